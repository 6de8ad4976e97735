"""Streaming readers of query logs: CSV, JSON Lines and PostgreSQL csvlog.

Each reader takes a binary stream and yields one ``QueryRecord`` per query
or a ``LineError`` for a line it cannot use (with its line number), so one
bad line never stops a log. Nothing reads a whole file: lines are decoded
one at a time and a line longer than the limit is skipped, not buffered.
"""

from __future__ import annotations

import csv
import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import IO, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from catalog.params import instant_from_iso
from ingest.events import EventError, check_plausible

FORMATS = ("csv", "jsonl", "pgcsvlog")
DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024

# status values that mean the query did not run to completion
FAILED_STATUSES = frozenset(
    {"failed", "fail", "failure", "error", "errored", "aborted", "cancelled", "canceled", "killed"}
)
_FIELD_ALIASES = {
    "query": "query",
    "query_text": "query",
    "sql": "query",
    "sql_text": "query",
    "statement": "query",
    "start_time": "start_time",
    "starttime": "start_time",
    "end_time": "end_time",
    "endtime": "end_time",
    "duration_ms": "duration_ms",
    "user": "user",
    "user_name": "user",
    "username": "user",
    "database": "database",
    "database_name": "database",
    "schema": "schema",
    "schema_name": "schema",
    "dialect": "dialect",
    "query_id": "query_id",
    "queryid": "query_id",
    "status": "status",
    "execution_status": "status",
    "session_id": "session_id",
    "query_tag": "query_tag",
}


class LogFormatError(ValueError):
    """The file as a whole cannot be read in the given format."""


@dataclass(frozen=True, slots=True)
class QueryRecord:
    line: int
    query: str
    start_time: datetime | None = None
    end_time: datetime | None = None
    user: str = ""
    database: str | None = None
    schema: str | None = None
    dialect: str | None = None
    query_id: str | None = None
    status: str = ""
    session_id: str | None = None
    query_tag: str | None = None

    @property
    def failed(self) -> bool:
        return self.status.lower() in FAILED_STATUSES


@dataclass(frozen=True, slots=True)
class LineError:
    line: int
    message: str
    field: str | None = None


Item = QueryRecord | LineError


def read_log(
    stream: IO[bytes],
    fmt: str,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    received: datetime | None = None,
) -> Iterator[Item]:
    """Yield the records of a query log in format ``fmt`` (csv, jsonl, pgcsvlog).

    ``received``: when the log was uploaded; its times are checked against that clock, so a
    log taken again later reads the same lines (``check_plausible``).
    """
    lines = _DecodedLines(stream, max_line_bytes)
    if fmt == "csv":
        return _read_csv(lines, received)
    if fmt == "jsonl":
        return _read_jsonl(lines, received)
    if fmt == "pgcsvlog":
        return _read_pgcsvlog(lines, received)
    raise LogFormatError(f"unknown log format {fmt!r}; use one of {', '.join(FORMATS)}")


# -- lines -------------------------------------------------------------------


class _DecodedLines:
    """Text lines of a binary stream, decoded one at a time.

    Lines that are not UTF-8, contain NUL bytes or exceed the length limit
    are remembered by number (the text given to the CSV parser is then
    empty), so the record they belong to can be reported instead of parsed.
    """

    def __init__(self, stream: IO[bytes], max_bytes: int) -> None:
        self._stream = stream
        self._max = max_bytes
        self.number = 0
        self.bad: dict[int, str] = {}

    def __iter__(self) -> Iterator[str]:
        first = True
        while True:
            raw = self._stream.readline(self._max + 1)
            if not raw:
                return
            self.number += 1
            if len(raw) > self._max and not raw.endswith(b"\n"):
                self._skip_rest()
                self.bad[self.number] = f"line longer than {self._max:,} bytes"
                yield "\n"
                continue
            if first and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            first = False
            if b"\x00" in raw:
                self.bad[self.number] = "binary data (NUL bytes) in line"
                yield "\n"
                continue
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.bad[self.number] = (
                    f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
                )
                yield "\n"

    def _skip_rest(self) -> None:
        while True:
            chunk = self._stream.readline(1024 * 1024)
            if not chunk or chunk.endswith(b"\n"):
                return

    def problem(self, first: int, last: int) -> str | None:
        for number in range(first, last + 1):
            found = self.bad.pop(number, None)
            if found is not None:
                return found
        return None


# -- values ------------------------------------------------------------------


