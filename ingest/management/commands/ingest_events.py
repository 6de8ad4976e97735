"""`manage.py ingest_events PATH… [--engine inline|celery|spark]`: load OpenLineage event files.

Reads JSON (one event or a list), NDJSON and gzip of either, with a progress
bar. Resumable: every event is stored once by fingerprint, so a re-run skips
what is already there and finishes what was left half-way.

Engines: ``inline`` normalises in this process in batches (the default
without a broker); ``celery`` stores the events and leaves normalising to the
workers; ``spark`` validates, fingerprints, de-duplicates and sorts NDJSON
archives on Spark (``pipelines/backfill.py``), then loads what Spark kept here
in bulk, through the same normaliser. Each engine is one function in ENGINES
taking the files and options.

Events are loaded by eventTime (``--order time``, the default): an archive is
sorted in bounded memory, runs of 50,000 events spilled to the data folder and
merged, so each job's timeline is built forwards and workers claim events (in
the order stored) oldest first. ``--order file`` keeps the files' order.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from ingest import actions
from ingest.events import EventError, ParsedEvent, parse_event
from ingest.files import FileItem, in_event_time_order, read_events


class Problems:
    """Lines that could not be read or are not valid events, and events stored with facets
    left out, with where they are."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.warned: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}")

    def note(self, where: str, event: ParsedEvent) -> ParsedEvent:
        """``event``, noting the facets left out of it."""
        if event.warnings:
            errors = "; ".join(w["error"] for w in event.warnings)
            self.warned.append(f"{where}: {errors}")
        return event


def parsed_events(
    paths: list[Path], problems: Problems, by_time: bool = False
) -> Iterator[ParsedEvent]:
    """Valid events of all files, in file order or (``by_time``) by eventTime; the others
    are noted in ``problems``."""
    items: Iterator[FileItem] = (item for path in paths for item in read_events(path))
    if by_time:
        Path(settings.DATA_DIR).mkdir(parents=True, exist_ok=True)
        items = in_event_time_order(items, spill=Path(settings.DATA_DIR))
    for item in items:
        where = f"{item.path}:{item.line}"
        if item.error:
            problems.add(where, item.error)
            continue
        try:
            yield problems.note(where, parse_event(item.value))
        except EventError as exc:
            problems.add(where, f"{exc.field}: {exc.message}" if exc.field else exc.message)


def progress_bar(command: BaseCommand, options: dict[str, Any]) -> Any:
    # tqdm redraws its line in place: give it the raw stream, not Django's line-ending wrapper.
    stream = getattr(command.stderr, "_out", sys.stderr)
    return tqdm(unit=" events", disable=options["no_progress"], file=stream)


def run_inline(command: BaseCommand, paths: list[Path], options: dict[str, Any]) -> dict[str, int]:
    """Store and normalise in this process, one transaction per batch."""
    problems = Problems()
    with progress_bar(command, options) as bar:
        report = actions.bulk_load(
            parsed_events(paths, problems, options["order"] == "time"),
            source=options["source"],
            batch_size=options["batch_size"],
            progress=bar.update,
        )
    return _summary(command, report, problems)


def run_celery(command: BaseCommand, paths: list[Path], options: dict[str, Any]) -> dict[str, int]:
    """Store the events and queue them for the workers."""
    problems = Problems()
    report = actions.IngestReport()
    with progress_bar(command, options) as bar:
        events = parsed_events(paths, problems, options["order"] == "time")
        for chunk in actions.chunked(events, options["batch_size"]):
            stored = actions.store_events(chunk, options["source"])
            report.stored += len(stored.stored)
            report.duplicates += len(stored.duplicates)
            bar.update(len(chunk))
    return _summary(command, report, problems)


def run_spark(command: BaseCommand, paths: list[Path], options: dict[str, Any]) -> dict[str, int]:
    """Clean the archives on Spark, then store and normalise what it kept, in eventTime order."""
    from pipelines.backfill import run_backfill
    from pipelines.spark import get_spark

    work = options["work_dir"]
    keep = work is not None
    if not keep:
        # With PostgreSQL nothing else creates the data folder.
        Path(settings.DATA_DIR).mkdir(parents=True, exist_ok=True)
    out = Path(work) if keep else Path(tempfile.mkdtemp(prefix="backfill-", dir=settings.DATA_DIR))
    problems = Problems()
    try:
        from pyspark.sql import SparkSession

        ours = SparkSession.getActiveSession() is None
        spark = get_spark("lineage-explorer-backfill", master=options["master"])
        try:
            cleaned = run_backfill(spark, [str(p) for p in paths], str(out))
        finally:
            if ours:
                spark.stop()
        command.stderr.write(
            f"Spark: {cleaned.valid:,} valid, {cleaned.duplicates:,} duplicates dropped, "
            f"{cleaned.rejected:,} rejected in {cleaned.seconds:.1f} s"
        )
        for part in sorted(Path(cleaned.rejects_path).glob("part-*")):
            for line in part.read_text(encoding="utf-8").splitlines():
                reject = json.loads(line)
                problems.add(f"{reject['file']}:{reject['line']}", reject["reason"])
        with progress_bar(command, options) as bar:
            bar.total = cleaned.written
            report = actions.bulk_load(
                cleaned_events(Path(cleaned.events_path), problems),
                source=options["source"],
                batch_size=options["batch_size"],
                progress=bar.update,
                quiet_graph=True,
            )
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)
    return _summary(command, report, problems)


