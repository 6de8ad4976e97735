"""Who may do what, for every endpoint and page: a role-by-route matrix generated from the URL
conf and checked against the README's role table.

``ACCESS`` names, for each route and method, the README row that grants it. A route
of the URL conf without a row fails ``test_every_route_has_a_row``, so a new endpoint
cannot ship without one; each persona then gets 401 (or the sign-in page) when anonymous,
403 when the README's table does not give its role that row, and anything else when it
does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from catalog import actions as catalog_actions
from catalog.auth import ROLES
from tests import fuzz
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

README = Path(__file__).resolve().parent.parent / "README.md"

READ = "read the catalog and the lineage"
EDIT = "edit descriptions, owners, tags, sensitivity, PII flags, retention, subject kinds"
TAINT = "mark datasets as tainted and clear taints"
OPERATE = "replay events; send and read SQL logs"
PRIVACY = "search for a data subject; scans, erasure plans"
AUDIT = "read the privacy audit"
POST_LINEAGE = "post lineage"
TOKENS = "list and revoke their own API tokens"
METRICS = "read the operational metrics"
PUBLIC = "anyone, signed in or not"

# A row, or any of several rows.
ACCESS: dict[str, dict[str, str | tuple[str, ...]]] = {
    # API
    "api-lineage": {"GET": READ, "POST": POST_LINEAGE},
    "api-lineage-graph": {"GET": READ, "POST": POST_LINEAGE},
    "api-lineage-batch": {"POST": POST_LINEAGE},
    "api-lineage-events": {"GET": READ},
    "api-ingestion-status": {"GET": READ},
    "api-ingestion-replay": {"POST": OPERATE},
    "api-run": {"GET": READ},
    "api-jobs": {"GET": READ},
    "api-job-runs": {"GET": READ},
    "api-job": {"GET": READ},
    "api-search": {"GET": READ},
    "api-dataset-versions": {"GET": READ},
    "api-sql-logs": {"GET": OPERATE, "POST": OPERATE},
    "api-sql-log": {"GET": OPERATE},
    "api-column-lineage": {"GET": READ},
    "api-lineage-impact": {"GET": READ},
    "api-lineage-root-cause": {"GET": READ},
    "api-lineage-path": {"GET": READ},
    "api-lineage-diff": {"GET": READ},
    "api-lineage-changes": {"GET": READ},
    "api-lineage-orphans": {"GET": READ},
    "api-lineage-sources": {"GET": READ},
    "api-taints": {"GET": READ, "POST": TAINT},
    "api-taint": {"GET": READ, "DELETE": TAINT},
    "privacy-api-search": {"POST": PRIVACY},
    "privacy-api-kinds": {"GET": (PRIVACY, EDIT), "POST": EDIT},
    "privacy-api-kind": {"PATCH": EDIT},
    "privacy-api-scans": {"POST": PRIVACY},
    "privacy-api-run": {"GET": PRIVACY},
    "privacy-api-plans": {"POST": PRIVACY},
    "privacy-api-plan": {"GET": PRIVACY},
    "privacy-api-plan-csv": {"GET": PRIVACY},
    "privacy-api-plan-json": {"GET": PRIVACY},
    "privacy-api-plan-dry-run": {"POST": PRIVACY},
    "privacy-api-plan-apply": {"POST": PRIVACY},
    "privacy-api-audit": {"GET": AUDIT},
    "api-namespaces": {"GET": READ},
    "api-field": {"GET": READ, "PATCH": EDIT},
    "api-dataset-history": {"GET": READ},
    "api-datasets": {"GET": READ},
    "api-dataset": {"GET": READ, "PATCH": EDIT},
    "api-namespace": {"GET": READ, "PUT": EDIT},
    "api-tokens": {"GET": TOKENS},
    "api-token": {"DELETE": TOKENS},
    "api-slis": {"GET": READ},
    # pages
    "login": {"GET": PUBLIC, "POST": PUBLIC},
    "logout": {"POST": PUBLIC},
    "home": {"GET": READ},
    "dataset-list": {"GET": READ},
    "dataset-detail": {"GET": READ},
    "dataset-edit": {"GET": EDIT, "POST": EDIT},
    "field-edit": {"GET": EDIT, "POST": EDIT},
    "dataset-history": {"GET": READ},
    "schema-compare": {"GET": READ},
    "stewardship": {"GET": READ},
    "subject-kinds": {"GET": (PRIVACY, EDIT), "POST": EDIT},
    "search": {"GET": READ},
    "search-suggest": {"GET": READ},
    "job-detail": {"GET": READ},
    "run-detail": {"GET": READ},
    "graph-explorer": {"GET": READ},
    "graph-data": {"GET": READ},
    "graph-export": {"GET": READ},
    "impact": {"GET": READ},
    "impact-export": {"GET": READ},
    "root-cause": {"GET": READ},
    "dataset-lineage": {"GET": READ},
    "dataset-runs": {"GET": READ},
    "dataset-taints": {"GET": READ, "POST": TAINT},
    "taint-clear": {"POST": TAINT},
    "orphans-fragment": {"GET": READ},
    "ingestion-status": {"GET": READ},
    "ingestion-replay": {"POST": OPERATE},
    "sql-logs": {"GET": OPERATE, "POST": OPERATE},
    "sql-log-detail": {"GET": OPERATE},
    "sql-log-progress": {"GET": OPERATE},
    "privacy-search": {"GET": PRIVACY, "POST": PRIVACY},
    "privacy-scan": {"POST": PRIVACY},
    "privacy-run": {"GET": PRIVACY},
    "privacy-plan-create": {"POST": PRIVACY},
    "privacy-plan": {"GET": PRIVACY},
    "privacy-plan-run": {"POST": PRIVACY},
    "privacy-audit": {"GET": AUDIT, "POST": AUDIT},
    "healthz": {"GET": PUBLIC},
    "readyz": {"GET": PUBLIC},
    "metrics": {"GET": METRICS},
    "health": {"GET": READ},
    "runbooks": {"GET": READ},
    "notices": {"GET": READ},
}


def readme_table() -> dict[str, set[str]]:
    """The README's role table: {what may be done: the roles with a tick}."""
    text = README.read_text(encoding="utf-8")
    lines = text.split("## Roles", 1)[1].strip().splitlines()
    rows = lines[: next(i for i, line in enumerate(lines) if not line.startswith("|"))]
    header = [cell.strip().strip("`") for cell in rows[0].strip("|").split("|")]
    table = {}
    for line in rows[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        table[cells[0]] = {role for role, cell in zip(header[1:], cells[1:], strict=True) if cell}
    return table


ROUTES = {route.name: route for route in fuzz.routes()}


def test_every_route_has_a_row():
    pairs = set()
    for name, route in ROUTES.items():
        if route.is_api:
            template = route.template()
            methods = {m for (path, m) in fuzz.schema_operations(_schema()) if path == template}
        else:
            methods = set(fuzz.PAGES[name])
        pairs |= {(name, method) for method in methods}
    listed = {(name, method) for name, methods in ACCESS.items() for method in methods}
    assert pairs - listed == set(), "give each new route a row in ACCESS"
    assert listed - pairs == set()


def test_every_row_is_in_the_readme():
    table = readme_table()
    assert set(ROLES) <= set.union(*table.values())
    used = {row for methods in ACCESS.values() for rows in methods.values() for row in _rows(rows)}
    assert used - {PUBLIC} <= set(table), used - set(table)


def _schema() -> dict[str, Any]:
    from tests.test_fuzz_corpus import openapi

    return openapi()


def _persona(role: str | None) -> User | None:
    if role == "anonymous":
        return None
    return make_user(f"matrix-{role or 'none'}", role)


@pytest.mark.parametrize("role", ["anonymous", None, *ROLES])
def test_each_role_gets_exactly_what_the_readme_gives_it(role, world, settings):
    from tests.test_fuzz_corpus import path_kwargs

    table = readme_table()
    user = _persona(role)
    page, api = Client(), Client()
    if user is not None:
        page.force_login(user)
        api = Client(HTTP_AUTHORIZATION=f"Bearer {catalog_actions.issue_token(user)[1]}")
    wrong = []
    # Signing out last: the other pages want the persona signed in.
    for name, methods in sorted(ACCESS.items(), key=lambda item: item[0] == "logout"):
        route = ROUTES[name]
        path = route.path(**path_kwargs(route, world))
        for method, capability in methods.items():
            client = api if route.is_api else page
            response = client.generic(method, path)
            allowed = capability == PUBLIC or (
                user is not None
                and any(
                    row == TOKENS or (role is not None and role in table[row])
                    for row in _rows(capability)
                )
            )
            got = "allowed" if capability == PUBLIC else _verdict(response, route.is_api)
            expected = "allowed" if allowed else ("anonymous" if user is None else "refused")
            if got != expected:
                wrong.append(f"{role}: {method} {path} gave {response.status_code} ({got})")
    assert not wrong, "\n".join(wrong)


def _rows(capability: str | tuple[str, ...]) -> tuple[str, ...]:
    return capability if isinstance(capability, tuple) else (capability,)


def _verdict(response: Any, is_api: bool) -> str:
    if response.status_code == 401:
        return "anonymous"
    if response.status_code in (302, 303) and re.search(r"/accounts/login/", response["Location"]):
        return "anonymous"
    if response.status_code == 403:
        return "refused"
    return "allowed"
