"""``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics`` (Prometheus)."""

from __future__ import annotations

import ipaddress
import logging
from pathlib import Path
from typing import Any

import markdown
from django.conf import settings
from django.contrib.auth.decorators import login_required, permission_required
from django.db import DatabaseError, connection
from django.db.models import Exists, OuterRef
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from kombu.connection import Connection
from prometheus_client import CONTENT_TYPE_LATEST
from rest_framework.exceptions import AuthenticationFailed

from catalog import auth
from catalog.auth import BearerTokenAuthentication
from catalog.errors import ApiError, error_body
from catalog.models import Dataset, Namespace, Owner
from ops import metrics, slis
from ops.api import scope_of
from ops.models import Notice, Subscription

BROKER_TIMEOUT_SECONDS = 2.0
log = logging.getLogger(__name__)


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """The process answers: nothing else is looked at (no database, no broker)."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """200 when the database (and the broker, when one is configured) answers, else 503
    naming what is down and why."""
    checks = {"database": _database()}
    if settings.CELERY_BROKER_URL:
        checks["broker"] = _broker(settings.CELERY_BROKER_URL)
    down = sorted(name for name, state in checks.items() if state != "ok")
    body: dict[str, Any] = {"status": "unavailable" if down else "ready", "checks": checks}
    if down:
        body["down"] = down
    return JsonResponse(body, status=503 if down else 200)


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        connection.close()  # a broken connection is not kept for the next request
        return _down("database", exc)
    return "ok"


def _broker(url: str) -> str:
    try:
        with Connection(  # type: ignore[no-untyped-call]
            url,
            connect_timeout=BROKER_TIMEOUT_SECONDS,
            transport_options={"socket_timeout": BROKER_TIMEOUT_SECONDS},
        ) as broker:
            broker.ensure_connection(max_retries=1, interval_start=0, interval_step=0)
    except Exception as exc:  # kombu raises the transport's own errors
        return _down("broker", exc)
    return "ok"


def _down(what: str, exc: BaseException) -> str:
    """What the probe answers (anyone may ask: no host, address or user in it); the log
    has the whole error."""
    log.warning("readiness: the %s is down: %s", what, " ".join(str(exc).split())[:500])
    return f"down: {type(exc).__name__}"


@never_cache
@require_GET
def prometheus(request: HttpRequest) -> HttpResponse:
    """The metrics, to a user in any role (an API token, or signed in) or to an address in
    METRICS_ALLOWED_IPS."""
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    return HttpResponse(metrics.exposition(), content_type=CONTENT_TYPE_LATEST)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the request may read the metrics: a user in any role (by token or signed
    in), or an address of METRICS_ALLOWED_IPS."""
    try:
        bearer = BearerTokenAuthentication().authenticate(request)  # type: ignore[arg-type]
    except AuthenticationFailed as exc:
        return _unauthorized(str(exc.detail))
    user: Any = request.user if bearer is None else bearer[0]
    if not user.is_authenticated:
        if _allowed_address(request.META.get("REMOTE_ADDR", "")):
            return None
        return _unauthorized(
            "Metrics need an API token (Authorization: Bearer <token>) or a request from an "
            "address in METRICS_ALLOWED_IPS"
        )
    if not auth.role_names(user):
        return JsonResponse(error_body("Metrics need a user in a role"), status=403)
    return None


def _allowed_address(address: str) -> bool:
    try:
        client = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(client in network for network in settings.METRICS_ALLOWED_NETWORKS)


def _unauthorized(message: str) -> JsonResponse:
    response = JsonResponse(error_body(message), status=401)
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


# --- the Health page ----------------------------------------------------------------------


SPARK_WIDTH, SPARK_HEIGHT = 180, 36


