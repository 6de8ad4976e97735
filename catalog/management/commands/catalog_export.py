"""`manage.py catalog_export [-o FILE]`: the catalog's steward facts as YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from catalog import catalog_file


class Command(BaseCommand):
    help = "Export owners, PII flags, subject kinds and retention policies as YAML."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-o", "--output", help="write to this file instead of stdout")

    def handle(self, *args: Any, **options: Any) -> None:
        text = catalog_file.dump(catalog_file.export())
        if options["output"]:
            Path(options["output"]).write_text(text, encoding="utf-8")
            self.stderr.write(f"wrote {options['output']}")
        else:
            self.stdout.write(text, ending="")