def _clean(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _record(line: int, values: dict[str, Any], received: datetime | None) -> Item:
    query = values.get("query")
    if query is None or (isinstance(query, str) and not query.strip()):
        return LineError(line, "no query", "query")
    if not isinstance(query, str):
        return LineError(line, "query must be text", "query")
    times: dict[str, datetime | None] = {"start_time": None, "end_time": None}
    for key in times:
        raw = values.get(key)
        if raw is None or raw == "":
            continue
        if not isinstance(raw, str):
            return LineError(line, f"{key} must be an ISO-8601 string", key)
        try:
            times[key] = instant = instant_from_iso(raw)
        except ValueError:
            return LineError(line, f"{key} is not an ISO-8601 time: {raw[:40]!r}", key)
        try:
            check_plausible(instant, key, received)
        except EventError as exc:
            return LineError(line, exc.message, key)
    end_time = times["end_time"]
    duration = values.get("duration_ms")
    if end_time is None and duration not in (None, "") and times["start_time"] is not None:
        try:
            end_time = _after(times["start_time"], str(duration))
            check_plausible(end_time, "the end (start_time plus duration_ms)", received)
        except ValueError as exc:
            return LineError(line, f"duration_ms {exc}", "duration_ms")
    return QueryRecord(
        line=line,
        query=query,
        start_time=times["start_time"],
        end_time=end_time,
        user=_clean(values.get("user")) or "",
        database=_clean(values.get("database")),
        schema=_clean(values.get("schema")),
        dialect=_clean(values.get("dialect")),
        query_id=_clean(values.get("query_id")),
        status=_clean(values.get("status")) or "",
        session_id=_clean(values.get("session_id")),
        query_tag=_clean(values.get("query_tag")),
    )


# -- CSV -----------------------------------------------------------------------


def _read_csv(lines: _DecodedLines, received: datetime | None) -> Iterator[Item]:
    reader = csv.reader(iter(lines))
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as exc:
        raise LogFormatError(f"line 1: not a CSV header: {exc}") from None
    problem = lines.problem(1, lines.number)
    if problem:
        raise LogFormatError(f"line 1: {problem}")
    columns = [_FIELD_ALIASES.get(h.strip().lower(), "") for h in header]
    if "query" not in columns:
        raise LogFormatError("the CSV header has no 'query' column")
    last = reader.line_num
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            first, last = last + 1, reader.line_num
            lines.problem(first, last)
            yield LineError(first, f"malformed CSV: {exc}")
            continue
        first, last = last + 1, reader.line_num
        problem = lines.problem(first, last)
        if problem:
            yield LineError(first, problem)
            continue
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) > len(columns):
            yield LineError(first, f"{len(row)} fields but the header has {len(columns)}")
            continue
        values = {c: v for c, v in zip(columns, row, strict=False) if c}
        yield _record(first, values, received)


# -- JSON Lines -----------------------------------------------------------------


def _read_jsonl(lines: _DecodedLines, received: datetime | None) -> Iterator[Item]:
    for text in lines:
        number = lines.number
        problem = lines.problem(number, number)
        if problem:
            yield LineError(number, problem)
            continue
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as exc:
            yield LineError(number, f"not JSON: {str(exc)[:120]}")
            continue
        if not isinstance(value, dict):
            yield LineError(number, "a line must be a JSON object")
            continue
        values = {_FIELD_ALIASES.get(str(k).lower(), ""): v for k, v in value.items()}
        values.pop("", None)
        yield _record(number, values, received)


# -- PostgreSQL csvlog ------------------------------------------------------------

# csvlog columns (PostgreSQL 13-17); later versions only append columns.
_PG_LOG_TIME, _PG_USER, _PG_DATABASE, _PG_SESSION, _PG_SESSION_LINE = 0, 1, 2, 5, 6
_PG_SEVERITY, _PG_MESSAGE, _PG_QUERY, _PG_QUERY_ID = 11, 13, 19, 25
_PG_MIN_COLUMNS = 14
_PG_STATEMENT = re.compile(
    r"(?s)^(?:duration: (?P<duration>[\d.]+) ms\s+)?"
    r"(?:statement|execute [^:]*): (?P<sql>.*)$"
)
_PG_DURATION_ONLY = re.compile(r"^duration: (?P<duration>[\d.]+) ms\s*$")
_PG_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)\s*(\S+)?$")
_MAX_OPEN_SESSIONS = 10_000
# Abbreviations PostgreSQL writes for log_timezone; each already says whether DST applies.
_ZONE_ABBREVIATIONS = {
    "WET": 0, "WEST": 60, "BST": 60, "CET": 60, "CEST": 120, "EET": 120, "EEST": 180,
    "MSK": 180, "EST": -300, "EDT": -240, "CST": -360, "CDT": -300, "MST": -420,
    "MDT": -360, "PST": -480, "PDT": -420, "AKST": -540, "AKDT": -480, "HST": -600,
    "JST": 540, "KST": 540, "AEST": 600, "AEDT": 660, "ACST": 570, "AWST": 480,
    "NZST": 720, "NZDT": 780,
}  # fmt: skip


def _after(start: datetime, milliseconds: str, before: bool = False) -> datetime:
    """``start`` plus (``before``: minus) a duration in milliseconds; ValueError saying why
    it cannot be."""
    try:
        duration = timedelta(milliseconds=float(milliseconds))
        return start - duration if before else start + duration
    except ValueError:
        raise ValueError(f"is not a number of milliseconds: {milliseconds[:40]!r}") from None
    except OverflowError:
        raise ValueError(f"{milliseconds[:40]} ms is out of the calendar's range") from None


