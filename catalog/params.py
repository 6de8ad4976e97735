"""Input parsing shared by every view: instants, text, numbers and JSON bodies.

Each error names the parameter or the path in the body at fault. The text rule
(``text_problem``) is applied once to every request by ``TextGuardMiddleware``
(path, query and form fields) and by ``JSONBodyParser`` (API bodies); the
OpenLineage endpoint applies it to events in ``ingest.events``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest, HttpResponseBase
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.parsers import JSONParser

from catalog.errors import ApiError, error_response


def instant_from_iso(text: str) -> datetime:
    """An ISO-8601 instant (a date means its start) as aware UTC; a missing offset means UTC.

    Raises ValueError for anything else, including instants that fall outside the
    calendar once moved to UTC (``0001-01-01T00:00:00+01:00``). The one date parser
    of the project: query parameters, request bodies and OpenLineage events use it.
    """
    try:
        parsed = datetime.fromisoformat(text.strip().replace("z", "Z"))
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError(f"{text!r} is outside the calendar in UTC") from exc


def parse_instant(raw: str, param: str) -> datetime:
    """Parse an ISO-8601 instant (or a date, meaning its start, UTC) into aware UTC."""
    check_text(raw, param)
    try:
        return instant_from_iso(raw)
    except ValueError as exc:
        raise ApiError(f"{param} is not an ISO-8601 instant: {raw[:64]!r}", param) from exc


STRICT_INPUTS: set[str] = set()


class StrictInput(serializers.Serializer):  # type: ignore[type-arg]
    """A request body whose view refuses keys it does not know: its OpenAPI component says
    so (``additionalProperties: false``, catalog.schema.document_text_rule)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        STRICT_INPUTS.add(cls.__name__)


def strict_body(
    serializer_class: type[serializers.Serializer[Any]], payload: Any
) -> dict[str, Any]:
    """A JSON object's fields, checked by ``serializer_class``; a body that is not an object,
    or a key it does not know, is an error naming it."""
    if not isinstance(payload, dict):
        raise ApiError("Request body must be a JSON object", "body")
    unknown = sorted(set(payload) - set(serializer_class().fields))
    if unknown:
        raise ApiError(f"Unknown key {unknown[0]!r}", unknown[0])
    serializer = serializer_class(data=payload)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class TextField(serializers.CharField):
    """DRF's CharField for JSON bodies: a number or a boolean is not text."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


@extend_schema_field({"type": "string", "format": "date-time", "pattern": "^(?!0000)"})
class InstantField(serializers.Field):  # type: ignore[type-arg]
    """A request body's ISO-8601 instant, read by ``instant_from_iso`` into aware UTC."""

    default_error_messages = {"invalid": "Not an ISO-8601 instant."}

    def to_internal_value(self, data: Any) -> datetime:
        if not isinstance(data, str) or text_problem(data):
            self.fail("invalid")
        try:
            return instant_from_iso(data)
        except ValueError:
            self.fail("invalid")
        raise AssertionError("unreachable")

    def to_representation(self, value: datetime) -> str:
        return value.isoformat().replace("+00:00", "Z")


def text_problem(text: str) -> str:
    """What makes ``text`` unstorable ("" when nothing): PostgreSQL's text holds no NUL, and
    no database holds a lone UTF-16 surrogate (JSON can spell one, ``"\\ud800"``)."""
    if "\x00" in text:
        return "holds a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone UTF-16 surrogate (not valid Unicode)"
    return ""


def check_text(value: str, param: str) -> str:
    """``value`` when every database can store it; else ApiError (400) naming ``param``."""
    problem = text_problem(value)
    if problem:
        raise ApiError(f"{param} {problem}", param)
    return value


def unstorable_value(value: Any) -> tuple[str, str] | None:
    """(path, message) of the first part of decoded JSON that no database stores: a string
    or key that ``text_problem`` refuses, or a number beyond the range of a double (JSON
    spells one as ``1e999``, Python reads it as infinity); None when there is none."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        where = path or "body"
        if isinstance(item, dict):
            for key, child in item.items():
                problem = text_problem(key)
                if problem:
                    return where, f"{where} has a key that {problem}"
                stack.append((child, f"{path}.{key}" if path else key))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
        elif isinstance(item, str):
            problem = text_problem(item)
            if problem:
                return where, f"{where} {problem}"
        elif isinstance(item, float) and not math.isfinite(item):
            return where, f"{where} is a number beyond the range of a double"
    return None


def optional_instant(params: Mapping[str, str], param: str = "asOf") -> datetime | None:
    raw = params.get(param)
    if raw is None or raw == "":
        return None
    return parse_instant(raw, param)


# The largest id a database keeps (a signed 64-bit integer).
MAX_ID = 2**63 - 1


def int_param(
    params: Mapping[str, str], param: str, default: int, minimum: int, maximum: int
) -> int:
    raw = params.get(param)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ApiError(f"{param} must be an integer, got {raw[:64]!r}", param) from exc
    if not minimum <= value <= maximum:
        raise ApiError(f"{param} must be between {minimum} and {maximum}, got {value}", param)
    return value


def bool_param(params: Mapping[str, str], param: str, default: bool) -> bool:
    raw = params.get(param)
    if raw is None or raw == "":
        return default
    lowered = raw.lower()
    if lowered in {"true", "1", "yes"}:
        return True
    if lowered in {"false", "0", "no"}:
        return False
    raise ApiError(f"{param} must be true or false, got {raw[:64]!r}", param)


def choice_param(
    params: Mapping[str, str], param: str, default: str, choices: tuple[str, ...]
) -> str:
    raw = params.get(param) or default
    if raw not in choices:
        raise ApiError(f"{param} must be one of {', '.join(choices)}, got {raw[:64]!r}", param)
    return raw


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


class JSONBodyParser(JSONParser):
    """DRF's JSON parser, refusing NaN and Infinity, and values no database stores
    (``unstorable_value``) with a 400 naming their path."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            value = json.loads(stream.read(), parse_constant=_refuse_constant)
        except RecursionError as exc:
            raise ApiError("Body is nested too deeply", "body") from exc
        except ValueError as exc:  # UnicodeDecodeError too
            raise ApiError(f"Body is not valid JSON: {exc}", "body") from exc
        found = unstorable_value(value)
        if found is not None:
            raise ApiError(found[1], found[0])
        return value


class TextGuardMiddleware:
    """Refuses a request whose path, query parameters or form fields hold text no database
    stores (``text_problem``): 400 naming the parameter, in the API's JSON shape under
    ``/api/`` and as a page elsewhere. Views then never meet such text."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        try:
            check_request_text(request)
        except ApiError as exc:
            return error_response(request, 400, exc.message, exc.field)
        return self.get_response(request)


def check_request_text(request: HttpRequest) -> None:
    """ApiError naming the first part of the request's path, query or form fields that
    ``text_problem`` refuses."""
    check_text(request.path_info, "path")
    fields = [request.GET]
    if request.method == "POST" and request.content_type in FORM_TYPES:
        fields.append(request.POST)
    for params in fields:
        for key, values in params.lists():
            check_text(key, "parameter name")
            for value in values:
                check_text(value, key)


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
