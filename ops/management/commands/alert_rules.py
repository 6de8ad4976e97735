"""``manage.py alert_rules``: the Prometheus alert rules of ops/alerts.py as a rule file."""

from __future__ import annotations

from typing import Any

import yaml
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from ops.alerts import rule_file


class Command(BaseCommand):
    help = (
        "Print the Prometheus alert rules over /metrics (a rule file for rule_files:), "
        "each linked to its runbook on this app."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--base-url",
            default=settings.LINEAGE_BASE_URL,
            help="where people reach the app, for the runbook links (default: LINEAGE_BASE_URL)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        rules = rule_file(options["base_url"])
        self.stdout.write(yaml.safe_dump(rules, sort_keys=False, width=100), ending="")
