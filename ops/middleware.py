"""Counts and times every HTTP request, per view (ops/metrics.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase

from ops.metrics import REQUEST_SECONDS, REQUESTS

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RequestMetricsMiddleware:
    """Outermost: labels are the view's name (never the path, which has no bound) and the
    method; a request no view matched counts under "unmatched"."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        view = (match.view_name or "unnamed") if match is not None else "unmatched"
        method = request.method if request.method in METHODS else "other"
        REQUEST_SECONDS.labels(view, method).observe(time.perf_counter() - started)
        REQUESTS.labels(view, method, str(response.status_code)).inc()
        return response
