"""OpenLineage events checked and read into typed values, once, at the edge.

``parse_event`` accepts a decoded JSON value and gives back a ParsedEvent or
raises EventError naming the field at fault (``outputs[0].facets.schema``).
The same function reads stored events again in the normaliser, so what was
accepted is exactly what is normalised.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import numpy as np
from django.utils import timezone

from catalog import naming
from catalog.params import instant_from_iso, unstorable_value
from ingest import facets as standard
from pipelines.fingerprint import canonical_json

MAX_NAME_LENGTH = 1024
MAX_DEPTH = 64
# How far past this server's clock an event may say it happened (a clock a few hours off,
# or local time written without its offset, still passes).
AHEAD = timedelta(days=1)
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
RUN_EVENT_TYPES = ("START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER")
TRANSFORMATION_TYPES = ("DIRECT", "INDIRECT")
TRANSFORMATION_SUBTYPES = (
    "IDENTITY",
    "TRANSFORMATION",
    "AGGREGATION",
    "FILTER",
    "JOIN",
    "GROUP_BY",
    "SORT",
    "WINDOW",
    "CONDITIONAL",
)
# The deprecated field-level ``transformationType`` of columnLineage, as (type, subtype).
LEGACY_TRANSFORMATIONS = {
    "IDENTITY": ("DIRECT", "IDENTITY"),
    "TRANSFORMATION": ("DIRECT", "TRANSFORMATION"),
    "AGGREGATION": ("DIRECT", "AGGREGATION"),
    "MASKED": ("DIRECT", "TRANSFORMATION"),
}


class EventError(ValueError):
    """An event that cannot be accepted; ``status`` is 400 (not JSON) or 422 (not an event)."""

    def __init__(self, message: str, field: str | None, status: int = 422) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.status = status


class Warnings(list[dict[str, str]]):
    """The facets an event holds that were left out, each ``{"field", "error"}``.

    A facet that does not match the spec (or that this app cannot read) is not applied,
    but the event is stored: the client is told which facets were left out. ``strict``
    warnings raise instead (events this app builds itself must be right). ``checked``:
    the event's facets were checked against the spec when it was accepted, with nothing
    left out, so the check is not repeated (the normaliser reading a stored event).
    """

    def __init__(self, strict: bool = False, checked: bool = False) -> None:
        super().__init__()
        self.strict = strict
        self.checked = checked

    def add(self, field: str, error: str) -> None:
        if self.strict:
            raise EventError(error, field)
        self.append({"field": field, "error": f"{error}; the facet was left out"})


# The small values an event holds many of are named tuples: built, hashed and compared in C
# (a frozen dataclass sets each attribute through object.__setattr__).
class Transformation(NamedTuple):
    type: str
    subtype: str
    masking: bool
    description: str


class ColumnMapping(NamedTuple):
    """One input field feeding one output field (or, with ``target_field`` None, the dataset)."""

    source_namespace: str
    source_name: str
    source_field: str
    target_field: str | None
    transformation: Transformation


class SchemaField(NamedTuple):
    name: str
    type: str
    description: str


@dataclass
class DatasetRef:
    """A dataset as an event names it, with the facets the normaliser reads."""

    namespace: str
    name: str
    facets: dict[str, Any] = field(default_factory=dict)
    schema: list[SchemaField] | None = None
    columns: list[ColumnMapping] | None = None
    lifecycle: str = ""
    previous: tuple[str, str] | None = None
    symlinks: list[tuple[str, str]] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


@dataclass
class ParsedEvent:
    """An accepted OpenLineage event, read into typed values."""

    kind: str  # run | dataset | job, as ingest.models.EventKind
    event_type: str
    event_time: datetime
    producer: str
    body: dict[str, Any]
    fingerprint: str
    run_uuid: uuid.UUID | None = None
    run_facets: dict[str, Any] = field(default_factory=dict)
    job_namespace: str = ""
    job_name: str = ""
    job_facets: dict[str, Any] = field(default_factory=dict)
    inputs: list[DatasetRef] = field(default_factory=list)
    outputs: list[DatasetRef] = field(default_factory=list)
    dataset: DatasetRef | None = None
    parent_run_uuid: uuid.UUID | None = None
    parent_job: tuple[str, str] | None = None
    nominal_start: datetime | None = None
    nominal_end: datetime | None = None
    error_message: str = ""
    error_stack: str = ""
    # The body's canonical JSON when it was rendered for the fingerprint: stored as is.
    canonical: str = ""
    # Facets left out (``Warnings``): the event is stored and applied without them.
    warnings: list[dict[str, str]] = field(default_factory=list)

    @property
    def datasets(self) -> list[DatasetRef]:
        found = [*self.inputs, *self.outputs]
        if self.dataset is not None:
            found.append(self.dataset)
        return found

    @property
    def sort_key(self) -> tuple[datetime, str]:
        return (self.event_time, self.fingerprint)


def decode_body(raw: bytes, encoding: str, limit: int, items: bool = False) -> Any:
    """The JSON value of a request body, gunzipped if ``encoding`` says so, within ``limit`` bytes.

    Raises EventError (400, or 413 when the decompressed body is over the limit).
    ``items`` is ``loads``'s.
    """
    encoding = encoding.strip().lower()
    if encoding in ("gzip", "x-gzip"):
        raw = gunzip(raw, limit)
    elif encoding not in ("", "identity"):
        raise EventError(f"Unsupported Content-Encoding {encoding!r}", "Content-Encoding", 415)
    return loads(raw, items=items)


def gunzip(raw: bytes, limit: int) -> bytes:
    """Decompress gzip data, every member of it (RFC 1952), refusing to grow past ``limit``
    bytes (a gzip bomb is 413)."""
    data = b""
    rest = raw
    try:
        while True:
            decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
            data += decompressor.decompress(rest, limit + 1 - len(data))
            if len(data) > limit or decompressor.unconsumed_tail:
                raise EventError(
                    f"Decompressed body is larger than the {limit}-byte limit", "body", 413
                )
            data += decompressor.flush()
            if not decompressor.eof:
                raise EventError("Body is truncated gzip", "Content-Encoding", 400)
            rest = decompressor.unused_data
            if not rest.strip(b"\x00"):  # gzip allows zero padding after the last member
                return data
    except (zlib.error, EOFError) as exc:
        raise EventError(f"Body is not valid gzip: {exc}", "Content-Encoding", 400) from exc


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


@dataclass(frozen=True)
class InvalidItem:
    """An item of a batch whose values cannot be stored: the batch rejects it alone."""

    error: EventError


# JSON escapes of UTF-16 surrogates: a lone one decodes to a string no database stores.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def loads(raw: bytes | str, items: bool = False) -> Any:
    """Parse JSON text, answering 400 for anything that is not JSON, is absurdly nested, or
    holds a value no database stores (see ``unstorable``).

    With ``items``, the elements of a top-level list (or of ``{"events": [...]}``) holding
    such a value are replaced by InvalidItem, so that a batch refuses only them.
    """
    out_of_range = False

    def parse_float(text: str) -> float:
        nonlocal out_of_range
        value = float(text)
        if math.isinf(value):
            out_of_range = True
        return value

    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=parse_float)
    except UnicodeDecodeError as exc:
        raise EventError("Body is not UTF-8", "body", 400) from exc
    except RecursionError as exc:
        raise EventError(f"Body is nested deeper than {MAX_DEPTH} levels", "body", 400) from exc
    except ValueError as exc:
        raise EventError(f"Body is not valid JSON: {exc}", "body", 400) from exc
    check_structure(value, text=text)
    if out_of_range or "\\u0000" in text or _SURROGATE_ESCAPE.search(text):
        listed = value.get("events") if isinstance(value, dict) else value
        if items and isinstance(listed, list):
            for index, item in enumerate(listed):
                error = unstorable(item)
                if error is not None:
                    listed[index] = InvalidItem(error)
        else:
            error = unstorable(value)
            if error is not None:
                raise error
    return value


def unstorable(value: Any) -> EventError | None:
    """The first value of ``value`` no database stores (``catalog.params.unstorable_value``),
    as an error naming its path."""
    found = unstorable_value(value)
    return None if found is None else EventError(found[1], found[0], 400)


def check_structure(value: Any, limit: int = MAX_DEPTH, text: str | None = None) -> None:
    """Refuse JSON nested deeper than ``limit``; iterative, so hostile input cannot exhaust
    the stack. ``text``, the JSON the value was decoded from, lets large values be checked
    by counting brackets."""
    if text is not None and len(text) >= BRACKET_SCAN_MIN_CHARS:
        depth = _bracket_depth(text)
        if depth is not None and depth < limit:
            return
        if depth is not None and depth > limit:
            raise EventError(f"Body is nested deeper than {limit} levels", "body", 400)
    level = [value] if isinstance(value, (dict, list)) else []
    depth = 1
    while level:
        below: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            if depth == limit and children:
                raise EventError(f"Body is nested deeper than {limit} levels", "body", 400)
            below += [child for child in children if isinstance(child, (dict, list))]
        level = below
        depth += 1


# From this size on (a batch of events) the brackets are counted over the bytes at once.
BRACKET_SCAN_MIN_CHARS = 65536
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_OPENING, _CLOSING = (ord("["), ord("{")), (ord("]"), ord("}"))


def _bracket_depth(text: str) -> int | None:
    """How deep the containers of JSON ``text`` nest (``[[]]`` is 2), counting only brackets
    outside strings; None when a string holds an escaped quote (then the walk decides).

    A value nested D deep holds values at D + 1 unless its deepest containers are all
    empty: callers settle D equal to the limit by walking.
    """
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    quotes = data == _QUOTE
    if np.any(quotes[1:] & (data[:-1] == _BACKSLASH)):
        return None
    opening = (data == _OPENING[0]) | (data == _OPENING[1])
    closing = (data == _CLOSING[0]) | (data == _CLOSING[1])
    marks = data[np.flatnonzero(quotes | opening | closing)]  # a tenth of the bytes or so
    is_quote = marks == _QUOTE
    outside = (np.cumsum(is_quote, dtype=np.int32) & 1) == 0
    step = np.where((marks == _OPENING[0]) | (marks == _OPENING[1]), 1, -1).astype(np.int32)
    step[is_quote | ~outside] = 0
    return int(np.cumsum(step).max(initial=0))


def _check_every_node(value: Any, limit: int) -> None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise EventError(f"Body is nested deeper than {limit} levels", "body", 400)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)


# -- the checks ---------------------------------------------------------------------------


def _fail(message: str, path: str) -> EventError:
    return EventError(message, path)


def _obj(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(f"{path} must be an object", path)
    return value


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fail(f"{path} must be a list", path)
    return value


def _text(value: Any, path: str, required: bool = False, limit: int | None = None) -> str:
    if value is None:
        if required:
            raise _fail(f"{path} is required", path)
        return ""
    if not isinstance(value, str):
        raise _fail(f"{path} must be a string", path)
    if required and not value.strip():
        raise _fail(f"{path} must not be empty", path)
    if limit is not None and len(value) > limit:
        raise _fail(f"{path} is longer than {limit} characters", path)
    if "\x00" in value:
        raise _fail(f"{path} contains a NUL character", path)
    return value


def _name(value: Any, path: str) -> str:
    return _text(value, path, required=True, limit=MAX_NAME_LENGTH)


def _valid_text(value: Any, required: bool = False, limit: int | None = None) -> bool:
    """Whether ``_text`` would accept ``value``: the hot loops check first and build the
    path naming a field only when something is wrong."""
    if value is None:
        return not required
    return (
        isinstance(value, str)
        and (not required or bool(value.strip()))
        and (limit is None or len(value) <= limit)
        and "\x00" not in value
    )


def _valid_name(value: Any) -> bool:
    return _valid_text(value, required=True, limit=MAX_NAME_LENGTH)


def parse_time(value: Any, path: str, required: bool = True) -> datetime | None:
    """An ISO-8601 instant as aware UTC (a missing offset means UTC)."""
    if value is None and not required:
        return None
    text = _text(value, path, required=True)
    try:
        return instant_from_iso(text)
    except ValueError as exc:
        raise _fail(f"{path} is not an ISO-8601 date-time: {text[:64]!r}", path) from exc


def check_plausible(instant: datetime, path: str, received: datetime | None = None) -> None:
    """Refuse an instant before 1970 or more than ``AHEAD`` past this server's clock: from a
    clock that is wrong, lineage would land where "now" cannot see it, and instants worked
    out from one near either end of the calendar cannot be written.

    ``received``: when this server received what holds the instant (a stored event, an
    uploaded log), the clock it is checked against; so a worker whose clock is behind the
    web server's, or a log taken again days later, gives the answer the door gave.
    """
    shown = instant.isoformat().replace("+00:00", "Z")
    if instant < EARLIEST:
        raise _fail(f"{path} {shown} is before 1970: check the clock of what wrote it", path)
    now = received or timezone.now()
    if instant > now + AHEAD:
        clock = "this server's clock" if received is None else "when this server received it"
        raise _fail(
            f"{path} {shown} is more than a day ahead of {clock} "
            f"({now:%Y-%m-%dT%H:%M:%SZ}): check the clock of what wrote it",
            path,
        )


def _uuid(value: Any, path: str) -> uuid.UUID:
    text = _text(value, path, required=True, limit=64)
    try:
        return uuid.UUID(text)
    except ValueError as exc:
        raise _fail(f"{path} is not a UUID: {text!r}", path) from exc


def _facets(value: Any, path: str, scope: str, warnings: Warnings) -> dict[str, Any]:
    """A facets object, without the facets left out: any that is not an object, and any
    standard facet that does not match its schema (``ingest.facets``). Null facets are
    dropped silently."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        warnings.add(path, f"{path} must be an object")
        return {}
    kept: dict[str, Any] = {}
    for name, facet in value.items():
        if facet is None:
            continue
        if len(name) > 256 or "\x00" in name:
            warnings.add(f"{path} key", f"{path} has a facet name that is too long or holds NUL")
        elif not isinstance(facet, dict):
            warnings.add(f"{path}.{name}", f"{path}.{name} must be an object")
        else:
            found = None if warnings.checked else standard.problem(scope, name, facet)
            if found is None:
                kept[name] = facet
            else:
                where = f"{path}.{name}{found[0]}"
                warnings.add(where, f"{where} {found[1]}")
    return kept


