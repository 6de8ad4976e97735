"""Subject erasure: count (dry run) or remove (apply) a data subject's rows, dataset by dataset.

Plan (JSON file)::

    {"version": 1, "kind": "erasure", "runId": "…", "apply": false,
     "lineage": {"url": "http://app:8000" | null, "jobNamespace": "lineage-explorer",
                 "jobName": "privacy_erasure", "spoolPath": "…/lineage-spool.ndjson"},
     "datasets": [{"key": "dataset:file:/lake/orders", "location": "/lake/orders",
                   "format": "parquet", "operation": "delete" | "anonymise",
                   "anonymiseColumns": ["email", "name"],
                   "columns": [{"name": "customer_id", "identifiers": [0], …}]}]}

Values: a JSON array of strings on stdin, as for the scan. The API key for
the lineage endpoint comes from ``LINEAGE_API_KEY``, never from the plan.

Apply, per dataset with matching rows: the new data (without the subject's
rows, or with their personal columns nulled) is written to a hidden sibling
folder, read back and checked (row count as expected, no row matching any
more), and only then swapped in — atomically with ``renameat2(RENAME_EXCHANGE)``
on Linux, else by two renames — after which the old data is removed. Until the
new data is whole, the old is untouched. The erasure job reports itself
through OpenLineage (START, COMPLETE or FAIL) with each rewritten dataset as
input and output.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from pipelines.privacy.common import (
    describe_error,
    detect_format,
    load_plan,
    local_path,
    matches_not,
    print_progress,
    quiet_loggers,
    read_values,
    reader,
    row_condition,
    scrub,
    write_result,
    writer_options,
)

Progress = Callable[[int, int, dict[str, Any]], None]
DELETE = "delete"
ANONYMISE = "anonymise"
_PARTITION_DIR = re.compile(r"^([^=/]+)=")
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class ErasureError(RuntimeError):
    """An erasure step could not be completed; the dataset was left as it was."""


def exchange_paths(first: str, second: str) -> None:
    """Swap two paths: atomically where the OS can (Linux renameat2), else by two renames."""
    libc_name = ctypes.util.find_library("c")
    renameat2 = (
        getattr(ctypes.CDLL(libc_name, use_errno=True), "renameat2", None) if libc_name else None
    )
    if renameat2 is not None:
        result = renameat2(
            _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
        )
        if result == 0:
            return
    aside = f"{second}.swap"
    os.rename(second, aside)
    try:
        os.rename(first, second)
    except OSError:
        os.rename(aside, second)
        raise
    os.rename(aside, first)


def partition_columns(path: str) -> list[str]:
    """Return the Hive-style partition columns of a folder (``country=FR/…``), outermost first."""
    columns: list[str] = []
    current = path
    while os.path.isdir(current):
        subdirs = sorted(
            d
            for d in os.listdir(current)
            if os.path.isdir(os.path.join(current, d)) and _PARTITION_DIR.match(d)
        )
        if not subdirs:
            break
        match = _PARTITION_DIR.match(subdirs[0])
        assert match is not None
        columns.append(match.group(1))
        current = os.path.join(current, subdirs[0])
    return columns


def erased_frame(frame: Any, condition: Any, target: dict[str, Any]) -> Any:
    """Return the dataset without the subject: matching rows dropped, or their personal columns nulled."""
    from pyspark.sql import functions as F

    if target.get("operation", DELETE) == DELETE:
        return frame.filter(matches_not(condition))
    nulled = set(target.get("anonymiseColumns") or []) | {c["name"] for c in target["columns"]}
    columns = []
    for struct_field in frame.schema.fields:
        column = F.col("`" + struct_field.name.replace("`", "``") + "`")
        if struct_field.name in nulled:
            column = F.when(condition, F.lit(None).cast(struct_field.dataType)).otherwise(column)
        columns.append(column.alias(struct_field.name))
    return frame.select(*columns)


def _sibling(path: str, run_id: str, suffix: str) -> str:
    parent, base = os.path.split(path.rstrip("/"))
    return os.path.join(parent, f".{base}.erasure-{run_id}.{suffix}")


def write_and_swap(
    spark: Any,
    new_frame: Any,
    path: str,
    fmt: str,
    run_id: str,
    expected_rows: int,
    target: dict[str, Any],
    values: Sequence[str],
) -> int:
    """Write ``new_frame`` beside ``path``, check it, then swap it in; return its row count."""
    staging = _sibling(path, run_id, "new")
    if os.path.exists(staging):
        shutil.rmtree(staging)  # left over by an interrupted attempt: never the live data
    single_file = os.path.isfile(path)
    partitions = [] if single_file else partition_columns(path)
    writer = (new_frame.coalesce(1) if single_file else new_frame).write.format(fmt)
    writer = writer.options(**writer_options(fmt)).mode("errorifexists")
    if partitions:
        writer = writer.partitionBy(*partitions)
    writer.save(staging)

    written = reader(spark, fmt).load(staging)
    rows = int(written.count())
    condition, _ = row_condition(written.schema, target["columns"], values)
    left = int(written.filter(condition).count()) if condition is not None else 0
    if rows != expected_rows or left:
        shutil.rmtree(staging, ignore_errors=True)
        raise ErasureError(
            f"new version failed its check ({rows} rows, expected {expected_rows}; "
            f"{left} still matching): dataset left unchanged"
        )
    if single_file:
        parts = [
            os.path.join(staging, n) for n in os.listdir(staging) if not n.startswith((".", "_"))
        ]
        if len(parts) != 1:
            shutil.rmtree(staging, ignore_errors=True)
            raise ErasureError("expected one data file for a single-file dataset")
        replacement = _sibling(path, run_id, "file")
        os.replace(parts[0], replacement)
        shutil.rmtree(staging, ignore_errors=True)
        os.replace(replacement, path)
        return rows
    try:
        exchange_paths(staging, path)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)  # now the old data
    return rows


def _counts(frame: Any, condition: Any, fmt: str) -> tuple[int, int]:
    """Return (rows, matching rows); Parquet answers the total from metadata."""
    from pyspark.sql import functions as F

    if fmt == "parquet":
        return int(frame.count()), int(frame.filter(condition).count())
    row = frame.agg(F.count(F.lit(1)), F.count(F.when(condition, 1))).collect()[0]
    return int(row[0]), int(row[1])


def erase_dataset(
    spark: Any,
    target: dict[str, Any],
    values: Sequence[str],
    apply: bool,
    run_id: str,
    lineage_run: Any = None,
) -> dict[str, Any]:
    """Return the dry-run counts of one dataset, erasing its matching rows when ``apply``."""
    started = time.perf_counter()
    operation = target.get("operation", DELETE)
    result: dict[str, Any] = {"key": target["key"], "operation": operation, "notes": []}
    try:
        fmt = detect_format(target["location"], target.get("format"))
        frame = reader(spark, fmt).load(target["location"])
        condition, notes = row_condition(frame.schema, target["columns"], values)
        result["notes"] = notes
        if condition is None:
            result.update(status="unmatchable", rowsBefore=None, rowsMatched=0)
            return result
        before, matched = _counts(frame, condition, fmt)
        result.update(status="counted", rowsBefore=before, rowsMatched=matched)
        if not apply:
            return result
        if matched == 0:
            result.update(status="nothing_to_erase", rowsAfter=before, swapped=False)
            return result
        path = local_path(target["location"])
        if path is None or not os.path.exists(path):
            raise ErasureError("apply needs a dataset on the local file system")
        new_frame = erased_frame(frame, condition, target)
        if lineage_run is not None:
            lineage_run.record_output(
                new_frame, lineage_run.emitter.qualify(target["location"]), mode="overwrite"
            )
        expected = before - matched if operation == DELETE else before
        after = write_and_swap(spark, new_frame, path, fmt, run_id, expected, target, values)
        result.update(status="erased", rowsAfter=after, swapped=True)
    except Exception as error:  # reported per dataset; the others go on
        result.update(status="error", error=describe_error(error, values))
    finally:
        result["elapsedMs"] = round((time.perf_counter() - started) * 1000, 1)
    return result


def _emitter(spark: Any, plan: dict[str, Any], api_key: str | None, transport: Any) -> Any:
    from pipelines.lineage.emitter import EmitterConfig, LineageEmitter

    settings = plan.get("lineage") or {}
    config = EmitterConfig(
        url=settings.get("url"),
        api_key=api_key,
        job_namespace=settings.get("jobNamespace") or "lineage-explorer",
        spool_path=settings.get("spoolPath") or "lineage-spool.ndjson",
    )
    return LineageEmitter(spark, config, inner_transport=transport)


def run_erasure(
    spark: Any,
    plan: dict[str, Any],
    values: Sequence[str],
    progress: Progress | None = None,
    *,
    api_key: str | None = None,
    lineage_transport: Any = None,
) -> dict[str, Any]:
    """Return per-dataset counts (dry run) or erasure results (``plan["apply"]``)."""
    apply = bool(plan.get("apply"))
    run_id = str(plan.get("runId") or "run")
    targets = plan["datasets"]
    results: list[dict[str, Any]] = []

    def each(lineage_run: Any = None) -> None:
        for done, target in enumerate(targets, start=1):
            result = erase_dataset(spark, target, values, apply, run_id, lineage_run)
            results.append(result)
            if progress is not None:
                progress(done, len(targets), result)

    if not apply:
        each()
    else:
        emitter = _emitter(spark, plan, api_key, lineage_transport)
        name = (plan.get("lineage") or {}).get("jobName") or "privacy_erasure"
        try:
            job = emitter.job(name, run_key=run_id, description="GDPR subject erasure")
            with quiet_loggers("pipelines.lineage"), job as run:
                run.start()
                each(run)
                failed = [r["key"] for r in results if r["status"] == "error"]
                if failed:
                    raise ErasureError(scrub(f"erasure failed for {', '.join(failed)}", values))
        except ErasureError:
            pass  # already reported per dataset; the FAIL event says so too
        finally:
            emitter.close()
    return {
        "version": plan["version"],
        "kind": "erasure",
        "apply": apply,
        "runId": plan.get("runId"),
        "datasets": results,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", required=True, help="plan JSON file")
    parser.add_argument("--result", required=True, help="result JSON file to write")
    parser.add_argument("--master", help="Spark master (default: SPARK_MASTER or local[*])")
    args = parser.parse_args(argv)
    plan = load_plan(args.plan, "erasure")
    values = read_values(sys.stdin)

    from pipelines.spark import get_spark

    spark = get_spark("privacy-erasure", master=args.master)
    result = run_erasure(
        spark,
        plan,
        values,
        lambda done, total, r: print_progress(done, total, r["key"]),
        api_key=os.environ.get("LINEAGE_API_KEY"),
    )
    write_result(args.result, result)
    return 1 if any(r["status"] == "error" for r in result["datasets"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
