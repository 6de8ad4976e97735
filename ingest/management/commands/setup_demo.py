"""`manage.py setup_demo`: what `make run` needs before serving.

Creates one login per role (the password is generated once and kept in the
data folder, as is the secret key the demo is served with), runs the demo Spark pipeline so there is real lineage to
explore (run_demo also applies the demo's catalog file), and prints the
logins last.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandParser

from catalog.auth import ADMIN, COMPLIANCE, ENGINEER, STEWARD, VIEWER

DEMO_USERS = {
    "admin": ADMIN,
    "steward": STEWARD,
    "compliance": COMPLIANCE,
    "engineer": ENGINEER,
    "viewer": VIEWER,
}


def _kept(path: Path, make: Callable[[], str]) -> str:
    """A secret made once and kept in ``path`` (only its owner may read it); reruns read it."""
    if path.exists():
        return path.read_text(encoding="utf-8").strip()
    value = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n", encoding="utf-8")
    path.chmod(0o600)
    return value


def demo_password(data_dir: Path) -> str:
    """The demo logins' password."""
    return _kept(data_dir / "demo-login.txt", lambda: secrets.token_urlsafe(12))


def demo_secret(data_dir: Path) -> str:
    """The secret key ``make run`` serves the demo with."""
    return _kept(data_dir / "secret-key", lambda: secrets.token_urlsafe(48))


class Command(BaseCommand):
    help = "Create demo logins and run the demo Spark pipeline."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--skip-pipeline", action="store_true", help="do not run the Spark demo pipeline"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        data_dir = Path(settings.DATA_DIR)
        password = demo_password(data_dir)
        demo_secret(data_dir)
        for username, role in DEMO_USERS.items():
            user, _ = User.objects.get_or_create(username=username)
            user.set_password(password)
            user.is_staff = role == ADMIN
            user.is_superuser = role == ADMIN
            user.save()
            user.groups.set([Group.objects.get(name=role)])

        if not options["skip_pipeline"]:
            if "run_demo" in get_commands():
                call_command("run_demo")
            else:
                self.stderr.write("The demo pipeline is not available; skipping it.")

        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS("Lineage Explorer is ready."))
        self.stdout.write(f"  Open   http://127.0.0.1:{os.environ.get('PORT', '8000')}/")
        self.stdout.write(f"  Login  admin / {password}")
        self.stdout.write(
            "  (also steward, compliance, engineer, viewer with the same password; "
            f"kept in {data_dir / 'demo-login.txt'})"
        )
