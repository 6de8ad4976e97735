"""`manage.py list_tokens [--user NAME]`: tokens with prefix, owner and state (never the secret)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from catalog.models import ApiToken


class Command(BaseCommand):
    help = "List API tokens."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", help="only this user's tokens")

    def handle(self, *args: Any, **options: Any) -> None:
        tokens = ApiToken.objects.select_related("user").order_by("user__username", "created_at")
        if options["user"]:
            tokens = tokens.filter(user__username=options["user"])
        for t in tokens:
            state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "active"
            used = f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never"
            self.stdout.write(
                f"{t.pk:>5}  {t.prefix}…  {t.user.username:<20} {state:<24} last used {used}  {t.name}"
            )