# The keys beside ``facets`` that belong to the event's core, per scope.
_CORE_KEYS = {
    "run": {"runId", "facets"},
    "job": {"namespace", "name", "facets"},
    "dataset": {"namespace", "name", "facets", "inputFacets", "outputFacets"},
}


def _misplaced(
    item: dict[str, Any], path: str, scope: str, warnings: Warnings, output: bool = False
) -> None:
    """A standard facet written beside ``facets`` instead of in it is not applied: say so."""
    extra = "outputFacets" if output else "inputFacets"
    for key in item.keys() - _CORE_KEYS[scope]:
        if key in standard.STANDARD[scope]:
            home = f"{path}.facets"
        elif scope == "dataset" and key in standard.STANDARD[extra]:
            home = f"{path}.{extra}"
        else:
            continue
        warnings.add(f"{path}.{key}", f"{path}.{key} is a facet: it belongs in {home}")


# A facet's reader: (what it fills in, the facet, the facet's path) -> None or EventError.
Reader = Callable[[Any, dict[str, Any], str], None]


def _apply(
    facets: dict[str, Any], readers: dict[str, Reader], target: Any, path: str, warnings: Warnings
) -> None:
    """Read each facet that has a reader into ``target``; one this app cannot read (a name
    over its limits, a NUL) is left out with a warning."""
    for key in [key for key in readers if key in facets]:
        try:
            readers[key](target, facets[key], f"{path}.{key}")
        except EventError as exc:
            del facets[key]
            warnings.add(exc.field or key, exc.message)
        except (KeyError, TypeError, AttributeError) as exc:  # a stored event read ``checked``
            del facets[key]
            warnings.add(f"{path}.{key}", f"{path}.{key} cannot be read: {type(exc).__name__}")


