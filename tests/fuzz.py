"""The fuzzing tier's shared parts: a corpus of hostile values, every route of the URL conf
with the parameters it reads, a seeded world to aim at, and the checks each answer meets.

Routes come from the URL conf itself, so a new endpoint or page cannot ship
without the tier reaching it: ``PAGES`` must name the parameters of every page
(a test fails on a page it does not know), and API routes take theirs from the
OpenAPI schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from tests.ingest_builders import at, columns, dataset, run_event, run_id
from tests.ingest_builders import schema as schema_facet
from tests.privacy_builders import CUSTOMERS, SHOP, build_shop

# Values a careless client or an attacker sends. Each is tried in every parameter, path
# segment and body field the tier knows; none may cause a 5xx.
HOSTILE: tuple[str, ...] = (
    "",
    " ",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "0001-01-01",
    "9999-12-31",
    "10000-01-01",
    "2024-02-30",
    "a\x00b",
    "\x00",
    "\ud800",
    "x\udfffy",
    "\n",
    "a\r\nb",
    "\t",
    "\u2028\u2029",
    "\u00a0\ufeff",
    "\u202e\u200b",
    "1e999",
    "-1e999",
    "NaN",
    "-Infinity",
    "9" * 400,
    "-1",
    "-0",
    "0x10",
    "\u00b2",
    "\u0661\u0662",
    "1_000",
    "<script>alert(1)</script>",
    "\"'><img src=x onerror=alert(1)>",
    "{{7*7}}${7*7}%s%n",
    "../../etc/passwd",
    "//",
    ":",
    "dataset:",
    "dataset::",
    "datasetField:a:b",
    "job:x:y",
    "a:" * 1500,
    "x" * 5000,
    "=cmd|' /C calc'!A0",
    "quarterly\r=cmd|' /C calc'!A0",
    "x\n%%{init: {'theme':'forest'}}%%",
    "' OR 1=1 --",
    "%",
    "_",
    "\U0001d518\U0001f600",
)

# A value holding these must never be shown as it was sent (attributes are double-quoted).
MARKUP = re.compile(r"[<>\"]")


def reflected(value: str, body: str) -> bool:
    """Whether a response body shows a value holding markup as it was sent."""
    return bool(MARKUP.search(value)) and len(value) > 3 and value in body


# -- routes ------------------------------------------------------------------------------------


@dataclass
class Route:
    """One URL pattern of the conf: its name and the keyword arguments its path takes."""

    name: str
    kwargs: dict[str, str]
    converters: dict[str, str] = field(default_factory=dict)

    @property
    def is_api(self) -> bool:
        return self.path().startswith("/api/")

    def path(self, **values: str) -> str:
        """The route's path with these values (percent-encoded) in its segments."""
        sentinels = {
            k: SENTINELS.get(self.converters.get(k, ""), f"SENTINEL{k}") for k in self.kwargs
        }
        path = reverse(self.name, kwargs=sentinels)
        for key, sentinel in sentinels.items():
            value = values.get(key, self.kwargs[key])
            path = path.replace(sentinel, encode(value), 1)
        return path

    def template(self) -> str:
        """The OpenAPI path template, e.g. ``/api/v1/namespaces/{namespace}``."""
        return unquote(self.path(**{k: "{" + k + "}" for k in self.kwargs}))


SENTINELS = {"int": "987654321", "uuid": "00000000-0000-4000-8000-00000000abcd"}


