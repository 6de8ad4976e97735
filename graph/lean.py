"""The lineage API's two hottest reads, answered without the middleware chain and DRF.

``GET /api/v1/lineage`` and ``GET /api/v1/column-lineage`` are what OpenLineage
tools and the benchmarks ask for again and again. Through Django's middleware
chain and DRF's dispatch, a request spends about as long in the framework as
in the lineage itself (~0.9 of ~2 ms of CPU at 100,000 datasets). With four
clients on two cores, every millisecond of CPU per request is about two of
latency. :class:`LeanReads` answers the plain case of those two reads in a
fraction of that:

- a GET of exactly one of the two paths, with ``Authorization: Bearer <token>``,
  no ``format`` and an ``Accept`` that API clients send (``*/*``, JSON);
- a token that is valid and whose user may read the lineage;
- parameters the view accepts.

Everything else (sessions, other formats, a bad parameter, an unknown node, a
bad token, a role that may not) goes through the full stack, which gives its
usual answer. A request can go there after the lean path has looked at it: it
is a read, and the lean path changes nothing but what the full stack would
change too (the token's last use). The body comes from the same function as
the DRF view's (``graph.api.lineage_json``, ``column_lineage_json``), and the
headers from Django's own middleware (security headers, X-Frame-Options,
Content-Length, host check, HTTPS redirect) and DRF's defaults for the view
(``Allow``, ``Vary``). Each other middleware of the project is known to
change nothing for such a request; with a middleware not known here, the
lean path is off (``GRAPH_LEAN_READS=false`` turns it off too).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.security import SecurityMiddleware
from django.urls import reverse
from rest_framework.exceptions import APIException
from rest_framework.views import APIView

from catalog.api import PLAIN_ACCEPT
from catalog.auth import READ_LINEAGE, BearerTokenAuthentication, has_perm
from catalog.errors import ApiError
from catalog.params import check_request_text
from graph import api, revision

log = logging.getLogger(__name__)

# Called by the lean path itself, request side first, response side in reverse.
CALLED = (
    "django.middleware.security.SecurityMiddleware",
    "catalog.params.TextGuardMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
)
# Known to change nothing for a bearer-token GET of the API whose view is exempt from
# CSRF: they act on static files, a session or messages the request never touches,
# or a user the lean path authenticates itself.
INERT = (
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
)


@dataclass(frozen=True, slots=True)
class Route:
    """One lean read: the function giving its JSON body and the headers DRF adds for
    its view (``Allow``, ``Vary``)."""

    body: Callable[[Mapping[str, str]], bytes]
    headers: tuple[tuple[str, str], ...]


def _route(
    view: type[APIView], body: Callable[[Mapping[str, str]], bytes], allow: str = ""
) -> Route:
    instance = view()
    if hasattr(instance, "get") and not hasattr(instance, "head"):
        # As View.setup does for each request, so that Allow names HEAD.
        setattr(instance, "head", instance.get)  # noqa: B010
    defaults = instance.default_response_headers
    if allow:
        defaults["Allow"] = allow
    # DRF's finalize_response sets Vary before Allow.
    order = sorted(defaults, key=lambda name: name != "Vary")
    return Route(body, tuple((name, defaults[name]) for name in order))


def _no_response(request: HttpRequest) -> HttpResponseBase:
    raise AssertionError("the lean path calls middleware hooks, never the chain")


class LeanReads:
    """Answers the plain reads listed in the module's docstring; ``answer`` gives None for
    every other request."""

    def __init__(self, routes: Mapping[str, Route]) -> None:
        self.routes = dict(routes)
        self.security = SecurityMiddleware(_no_response)
        self.common = CommonMiddleware(_no_response)
        self.frames = XFrameOptionsMiddleware(_no_response)
        self.authentication = BearerTokenAuthentication()

    @classmethod
    def configured(cls) -> LeanReads | None:
        """The lean reads for this project's settings, or None when they are off."""
        if not getattr(settings, "GRAPH_LEAN_READS", True):
            return None
        unknown = [m for m in settings.MIDDLEWARE if m not in CALLED and m not in INERT]
        if unknown or not all(m in settings.MIDDLEWARE for m in CALLED):
            log.info("Lean lineage reads are off: middleware %s", unknown or "missing")
            return None
        return cls(
            {
                # The path takes POST too (the ingest app's): Allow says so.
                reverse("api-lineage-graph"): _route(
                    api.LineageView, api.lineage_json, allow="GET, POST, HEAD, OPTIONS"
                ),
                reverse("api-column-lineage"): _route(
                    api.ColumnLineageView, api.column_lineage_json
                ),
            }
        )

    def answer(self, request: HttpRequest) -> HttpResponse | None:
        """The response to ``request``, or None when the full stack must answer it."""
        route = self.routes.get(request.path_info)
        if route is None or request.method != "GET":
            return None
        meta = request.META
        if meta.get("HTTP_ACCEPT", "*/*") not in PLAIN_ACCEPT or "format" in request.GET:
            return None
        parts = meta.get("HTTP_AUTHORIZATION", "").split()
        if len(parts) != 2 or parts[0].lower() != "bearer":
            return None
        try:
            # Redirects (HTTPS, www, a slash), unknown hosts, refused user agents.
            if self.security.process_request(request) or self.common.process_request(request):
                return None
            check_request_text(request)
            with revision.pinned():
                user, _ = self.authentication.authenticate_key(parts[1])
                if not has_perm(user, READ_LINEAGE):
                    return None
                body = route.body(request.GET)
        except (ApiError, APIException):
            return None
        except Exception:
            # Anything unexpected: the full stack meets it again and answers as it does.
            log.debug("Lean read left to the full stack", exc_info=True)
            return None
        return self._response(request, body, route)

    def _response(self, request: HttpRequest, body: bytes, route: Route) -> HttpResponse:
        response = HttpResponse(body, content_type="application/json")
        for name, value in route.headers:
            response[name] = value
        # What the chain's response side would do, in its order (the chain runs it in reverse).
        out: Any = self.frames.process_response(request, response)
        out = self.common.process_response(request, out)
        return self.security.process_response(request, out)