@login_required
@permission_required(auth.READ_LINEAGE, raise_exception=True)
def health(request: HttpRequest) -> HttpResponse:
    """The indicators of /api/v1/slis for people, with each one's last 30 days."""
    try:
        scope = scope_of(request.GET)
    except ApiError as exc:
        return render(
            request, "error.html", {"title": "Bad filter", "message": exc.message}, status=400
        )
    found = slis.indicators(scope, 0, 20)
    history = slis.trends()
    rows = []
    for indicator in found:
        samples = history.get(indicator.name, [])
        for miss in indicator.misses:
            if "ageSeconds" in miss:
                miss["age"] = _duration(miss["ageSeconds"])
                miss["usually"] = _duration(miss["usualIntervalSeconds"])
        rows.append(
            {
                "indicator": indicator,
                "label": LABELS[indicator.name],
                "trend": _sparkline([s.value for s in samples], indicator.target),
                "days": len(samples),
                "runbook": RUNBOOKS[indicator.name],
            }
        )
    return render(
        request,
        "ops/health.html",
        {
            "rows": rows,
            "scope": scope,
            "owners": Owner.objects.order_by("name").values_list("name", flat=True),
            # The indicators judge datasets: namespaces of jobs alone would show nothing.
            "namespaces": Namespace.objects.filter(
                Exists(Dataset.objects.filter(namespace=OuterRef("pk"), is_hidden=False))
            )
            .order_by("name")
            .values_list("name", flat=True),
            "nav": "health",
        },
    )


LABELS = {
    "coverage": "Coverage",
    "freshness": "Freshness",
    "completeness": "Completeness",
    "ingestionLag": "Ingestion lag",
    "deadLetters": "Dead letters",
}


def _duration(seconds: float) -> str:
    """A span as people say it: 45 min, 4.0 h, 3.5 d."""
    if seconds < 3600:
        return f"{round(seconds / 60)} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


# Where docs/runbooks.md tells what to do when an indicator misses its target.
RUNBOOKS = {
    "coverage": "stale-lineage",
    "freshness": "stale-lineage",
    "completeness": "incomplete-stewardship",
    "ingestionLag": "ingestion-lag",
    "deadLetters": "dead-letters",
}


def _sparkline(values: list[float | None], target: float) -> dict[str, Any] | None:
    """SVG polyline points of ``values`` (oldest first), scaled with the target in view."""
    known = [v for v in values if v is not None]
    if len(known) < 2:
        return None
    low, high = min([*known, target]), max([*known, target])
    span = (high - low) or 1.0
    step = SPARK_WIDTH / (len(values) - 1)

    def y(value: float) -> float:
        return round(SPARK_HEIGHT - 2 - (value - low) / span * (SPARK_HEIGHT - 4), 1)

    points = " ".join(f"{round(i * step, 1)},{y(v)}" for i, v in enumerate(values) if v is not None)
    return {"points": points, "target_y": y(target), "width": SPARK_WIDTH, "height": SPARK_HEIGHT}


RUNBOOK_FILE = Path(settings.BASE_DIR) / "docs" / "runbooks.md"


@login_required
@permission_required(auth.READ_LINEAGE, raise_exception=True)
def runbooks(request: HttpRequest) -> HttpResponse:
    """docs/runbooks.md as a page: what to do when an indicator misses its target."""
    body = markdown.markdown(RUNBOOK_FILE.read_text(encoding="utf-8"), extensions=["toc"])
    return render(request, "ops/runbooks.html", {"body": body, "nav": "health"})


@login_required
@permission_required(auth.READ_LINEAGE, raise_exception=True)
def notices(request: HttpRequest) -> HttpResponse:
    """Notices sent to owners lately, each delivery's state and attempts; the subscriptions."""
    recent = (
        Notice.objects.select_related("subscription").prefetch_related("deliveries").all()[:100]
    )
    return render(
        request,
        "ops/notices.html",
        {
            "notices": recent,
            "subscriptions": Subscription.objects.select_related("dataset", "namespace", "owner"),
            "nav": "health",
        },
    )
