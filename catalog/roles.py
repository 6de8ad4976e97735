"""Create the role groups and give each its permissions (idempotent)."""

from __future__ import annotations

from typing import Any

from django.apps import apps as global_apps
from django.contrib.auth.management import create_permissions
from django.contrib.auth.models import Group, Permission

from catalog.auth import ROLE_PERMISSIONS


def ensure_roles(**kwargs: Any) -> None:
    """post_migrate handler: every role group exists with exactly its permissions."""
    for app_config in global_apps.get_app_configs():
        create_permissions(app_config, verbosity=0)
    for role, perms in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        wanted = []
        for dotted in perms:
            app_label, codename = dotted.split(".")
            wanted.append(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )
        group.permissions.set(wanted)
