"""`manage.py ingest_sql_log PATH --namespace NS --dialect D --format csv|jsonl|pgcsvlog`.

Reads a query log in place (streamed, never loaded whole), turns its
statements into lineage through the same outbox and normaliser as
OpenLineage events, and shows a progress bar. Lines that could not be used
are listed at the end with their line numbers. Running it twice is
harmless: runs and events are recognised by their ids and fingerprints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from ingest import sql_actions
from ingest.models import SqlLogProblem, SqlLogState
from ingest.sql.dialects import SUPPORTED_DIALECTS
from ingest.sql.readers import FORMATS


class Command(BaseCommand):
    help = "Turn a SQL query log (CSV, JSON Lines or PostgreSQL csvlog) into lineage."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument(
            "--namespace", required=True, help="data source, e.g. postgres://warehouse:5432"
        )
        parser.add_argument(
            "--dialect",
            required=True,
            help=f"SQL dialect: {', '.join(sorted(SUPPORTED_DIALECTS))}",
        )
        parser.add_argument("--format", dest="fmt", required=True, choices=FORMATS)
        parser.add_argument("--database", default="", help="default database for unqualified names")
        parser.add_argument("--schema", default="", help="default schema for unqualified names")
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["path"]
        try:
            upload = sql_actions.create_upload(
                namespace=options["namespace"],
                dialect=options["dialect"],
                fmt=options["fmt"],
                path=path,
                original_name=path.name,
                database=options["database"],
                schema=options["schema"],
                source="command",
                enqueue=False,
            )
        except sql_actions.SqlLogInputError as exc:
            raise CommandError(
                f"--{exc.field}: {exc.message}" if exc.field != "path" else exc.message
            ) from exc
        with tqdm(
            total=upload.size_bytes,
            unit="B",
            unit_scale=True,
            disable=options["no_progress"],
            file=self.stderr,
            desc=path.name,
        ) as bar:
            done = sql_actions.process_upload(upload.pk, progress=bar.update)
        if done is None:
            raise CommandError("the log could not be claimed for processing")
        for problem in SqlLogProblem.objects.filter(upload=done)[:50]:
            where = f"{path}:{problem.line}"
            if problem.statement is not None:
                where += f" (statement {problem.statement + 1})"
            self.stderr.write(f"{where}: {problem.message}")
        if done.problem_count > 50:
            self.stderr.write(f"… and {done.problem_count - 50} more problems")
        summary = (
            f"{done.records} records: {done.events} events, {done.reads} reads, "
            f"{done.skipped_failed} failed queries skipped, {done.problem_count} problems; "
            f"{done.cache_hits} statements served from the cache"
        )
        if done.state == SqlLogState.FAILED:
            raise CommandError(f"{path}: {done.error}")
        self.stdout.write(summary)
