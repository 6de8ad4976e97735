"""`python -m benchmarks`: list the benchmarks and how to run each.

Each one is long (some generate 100,000-dataset graphs on PostgreSQL), so
they run one at a time, by name: `python -m benchmarks.bench_graph`.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path


def main() -> None:
    here = Path(__file__).parent
    print("Benchmarks (results go to benchmarks/results/*.json; see benchmarks/README.md):")
    for info in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if not info.name.startswith("bench_"):
            continue
        module = importlib.import_module(f"benchmarks.{info.name}")
        summary = (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else ""
        print(f"  .venv/bin/python -m benchmarks.{info.name:<16} {summary}")


if __name__ == "__main__":
    main()
