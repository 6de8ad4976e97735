"""Template context: the signed-in user's roles, for navigation and edit controls."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from catalog import auth


def roles(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    return {
        "user_roles": auth.role_names(user),
        "can_edit_catalog": auth.has_perm(user, auth.EDIT_CATALOG),
        "can_search_subjects": auth.has_perm(user, auth.SEARCH_SUBJECTS),
        "can_operate_ingestion": auth.has_perm(user, auth.OPERATE_INGESTION),
        "can_taint": auth.has_perm(user, auth.TAINT_DATASET),
    }
