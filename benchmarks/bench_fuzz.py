"""The fuzzing tier, long and random: at least 100,000 requests per database, none ≥ 500.

Runs the suite's fuzzing tier (``tests/test_fuzz_corpus.py``, the hand-made hostile
corpus in every parameter of every route; ``tests/test_fuzz_schema.py``, schemathesis
against the OpenAPI schema) with random (not derandomised) examples, ``--examples`` per
API operation, on SQLite and on PostgreSQL. Records, per database, the requests sent,
how many answered 500 or more, the tests that failed and the time taken.

Usage: python -m benchmarks.bench_fuzz [--examples N] [--database-url URL] [--skip-sqlite]
           [--skip-postgres]
Writes benchmarks/results/fuzz.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "fuzz.json"
TESTS = ["tests/test_fuzz_corpus.py", "tests/test_fuzz_schema.py"]


def run(database_url: str | None, examples: int) -> dict[str, Any]:
    """One pass of the tier on one database."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        env = {
            **os.environ,
            "FUZZ_EXAMPLES": str(examples),
            "FUZZ_RANDOM": "1",
            "FUZZ_REPORT": str(report),
        }
        env.pop("CELERY_BROKER_URL", None)
        if database_url:
            env["DATABASE_URL"] = database_url
        else:
            env.pop("DATABASE_URL", None)
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.monotonic() - started
        sent = json.loads(report.read_text()) if report.exists() else {}
    failed = re.findall(r"^FAILED (\S+)", result.stdout, re.MULTILINE)
    # What schemathesis said of each failure: the operation, the check and the request.
    said = re.findall(
        r"^_+ (test_\S+\[[^\]]+\]) _+$|^  \| - (ST\d+ .+)$|^  \|     (curl .+)$",
        result.stdout,
        re.MULTILINE,
    )
    failures = [next(part for part in parts if part)[:500] for parts in said]
    return {
        "database": "postgresql" if database_url else "sqlite",
        "requests": sent.get("requests", 0),
        "server_errors": sent.get("server_errors", 0),
        "tests_failed": failed,
        "failures": failures[:60],
        "passed": result.returncode == 0,
        "seconds": round(seconds, 1),
        "summary": result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "",
    }


def commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="per API operation")
    parser.add_argument(
        "--database-url",
        default="postgres://postgres@127.0.0.1:5432/lineage_bench_fuzz",
        help="PostgreSQL (the tests run in its test_ twin)",
    )
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args()
    passes = []
    if not args.skip_sqlite:
        passes.append(run(None, args.examples))
        print(json.dumps(passes[-1]))
    if not args.skip_postgres:
        passes.append(run(args.database_url, args.examples))
        print(json.dumps(passes[-1]))
    RESULTS.write_text(
        json.dumps(
            {
                "commit": commit(),
                "date": datetime.now(UTC).date().isoformat(),
                "examples_per_operation": args.examples,
                "passes": passes,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
