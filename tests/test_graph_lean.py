"""Lean lineage reads (graph/lean.py): the project's WSGI handler answers plain bearer-token
JSON GETs of table and column lineage before the middleware chain, byte for byte and header
for header as the full stack does, and leaves every other request to it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import urlencode

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import RequestFactory

from graph import responses
from graph.lean import LeanReads
from graph.models import Direction, RunState
from lineage_site.handler import LineageWSGIHandler
from tests.graph_builders import T1, T2, LineageBuilder

pytestmark = pytest.mark.django_db

Answer = tuple[str, list[tuple[str, str]], bytes]


@pytest.fixture(autouse=True)
def _keep_test_connection() -> Iterator[None]:
    """As Django's test client does: requests must not close the test's connection."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def shop() -> LineageBuilder:
    g = LineageBuilder()
    g.dataset("raw.orders", fields=("id", "email"))
    g.dataset("raw.legacy", fields=("id",))
    g.dataset("clean.orders", fields=("order_id", "email_hash"))
    g.dataset("mart.daily", fields=("day", "total"))
    g.job(
        "clean",
        reads=["raw.orders"],
        writes=["clean.orders"],
        columns={
            "clean.orders.order_id": ["raw.orders.id"],
            "clean.orders.email_hash": ["raw.orders.email"],
        },
        state=RunState.COMPLETED,
    )
    g.edge("clean", "raw.legacy", Direction.INPUT, until=T2)
    g.job(
        "report",
        reads=["clean.orders"],
        writes=["mart.daily"],
        columns={"mart.daily.total": ["clean.orders.order_id"]},
        state=RunState.FAILED,
    )
    return g


class Counting(LineageWSGIHandler):
    """The project's handler, counting the requests that reached the middleware chain."""

    def __init__(self) -> None:
        super().__init__()
        self.chain_calls = 0
        chain = cast(Any, self)._middleware_chain

        def counted(request: Any) -> Any:
            self.chain_calls += 1
            return chain(request)

        self._middleware_chain = counted


def call(handler: WSGIHandler, path: str, method: str = "get", **meta: Any) -> Answer:
    """Status, headers and body of one request through ``handler`` as a WSGI server sees them."""
    environ = getattr(RequestFactory(), method)(path, **meta).environ
    seen: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        seen.append((status, headers))

    response = handler(environ, start_response)
    try:
        body = b"".join(response)
    finally:
        response.close()
    return seen[0][0], seen[0][1], body


def both(path: str, **meta: Any) -> tuple[Answer, Answer, int]:
    """The answer of the full stack, the project's handler's, and how many of the project's
    handler's requests went through the chain."""
    responses.cache.clear()
    full = call(WSGIHandler(), path, **meta)
    responses.cache.clear()
    handler = Counting()
    lean = call(handler, path, **meta)
    return full, lean, handler.chain_calls


def url(path: str, **params: object) -> str:
    return f"/api/v1/{path}?{urlencode(params)}"


def bearer(token: str, **meta: Any) -> dict[str, Any]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}", **meta}


def test_it_answers_plain_reads_as_the_full_stack_does(shop, viewer, token_for):
    token = token_for(viewer)
    paths = [
        url("lineage", nodeId=shop.id("clean.orders"), depth=5),
        url("lineage", nodeId=shop.id("clean.orders"), depth=1, direction="upstream"),
        url("lineage", nodeId=shop.id("raw.orders"), direction="downstream", maxNodes=2),
        url("lineage", nodeId=shop.id("job:clean"), asOf=T1.isoformat()),
        url("column-lineage", nodeId=shop.id("clean.orders.order_id"), withDownstream="true"),
        url("column-lineage", nodeId=shop.id("raw.orders"), depth=2, asOf=T1.isoformat()),
    ]
    for path in paths:
        for accept in ({}, {"HTTP_ACCEPT": "application/json"}, {"HTTP_ACCEPT": "*/*"}):
            full, lean, chain_calls = both(path, **bearer(token, **accept))
            assert full[0] == "200 OK", full[2]
            assert lean == full, path
            assert chain_calls == 0, path


def test_it_keeps_the_full_stacks_headers(shop, viewer, token_for):
    token = token_for(viewer)
    _, headers, _ = call(
        LineageWSGIHandler(), url("lineage", nodeId=shop.id("raw.orders")), **bearer(token)
    )
    names = dict(headers)
    assert names["Content-Type"] == "application/json"
    assert names["Vary"] == "Accept"
    assert names["Allow"] == "GET, POST, HEAD, OPTIONS"
    assert names["X-Frame-Options"] == "DENY"
    assert names["X-Content-Type-Options"] == "nosniff"
    assert int(names["Content-Length"]) > 0


