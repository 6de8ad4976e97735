"""The fuzzing tier, hand-made half: every hostile value of ``tests.fuzz.HOSTILE`` in every
path segment, query parameter, form field and JSON body field of every route of the URL
conf, as an admin (who reaches the deepest code), on a seeded world.

It fails on any 5xx, on a JSON content type whose body is not JSON, on a hostile value
shown unescaped in a page, and on an accepted lineage event that is neither normalised nor
visible as failed. Runs on SQLite and on PostgreSQL (the Makefile's two passes).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from ingest.models import EventState, RawEvent
from tests import fuzz
from tests.fuzz import good_event
from tests.privacy_builders import CUSTOMERS, SHOP

pytestmark = pytest.mark.django_db

ROUTES = {route.name: route for route in fuzz.routes()}
# The on-commit work of these runs (normalising events and SQL logs); privacy's would
# start Spark jobs, whose own tier is tests/spark.
RUN_ON_COMMIT = ("/api/v1/lineage", "/api/v1/sql-logs", "/api/v1/ingestion/", "/ingestion/")


@functools.cache
def openapi() -> dict[str, Any]:
    from drf_spectacular.generators import SchemaGenerator

    schema: dict[str, Any] = json.loads(
        json.dumps(SchemaGenerator().get_schema(request=None, public=True))
    )
    return schema


# A valid value of each parameter, so that the hostile one in another parameter reaches
# the code behind it.
def valid_params(world: dict[str, Any]) -> dict[str, str]:
    node = f"dataset:{SHOP}:{CUSTOMERS}"
    return {
        "namespace": SHOP,
        "name": CUSTOMERS,
        "field": "email",
        "node": node,
        "nodeId": node,
        "from": node,
        "to": f"dataset:{SHOP}:dw.customers",
        "asOf": "2024-06-01T00:00:00Z",
        "compare": "2024-01-01T00:00:00Z",
        "t1": "2024-01-01T00:00:00Z",
        "t2": "2025-01-01T00:00:00Z",
        "after": "2024-01-01T00:00:00Z",
        "before": "2030-01-01T00:00:00Z",
        "depth": "3",
        "maxNodes": "100",
        "limit": "10",
        "offset": "0",
        "page": "1",
        "q": "customers",
        "kind": "all",
        "level": "table",
        "direction": "both",
        "format": "json",
        "withDownstream": "true",
        "all": "true",
        "sortDirection": "asc",
        "dialect": "postgres",
        "subjectKind": "customer",
        "value-0": "4242",
        "value": "4242",
        "mode": "dry-run",
        "description": "fuzzed",
    }


PATH_VALUES = {
    "namespace": SHOP,
    "name": CUSTOMERS,
    "field": "email",
    "job": "load_customers",
}


def path_kwargs(route: fuzz.Route, world: dict[str, Any]) -> dict[str, str]:
    values = {}
    for key in route.kwargs:
        if route.converters.get(key) == "slug":  # a subject kind's name
            values[key] = "customer"
        elif key in PATH_VALUES:
            values[key] = PATH_VALUES[key]
        elif key == "run_id":
            values[key] = world["privacy_run"] if "privacy" in route.name else world["run_id"]
        else:
            values[key] = world[key]
    return values


def query(params: dict[str, str]) -> str:
    return "&".join(f"{fuzz.encode(k)}={fuzz.encode(v)}" for k, v in params.items())


VALID_BODIES: dict[tuple[str, str], Callable[[dict[str, Any]], dict[str, Any]]] = {
    ("/api/v1/ingestion/replay", "POST"): lambda w: {"ids": [1]},
    ("/api/v1/namespaces/{namespace}/datasets/{name}", "PATCH"): lambda w: {"description": "x"},
    ("/api/v1/namespaces/{namespace}/datasets/{name}/fields/{field}", "PATCH"): lambda w: {
        "description": "x"
    },
    ("/api/v1/privacy/subject-search", "POST"): lambda w: {
        "subjectKind": "customer",
        "value": "4242",
    },
    ("/api/v1/privacy/erasure-plans", "POST"): lambda w: {
        "subjectKind": "customer",
        "value": "4242",
    },
    ("/api/v1/privacy/scans", "POST"): lambda w: {"subjectKind": "customer", "value": "4242"},
    ("/api/v1/privacy/erasure-plans/{plan_id}/dry-run", "POST"): lambda w: {
        "subjectKind": "customer",
        "value": "4242",
    },
    ("/api/v1/privacy/erasure-plans/{plan_id}/apply", "POST"): lambda w: {
        "subjectKind": "customer",
        "value": "4242",
        "confirm": True,
    },
    ("/api/v1/taints", "POST"): lambda w: {
        "nodeId": f"dataset:{SHOP}:{CUSTOMERS}",
        "reason": "bad load",
    },
}


def hostile_events() -> list[Any]:
    """Events with a hostile value at each place an event names something."""
    events: list[Any] = []
    for n, value in enumerate(fuzz.HOSTILE, start=100):
        for place in range(6):
            event = good_event(n * 10 + place)
            if place == 0:
                event["eventTime"] = value
            elif place == 1:
                event["job"]["name"] = value
            elif place == 2:
                event["inputs"][0]["name"] = value
            elif place == 3:
                event["outputs"][0]["facets"]["schema"]["fields"][0]["name"] = value
            elif place == 4:
                event["run"]["facets"]["custom"] = {value: value, "n": value}
            else:
                event["outputs"][0]["facets"]["columnLineage"]["fields"]["email"]["inputFields"][0][
                    "field"
                ] = value
            events.append(event)
    return events


class Sender:
    """Sends requests as the admin and keeps what went wrong."""

    def __init__(self, world: dict[str, Any], admin: Any, token: str, capture: Any) -> None:
        self.world = world
        self.page = Client()
        self.page.force_login(admin)
        self.api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
        self.capture = capture
        self.count = 0
        self.failures: list[str] = []

    def send(self, method: str, path: str, value: str, **kwargs: Any) -> None:
        client = self.api if path.startswith("/api/") else self.page
        execute = path.startswith(RUN_ON_COMMIT)
        with self.capture(execute=execute):
            response = client.generic(method, path, **kwargs)
        self.count += 1
        for problem in fuzz.problems_of(response, value):
            self.failures.append(f"{method} {path[:200]!r} [{value[:40]!r}]: {problem}")


def _api_parameters(route: fuzz.Route, method: str) -> tuple[list[str], list[str]]:
    operation = fuzz.schema_operations(openapi()).get((route.template(), method))
    if operation is None:
        return [], []
    names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
    return names, fuzz.body_fields(operation, openapi())


def methods_of(route: fuzz.Route) -> list[str]:
    if route.is_api:
        template = route.template()
        return sorted({m for (path, m) in fuzz.schema_operations(openapi()) if path == template})
    return sorted(fuzz.PAGES[route.name])


def test_every_page_is_known():
    pages = {name for name, route in ROUTES.items() if not route.is_api}
    assert pages - set(fuzz.PAGES) == set(), "add the page's parameters to tests.fuzz.PAGES"


def test_every_api_route_is_in_the_schema():
    templates = {path for (path, _) in fuzz.schema_operations(openapi())}
    missing = {r.name for r in ROUTES.values() if r.is_api and r.template() not in templates}
    assert missing == {"api-not-found"} or missing == set(), missing


@pytest.mark.parametrize("name", sorted(ROUTES))
def test_hostile_values_get_no_5xx(name, world, admin_user, django_capture_on_commit_callbacks):
    from catalog import actions as catalog_actions

    route = ROUTES[name]
    token = catalog_actions.issue_token(admin_user, name="fuzz-client")[1]
    sender = Sender(world, admin_user, token, django_capture_on_commit_callbacks)
    valid = valid_params(world)
    kwargs = path_kwargs(route, world)
    for method in methods_of(route):
        if route.is_api:
            params, fields = _api_parameters(route, method)
        else:
            params = list(fuzz.PAGES[route.name][method])
            fields = []
        form = method == "POST" and not route.is_api
        base = {p: valid.get(p, "x") for p in params}
        body_of = VALID_BODIES.get((route.template(), method), lambda w: {})
        for value in fuzz.HOSTILE:
            # The value in each path segment, each parameter, each body field.
            for key in kwargs:
                path = route.path(**{**kwargs, key: value})
                sender.send(method, path, value, **_payload(form, base, body_of(world)))
            path = route.path(**kwargs)
            for param in [*params, "unknown"]:
                hostile = {**base, param: value}
                if form:
                    sender.send(method, path, value, **_payload(True, hostile, {}))
                else:
                    sender.send(
                        method,
                        f"{path}?{query(hostile)}",
                        value,
                        **_payload(False, {}, body_of(world)),
                    )
            for key in fields:
                body = {**body_of(world), key: value}
                sender.send(method, path, value, **_payload(False, {}, body))
    if name == "api-lineage":
        for event in hostile_events():
            sender.send("POST", "/api/v1/lineage", json.dumps(event), **_json(event))
        sender.send("POST", "/api/v1/lineage/batch", "batch", **_json(hostile_events()))
    if name == "api-sql-logs":
        for value in fuzz.HOSTILE:
            log = "query,start_time,end_time\n" + ",".join(
                json.dumps(v) for v in (f"SELECT {value} FROM t", value, value)
            )
            sender.send(
                "POST",
                f"/api/v1/sql-logs?{query({'namespace': SHOP, 'dialect': 'postgres', 'format': 'csv'})}",
                value,
                data=log.encode("utf-8", "surrogatepass"),
                content_type="text/csv",
            )
    stuck = RawEvent.objects.exclude(state__in=[EventState.DONE, EventState.FAILED])
    assert not stuck.exists(), f"accepted but not processed: {list(stuck.values('pk', 'state'))}"
    assert not sender.failures, f"{len(sender.failures)} of {sender.count} requests:\n" + "\n".join(
        sender.failures[:60]
    )


def _json(body: Any) -> dict[str, Any]:
    return {"data": json.dumps(body), "content_type": "application/json"}


def _payload(form: bool, fields: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    if form:
        return {"data": query(fields), "content_type": "application/x-www-form-urlencoded"}
    if body:
        return _json(body)
    return {}


def test_old_events_are_swept_into_processing(world, django_capture_on_commit_callbacks):
    """Events left pending by a process that stopped are taken up by the next one."""
    from ingest import actions

    raw = RawEvent.objects.filter(state=EventState.DONE).first()
    RawEvent.objects.filter(pk=raw.pk).update(
        state=EventState.PENDING, queued_at=timezone.now() - timedelta(hours=1)
    )
    with django_capture_on_commit_callbacks(execute=True):
        actions.sweep()
    assert RawEvent.objects.get(pk=raw.pk).state == EventState.DONE