def _limited(fields: dict[str, int]) -> Reader:
    """A reader checking only that text fields fit what this app stores."""

    def read(target: Any, facet: dict[str, Any], path: str) -> None:
        for name, limit in fields.items():
            _text(facet.get(name), f"{path}.{name}", limit=limit)

    return read


def kind_of(event: dict[str, Any]) -> str:
    """run, dataset or job: from the schemaURL's definition name, else from the fields present."""
    schema_url = event.get("schemaURL")
    if isinstance(schema_url, str):
        tail = schema_url.rsplit("/", 1)[-1]
        for suffix, kind in (("RunEvent", "run"), ("DatasetEvent", "dataset"), ("JobEvent", "job")):
            if tail.endswith(suffix):
                return kind
    if "run" in event:
        return "run"
    if "dataset" in event and "job" not in event:
        return "dataset"
    if "job" in event:
        return "job"
    raise _fail("run is required (a RunEvent needs run, job and eventTime)", "run")


def parse_event(
    value: Any,
    fingerprint: str | None = None,
    checked: bool = False,
    strict: bool = False,
    received: datetime | None = None,
) -> ParsedEvent:
    """Check one decoded OpenLineage event and read it; raises EventError naming the field
    when its core is wrong. Facets left out are listed in the answer's ``warnings``.

    ``checked``: a stored event accepted with no facet left out; ``strict``: an event this
    app built, whose facets must all be right (``Warnings``); ``received``: when a stored
    event was received (``check_plausible``).
    """
    event = _obj(value, "body")
    kind = kind_of(event)
    event_time = parse_time(event.get("eventTime"), "eventTime")
    assert event_time is not None
    if not strict:  # this app's own events: their times were checked where they came from
        check_plausible(event_time, "eventTime", received)
    producer = _text(event.get("producer"), "producer", limit=2048)
    _text(event.get("schemaURL"), "schemaURL", limit=2048)
    canonical = ""
    if fingerprint is None:
        canonical, fingerprint = _canonical(event)
    parsed = ParsedEvent(
        kind=kind,
        event_type="",
        event_time=event_time,
        producer=producer,
        body=event,
        fingerprint=fingerprint,
        canonical=canonical,
    )
    warnings = Warnings(strict=strict, checked=checked)
    parsed.warnings = warnings
    if kind == "dataset":
        parsed.dataset = _dataset(event.get("dataset"), "dataset", True, warnings)
        return parsed
    job = _obj(event.get("job"), "job") if "job" in event else None
    if job is None:
        raise _fail("job is required", "job")
    parsed.job_namespace, parsed.job_name, parsed.job_facets = parse_job(job, warnings)
    parsed.inputs = parse_datasets(event.get("inputs"), "inputs", False, warnings)
    parsed.outputs = parse_datasets(event.get("outputs"), "outputs", True, warnings)
    if kind == "job":
        return parsed
    if "run" not in event:
        raise _fail("run is required", "run")
    run = _obj(event.get("run"), "run")
    parsed.run_uuid = _uuid(run.get("runId"), "run.runId")
    event_type = event.get("eventType")
    if event_type is not None:
        if not isinstance(event_type, str) or event_type.upper() not in RUN_EVENT_TYPES:
            raise _fail(f"eventType must be one of {', '.join(RUN_EVENT_TYPES)}", "eventType")
        parsed.event_type = event_type.upper()
    _misplaced(run, "run", "run", warnings)
    parsed.run_facets = _facets(run.get("facets"), "run.facets", "run", warnings)
    _run_facets(parsed, warnings)
    return parsed