def cleaned_events(folder: Path, problems: Problems) -> Iterator[ParsedEvent]:
    """The events Spark kept: canonical JSON lines, part files in eventTime order."""
    for part in sorted(folder.glob("part-*")):
        with part.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                text = line.rstrip("\n")
                if not text:
                    continue
                # Each line is the canonical JSON, so its SHA-256 is the event's fingerprint.
                fingerprint = hashlib.sha256(text.encode("utf-8")).hexdigest()
                try:
                    event = parse_event(json.loads(text), fingerprint)
                except EventError as exc:
                    where = f"{part.name}:{number}"
                    problems.add(where, f"{exc.field}: {exc.message}" if exc.field else exc.message)
                    continue
                event.canonical = text  # stored as is: no second rendering of the body
                yield problems.note(f"{part.name}:{number}", event)


def _summary(
    command: BaseCommand, report: actions.IngestReport, problems: Problems
) -> dict[str, int]:
    for line in problems.items[:50]:
        command.stderr.write(f"  skipped {line}")
    if len(problems.items) > 50:
        command.stderr.write(f"  … and {len(problems.items) - 50} more")
    for line in problems.warned[:50]:
        command.stderr.write(f"  facets left out at {line}")
    if len(problems.warned) > 50:
        command.stderr.write(f"  … and {len(problems.warned) - 50} more")
    return {
        "stored": report.stored,
        "duplicates": report.duplicates,
        "processed": report.processed,
        "failed": report.failed,
        "skipped": len(problems.items) + len(report.rejected),
        "warned": len(problems.warned),
    }


Engine = Callable[[BaseCommand, list[Path], dict[str, Any]], dict[str, int]]
ENGINES: dict[str, Engine] = {"inline": run_inline, "celery": run_celery, "spark": run_spark}
# A bulk load's batches are large: each batch reads, locks and writes back every job,
# dataset and field its events touch, once. At 200,000 archive events over 10,000
# datasets, 50,000 per batch loaded 1.6x as fast as 5,000 (benchmarks/README.md).
DEFAULT_BATCH_SIZES = {"inline": 5000, "celery": 500, "spark": 50000}


class Command(BaseCommand):
    help = "Load OpenLineage events from JSON, NDJSON or gzip files (resumable)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path, help="event files")
        parser.add_argument(
            "--engine",
            choices=sorted(ENGINES),
            default=None,
            help="inline (normalise here; default without a broker), celery (queue for "
            "workers) or spark (clean NDJSON archives on Spark, then load here in bulk)",
        )
        parser.add_argument("--master", help="Spark master for --engine spark (default local[*])")
        parser.add_argument(
            "--work-dir", help="--engine spark: keep Spark's output (events, rejects) here"
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=None,
            help="events per transaction (a transaction's work on each job and dataset is "
            "shared by its events): default 5,000 for inline, 50,000 for spark (about 1.5 GB "
            "of memory), 500 per store for celery",
        )
        parser.add_argument(
            "--order",
            choices=("time", "file"),
            default="time",
            help="time (default): load the events by eventTime, sorted in bounded memory "
            "(spilled to the data folder), so each job's timeline is built forwards; file: "
            "as the files list them. --engine spark always sorts",
        )
        parser.add_argument("--source", default="file", help="recorded as the events' source")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        paths: list[Path] = options["paths"]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise CommandError(f"No such file: {', '.join(missing)}")
        engine = options["engine"] or ("inline" if settings.CELERY_TASK_ALWAYS_EAGER else "celery")
        if options["batch_size"] is None:
            options["batch_size"] = DEFAULT_BATCH_SIZES[engine]
        if options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        if engine != "spark" and (options["master"] or options["work_dir"]):
            raise CommandError("--master and --work-dir go with --engine spark")
        summary = ENGINES[engine](self, paths, options)
        self.stdout.write(
            self.style.SUCCESS(
                "{stored} stored, {duplicates} already there, {processed} normalised, "
                "{failed} failed, {skipped} skipped, {warned} with facets left out".format(
                    **summary
                )
            )
        )
