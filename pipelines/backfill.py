"""Bulk backfill of OpenLineage archives on Spark: validate, fingerprint, de-duplicate, sort.

Reads NDJSON files (plain or ``.gz``, local or on any Hadoop file system), checks every line,
and writes:

* ``<out>/events``: the valid events, one per fingerprint, sorted by ``eventTime`` — as NDJSON
  part files (each line the event's canonical JSON, ready for ``manage.py ingest_events``) or
  as Parquet with columns ``fingerprint``, ``event_time``, ``kind``, ``body`` (``--format``);
* ``<out>/rejects``: one JSON line per bad line: ``file``, ``line`` (1-based), ``reason``,
  ``excerpt``;
* ``<out>/_summary.json``: counts.

A malformed line never aborts the job; it is counted and written to the rejects.

    spark-submit pipelines/backfill.py ARCHIVE.ndjson.gz … --output DIR
    python -m pipelines.backfill ARCHIVE … --output DIR [--format parquet] [--master local[*]]
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Launched as a file (spark-submit): make the repository root importable.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines.fingerprint import canonical_json, fingerprint_of_canonical

EVENT_TYPES = frozenset({"START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"})
EXCERPT_CHARS = 200
MAX_LINE_CHARS = 20 * 1024 * 1024


class InvalidEvent(ValueError):
    """An event that cannot be loaded; the message says which field is at fault and why."""


@dataclass(frozen=True)
class CheckedLine:
    """One archive line after validation: either an event (with fingerprint) or a reason."""

    file: str
    line: int
    fingerprint: str | None = None
    event_time: datetime | None = None
    kind: str | None = None
    body: str | None = None
    reason: str | None = None
    excerpt: str | None = None


@dataclass
class BackfillSummary:
    """Counts of a backfill run."""

    lines: int = 0
    blank: int = 0
    valid: int = 0
    rejected: int = 0
    duplicates: int = 0
    written: int = 0
    seconds: float = 0.0
    events_path: str = ""
    rejects_path: str = ""
    output_format: str = "ndjson"


def parse_event_time(value: Any) -> datetime:
    """Return ``eventTime`` as an aware UTC datetime; raise InvalidEvent when it is not one."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidEvent("eventTime: expected an ISO-8601 date-time string")
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError as error:
        raise InvalidEvent(f"eventTime: not an ISO-8601 date-time ({error})") from None
    if moment.tzinfo is None:
        raise InvalidEvent("eventTime: no UTC offset")
    return moment.astimezone(UTC)