def _canonical(event: dict[str, Any]) -> tuple[str, str]:
    """The event's canonical JSON and its fingerprint."""
    text = canonical_json(event)
    return text, fingerprint_of_text(text)


def fingerprint_of_text(canonical: str) -> str:
    """The fingerprint of an event's canonical JSON; EventError if it is not valid Unicode."""
    try:
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    except UnicodeEncodeError as exc:
        raise EventError("Body holds text that is not valid Unicode", "body", 400) from exc


def parse_job(
    job: dict[str, Any], warnings: Warnings | None = None
) -> tuple[str, str, dict[str, Any]]:
    """A run or job event's job: namespace, name and the facets kept (``Warnings``; without
    them, a facet left out raises)."""
    warnings = Warnings(strict=True) if warnings is None else warnings
    namespace = _name(job.get("namespace"), "job.namespace")
    name = _name(job.get("name"), "job.name")
    _misplaced(job, "job", "job", warnings)
    facets = _facets(job.get("facets"), "job.facets", "job", warnings)
    _job_facets(facets, warnings)
    return namespace, name, facets


def parse_datasets(
    value: Any, path: str, output: bool, warnings: Warnings | None = None
) -> list[DatasetRef]:
    """An event's ``inputs`` or ``outputs``, each dataset checked and read (``warnings`` as
    ``parse_job``'s)."""
    warnings = Warnings(strict=True) if warnings is None else warnings
    return [
        _dataset(item, f"{path}[{i}]", output, warnings)
        for i, item in enumerate(_list(value, path))
    ]


