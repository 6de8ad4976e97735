"""``manage.py render_node_documents [--full]``: write the host's node document file."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from graph import documents


class Command(BaseCommand):
    help = (
        "Write the host's file of lineage node documents (PostgreSQL): render the datasets and "
        "jobs changed since the last file and take the others from it, or render every node "
        "with --full or when the change log cannot tell what changed."
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
        copied = "" if result.full else f", {result.copied:,} taken from the file before"
        self.stdout.write(
            self.style.SUCCESS(
                f"{kind} at revision {result.revision}: {result.datasets:,} dataset and "
                f"{result.jobs:,} job documents rendered{copied}, in {result.seconds:.1f} s."
            )
        )
