"""Subject scan: count the rows of each dataset that hold a data subject's identifiers.

Plan (JSON file)::

    {"version": 1, "kind": "scan", "runId": "…",
     "datasets": [{"key": "dataset:file:/lake/orders", "location": "/lake/orders",
                   "format": "parquet" | "csv" | "json" | "auto",
                   "columns": [{"name": "customer_id", "identifiers": [0],
                                "masked": false, "caseInsensitive": false}]}]}

Values: a JSON array of strings on stdin (index = ``identifiers`` entries).
Result (JSON file): ``{"datasets": [{"key", "status", "rowsFound", "notes",
"error", "elapsedMs"}]}`` with status ``scanned``, ``unmatchable`` (no column
could be compared) or ``error``.

Run: ``spark-submit pipelines/privacy/scan.py --plan plan.json --result out.json < values.json``
or ``python -m pipelines.privacy.scan …``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from pipelines.privacy.common import (
    describe_error,
    detect_format,
    load_plan,
    print_progress,
    read_values,
    reader,
    row_condition,
    write_result,
)

Progress = Callable[[int, int, dict[str, Any]], None]


def scan_dataset(spark: Any, target: dict[str, Any], values: Sequence[str]) -> dict[str, Any]:
    """Return the scan result of one dataset of the plan."""
    started = time.perf_counter()
    result: dict[str, Any] = {"key": target["key"], "notes": []}
    try:
        fmt = detect_format(target["location"], target.get("format"))
        frame = reader(spark, fmt).load(target["location"])
        condition, notes = row_condition(frame.schema, target.get("columns", []), values)
        result["notes"] = notes
        result["format"] = fmt
        if condition is None:
            result.update(status="unmatchable", rowsFound=0)
        else:
            result.update(status="scanned", rowsFound=int(frame.filter(condition).count()))
    except Exception as error:  # one unreadable dataset must not stop the scan
        result.update(status="error", rowsFound=None, error=describe_error(error, values))
    result["elapsedMs"] = round((time.perf_counter() - started) * 1000, 1)
    return result


def run_scan(
    spark: Any,
    plan: dict[str, Any],
    values: Sequence[str],
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Return the scan result for every dataset of the plan, reporting progress after each."""
    targets = plan["datasets"]
    results = []
    for done, target in enumerate(targets, start=1):
        result = scan_dataset(spark, target, values)
        results.append(result)
        if progress is not None:
            progress(done, len(targets), result)
    return {
        "version": plan["version"],
        "kind": "scan",
        "runId": plan.get("runId"),
        "datasets": results,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="plan JSON file")
    parser.add_argument("--result", required=True, help="result JSON file to write")
    parser.add_argument("--master", help="Spark master (default: SPARK_MASTER or local[*])")
    args = parser.parse_args(argv)
    plan = load_plan(args.plan, "scan")
    values = read_values(sys.stdin)

    from pipelines.spark import get_spark

    spark = get_spark("privacy-scan", master=args.master)
    result = run_scan(
        spark, plan, values, lambda done, total, r: print_progress(done, total, r["key"])
    )
    write_result(args.result, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