def test_it_keeps_production_security_headers_and_redirects(shop, viewer, token_for, settings):
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 3600
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    token = token_for(viewer)
    path = url("lineage", nodeId=shop.id("clean.orders"))

    full, lean, chain_calls = both(path, **bearer(token, HTTP_X_FORWARDED_PROTO="https"))
    assert lean == full
    assert ("Strict-Transport-Security", "max-age=3600; includeSubDomains") in lean[1]
    assert chain_calls == 0

    full, lean, chain_calls = both(path, **bearer(token))
    assert full[0].startswith("301")
    assert lean == full
    assert chain_calls == 1


RAW = "dataset:postgres://warehouse-db:5432:raw.orders"


@pytest.mark.parametrize(
    ("path", "meta"),
    [
        pytest.param(url("lineage", nodeId="dataset:"), {}, id="malformed-id"),
        pytest.param(url("lineage", nodeId="dataset:nowhere:nothing"), {}, id="unknown-node"),
        pytest.param(url("lineage", nodeId=RAW, depth=1001), {}, id="depth-out-of-range"),
        pytest.param(url("lineage", nodeId=RAW, asOf="yesterday"), {}, id="bad-as-of"),
        pytest.param(url("lineage", nodeId=RAW, direction="sideways"), {}, id="bad-direction"),
        pytest.param(url("lineage", nodeId=RAW, format="csv"), {}, id="csv"),
        pytest.param(url("lineage", nodeId=RAW, format="xml"), {}, id="unknown-format"),
        pytest.param(url("lineage", nodeId=RAW), {"HTTP_ACCEPT": "text/html"}, id="html"),
        pytest.param(url("column-lineage", nodeId="job:airflow://etl:clean"), {}, id="job-columns"),
        pytest.param(url("column-lineage"), {}, id="no-node"),
        pytest.param(url("lineage", nodeId=RAW), {"HTTP_HOST": "evil.example"}, id="unknown-host"),
        pytest.param(url("lineage/impact", nodeId=RAW), {}, id="another-endpoint"),
    ],
)
def test_it_leaves_everything_else_to_the_full_stack(shop, viewer, token_for, path, meta):
    assert shop.id("raw.orders") == RAW
    full, lean, chain_calls = both(path, **bearer(token_for(viewer), **meta))
    assert lean == full
    assert chain_calls == 1


def test_it_leaves_unauthenticated_and_forbidden_reads_to_the_full_stack(
    shop, viewer, producer, token_for, client
):
    path = url("lineage", nodeId=shop.id("raw.orders"))
    cases = [
        {},
        {"HTTP_AUTHORIZATION": "Bearer not-a-token"},
        {"HTTP_AUTHORIZATION": "Bearer two words"},
        {"HTTP_AUTHORIZATION": "Token something"},
        bearer(token_for(producer)),
    ]
    statuses = []
    for meta in cases:
        full, lean, chain_calls = both(path, **meta)
        assert lean == full
        assert chain_calls == 1
        statuses.append(full[0][:3])
    assert statuses == ["401", "401", "401", "401", "403"]


def test_it_leaves_posts_and_sessions_to_the_full_stack(shop, viewer, token_for, client):
    path = url("lineage", nodeId=shop.id("raw.orders"))
    handler = Counting()
    status, _, _ = call(handler, path, method="post", **bearer(token_for(viewer)))
    assert status.startswith("4")
    client.force_login(viewer)
    session = {"HTTP_COOKIE": f"sessionid={client.cookies['sessionid'].value}"}
    status, _, _ = call(handler, path, **session)
    assert status == "200 OK"
    assert handler.chain_calls == 2


def test_it_sees_each_commit_as_the_full_stack_does(shop, viewer, token_for):
    token = token_for(viewer)
    handler = Counting()
    path = url("lineage", nodeId=shop.id("clean.orders"), direction="upstream")
    before = call(handler, path, **bearer(token))[2]
    shop.dataset("raw.refunds")
    shop.job("refunds", reads=["raw.refunds"], writes=["clean.orders"])
    after = call(handler, path, **bearer(token))[2]
    assert shop.id("raw.refunds").encode() not in before
    assert shop.id("raw.refunds").encode() in after
    assert handler.chain_calls == 0


def test_it_is_off_when_turned_off_or_a_middleware_is_unknown(settings):
    assert LeanReads.configured() is not None
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "django.middleware.gzip.GZipMiddleware"]
    assert LeanReads.configured() is None
    settings.MIDDLEWARE = settings.MIDDLEWARE[:-1]
    settings.MIDDLEWARE = [
        m
        for m in settings.MIDDLEWARE
        if m != "django.middleware.clickjacking.XFrameOptionsMiddleware"
    ]
    assert LeanReads.configured() is None
    settings.MIDDLEWARE = [
        *settings.MIDDLEWARE,
        "django.middleware.clickjacking.XFrameOptionsMiddleware",
    ]
    assert LeanReads.configured() is not None
    settings.GRAPH_LEAN_READS = False
    assert LeanReads.configured() is None
    assert LineageWSGIHandler().lean is None