def _parent(parsed: ParsedEvent, facet: dict[str, Any], path: str) -> None:
    run, job = facet["run"], facet["job"]
    parent_run = _uuid(run.get("runId"), f"{path}.run.runId")
    parsed.parent_job = (
        _name(job.get("namespace"), f"{path}.job.namespace"),
        _name(job.get("name"), f"{path}.job.name"),
    )
    parsed.parent_run_uuid = parent_run


def _nominal_time(parsed: ParsedEvent, facet: dict[str, Any], path: str) -> None:
    start = parse_time(facet.get("nominalStartTime"), f"{path}.nominalStartTime")
    parsed.nominal_end = parse_time(
        facet.get("nominalEndTime"), f"{path}.nominalEndTime", required=False
    )
    parsed.nominal_start = start


def _error_message(parsed: ParsedEvent, facet: dict[str, Any], path: str) -> None:
    message = _text(facet.get("message"), f"{path}.message", required=True)
    parsed.error_stack = _text(facet.get("stackTrace"), f"{path}.stackTrace")
    parsed.error_message = message


RUN_READERS: dict[str, Reader] = {
    "parent": _parent,
    "nominalTime": _nominal_time,
    "errorMessage": _error_message,
    "processing_engine": _limited({"version": 256, "name": 256, "openlineageAdapterVersion": 256}),
}
# Only limits of what this app stores: the shapes were checked against the spec.
JOB_READERS: dict[str, Reader] = {
    "sql": _limited({"dialect": 64}),
    "jobType": _limited({"processingType": 32, "integration": 32, "jobType": 32}),
    "sourceCodeLocation": _limited({"url": 2048}),
}


