"""`manage.py catalog_import FILE.yaml`: apply owners, PII flags and retention from a file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from catalog import catalog_file


class _DryRun(Exception):
    pass


class Command(BaseCommand):
    help = "Import catalog facts (owners, PII flags, subject kinds, retention) from YAML."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="catalog YAML file ('-' for standard input)")
        parser.add_argument("--dry-run", action="store_true", help="report, change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["file"]
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"Cannot read {path}: {exc}") from exc
        try:
            parsed = catalog_file.parse(text)
        except catalog_file.CatalogFileError as exc:
            raise CommandError(f"{path}: {exc}") from exc
        report = catalog_file.ImportReport()
        try:
            with transaction.atomic():
                report = catalog_file.apply(parsed)
                if options["dry_run"]:
                    raise _DryRun
        except _DryRun:
            pass
        for line in report.created:
            self.stdout.write(f"created {line}")
        for line in report.changes:
            self.stdout.write(f"changed {line}")
        verb = "would change" if options["dry_run"] else "changed"
        if report.changed:
            self.stdout.write(f"{verb} {len(report.created)} new, {len(report.changes)} updated")
        else:
            self.stdout.write("catalog already up to date: nothing changed")
