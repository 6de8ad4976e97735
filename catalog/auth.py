"""Roles, bearer tokens and the permission classes every API view uses.

Roles are Django groups carrying permissions (see ROLE_PERMISSIONS); checks go
through permissions, so a superuser passes every check.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.utils import timezone
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from catalog.models import ApiToken

VIEWER = "viewer"
ENGINEER = "engineer"
STEWARD = "steward"
COMPLIANCE = "compliance"
ADMIN = "admin"
PRODUCER = "producer"
ROLES = (VIEWER, ENGINEER, STEWARD, COMPLIANCE, ADMIN, PRODUCER)

READ_LINEAGE = "catalog.read_lineage"
EDIT_CATALOG = "catalog.edit_catalog"
POST_LINEAGE = "ingest.post_lineage"
OPERATE_INGESTION = "ingest.operate_ingestion"
TAINT_DATASET = "graph.taint_dataset"
SEARCH_SUBJECTS = "privacy.search_subjects"
VIEW_AUDIT = "privacy.view_audit"

ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    VIEWER: (READ_LINEAGE,),
    ENGINEER: (READ_LINEAGE, TAINT_DATASET, OPERATE_INGESTION),
    STEWARD: (READ_LINEAGE, EDIT_CATALOG, TAINT_DATASET),
    COMPLIANCE: (READ_LINEAGE, SEARCH_SUBJECTS, VIEW_AUDIT),
    ADMIN: (
        READ_LINEAGE,
        EDIT_CATALOG,
        POST_LINEAGE,
        OPERATE_INGESTION,
        TAINT_DATASET,
        SEARCH_SUBJECTS,
        VIEW_AUDIT,
    ),
    PRODUCER: (POST_LINEAGE,),
}

User = AbstractBaseUser | AnonymousUser


def has_perm(user: Any, perm: str) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.has_perm(perm))


def has_role(user: Any, *roles: str) -> bool:
    """Whether the user is in one of the named role groups (superusers count as admin)."""
    if not (user and user.is_authenticated and user.is_active):
        return False
    if user.is_superuser and ADMIN in roles:
        return True
    return bool(user.groups.filter(name__in=roles).exists())


def role_names(user: Any) -> list[str]:
    if not (user and user.is_authenticated):
        return []
    names = list(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
    if user.is_superuser and ADMIN not in names:
        names.append(ADMIN)
    return sorted(names)


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <token>`, as openlineage-python's api_key auth sends it."""

    keyword = "bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").strip()
        if not header:
            return None
        parts = header.split()
        if parts[0].lower() != self.keyword:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "Malformed Authorization header: use 'Bearer <token>'"
            )
        return self.authenticate_key(parts[1])

    def authenticate_key(self, key: str) -> tuple[Any, ApiToken]:
        token = (
            ApiToken.objects.select_related("user")
            .filter(key_hash=ApiToken.hash_key(key), revoked_at__isnull=True)
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked token")
        now = timezone.now()
        # Touch at most once a minute: the lineage endpoint is hot.
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class _PermissionRequired(permissions.BasePermission):
    perm = READ_LINEAGE
    message = "Your role does not allow this"

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            raise exceptions.NotAuthenticated()
        return has_perm(request.user, self.perm)


class CanReadLineage(_PermissionRequired):
    perm = READ_LINEAGE
    message = "Reading the catalog needs the viewer role or higher"


class CanEditCatalog(_PermissionRequired):
    perm = EDIT_CATALOG
    message = "Editing the catalog needs the steward role"


class CanPostLineage(_PermissionRequired):
    perm = POST_LINEAGE
    message = "Posting lineage needs the producer role"


class CanOperateIngestion(_PermissionRequired):
    perm = OPERATE_INGESTION
    message = "Operating ingestion needs the engineer role"


class CanTaint(_PermissionRequired):
    perm = TAINT_DATASET
    message = "Marking datasets needs the engineer or steward role"


class CanSearchSubjects(_PermissionRequired):
    perm = SEARCH_SUBJECTS
    message = "Subject search needs the compliance role"


class ReadOrEditCatalog(permissions.BasePermission):
    """Safe methods need read access; writes need steward."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return CanReadLineage().has_permission(request, view)
        checker = CanEditCatalog()
        self.message = checker.message
        return checker.has_permission(request, view)
