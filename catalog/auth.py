"""Roles, bearer tokens and the permission classes every API view uses.

Roles are Django groups carrying permissions (see ROLE_PERMISSIONS); checks go
through permissions, so a superuser passes every check.

A user's roles and permissions, and what a bearer token resolves to, are kept
in the process for AUTH_CACHE_SECONDS: the lineage endpoint and the graph API
would otherwise spend most of a request on these lookups. Changes made in this
process (groups, users, revoked tokens) clear the cache at once; other
processes see them within AUTH_CACHE_SECONDS.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
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
    STEWARD: (READ_LINEAGE, EDIT_CATALOG),
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


# -- the grants cache ---------------------------------------------------------------------


@dataclass(frozen=True)
class Grants:
    """What one user may do: role group names and permission names."""

    roles: frozenset[str]
    perms: frozenset[str]
    expires: float


@dataclass(frozen=True)
class _TokenGrant:
    user: Any
    token: ApiToken
    expires: float


_GRANTS: dict[int, Grants] = {}
_TOKENS: dict[str, _TokenGrant] = {}
_MAX_ENTRIES = 10_000


def cache_seconds() -> float:
    return float(getattr(settings, "AUTH_CACHE_SECONDS", 5))


def forget_grants(*args: Any, **kwargs: Any) -> None:
    """Drop every cached grant and token (connected to the signals that change them)."""
    _GRANTS.clear()
    _TOKENS.clear()


def grants(user: Any) -> Grants:
    """The user's roles and permissions, from the cache when fresh."""
    now = time.monotonic()
    found = _GRANTS.get(user.pk)
    if found is not None and found.expires > now:
        return found
    roles: set[str] = set()
    perms: set[str] = set()
    if user.is_superuser:
        roles.add(ADMIN)
        perms.update(ModelBackend().get_all_permissions(_uncached(user)))
    else:
        # Groups and their permissions in one query, the user's own permissions in another.
        rows = user.groups.values_list(
            "name", "permissions__content_type__app_label", "permissions__codename"
        )
        for group, app_label, codename in rows:
            if group in ROLES:
                roles.add(group)
            if codename:
                perms.add(f"{app_label}.{codename}")
        own = user.user_permissions.values_list("content_type__app_label", "codename")
        perms.update(f"{app_label}.{codename}" for app_label, codename in own)
    found = Grants(frozenset(roles), frozenset(perms), now + cache_seconds())
    if len(_GRANTS) >= _MAX_ENTRIES:
        _GRANTS.clear()
    _GRANTS[user.pk] = found
    return found


def _instance_copy(instance: Any) -> Any:
    """A shallow copy of a model instance with its own state (cheaper than copy.copy's pickling)."""
    clone = instance.__class__.__new__(instance.__class__)
    clone.__dict__.update(instance.__dict__)
    clone._state = copy.copy(instance._state)
    clone._state.fields_cache = dict(instance._state.fields_cache)
    return clone


def _uncached(user: Any) -> Any:
    """A copy of the user without Django's per-object permission cache."""
    fresh = copy.copy(user)
    for name in ("_perm_cache", "_user_perm_cache", "_group_perm_cache"):
        fresh.__dict__.pop(name, None)
    return fresh


class CachedModelBackend(ModelBackend):
    """Django's model backend, with permissions read through the grants cache."""

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        return set(grants(user_obj).perms)


def has_perm(user: Any, perm: str) -> bool:
    if not (user and user.is_authenticated and user.is_active):
        return False
    return bool(user.is_superuser or perm in grants(user).perms)


def role_names(user: Any) -> list[str]:
    if not (user and user.is_authenticated):
        return []
    return sorted(grants(user).roles)


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
        key_hash = ApiToken.hash_key(key)
        clock = time.monotonic()
        cached = _TOKENS.get(key_hash)
        if cached is None or cached.expires <= clock:
            token = (
                ApiToken.objects.select_related("user")
                .filter(key_hash=key_hash, revoked_at__isnull=True)
                .first()
            )
            if token is None or not token.user.is_active:
                raise exceptions.AuthenticationFailed("Invalid or revoked token")
            cached = _TokenGrant(token.user, token, clock + cache_seconds())
            if len(_TOKENS) >= _MAX_ENTRIES:
                _TOKENS.clear()
            _TOKENS[key_hash] = cached
        token = cached.token
        now = timezone.now()
        # Touch at most once a minute: the lineage endpoint is hot.
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            token.last_used_at = now
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        # Each request gets its own copies: views may set attributes on them.
        return _instance_copy(cached.user), _instance_copy(token)

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
    message = "Operating ingestion (replays, SQL logs) needs the engineer role"


class CanTaint(_PermissionRequired):
    perm = TAINT_DATASET
    message = "Marking datasets as tainted needs the engineer role"


class CanSearchSubjects(_PermissionRequired):
    perm = SEARCH_SUBJECTS
    message = "Subject search needs the compliance role"


class ManageSubjectKinds(permissions.BasePermission):
    """Subject kinds: compliance reads them (to search), stewards define them."""

    message = "Subject kinds are read by compliance and stewards, and defined by stewards"

    def has_permission(self, request: Request, view: Any) -> bool:
        if not (request.user and request.user.is_authenticated):
            raise exceptions.NotAuthenticated()
        if has_perm(request.user, EDIT_CATALOG):
            return True
        return request.method in permissions.SAFE_METHODS and has_perm(
            request.user, SEARCH_SUBJECTS
        )


class ReadOrEditCatalog(permissions.BasePermission):
    """Safe methods need read access; writes need steward."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return CanReadLineage().has_permission(request, view)
        checker = CanEditCatalog()
        self.message = checker.message
        return checker.has_permission(request, view)