def _run_facets(parsed: ParsedEvent, warnings: Warnings) -> None:
    _apply(parsed.run_facets, RUN_READERS, parsed, "run.facets", warnings)


def _job_facets(facets: dict[str, Any], warnings: Warnings) -> None:
    _apply(facets, JOB_READERS, None, "job.facets", warnings)


def _dataset(value: Any, path: str, output: bool, warnings: Warnings) -> DatasetRef:
    item = _obj(value, path)
    namespace: Any = item.get("namespace")
    name: Any = item.get("name")
    if not (_valid_name(namespace) and _valid_name(name)):
        _name(namespace, f"{path}.namespace")
        _name(name, f"{path}.name")
    namespace, name = naming.canonical(namespace, name)
    ref = DatasetRef(namespace=namespace, name=name)
    _misplaced(item, path, "dataset", warnings, output)
    base = f"{path}.facets"
    facets = _facets(item.get("facets"), base, "dataset", warnings)
    extra_key = "outputFacets" if output else "inputFacets"
    if extra_key in item:
        _facets(item[extra_key], f"{path}.{extra_key}", extra_key, warnings)
    ref.facets = facets
    if facets:
        _apply(facets, DATASET_READERS, ref, base, warnings)
    return ref


def _read_schema(ref: DatasetRef, facet: dict[str, Any], path: str) -> None:
    ref.schema = _schema(facet, path)