def parse_pg_time(value: str) -> datetime:
    """Return an aware UTC datetime from csvlog's ``2024-01-15 10:00:00.123 UTC``."""
    try:
        return _pg_time(value)
    except OverflowError:
        raise ValueError(f"{value[:40]!r} is outside the calendar in UTC") from None


def _pg_time(value: str) -> datetime:
    m = _PG_TIME.match(value.strip())
    if m is None:
        raise ValueError(value)
    stamp, zone = m.groups()
    naive = datetime.fromisoformat(stamp)
    if not zone or zone.upper() in {"UTC", "GMT", "Z"}:
        return naive.replace(tzinfo=UTC)
    if re.fullmatch(r"[+-]\d{1,2}(:?\d{2})?", zone):
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        hours, minutes = int(digits[:2] if len(digits) > 2 else digits), int(digits[2:] or 0)
        offset = timedelta(hours=hours, minutes=minutes) * sign
        return (naive - offset).replace(tzinfo=UTC)
    minutes_east = _ZONE_ABBREVIATIONS.get(zone.upper())
    if minutes_east is not None:
        return (naive - timedelta(minutes=minutes_east)).replace(tzinfo=UTC)
    try:
        return naive.replace(tzinfo=ZoneInfo(zone)).astimezone(UTC)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {zone!r}") from None


def _read_pgcsvlog(lines: _DecodedLines, received: datetime | None) -> Iterator[Item]:
    """Statements from a PostgreSQL csvlog, skipping those an ERROR line reports as failed.

    A statement is held back until the next line of its session: if that line
    is the ERROR for it, the statement failed.
    """
    reader = csv.reader(iter(lines))
    pending: OrderedDict[str, QueryRecord] = OrderedDict()
    last = 0
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            first, last = last + 1, reader.line_num
            lines.problem(first, last)
            yield LineError(first, f"malformed csvlog line: {exc}")
            continue
        first, last = last + 1, reader.line_num
        problem = lines.problem(first, last)
        if problem:
            yield LineError(first, problem)
            continue
        if not row:
            continue
        if len(row) < _PG_MIN_COLUMNS:
            yield LineError(
                first, f"{len(row)} fields; a csvlog line has at least {_PG_MIN_COLUMNS}"
            )
            continue
        yield from _pg_line(first, row, pending, received)
    yield from pending.values()


def _pg_line(
    number: int, row: list[str], pending: OrderedDict[str, QueryRecord], received: datetime | None
) -> Iterable[Item]:
    session = row[_PG_SESSION] or f"line-{number}"
    severity = row[_PG_SEVERITY].upper()
    message = row[_PG_MESSAGE]
    held = pending.pop(session, None)
    if held is not None:
        query = row[_PG_QUERY] if len(row) > _PG_QUERY else ""
        if severity in {"ERROR", "FATAL", "PANIC"} and (not query or query == held.query):
            yield replace(held, status="error")
            return
        duration = _PG_DURATION_ONLY.match(message) if severity == "LOG" else None
        if duration is not None and held.start_time is not None and held.end_time is None:
            try:
                finished = _after(held.start_time, duration["duration"])
                check_plausible(finished, "the end (log_time plus duration)", received)
            except ValueError as exc:
                yield LineError(number, f"duration {exc}", "message")
                yield held  # the statement stands, without its end
            else:
                yield replace(held, end_time=finished)
            return
        yield held
    if severity != "LOG":
        return
    m = _PG_STATEMENT.match(message)
    if m is None:
        return
    try:
        start = parse_pg_time(row[_PG_LOG_TIME])
    except ValueError as exc:
        yield LineError(number, f"log_time is not a time: {exc}", "log_time")
        return
    try:
        check_plausible(start, "log_time", received)
    except EventError as exc:
        yield LineError(number, exc.message, "log_time")
        return
    end = None
    if m["duration"]:
        # The duration line is written when the statement ends.
        end = start
        try:
            start = _after(end, m["duration"], before=True)
            check_plausible(start, "the start (log_time minus duration)", received)
        except ValueError as exc:
            yield LineError(number, f"duration {exc}", "message")
            return
    query_id = (
        row[_PG_QUERY_ID]
        if len(row) > _PG_QUERY_ID and row[_PG_QUERY_ID] not in ("", "0")
        else None
    )
    record = QueryRecord(
        line=number,
        query=m["sql"],
        start_time=start,
        end_time=end,
        user=row[_PG_USER],
        database=row[_PG_DATABASE] or None,
        query_id=f"{row[_PG_SESSION]}:{row[_PG_SESSION_LINE]}" if row[_PG_SESSION] else query_id,
        status="success",
        session_id=row[_PG_SESSION] or None,
    )
    pending[session] = record
    if len(pending) > _MAX_OPEN_SESSIONS:
        yield pending.popitem(last=False)[1]
