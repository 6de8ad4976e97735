"""`manage.py revoke_token ID`: a revoked token is refused from then on."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog import actions
from catalog.models import ApiToken


class Command(BaseCommand):
    help = "Revoke an API token by its id (see list_tokens)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("token_id", type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        token = ApiToken.objects.filter(pk=options["token_id"]).first()
        if token is None:
            raise CommandError(f"No token with id {options['token_id']}")
        actions.revoke_token(token)
        self.stdout.write(f"Revoked token {token.pk} ({token.prefix}…) of {token.user}")
