"""One JSON error shape for the whole API: {"error", "field", "detail"}."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader
from rest_framework import exceptions, status
from rest_framework.response import Response

logger = logging.getLogger(__name__)


class ApiError(exceptions.APIException):
    """An API error naming the field or parameter at fault."""

    status_code: int = status.HTTP_400_BAD_REQUEST

    def __init__(
        self,
        message: str,
        field: str | None = None,
        status_code: int = status.HTTP_400_BAD_REQUEST,
        detail: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.status_code = status_code
        self.extra = detail or {}


def error_body(message: str, field: str | None = None, detail: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"error": message, "field": field}
    if detail:
        body["detail"] = detail
    return body


def _first_field_error(detail: Any, prefix: str = "") -> tuple[str | None, str]:
    """Return (dotted field path, message) of the first error in a DRF error tree."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            if key in ("non_field_errors", "detail"):
                path = prefix
            elif isinstance(key, int) or str(key).isdigit():
                path = f"{prefix}[{key}]"
            else:
                path = f"{prefix}.{key}" if prefix else str(key)
            return _first_field_error(value, path)
    if isinstance(detail, list) and detail:
        first = detail[0]
        if isinstance(first, dict | list):
            index = next(i for i, item in enumerate(detail) if item)
            return _first_field_error(detail[index], f"{prefix}[{index}]" if prefix else "")
        return (prefix or None), str(first)
    return (prefix or None), str(detail)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler that answers every error in the project's shape."""
    # Imported here: DRF's views module reads the parser setting, which names catalog.params,
    # which imports this module.
    from rest_framework.views import exception_handler

    if isinstance(exc, ApiError):
        return Response(error_body(exc.message, exc.field, exc.extra), status=exc.status_code)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "Not found.")
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        field, message = _first_field_error(exc.detail)
        response.data = error_body(
            f"{field}: {message}" if field else message, field, {"errors": exc.detail}
        )
    elif isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        response.status_code = status.HTTP_401_UNAUTHORIZED
        response.data = error_body(str(exc.detail), "Authorization")
        response["WWW-Authenticate"] = 'Bearer realm="api"'
    elif isinstance(exc, exceptions.APIException):
        response.data = error_body(str(exc.detail))
    return response


def json_error(message: str, status_code: int, field: str | None = None) -> JsonResponse:
    return JsonResponse(error_body(message, field), status=status_code)


# -- errors outside the API's views: the same shape under /api/, a page elsewhere ----------

TITLES = {
    400: "Cannot show this",
    403: "Not allowed",
    404: "Not found",
    405: "Not allowed",
    413: "Too large",
    500: "Something went wrong",
}


def error_response(
    request: HttpRequest | None, status_code: int, message: str, field: str | None = None
) -> HttpResponse:
    """The error as the API's JSON under ``/api/``, else as the app's error page."""
    if request is not None and request.path_info.startswith("/api/"):
        return json_error(message, status_code, field)
    context = {
        "status": status_code,
        "title": TITLES.get(status_code, "Cannot show this"),
        "message": message,
        "param": field,
    }
    if request is None or status_code >= 500:
        # Without the request's context: a failing database must not fail the error page.
        body = loader.get_template("error.html").render(context)
        return HttpResponse(body, status=status_code)
    return render(request, "error.html", context, status=status_code)


def _message(exception: BaseException | None, default: str) -> str:
    """Our own exceptions carry a message for people; Django's resolver carries a dict."""
    text = exception.args[0] if exception is not None and exception.args else None
    return text if isinstance(text, str) and text else default


def bad_request(request: HttpRequest, exception: BaseException) -> HttpResponse:
    if isinstance(exception, RequestDataTooBig):
        limit = int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        return error_response(request, 413, f"Body is larger than the {limit:,}-byte limit", "body")
    return error_response(request, 400, "The request could not be read.")


def permission_denied(request: HttpRequest, exception: BaseException) -> HttpResponse:
    return error_response(request, 403, _message(exception, "Your role does not allow this."))


def page_not_found(request: HttpRequest, exception: BaseException) -> HttpResponse:
    return error_response(request, 404, _message(exception, "There is nothing at this address."))


def server_error(request: HttpRequest) -> HttpResponse:
    message = "The server met an error; it has been logged. Try again, or tell an admin."
    if request.path_info.startswith("/api/"):
        return json_error(message, 500)
    return error_response(None, 500, message)
