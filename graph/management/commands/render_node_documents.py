"""``manage.py render_node_documents [--full]``: render node documents ahead of requests."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graph import documents


class Command(BaseCommand):
    help = (
        "Render the lineage documents of datasets and jobs changed since the last full pass "
        "(PostgreSQL; every node with --full or when the change log cannot tell)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--full", action="store_true", help="render every dataset and job")
        parser.add_argument(
            "--batch", type=int, default=documents.BATCH, help="nodes rendered per query"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["batch"] < 1:
            raise CommandError("--batch must be at least 1")
        result = documents.render_documents(full=options["full"], batch=options["batch"])
        if result.skipped:
            self.stdout.write(f"Nothing rendered: {result.skipped}.")
            return
        kind = "Full pass" if result.full else "Follow-up pass"
        self.stdout.write(
            self.style.SUCCESS(
                f"{kind} at revision {result.revision}: {result.datasets:,} dataset and "
                f"{result.jobs:,} job documents in {result.seconds:.1f} s."
            )
        )