def _require_name(obj: Any, where: str) -> None:
    if not isinstance(obj, dict):
        raise InvalidEvent(f"{where}: expected an object")
    for key in ("namespace", "name"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise InvalidEvent(f"{where}.{key}: expected a non-empty string")


def _require_uuid(value: Any, where: str) -> None:
    try:
        uuid.UUID(value)
    except (TypeError, ValueError, AttributeError):
        raise InvalidEvent(f"{where}: expected a UUID") from None


def _require_datasets(event: dict[str, Any], key: str) -> None:
    datasets = event.get(key)
    if datasets is None:
        return
    if not isinstance(datasets, list):
        raise InvalidEvent(f"{key}: expected a list")
    for position, dataset in enumerate(datasets):
        _require_name(dataset, f"{key}[{position}]")


def check_event(event: Any) -> tuple[str, datetime]:
    """Return (kind, eventTime) of a decoded OpenLineage event; raise InvalidEvent if malformed.

    The kind is RunEvent (has ``run``), DatasetEvent (has ``dataset``) or JobEvent (``job``).
    """
    if not isinstance(event, dict):
        raise InvalidEvent("event: expected a JSON object")
    if "eventTime" not in event:
        raise InvalidEvent("eventTime: missing")
    moment = parse_event_time(event["eventTime"])
    if "run" in event:
        run = event["run"]
        if not isinstance(run, dict):
            raise InvalidEvent("run: expected an object")
        _require_uuid(run.get("runId"), "run.runId")
        _require_name(event.get("job"), "job")
        event_type = event.get("eventType")
        if event_type is not None and event_type not in EVENT_TYPES:
            raise InvalidEvent(f"eventType: {event_type!r} is not one of {sorted(EVENT_TYPES)}")
        _require_datasets(event, "inputs")
        _require_datasets(event, "outputs")
        return "RunEvent", moment
    if "dataset" in event:
        _require_name(event["dataset"], "dataset")
        return "DatasetEvent", moment
    if "job" in event:
        _require_name(event["job"], "job")
        _require_datasets(event, "inputs")
        _require_datasets(event, "outputs")
        return "JobEvent", moment
    raise InvalidEvent("event: has none of run, job or dataset")


def check_line(file: str, line_number: int, text: str) -> CheckedLine | None:
    """Validate one archive line; return None for a blank line."""
    stripped = text.strip()
    if not stripped:
        return None
    excerpt = stripped[:EXCERPT_CHARS]
    if len(stripped) > MAX_LINE_CHARS:
        return CheckedLine(file, line_number, reason="line: longer than 20 MB", excerpt=excerpt)
    try:
        event = json.loads(stripped)
    except RecursionError:
        return CheckedLine(file, line_number, reason="event: nested too deeply", excerpt=excerpt)
    except ValueError as error:
        return CheckedLine(file, line_number, reason=f"not JSON: {error}", excerpt=excerpt)
    try:
        kind, moment = check_event(event)
        body = canonical_json(event)
    except InvalidEvent as error:
        return CheckedLine(file, line_number, reason=str(error), excerpt=excerpt)
    except RecursionError:
        return CheckedLine(file, line_number, reason="event: nested too deeply", excerpt=excerpt)
    return CheckedLine(
        file,
        line_number,
        fingerprint=fingerprint_of_canonical(body),
        event_time=moment,
        kind=kind,
        body=body,
    )


VALID, REJECTED, BLANK = "valid", "rejected", "blank"
SAMPLE_FRACTION = 0.01
SAMPLES_PER_PARTITION = 50

# Shuffle keys: (0, time, fingerprint) for events, (1, file number, line) for rejects.
Key = tuple[int, Any, Any]


def sort_time(moment: datetime) -> str:
    """Return a UTC instant as fixed-width text whose string order is time order."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _keyed_partition(
    rows: Iterable[tuple[tuple[int, str], int]], files: Sequence[str], counters: dict[str, Any]
) -> Iterator[tuple[Key, str]]:
    """Validate lines into shuffle records: event bodies, or rejects as JSON lines.

    Counts go to the ``counters`` accumulators, once per partition.
    """
    seen = dict.fromkeys(counters, 0)
    for (number, text), index in rows:
        checked = check_line(files[number], index + 1, text)
        if checked is None:
            seen[BLANK] += 1
        elif checked.reason is not None or checked.event_time is None or checked.body is None:
            seen[REJECTED] += 1
            reject = {
                "file": checked.file,
                "line": checked.line,
                "reason": checked.reason,
                "excerpt": checked.excerpt,
            }
            yield (1, number, index), json.dumps(reject, ensure_ascii=False)
        else:
            seen[VALID] += 1
            yield (0, sort_time(checked.event_time), checked.fingerprint), checked.body
    for status, count in seen.items():
        counters[status].add(count)


def _partition_of(key: Key, boundaries: Sequence[str]) -> int:
    """Events by time range (partitions 0…n-1); rejects all in the last partition (n)."""
    if key[0]:
        return len(boundaries) + 1
    return bisect.bisect_right(boundaries, key[1])


def _rendered(rows: Iterable[tuple[Key, str]], written: Any) -> Iterator[str]:
    """Return output lines, dropping repeated events (after the sort they are neighbours)."""
    previous = None
    count = 0
    for key, text in rows:
        if key[0] == 0:
            if key == previous:
                continue
            previous = key
            count += 1
        yield text
    written.add(count)


def _sample_time(text: str) -> str | None:
    try:
        return sort_time(parse_event_time(json.loads(text).get("eventTime")))
    except (ValueError, AttributeError, RecursionError):
        return None


def time_boundaries(spark: Any, files: Sequence[str], partitions: int) -> list[str]:
    """Return eventTime split points for about ``partitions`` even ranges, from a 1 % sample.

    The sample is taken by the JVM (no Python pass over the data); small inputs give one range.
    """
    sampled = (
        spark.read.text(list(files))
        .sample(withReplacement=False, fraction=SAMPLE_FRACTION, seed=17)
        .limit(partitions * SAMPLES_PER_PARTITION * 20)
        .collect()
    )
    times = sorted(t for t in (_sample_time(row[0]) for row in sampled) if t)
    ranges = max(1, min(partitions, len(times) // SAMPLES_PER_PARTITION))
    return sorted({times[len(times) * i // ranges] for i in range(1, ranges)})


def _lines(spark: Any, paths: Sequence[str]) -> Any:
    """Return an RDD of ((file number, text), index) with each file's own 0-based line index."""
    context = spark.sparkContext
    per_file = [
        context.textFile(str(path)).map(lambda text, n=number: (n, text)).zipWithIndex()
        for number, path in enumerate(paths)
    ]
    return context.union(per_file)


def expand_inputs(paths: Sequence[str]) -> list[str]:
    """Return the files to read: local folders are expanded to their files, URIs kept as given."""
    result: list[str] = []
    for path in paths:
        local = Path(path)
        if "://" not in path and local.is_dir():
            result.extend(
                str(p.resolve())
                for p in sorted(local.rglob("*"))
                if p.is_file() and not p.name.startswith((".", "_"))
            )
        elif "://" not in path:
            result.append(str(local.resolve()))
        else:
            result.append(path)
    return result


def run_backfill(
    spark: Any,
    inputs: Sequence[str],
    output: str,
    *,
    output_format: str = "ndjson",
    partitions: int | None = None,
) -> BackfillSummary:
    """Validate, fingerprint, de-duplicate and sort the events of ``inputs`` into ``output``.

    One Python pass validates every line; one shuffle, range-partitioned on eventTime and
    sorted on (eventTime, fingerprint), orders the events and puts duplicates side by side,
    where they are dropped. Rejects ride in the same shuffle to a partition of their own.
    """
    from pipelines.spark import delete_path, ship_package

    if output_format not in ("ndjson", "parquet"):
        raise ValueError("output_format must be ndjson or parquet")
    started = time.monotonic()
    ship_package(spark)
    context = spark.sparkContext
    out = output.rstrip("/")
    summary = BackfillSummary(
        output_format=output_format, events_path=f"{out}/events", rejects_path=f"{out}/rejects"
    )
    staging = f"{out}/_staging"
    for path in (summary.events_path, summary.rejects_path, staging):
        delete_path(spark, path)

    files = expand_inputs(inputs)
    boundaries = time_boundaries(spark, files, partitions or 4 * context.defaultParallelism)
    counters = {status: context.accumulator(0) for status in (VALID, REJECTED, BLANK)}
    written = context.accumulator(0)
    _lines(spark, files).mapPartitions(
        lambda rows: _keyed_partition(rows, files, counters)
    ).repartitionAndSortWithinPartitions(
        len(boundaries) + 2, partitionFunc=lambda key: _partition_of(key, boundaries)
    ).mapPartitions(lambda rows: _rendered(rows, written)).saveAsTextFile(staging)
    _publish(spark, staging, len(boundaries) + 1, summary.events_path, summary.rejects_path)
    if output_format == "parquet":
        _to_parquet(spark, summary.events_path)

    summary.blank = int(counters[BLANK].value)
    summary.valid = int(counters[VALID].value)
    summary.rejected = int(counters[REJECTED].value)
    summary.lines = summary.blank + summary.valid + summary.rejected
    summary.written = int(written.value)
    summary.duplicates = summary.valid - summary.written
    summary.seconds = round(time.monotonic() - started, 2)
    if "://" not in out:
        Path(out, "_summary.json").write_text(json.dumps(asdict(summary), indent=2) + "\n")
    return summary


def _publish(spark: Any, staging: str, rejects_part: int, events: str, rejects: str) -> None:
    """Move the staged part files into place: the last one holds the rejects."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    source = jvm.org.apache.hadoop.fs.Path(staging)
    fs = source.getFileSystem(conf)
    for folder in (events, rejects):
        fs.mkdirs(jvm.org.apache.hadoop.fs.Path(folder))
    for status in fs.listStatus(source):
        name = str(status.getPath().getName())
        if not name.startswith("part-"):
            continue
        target = rejects if int(name.split("-")[1]) == rejects_part else events
        fs.rename(status.getPath(), jvm.org.apache.hadoop.fs.Path(f"{target}/{name}"))
    fs.delete(source, True)


def _to_parquet(spark: Any, events: str) -> None:
    """Rewrite the NDJSON events as Parquet (fingerprint, event_time, kind, body) in the JVM.

    Each line is the canonical JSON, so the SHA-256 of its UTF-8 text is the fingerprint.
    """
    from pyspark.sql import functions as F

    body = F.col("value")
    kind = (
        F.when(F.get_json_object(body, "$.run").isNotNull(), F.lit("RunEvent"))
        .when(F.get_json_object(body, "$.dataset").isNotNull(), F.lit("DatasetEvent"))
        .otherwise(F.lit("JobEvent"))
    )
    frame = spark.read.text(events).select(
        F.sha2(body, 256).alias("fingerprint"),
        F.try_to_timestamp(F.get_json_object(body, "$.eventTime")).alias("event_time"),
        kind.alias("kind"),
        body.alias("body"),
    )
    target = f"{events}_parquet"
    frame.orderBy("event_time", "fingerprint").write.mode("overwrite").parquet(target)
    from pipelines.spark import delete_path

    delete_path(spark, events)
    jvm = spark.sparkContext._jvm
    source = jvm.org.apache.hadoop.fs.Path(target)
    fs = source.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    fs.rename(source, jvm.org.apache.hadoop.fs.Path(events))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="pipelines/backfill.py",
        description="Validate, fingerprint, de-duplicate and sort OpenLineage NDJSON archives.",
    )
    parser.add_argument("inputs", nargs="+", help="NDJSON files (.gz too) or folders of them")
    parser.add_argument("--output", required=True, help="output folder")
    parser.add_argument("--format", choices=("ndjson", "parquet"), default="ndjson")
    parser.add_argument("--partitions", type=int, help="output part files (range of eventTime)")
    parser.add_argument("--master", help="Spark master (default: $SPARK_MASTER or local[*])")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spark-submit pipelines/backfill.py`` and ``python -m pipelines.backfill``."""
    from pipelines.spark import get_spark

    args = parse_args(argv)
    spark = get_spark("lineage-explorer-backfill", master=args.master)
    summary = run_backfill(
        spark, args.inputs, args.output, output_format=args.format, partitions=args.partitions
    )
    print(json.dumps(asdict(summary), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