def encode(value: str) -> str:
    """A value percent-encoded as a client sends it (lone surrogates as their raw bytes)."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def _walk(
    patterns: list[URLPattern | URLResolver], converters: dict[str, str]
) -> Iterator[tuple[URLPattern, dict[str, str]]]:
    for pattern in patterns:
        found = dict(converters)
        for key, converter in getattr(pattern.pattern, "converters", {}).items():
            found[key] = type(converter).__name__.replace("Converter", "").lower()
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, found)
        else:
            yield pattern, found


SKIPPED = {
    # Django's admin is Django's; the schema and docs pages take no input.
    "api-schema",
    "api-docs",
    "api-redoc",
}


def routes() -> list[Route]:
    """Every named route of the project's URL conf (Django's admin excepted; its sign-in and
    sign-out pages included)."""
    found: list[Route] = []
    for pattern, converters in _walk(get_resolver().url_patterns, {}):
        name = pattern.name
        django_own = pattern.callback.__module__.startswith("django.contrib.")
        if not name or name in SKIPPED or (django_own and name not in ("login", "logout")):
            continue
        keys = list(pattern.pattern.regex.groupindex)
        found.append(Route(name, {k: "" for k in keys}, converters))
    return found


# What each page reads. A page missing here fails ``test_every_page_is_known``.
PAGES: dict[str, dict[str, tuple[str, ...]]] = {
    "home": {"GET": ()},
    "login": {"GET": ("next",), "POST": ("username", "password", "next")},
    "logout": {"POST": ()},
    "dataset-list": {
        "GET": ("q", "namespace", "pii", "owner", "retention", "platform", "tag", "page")
    },
    "dataset-detail": {"GET": ("namespace", "name", "asOf")},
    "dataset-edit": {
        "GET": ("namespace", "name"),
        "POST": ("description", "owners", "tags", "sensitivity", "retention_policy"),
    },
    "field-edit": {
        "GET": ("namespace", "name", "field"),
        "POST": (
            "pii_category",
            "subject_kind",
            "new_subject_kind",
            "sensitivity",
            "description",
            "action",
        ),
    },
    "dataset-history": {"GET": ("namespace", "name")},
    "schema-compare": {"GET": ("namespace", "name", "from", "to")},
    "stewardship": {"GET": ("list", "namespace", "owner", "page")},
    "subject-kinds": {"GET": (), "POST": ("name", "description", "edit")},
    "search": {"GET": ("q", "kind", "namespace", "platform", "owner", "retention", "pii", "page")},
    "search-suggest": {"GET": ("q",)},
    "job-detail": {"GET": ("namespace", "name", "page")},
    "run-detail": {"GET": ()},
    "graph-explorer": {
        "GET": ("node", "level", "direction", "depth", "asOf", "compare", "limit", "focus")
    },
    "graph-data": {"GET": ("node", "level", "direction", "depth", "asOf", "compare", "limit")},
    "graph-export": {"GET": ("node", "level", "direction", "depth", "asOf", "limit", "format")},
    "impact": {"GET": ("node", "depth", "asOf", "limit")},
    "impact-export": {"GET": ("node", "depth", "asOf", "format")},
    "root-cause": {"GET": ("node", "depth", "asOf", "limit")},
    "dataset-lineage": {"GET": ("namespace", "name", "asOf")},
    "dataset-runs": {"GET": ("namespace", "name", "page", "asOf")},
    "dataset-taints": {
        "GET": ("namespace", "name", "next"),
        "POST": ("namespace", "name", "next", "reason", "windowStart", "windowEnd"),
    },
    "taint-clear": {"POST": ("next",)},
    "orphans-fragment": {"GET": ("namespace", "page")},
    "ingestion-status": {"GET": ()},
    "ingestion-replay": {"POST": ("event_id",)},
    "sql-logs": {
        "GET": (),
        "POST": ("namespace", "dialect", "format", "database", "schema"),
    },
    "sql-log-detail": {"GET": ("page",)},
    "sql-log-progress": {"GET": ()},
    "privacy-search": {
        "GET": (),
        "POST": ("subjectKind", "asOf", "offset", "value-0", "kind-0", "field-0"),
    },
    "privacy-scan": {"POST": ("subjectKind", "value-0", "kind-0", "field-0")},
    "privacy-run": {"GET": ()},
    "privacy-plan-create": {"POST": ("subjectKind", "value-0", "kind-0", "field-0")},
    "privacy-plan": {"GET": ()},
    "privacy-plan-run": {"POST": ("mode", "confirm")},
    "privacy-audit": {"GET": ("action", "page"), "POST": ("subjectKind", "value")},
    "healthz": {"GET": ()},
    "readyz": {"GET": ()},
    "metrics": {"GET": ()},
    "health": {"GET": ("namespace", "owner", "personal")},
    "runbooks": {"GET": ()},
    "notices": {"GET": ()},
}


def schema_operations(schema: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The OpenAPI operations by (path template, METHOD)."""
    found = {}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method in ("get", "post", "patch", "put", "delete"):
                found[(path, method.upper())] = operation
    return found


