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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from catalog.params import instant_from_iso, unstorable_value
from pipelines.fingerprint import canonical_json

MAX_NAME_LENGTH = 1024
MAX_DEPTH = 64
RUN_EVENT_TYPES = ("START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER")
LIFECYCLE_CHANGES = ("ALTER", "CREATE", "DROP", "OVERWRITE", "RENAME", "TRUNCATE")
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


def _obj(value: Any, path: str, required: bool = True) -> dict[str, Any]:
    if value is None and not required:
        return {}
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


def _bool(value: Any, path: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _fail(f"{path} must be true or false", path)
    return value


def parse_time(value: Any, path: str, required: bool = True) -> datetime | None:
    """An ISO-8601 instant as aware UTC (a missing offset means UTC)."""
    if value is None and not required:
        return None
    text = _text(value, path, required=True)
    try:
        return instant_from_iso(text)
    except ValueError as exc:
        raise _fail(f"{path} is not an ISO-8601 date-time: {text[:64]!r}", path) from exc


def _uuid(value: Any, path: str) -> uuid.UUID:
    text = _text(value, path, required=True, limit=64)
    try:
        return uuid.UUID(text)
    except ValueError as exc:
        raise _fail(f"{path} is not a UUID: {text!r}", path) from exc


def _facets(value: Any, path: str) -> dict[str, Any]:
    """A facets object: every facet is an object (null facets are dropped)."""
    facets = _obj(value, path, required=False)
    kept: dict[str, Any] = {}
    for name, facet in facets.items():
        if facet is None:
            continue
        # The checks, spelled out: a path is built only on error.
        if not isinstance(name, str) or len(name) > 256 or "\x00" in name:
            _text(name, f"{path} key", limit=256)
        if not isinstance(facet, dict):
            _obj(facet, f"{path}.{name}")
        kept[name] = facet
    return kept


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


def parse_event(value: Any, fingerprint: str | None = None) -> ParsedEvent:
    """Check one decoded OpenLineage event and read it; raises EventError naming the field."""
    event = _obj(value, "body")
    kind = kind_of(event)
    event_time = parse_time(event.get("eventTime"), "eventTime")
    assert event_time is not None
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
    if kind == "dataset":
        parsed.dataset = _dataset(event.get("dataset"), "dataset", output=True)
        return parsed
    job = _obj(event.get("job"), "job") if "job" in event else None
    if job is None:
        raise _fail("job is required", "job")
    parsed.job_namespace, parsed.job_name, parsed.job_facets = parse_job(job)
    parsed.inputs = parse_datasets(event.get("inputs"), "inputs", output=False)
    parsed.outputs = parse_datasets(event.get("outputs"), "outputs", output=True)
    if kind == "job":
        return parsed
    if "run" not in event:
        raise _fail("run is required", "run")
    run = _obj(event.get("run"), "run")
    parsed.run_uuid = _uuid(run.get("runId"), "run.runId")
    parsed.run_facets = _facets(run.get("facets"), "run.facets")
    event_type = event.get("eventType")
    if event_type is not None:
        if not isinstance(event_type, str) or event_type.upper() not in RUN_EVENT_TYPES:
            raise _fail(f"eventType must be one of {', '.join(RUN_EVENT_TYPES)}", "eventType")
        parsed.event_type = event_type.upper()
    _run_facets(parsed)
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


def parse_job(job: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """A run or job event's job: namespace, name and checked facets."""
    namespace = _name(job.get("namespace"), "job.namespace")
    name = _name(job.get("name"), "job.name")
    facets = _facets(job.get("facets"), "job.facets")
    _job_facets(facets)
    return namespace, name, facets


def parse_datasets(value: Any, path: str, output: bool) -> list[DatasetRef]:
    """An event's ``inputs`` or ``outputs``, each dataset checked and read."""
    return [_dataset(item, f"{path}[{i}]", output) for i, item in enumerate(_list(value, path))]


def _run_facets(parsed: ParsedEvent) -> None:
    facets = parsed.run_facets
    if "parent" in facets:
        parent = facets["parent"]
        run = _obj(parent.get("run"), "run.facets.parent.run")
        parsed.parent_run_uuid = _uuid(run.get("runId"), "run.facets.parent.run.runId")
        job = _obj(parent.get("job"), "run.facets.parent.job")
        parsed.parent_job = (
            _name(job.get("namespace"), "run.facets.parent.job.namespace"),
            _name(job.get("name"), "run.facets.parent.job.name"),
        )
    if "nominalTime" in facets:
        nominal = facets["nominalTime"]
        parsed.nominal_start = parse_time(
            nominal.get("nominalStartTime"), "run.facets.nominalTime.nominalStartTime"
        )
        parsed.nominal_end = parse_time(
            nominal.get("nominalEndTime"), "run.facets.nominalTime.nominalEndTime", required=False
        )
    if "errorMessage" in facets:
        error = facets["errorMessage"]
        parsed.error_message = _text(
            error.get("message"), "run.facets.errorMessage.message", required=True
        )
        parsed.error_stack = _text(error.get("stackTrace"), "run.facets.errorMessage.stackTrace")
        _text(error.get("programmingLanguage"), "run.facets.errorMessage.programmingLanguage")
    if "processing_engine" in facets:
        engine = facets["processing_engine"]
        for key in ("version", "name", "openlineageAdapterVersion"):
            _text(engine.get(key), f"run.facets.processing_engine.{key}", limit=256)


def _job_facets(facets: dict[str, Any]) -> None:
    if "sql" in facets:
        _text(facets["sql"].get("query"), "job.facets.sql.query", required=True)
        _text(facets["sql"].get("dialect"), "job.facets.sql.dialect", limit=64)
    if "jobType" in facets:
        for key in ("processingType", "integration", "jobType"):
            _text(facets["jobType"].get(key), f"job.facets.jobType.{key}", limit=32)
    if "documentation" in facets:
        _text(facets["documentation"].get("description"), "job.facets.documentation.description")
    if "sourceCodeLocation" in facets:
        _text(
            facets["sourceCodeLocation"].get("url"), "job.facets.sourceCodeLocation.url", limit=2048
        )


def _dataset(value: Any, path: str, output: bool) -> DatasetRef:
    item = _obj(value, path)
    namespace: Any = item.get("namespace")
    name: Any = item.get("name")
    if not (_valid_name(namespace) and _valid_name(name)):
        _name(namespace, f"{path}.namespace")
        _name(name, f"{path}.name")
    ref = DatasetRef(namespace=namespace, name=name)
    facets = _facets(item.get("facets"), f"{path}.facets")
    extra_key = "outputFacets" if output else "inputFacets"
    if extra_key in item:
        _facets(item[extra_key], f"{path}.{extra_key}")
    ref.facets = facets
    base = f"{path}.facets"
    if "schema" in facets:
        ref.schema = _schema(facets["schema"], f"{base}.schema")
    if "columnLineage" in facets:
        ref.columns = _column_lineage(facets["columnLineage"], f"{base}.columnLineage")
    if "lifecycleStateChange" in facets:
        change = facets["lifecycleStateChange"]
        state = change.get("lifecycleStateChange")
        if not isinstance(state, str) or state.upper() not in LIFECYCLE_CHANGES:
            raise _fail(
                f"lifecycleStateChange must be one of {', '.join(LIFECYCLE_CHANGES)}",
                f"{base}.lifecycleStateChange.lifecycleStateChange",
            )
        ref.lifecycle = state.upper()
        if change.get("previousIdentifier") is not None:
            prev_path = f"{base}.lifecycleStateChange.previousIdentifier"
            prev = _obj(change["previousIdentifier"], prev_path)
            ref.previous = (
                _name(prev.get("namespace"), f"{prev_path}.namespace"),
                _name(prev.get("name"), f"{prev_path}.name"),
            )
    if "symlinks" in facets:
        identifiers = _list(facets["symlinks"].get("identifiers"), f"{base}.symlinks.identifiers")
        for i, ident in enumerate(identifiers):
            ipath = f"{base}.symlinks.identifiers[{i}]"
            ident = _obj(ident, ipath)
            key = (
                _name(ident.get("namespace"), f"{ipath}.namespace"),
                _name(ident.get("name"), f"{ipath}.name"),
            )
            _text(ident.get("type"), f"{ipath}.type", limit=64)
            if key != ref.key:
                ref.symlinks.append(key)
    if "ownership" in facets:
        owners = _list(facets["ownership"].get("owners"), f"{base}.ownership.owners")
        for i, owner in enumerate(owners):
            opath = f"{base}.ownership.owners[{i}]"
            owner = _obj(owner, opath)
            _text(owner.get("name"), f"{opath}.name", required=True, limit=255)
            _text(owner.get("type"), f"{opath}.type", limit=64)
    if "documentation" in facets:
        _text(facets["documentation"].get("description"), f"{base}.documentation.description")
    if "dataSource" in facets:
        _text(facets["dataSource"].get("name"), f"{base}.dataSource.name", limit=255)
        _text(facets["dataSource"].get("uri"), f"{base}.dataSource.uri", limit=2048)
    if "storage" in facets:
        _text(facets["storage"].get("storageLayer"), f"{base}.storage.storageLayer", limit=64)
        _text(facets["storage"].get("fileFormat"), f"{base}.storage.fileFormat", limit=32)
    return ref


def _schema(facet: dict[str, Any], path: str) -> list[SchemaField]:
    """The schema facet's fields, nested ones flattened to dotted names, in order."""
    result: list[SchemaField] = []
    seen: set[str] = set()

    def walk(items: Any, items_path: str, prefix: str) -> None:
        for i, item in enumerate(_list(items, items_path)):
            name, kind, description = (
                (item.get("name"), item.get("type"), item.get("description"))
                if isinstance(item, dict)
                else (None, None, None)
            )
            # _valid_name and _valid_text, spelled out: this runs for every field of every
            # dataset of every event.
            if not (
                isinstance(item, dict)
                and isinstance(name, str)
                and 0 < len(name) <= MAX_NAME_LENGTH
                and "\x00" not in name
                and name.strip()
                and (kind is None or (isinstance(kind, str) and "\x00" not in kind))
                and (
                    description is None
                    or (isinstance(description, str) and "\x00" not in description)
                )
            ):
                fpath = f"{items_path}[{i}]"
                _obj(item, fpath)
                _name(name, f"{fpath}.name")
                _text(kind, f"{fpath}.type")
                _text(description, f"{fpath}.description")
            full = f"{prefix}{name}"
            if len(full) > MAX_NAME_LENGTH:
                fpath = f"{items_path}[{i}]"
                raise _fail(
                    f"{fpath}.name is longer than {MAX_NAME_LENGTH} characters", f"{fpath}.name"
                )
            if full not in seen:
                seen.add(full)
                result.append(
                    SchemaField(name=full, type=(kind or "")[:255], description=description or "")
                )
            if item.get("fields") is not None:
                walk(item["fields"], f"{items_path}[{i}].fields", f"{full}.")

    walk(facet.get("fields"), f"{path}.fields", "")
    return result


def _transformations(
    items: Any, owner: str, index: int, legacy_type: str, legacy_description: str
) -> list[Transformation]:
    """The transformations of input field ``index`` of ``owner`` (its path, built on error)."""
    if not isinstance(items, list):
        items = _list(items, f"{owner}[{index}].transformations")
    if not items:
        legacy = LEGACY_TRANSFORMATIONS.get(legacy_type.upper(), ("DIRECT", ""))
        return [Transformation(*legacy, legacy_type.upper() == "MASKED", legacy_description)]
    found = []
    kind: Any
    subtype: Any
    masking: Any
    description: Any
    for i, item in enumerate(items):
        kind, subtype, masking, description = (
            (item.get("type"), item.get("subtype"), item.get("masking"), item.get("description"))
            if isinstance(item, dict)
            else (None, None, None, None)
        )
        if not (
            isinstance(item, dict)
            and _valid_text(kind, required=True)
            and kind.upper() in TRANSFORMATION_TYPES
            and _valid_text(subtype, limit=64)
            and (masking is None or isinstance(masking, bool))
            and _valid_text(description)
        ):
            tpath = f"{owner}[{index}].transformations[{i}]"
            _obj(item, tpath)
            if _text(kind, f"{tpath}.type", required=True).upper() not in TRANSFORMATION_TYPES:
                raise _fail(f"{tpath}.type must be DIRECT or INDIRECT", f"{tpath}.type")
            _text(subtype, f"{tpath}.subtype", limit=64)
            _bool(masking, f"{tpath}.masking")
            _text(description, f"{tpath}.description")
        known = (subtype or "").upper()
        found.append(
            Transformation(
                type=kind.upper(),
                # Subtypes outside the spec's list are kept as unknown rather than refused.
                subtype=known if known in TRANSFORMATION_SUBTYPES else "",
                masking=bool(masking),
                description=description or "",
            )
        )
    return found


def _input_fields(
    items: Any, path: str, target: str | None, legacy_type: str = "", legacy_description: str = ""
) -> list[ColumnMapping]:
    mappings = []
    for i, item in enumerate(_list(items, path)):
        namespace: Any
        name: Any
        source_field: Any
        namespace, name, source_field = (
            (item.get("namespace"), item.get("name"), item.get("field"))
            if isinstance(item, dict)
            else (None, None, None)
        )
        if not (
            isinstance(item, dict)
            and _valid_name(namespace)
            and _valid_name(name)
            and _valid_name(source_field)
        ):
            ipath = f"{path}[{i}]"
            _obj(item, ipath)
            _name(namespace, f"{ipath}.namespace")
            _name(name, f"{ipath}.name")
            _name(source_field, f"{ipath}.field")
        for transformation in _transformations(
            item.get("transformations"),
            path,
            i,
            legacy_type,
            legacy_description,
        ):
            mappings.append(ColumnMapping(namespace, name, source_field, target, transformation))
    return mappings


def _column_lineage(facet: dict[str, Any], path: str) -> list[ColumnMapping]:
    mappings: list[ColumnMapping] = []
    fields = _obj(facet.get("fields"), f"{path}.fields", required=False)
    for target, raw in fields.items():
        fpath = f"{path}.fields.{target}"
        _name(target, fpath)
        item = _obj(raw, fpath)
        legacy_type = _text(item.get("transformationType"), f"{fpath}.transformationType", limit=64)
        legacy_description = _text(
            item.get("transformationDescription"), f"{fpath}.transformationDescription"
        )
        mappings.extend(
            _input_fields(
                item.get("inputFields"),
                f"{fpath}.inputFields",
                target,
                legacy_type,
                legacy_description,
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
