"""``manage.py render_node_documents [--full]``: write the host's node document file and,
where there are none of this release, its lineage snapshot bases."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from graph import docfile, documents, snapshot


class Command(BaseCommand):
    help = (
        "Write the host's file of lineage node documents (PostgreSQL): render the datasets and "
        "jobs changed since the last file and take the others from it, or render every node "
        "with --full or when the change log cannot tell what changed. Then write the host's "
        "lineage snapshot bases when it has none of this release."
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
        else:
            kind = "Full pass" if result.full else "Follow-up pass"
            copied = "" if result.full else f", {result.copied:,} taken from the file before"
            self.stdout.write(
                self.style.SUCCESS(
                    f"{kind} at revision {result.revision}: {result.datasets:,} dataset and "
                    f"{result.jobs:,} job documents rendered{copied}, in {result.seconds:.1f} s."
                )
            )
        write_snapshot_bases(self.stdout)


def write_snapshot_bases(out: OutputWrapper) -> None:
    """Write the host's lineage snapshot bases now, as a deploy does, when the host shares
    them and has none of this release (else map them), so that a server process started
    next maps them instead of building them before it serves (graph/snapshot.py)."""
    if not docfile.enabled():
        return
    started = time.perf_counter()
    if snapshot.warm():
        out.write(
            f"Lineage snapshot bases of this host ready in {time.perf_counter() - started:.1f} s."
        )