def body_fields(operation: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """The top-level properties of an operation's JSON request body."""
    content = operation.get("requestBody", {}).get("content", {})
    body = content.get("application/json", {}).get("schema")
    if body is None:
        return []
    if "$ref" in body:
        body = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[-1]]
    return list(body.get("properties", {}))


# Requests the tier sent in this test session, and how many answered 500 or more: the
# session's summary line reports them (tests/conftest.py).
SENT = {"requests": 0, "server_errors": 0}


def is_json(response: Any) -> bool:
    return bool(response.get("Content-Type", "").startswith("application/json"))


def problems_of(response: Any, value: str) -> list[str]:
    """What is wrong with one answer to a request carrying ``value``."""
    found = []
    SENT["requests"] += 1
    if response.status_code >= 500:
        SENT["server_errors"] += 1
        found.append(f"status {response.status_code}")
    body = b"".join(response) if response.streaming else response.content
    text = body.decode("utf-8", "replace")
    if is_json(response) and response.status_code != 204:
        try:
            json.loads(text)
        except ValueError:
            found.append("a JSON content type with a body that is not JSON")
    elif response.get("Content-Type", "").startswith("text/html") and reflected(value, text):
        found.append("the value is shown unescaped")
    return found


# -- the world the requests aim at -------------------------------------------------------------


def good_event(n: int = 1) -> dict[str, Any]:
    return run_event(
        "COMPLETE",
        run_id(n),
        at(1, n % 24),
        job="load_customers",
        inputs=[dataset(CUSTOMERS, ns=SHOP, schema=schema_facet("customer_id", "email"))],
        outputs=[
            dataset(
                "dw.customers",
                ns=SHOP,
                schema=schema_facet("customer_id", "email"),
                columnLineage=columns({"email": [(CUSTOMERS, "email")]}, ns=SHOP),
            )
        ],
    )


def build_world(
    admin_user: Any, api: Any, django_capture_on_commit_callbacks: Any
) -> dict[str, Any]:
    """The shop of the privacy tests, events, a taint, a token, a plan, a scan, a SQL log."""
    from catalog import actions as catalog_actions
    from catalog.models import Dataset
    from graph.taint import mark_tainted
    from ingest import sql_actions
    from privacy import actions as privacy_actions

    build_shop()
    client = api(admin_user)
    with django_capture_on_commit_callbacks(execute=True):
        client.post("/api/v1/lineage/batch", [good_event(1), good_event(2)], format="json")
    taint = mark_tainted(
        Dataset.objects.get(name=CUSTOMERS), reason="fuzz", actor=admin_user, window_start=None
    )
    token, _ = catalog_actions.issue_token(admin_user, name="fuzz")
    request = privacy_actions.SubjectRequest.build(_customer_kind(), [(None, None, "4242")], None)
    plan = privacy_actions.create_erasure_plan(admin_user, request)
    privacy_actions.build_erasure_plan(str(plan.id))
    scan = privacy_actions.request_scan(admin_user, request)
    with django_capture_on_commit_callbacks(execute=True):
        upload = _sql_log(sql_actions, admin_user)
    now = timezone.now()
    return {
        "namespace": SHOP,
        "name": CUSTOMERS,
        "field": "email",
        "job": "load_customers",
        "run_id": run_id(1),
        "plan_id": str(plan.id),
        "taint_id": str(taint.pk),
        "token_id": str(token.pk),
        "upload_id": str(upload.pk),
        "privacy_run": str(scan.id),
        "now": now,
    }


def _customer_kind() -> Any:
    from catalog.models import SubjectKind

    return SubjectKind.objects.get(name="customer")


def _sql_log(sql_actions: Any, user: Any) -> Any:
    import io

    log = io.BytesIO(b"query,start_time\nINSERT INTO dw.t SELECT * FROM shop.public.orders,\n")
    return sql_actions.create_upload(
        user=user,
        stream=log,
        original_name="fuzz.csv",
        namespace=SHOP,
        dialect="postgres",
        fmt="csv",
    )
