"""`manage.py issue_token --user NAME --role ROLE`: the new token is the last line printed."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from catalog import actions
from catalog.auth import ROLES


class Command(BaseCommand):
    help = "Create an API token (and the user, if needed) and print it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="username; created when missing")
        parser.add_argument("--role", choices=ROLES, help="add the user to this role")
        parser.add_argument("--name", default="", help="a label for the token")

    def handle(self, *args: Any, **options: Any) -> None:
        username: str = options["user"].strip()
        if not username:
            raise CommandError("--user must not be empty")
        with transaction.atomic():
            user, created = User.objects.get_or_create(username=username)
            if created:
                user.set_unusable_password()
                user.save()
            if options["role"]:
                user.groups.add(Group.objects.get(name=options["role"]))
            token, key = actions.issue_token(user, name=options["name"])
        roles = ", ".join(sorted(user.groups.values_list("name", flat=True))) or "no role"
        self.stdout.write(
            f"{'Created' if created else 'Found'} user {username} ({roles}); "
            f"token {token.pk} issued. Send it as 'Authorization: Bearer <token>'."
        )
        self.stdout.write(key)
