"""From query-log records to OpenLineage events, reads and per-line problems.

Pure Python: the Django side feeds the events to the normaliser and stores
reads and problems; the benchmark drives the same code.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ingest.events import ParsedEvent
from ingest.sql.dialects import UnknownDialectError, resolve_dialect
from ingest.sql.events import BuiltEvents, EventBuilder, Execution, ReadRecord, dataset_key
from ingest.sql.parser import SchemaProvider, SqlLineageParser
from ingest.sql.readers import Item, LineError, QueryRecord
from ingest.sql.session import LineageSession

_MAX_SESSIONS = 10_000


@dataclass(frozen=True, slots=True)
class Problem:
    """A line or statement that produced no lineage, and why."""

    line: int
    message: str
    field: str = ""
    statement: int | None = None
    excerpt: str = ""


@dataclass(slots=True)
class LogStats:
    records: int = 0
    statements: int = 0
    events: int = 0
    reads: int = 0
    skipped_failed: int = 0
    line_errors: int = 0
    parse_errors: int = 0
    cache_hits: int = 0
    warnings: int = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(slots=True)
class Processed:
    """What one log line gave: events to ingest, reads to record, problems to list."""

    line: int
    events: list[dict[str, Any]] = field(default_factory=list)
    parsed: list[ParsedEvent] = field(default_factory=list)  # ``events``, read
    reads: list[ReadRecord] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    # (namespace, name) of tables read before the catalog knew their columns
    columns_unknown: set[tuple[str, str]] = field(default_factory=set)


class SqlLogProcessor:
    """Turns query-log records into OpenLineage events for one namespace."""

    def __init__(
        self,
        namespace: str,
        dialect: str,
        *,
        database: str | None = None,
        schema: str | None = None,
        schema_provider: SchemaProvider | None = None,
        parser: SqlLineageParser | None = None,
        default_time: datetime | None = None,
    ) -> None:
        self.namespace = namespace
        self.dialect = resolve_dialect(dialect).name
        self.database = database
        self.schema = schema
        self.parser = parser or SqlLineageParser(self.dialect, schema_provider=schema_provider)
        self.builder = EventBuilder()
        self.default_time = default_time
        self.stats = LogStats()
        self.earliest: datetime | None = None  # the earliest time of a record processed
        self._sessions: OrderedDict[str, LineageSession] = OrderedDict()

    def process(self, items: Iterable[Item]) -> Iterator[Processed]:
        for item in items:
            yield self.process_one(item)

    def process_one(self, item: Item) -> Processed:
        stats = self.stats
        if isinstance(item, LineError):
            stats.line_errors += 1
            return Processed(
                item.line, problems=[Problem(item.line, item.message, item.field or "")]
            )
        stats.records += 1
        if item.failed:
            stats.skipped_failed += 1
            return Processed(item.line)
        return self._record(item)

    def _record(self, record: QueryRecord) -> Processed:
        stats = self.stats
        out = Processed(record.line)
        dialect = record.dialect or self.dialect
        try:
            spec = resolve_dialect(dialect)
        except UnknownDialectError as exc:
            stats.line_errors += 1
            out.problems.append(Problem(record.line, str(exc), "dialect"))
            return out
        start = record.start_time or self.default_time
        if start is None:
            stats.line_errors += 1
            out.problems.append(Problem(record.line, "no start_time", "start_time"))
            return out
        if self.earliest is None or start < self.earliest:
            self.earliest = start
        parsed = self.parser.parse(
            record.query,
            dialect=spec.name,
            database=record.database or self.database,
            schema=record.schema or self.schema,
            session=self._session(record.session_id),
        )
        stats.cache_hits += parsed.cached
        stats.statements += len(parsed.statements)
        for error in parsed.errors:
            stats.parse_errors += 1
            out.problems.append(
                Problem(record.line, error.reason, "query", error.index, error.excerpt)
            )
        stats.warnings += sum(1 for s in parsed.statements if s.warnings)
        out.columns_unknown = {
            dataset_key(d, self.namespace) for s in parsed.statements for d in s.columns_unknown
        }
        execution = Execution(
            namespace=self.namespace,
            query=record.query,
            dialect=spec.name,
            start_time=start,
            end_time=record.end_time,
            query_id=record.query_id,
            query_tag=record.query_tag,
            user=record.user,
        )
        built: BuiltEvents = self.builder.build(parsed, execution)
        for rejected in built.rejected:
            stats.parse_errors += 1
            out.problems.append(
                Problem(
                    record.line,
                    f"event rejected: {rejected.message}",
                    rejected.field,
                    rejected.statement,
                )
            )
        out.events = built.events
        out.parsed = built.parsed
        out.reads = built.reads
        stats.events += len(built.events)
        stats.reads += len(built.reads)
        return out

    def _session(self, session_id: str | None) -> LineageSession | None:
        if not session_id:
            return None
        session = self._sessions.pop(session_id, None) or LineageSession()
        self._sessions[session_id] = session
        if len(self._sessions) > _MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return session
