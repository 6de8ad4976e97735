"""`python -m tests.services postgres URL`: exit 0 when the service answers.

Outside CI a missing service prints one loud line and exits 1 (the Makefile
then skips that pass); under CI=true it exits 2, failing the run.
"""

from __future__ import annotations

import os
import sys


def postgres_ready(url: str) -> str | None:
    import psycopg

    try:
        with psycopg.connect(url.replace("postgres://", "postgresql://", 1), connect_timeout=5):
            return None
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0]


def main(argv: list[str]) -> int:
    kind, url = argv[1], argv[2]
    if kind != "postgres":
        print(f"unknown service {kind!r}", file=sys.stderr)
        return 2
    problem = postgres_ready(url)
    if problem is None:
        return 0
    in_ci = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
    print(
        f"!!! SKIPPING the PostgreSQL test pass: cannot connect to {url}: {problem}",
        file=sys.stderr,
    )
    return 2 if in_ci else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