def _read_columns(ref: DatasetRef, facet: dict[str, Any], path: str) -> None:
    ref.columns = _column_lineage(facet, path)


def _read_lifecycle(ref: DatasetRef, facet: dict[str, Any], path: str) -> None:
    previous = facet.get("previousIdentifier")
    if previous is not None:
        where = f"{path}.previousIdentifier"
        ref.previous = naming.canonical(
            _name(previous["namespace"], f"{where}.namespace"),
            _name(previous["name"], f"{where}.name"),
        )
    ref.lifecycle = facet["lifecycleStateChange"].upper()  # events stored before 2026-11-26


def _read_symlinks(ref: DatasetRef, facet: dict[str, Any], path: str) -> None:
    found = []
    for i, ident in enumerate(facet.get("identifiers") or []):
        where = f"{path}.identifiers[{i}]"
        key = naming.canonical(
            _name(ident["namespace"], f"{where}.namespace"),
            _name(ident["name"], f"{where}.name"),
        )
        _text(ident["type"], f"{where}.type", limit=64)
        if key != ref.key and key not in found:
            found.append(key)
    ref.symlinks = found


def _read_ownership(ref: DatasetRef, facet: dict[str, Any], path: str) -> None:
    for i, owner in enumerate(facet.get("owners") or []):
        _text(owner["name"], f"{path}.owners[{i}].name", required=True, limit=255)
        _text(owner.get("type"), f"{path}.owners[{i}].type", limit=64)


DATASET_READERS: dict[str, Reader] = {
    "schema": _read_schema,
    "columnLineage": _read_columns,
    "lifecycleStateChange": _read_lifecycle,
    "symlinks": _read_symlinks,
    "ownership": _read_ownership,
    "dataSource": _limited({"name": 255, "uri": 2048}),
    "storage": _limited({"storageLayer": 64, "fileFormat": 32}),
}


# The readers below run after ``ingest.facets`` checked the facet against its generated
# model, so the types are right: they add only this app's limits (names not empty, at most
# MAX_NAME_LENGTH characters, no NUL) and read the values.


