"""Query-parameter parsing shared by every API view: each error names the parameter."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from catalog.errors import ApiError


def parse_instant(raw: str, param: str) -> datetime:
    """Parse an ISO-8601 instant (or a date, meaning its start, UTC) into aware UTC."""
    value = raw.strip()
    try:
        parsed = (
            parse_datetime(value.replace("Z", "+00:00")) if "T" in value or " " in value else None
        )
        if parsed is None:
            day = parse_date(value)
            if day is None:
                raise ValueError(value)
            parsed = datetime(day.year, day.month, day.day)  # noqa: DTZ001 - made aware below
    except ValueError as exc:
        raise ApiError(f"{param} is not an ISO-8601 instant: {raw!r}", param) from exc
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed, UTC)
    return parsed.astimezone(UTC)


def optional_instant(params: Mapping[str, str], param: str = "asOf") -> datetime | None:
    raw = params.get(param)
    if raw is None or raw == "":
        return None
    return parse_instant(raw, param)


def int_param(
    params: Mapping[str, str], param: str, default: int, minimum: int, maximum: int
) -> int:
    raw = params.get(param)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ApiError(f"{param} must be an integer, got {raw!r}", param) from exc
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
    raise ApiError(f"{param} must be true or false, got {raw!r}", param)


def choice_param(
    params: Mapping[str, str], param: str, default: str, choices: tuple[str, ...]
) -> str:
    raw = params.get(param) or default
    if raw not in choices:
        raise ApiError(f"{param} must be one of {', '.join(choices)}, got {raw!r}", param)
    return raw
