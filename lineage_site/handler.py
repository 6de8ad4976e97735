"""The project's WSGI handler: Django's, with the lineage API's hottest reads answered
before the middleware chain (graph/lean.py)."""

from __future__ import annotations

from django.core.handlers.wsgi import WSGIHandler
from django.http import HttpRequest, HttpResponseBase

from graph.lean import LeanReads


class LineageWSGIHandler(WSGIHandler):
    """Django's WSGI handler (request, signals, response closing all Django's own) whose
    ``get_response`` first offers the request to the lean lineage reads."""

    def __init__(self) -> None:
        super().__init__()
        self.lean = LeanReads.configured()

    def get_response(self, request: HttpRequest) -> HttpResponseBase:
        if self.lean is not None and (response := self.lean.answer(request)) is not None:
            # As BaseHandler.get_response does: the request's files close with the response.
            response._resource_closers.append(request.close)  # type: ignore[attr-defined]
            return response
        return super().get_response(request)