def _schema(facet: dict[str, Any], path: str) -> list[SchemaField]:
    """The schema facet's fields, nested ones flattened to dotted names, in order."""
    result: list[SchemaField] = []
    seen: set[str] = set()

    def walk(items: list[dict[str, Any]], items_path: str, prefix: str) -> None:
        for i, item in enumerate(items):
            name = item["name"]
            kind = item.get("type") or ""
            description = item.get("description") or ""
            full = f"{prefix}{name}"
            if not (
                len(full) <= MAX_NAME_LENGTH
                and name.strip()
                and "\x00" not in name
                and "\x00" not in kind
                and "\x00" not in description
            ):
                where = f"{items_path}[{i}]"
                _text(kind, f"{where}.type")
                _text(description, f"{where}.description")
                if len(full) > MAX_NAME_LENGTH:
                    raise _fail(
                        f"{where}.name is longer than {MAX_NAME_LENGTH} characters", f"{where}.name"
                    )
                _name(name, f"{where}.name")
            if full not in seen:
                seen.add(full)
                result.append(SchemaField(name=full, type=kind[:255], description=description))
            if item.get("fields"):
                walk(item["fields"], f"{items_path}[{i}].fields", f"{full}.")

    walk(facet.get("fields") or [], f"{path}.fields", "")
    return result


def _transformations(
    items: list[dict[str, Any]] | None,
    owner: str,
    index: int,
    legacy_type: str,
    legacy_description: str,
) -> list[Transformation]:
    """The transformations of input field ``index`` of ``owner`` (its path, built on error)."""
    if not items:
        legacy = LEGACY_TRANSFORMATIONS.get(legacy_type.upper(), ("DIRECT", ""))
        return [Transformation(*legacy, legacy_type.upper() == "MASKED", legacy_description)]
    found = []
    for i, item in enumerate(items):
        kind = item["type"].upper()
        subtype = item.get("subtype") or ""
        if kind not in TRANSFORMATION_TYPES or len(subtype) > 64:
            where = f"{owner}[{index}].transformations[{i}]"
            if kind not in TRANSFORMATION_TYPES:
                raise _fail(f"{where}.type must be DIRECT or INDIRECT", f"{where}.type")
            _text(subtype, f"{where}.subtype", limit=64)
        known = subtype.upper()
        found.append(
            Transformation(
                type=kind,
                # Subtypes outside the spec's list are kept as unknown rather than refused.
                subtype=known if known in TRANSFORMATION_SUBTYPES else "",
                masking=bool(item.get("masking")),
                description=item.get("description") or "",
            )
        )
    return found


def _input_fields(
    items: list[dict[str, Any]] | None,
    path: str,
    target: str | None,
    legacy_type: str = "",
    legacy_description: str = "",
) -> list[ColumnMapping]:
    mappings = []
    for i, item in enumerate(items or ()):
        namespace, name, source_field = item["namespace"], item["name"], item["field"]
        if not (_valid_name(namespace) and _valid_name(name) and _valid_name(source_field)):
            where = f"{path}[{i}]"
            _name(namespace, f"{where}.namespace")
            _name(name, f"{where}.name")
            _name(source_field, f"{where}.field")
        namespace, name = naming.canonical(namespace, name)
        for transformation in _transformations(
            item.get("transformations"), path, i, legacy_type, legacy_description
        ):
            mappings.append(ColumnMapping(namespace, name, source_field, target, transformation))
    return mappings


def _column_lineage(facet: dict[str, Any], path: str) -> list[ColumnMapping]:
    mappings: list[ColumnMapping] = []
    for target, item in (facet.get("fields") or {}).items():
        where = f"{path}.fields.{target}"
        _name(target, where)
        legacy_type = _text(item.get("transformationType"), f"{where}.transformationType", limit=64)
        mappings.extend(
            _input_fields(
                item["inputFields"],
                f"{where}.inputFields",
                target,
                legacy_type,
                item.get("transformationDescription") or "",
            )
        )
    mappings.extend(_input_fields(facet.get("dataset"), f"{path}.dataset", None))
    # Dedupe while keeping the first description of each mapping.
    unique: dict[tuple[Any, ...], ColumnMapping] = {}
    for mapping in mappings:
        key = (
            mapping.source_namespace,
            mapping.source_name,
            mapping.source_field,
            mapping.target_field,
            mapping.transformation.type,
            mapping.transformation.subtype,
        )
        unique.setdefault(key, mapping)
    return list(unique.values())
