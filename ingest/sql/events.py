"""OpenLineage events for parsed SQL: what the normaliser ingests.

Each statement with lineage becomes a job (named by its query tag or by its
normalised text, so every run of a scheduled statement is one job) and each
execution a run with a START and a COMPLETE RunEvent at the query's own
time. DDL becomes DatasetEvents with a ``lifecycleStateChange`` facet.
Plain SELECTs become read records, never edges.

The parts of an event that only depend on the statement are built once per
distinct statement and shared by its runs: treat the dicts as read-only.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from json.encoder import encode_basestring
from typing import Any

from ingest.events import DatasetRef as ParsedDataset
from ingest.events import (
    EventError,
    ParsedEvent,
    fingerprint_of_text,
    parse_datasets,
    parse_event,
    parse_job,
)
from ingest.sql.dialects import resolve_dialect
from ingest.sql.fingerprint import redact
from ingest.sql.model import (
    DatasetRef,
    InputField,
    Lifecycle,
    ParsedRecord,
    StatementKind,
    StatementLineage,
    TargetLineage,
)
from pipelines.fingerprint import canonical_json

PRODUCER = "https://github.com/lineage-explorer/lineage-explorer/tree/main/ingest/sql"
RUN_EVENT_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"
DATASET_EVENT_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/DatasetEvent"
COLUMN_LINEAGE_SCHEMA = (
    "https://openlineage.io/spec/facets/1-2-0/ColumnLineageDatasetFacet.json"
    "#/$defs/ColumnLineageDatasetFacet"
)
SCHEMA_SCHEMA = (
    "https://openlineage.io/spec/facets/1-2-0/SchemaDatasetFacet.json#/$defs/SchemaDatasetFacet"
)
LIFECYCLE_SCHEMA = (
    "https://openlineage.io/spec/facets/1-0-1/LifecycleStateChangeDatasetFacet.json"
    "#/$defs/LifecycleStateChangeDatasetFacet"
)
SQL_SCHEMA = "https://openlineage.io/spec/facets/1-1-0/SQLJobFacet.json#/$defs/SQLJobFacet"
JOB_TYPE_SCHEMA = (
    "https://openlineage.io/spec/facets/2-0-4/JobTypeJobFacet.json#/$defs/JobTypeJobFacet"
)
_string = encode_basestring  # a str as canonical_json renders it
_PRODUCER_JSON = canonical_json(PRODUCER)
_SQL_HEAD_JSON = f'"_producer":{_PRODUCER_JSON},"_schemaURL":{canonical_json(SQL_SCHEMA)}'
_RUN_SCHEMA_JSON = canonical_json(RUN_EVENT_SCHEMA)
# Marks temporary / scratch datasets that lineage could not follow through.
HIDDEN_FACET = "lineageExplorer_hidden"
HIDDEN_SCHEMA = "https://github.com/lineage-explorer/lineage-explorer/spec/HiddenDatasetFacet.json"

_JOB_TYPE_FACET = {
    "_producer": PRODUCER,
    "_schemaURL": JOB_TYPE_SCHEMA,
    "processingType": "BATCH",
    "integration": "SQL",
    "jobType": "QUERY",
}
_JOB_TYPE_JSON = canonical_json(_JOB_TYPE_FACET)
_RUN_NAMESPACE = uuid.UUID("5d3c2a7e-9b1f-4c52-8e61-0f4a2b7c9d10")
_JOB_VERBS = {
    StatementKind.INSERT: "insert",
    StatementKind.INSERT_OVERWRITE: "insert_overwrite",
    StatementKind.CTAS: "create_table_as",
    StatementKind.CREATE_VIEW: "create_view",
    StatementKind.MERGE: "merge",
    StatementKind.UPDATE: "update",
    StatementKind.DELETE: "delete",
    StatementKind.COPY: "copy",
    StatementKind.UNLOAD: "unload",
}


@dataclass(frozen=True, slots=True)
class Execution:
    """One execution of a logged record: when, by whom, under which ids."""

    namespace: str
    query: str
    dialect: str
    start_time: datetime
    end_time: datetime | None = None
    query_id: str | None = None
    query_tag: str | None = None
    user: str = ""


@dataclass(frozen=True, slots=True)
class ReadRecord:
    """A plain SELECT: who read which datasets when (no lineage edge)."""

    namespace: str
    datasets: tuple[tuple[str, str], ...]
    at: datetime
    user: str
    job_name: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Rejected:
    """A statement whose events could not be accepted, and why."""

    statement: int
    message: str
    field: str


@dataclass(frozen=True, slots=True)
class BuiltEvents:
    events: list[dict[str, Any]]
    reads: list[ReadRecord]
    parsed: list[ParsedEvent] = field(default_factory=list)  # ``events``, read
    rejected: list[Rejected] = field(default_factory=list)


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def run_uuid_of(execution: Execution, record_fingerprint: str, index: int) -> uuid.UUID:
    """A stable run id: re-ingesting the same log gives the same runs."""
    if execution.query_id:
        key = f"{execution.namespace}\x00{execution.query_id}\x00{index}"
    else:
        # The exact text (not the fingerprint) so runs differing only in literals stay apart.
        key = (
            f"{execution.namespace}\x00{record_fingerprint}\x00{execution.query}\x00"
            f"{iso(execution.start_time)}\x00{index}"
        )
    return uuid.uuid5(_RUN_NAMESPACE, key)


def job_name(statement: StatementLineage, query_tag: str | None = None) -> str:
    """The job of a statement: its query tag, or verb, first output and normalised-text hash."""
    if query_tag:
        return query_tag[:1000]
    verb = _JOB_VERBS.get(statement.kind, statement.kind.value.lower())
    target = statement.outputs[0].name if statement.outputs else "select"
    key = (statement.job_key or statement.fingerprint)[:12]
    return f"{verb}.{target[:900]}.{key}"


@dataclass(frozen=True, slots=True)
class _StaticParts:
    """What every run of one statement shares: its job name, datasets and their JSON."""

    job_name: str
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    inputs_json: str
    outputs_json: str
    refs: tuple[list[ParsedDataset], list[ParsedDataset]]  # inputs and outputs, read


class EventBuilder:
    """Builds OpenLineage event dicts for parsed records, sharing per-statement parts.

    Each event comes with its parsed form (what ``ingest.events.parse_event``
    would read from it, fingerprint included): a statement's datasets are
    checked and read once, not once per execution.
    """

    def __init__(self, cache_size: int = 20_000) -> None:
        self._static: OrderedDict[tuple[str, int, str], tuple[StatementLineage, _StaticParts]] = (
            OrderedDict()
        )
        self._cache_size = cache_size

    def build(self, record: ParsedRecord, execution: Execution) -> BuiltEvents:
        built = BuiltEvents([], [])
        query = None  # the statement a job shows, worked out once per execution
        for statement in record.statements:
            if statement.hidden:
                continue
            try:
                if statement.has_lineage:
                    if query is None:
                        query = redact(execution.query, resolve_dialect(execution.dialect))
                    self._run_events(statement, record.fingerprint, execution, query, built)
                elif statement.kind is StatementKind.DDL and statement.outputs:
                    for event in self._dataset_events(statement, execution):
                        built.parsed.append(parse_event(event, strict=True))
                        built.events.append(event)
                elif statement.is_read and statement.inputs:
                    built.reads.append(
                        ReadRecord(
                            namespace=execution.namespace,
                            datasets=tuple(
                                dataset_key(d, execution.namespace) for d in statement.inputs
                            ),
                            at=execution.start_time,
                            user=execution.user,
                            job_name=job_name(statement, execution.query_tag),
                            fingerprint=statement.fingerprint,
                        )
                    )
            except EventError as exc:
                built.rejected.append(Rejected(statement.index, exc.message, exc.field or ""))
        return built

    # -- run events -------------------------------------------------------------

    def _static_parts(self, statement: StatementLineage, namespace: str) -> _StaticParts:
        key = (statement.fingerprint, statement.index, namespace)
        found = self._static.get(key)
        # Usually the very statement the parser's cache gave before; one composed again
        # through temporary tables is a new object, most often equal to the one cached.
        if found is not None and (found[0] is statement or found[0] == statement):
            self._static.move_to_end(key)
            return found[1]
        hidden = statement.hidden_datasets
        inputs = [_dataset(d, namespace, hidden) for d in statement.inputs]
        outputs = [_output(t, namespace, hidden) for t in _targets_in_output_order(statement)]
        parts = _StaticParts(
            job_name=job_name(statement),
            inputs=inputs,
            outputs=outputs,
            inputs_json=canonical_json(inputs),
            outputs_json=canonical_json(outputs),
            refs=(
                parse_datasets(inputs, "inputs", output=False),
                parse_datasets(outputs, "outputs", output=True),
            ),
        )
        self._static[key] = (statement, parts)
        if len(self._static) > self._cache_size:
            self._static.popitem(last=False)
        return parts

    def _run_events(
        self,
        statement: StatementLineage,
        record_fingerprint: str,
        execution: Execution,
        query: str,
        built: BuiltEvents,
    ) -> None:
        parts = self._static_parts(statement, execution.namespace)
        run_uuid = run_uuid_of(execution, record_fingerprint, statement.index)
        run = {"runId": str(run_uuid)}
        name = execution.query_tag[:1000] if execution.query_tag else parts.job_name
        job = {
            "namespace": execution.namespace,
            "name": name,
            "facets": {
                "sql": {
                    "_producer": PRODUCER,
                    "_schemaURL": SQL_SCHEMA,
                    "query": query,
                    "dialect": execution.dialect,
                },
                "jobType": _JOB_TYPE_FACET,
            },
        }
        namespace, name, job_facets = parse_job(job)
        started_at = execution.start_time.astimezone(UTC)
        ended_at = (execution.end_time or execution.start_time).astimezone(UTC)
        started, ended = iso(started_at), iso(ended_at)
        # The START only opens the run: datasets, column lineage and job facets travel
        # once, with the COMPLETE, so the normaliser reads them once per execution.
        start_job = {"namespace": namespace, "name": name}
        start = {
            "eventType": "START",
            "eventTime": started,
            "producer": PRODUCER,
            "schemaURL": RUN_EVENT_SCHEMA,
            "run": run,
            "job": start_job,
        }
        complete = {
            "eventType": "COMPLETE",
            "eventTime": ended,
            "producer": PRODUCER,
            "schemaURL": RUN_EVENT_SCHEMA,
            "run": run,
            "job": job,
            "inputs": parts.inputs,
            "outputs": parts.outputs,
        }
        # Canonical JSON (sorted keys, as ``canonical_json`` renders it) put together from
        # parts rendered once per statement; the tests hold the two equal.
        job_key = f'"name":{_string(name)},"namespace":{_string(namespace)}}}'
        tail = (
            f'"producer":{_PRODUCER_JSON},"run":{{"runId":"{run_uuid}"}},'
            f'"schemaURL":{_RUN_SCHEMA_JSON}}}'
        )
        start_text = f'{{"eventTime":"{started}","eventType":"START","job":{{{job_key},{tail}'
        complete_text = (
            f'{{"eventTime":"{ended}","eventType":"COMPLETE","inputs":{parts.inputs_json},'
            f'"job":{{"facets":{{"jobType":{_JOB_TYPE_JSON},"sql":{{{_SQL_HEAD_JSON},'
            f'"dialect":{_string(execution.dialect)},"query":{_string(query)}}}}},'
            f"{job_key},"
            f'"outputs":{parts.outputs_json},{tail}'
        )
        steps: tuple[tuple[Any, ...], ...] = (
            ("START", start, start_text, started_at, {}, [], []),
            ("COMPLETE", complete, complete_text, ended_at, job_facets, *parts.refs),
        )
        for event_type, event, text, at, facets, inputs, outputs in steps:
            built.events.append(event)
            built.parsed.append(
                ParsedEvent(
                    kind="run",
                    event_type=event_type,
                    event_time=at,
                    producer=PRODUCER,
                    body=event,
                    fingerprint=fingerprint_of_text(text),
                    canonical=text,
                    run_uuid=run_uuid,
                    job_namespace=namespace,
                    job_name=name,
                    job_facets=facets,
                    inputs=inputs,
                    outputs=outputs,
                )
            )

    # -- dataset events (DDL) --------------------------------------------------

    def _dataset_events(
        self, statement: StatementLineage, execution: Execution
    ) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        schemas = {t.dataset: t.schema for t in statement.targets}
        for output in statement.outputs:
            namespace, name = dataset_key(output, execution.namespace)
            facets: dict[str, Any] = {}
            if statement.lifecycle is not None:
                change: dict[str, Any] = {
                    "_producer": PRODUCER,
                    "_schemaURL": LIFECYCLE_SCHEMA,
                    "lifecycleStateChange": statement.lifecycle.value,
                }
                if statement.lifecycle is Lifecycle.RENAME and statement.previous_name:
                    prev_ns, prev_name = dataset_key(statement.previous_name, execution.namespace)
                    change["previousIdentifier"] = {"namespace": prev_ns, "name": prev_name}
                facets["lifecycleStateChange"] = change
            schema = schemas.get(output)
            if schema:
                facets["schema"] = _schema_facet(schema)
            events.append(
                {
                    "eventTime": iso(execution.start_time),
                    "producer": PRODUCER,
                    "schemaURL": DATASET_EVENT_SCHEMA,
                    "dataset": {"namespace": namespace, "name": name, "facets": facets},
                }
            )
        return events


def _targets_in_output_order(statement: StatementLineage) -> list[TargetLineage]:
    by_dataset = {t.dataset: t for t in statement.targets}
    return [by_dataset.get(o) or TargetLineage(o, {}) for o in statement.outputs]


def dataset_key(dataset: DatasetRef, namespace: str) -> tuple[str, str]:
    """The (namespace, name) an event gives a dataset of a log of ``namespace``."""
    if not dataset.namespace or dataset.namespace == "stage":
        return namespace, dataset.name
    return dataset.namespace, dataset.name


def _dataset(dataset: DatasetRef, namespace: str, hidden: frozenset[DatasetRef]) -> dict[str, Any]:
    ns, name = dataset_key(dataset, namespace)
    out: dict[str, Any] = {"namespace": ns, "name": name}
    if dataset in hidden:
        out["facets"] = {
            HIDDEN_FACET: {"_producer": PRODUCER, "_schemaURL": HIDDEN_SCHEMA, "hidden": True}
        }
    return out


def _output(
    target: TargetLineage,
    namespace: str,
    hidden: frozenset[DatasetRef],
) -> dict[str, Any]:
    out = _dataset(target.dataset, namespace, hidden)
    facets: dict[str, Any] = dict(out.get("facets") or {})
    # Which rows an UPDATE, DELETE or MERGE touches depends on the target's own
    # columns; as lineage that would make each of them read its own output (a
    # self-loop), so those dataset-level dependencies are left out of events.
    dataset_inputs = [f for f in target.dataset_inputs if f.source.dataset != target.dataset]
    if target.fields or dataset_inputs:
        facets["columnLineage"] = {
            "_producer": PRODUCER,
            "_schemaURL": COLUMN_LINEAGE_SCHEMA,
            "fields": {
                column: {"inputFields": _input_fields(sources, namespace)}
                for column, sources in target.fields.items()
            },
            "dataset": _input_fields(dataset_inputs, namespace),
        }
    if target.schema:
        facets["schema"] = _schema_facet(target.schema)
    if facets:
        out["facets"] = facets
    return out


def _input_fields(sources: Iterable[InputField], namespace: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for source in sources:
        ns, name = dataset_key(source.source.dataset, namespace)
        out.append(
            {
                "namespace": ns,
                "name": name,
                "field": source.source.field,
                "transformations": [
                    {
                        "type": t.type.value,
                        "subtype": t.subtype.value,
                        "description": "",
                        "masking": t.masking,
                    }
                    for t in sorted(source.transformations, key=lambda t: t.subtype.value)
                ],
            }
        )
    return out


def _schema_facet(schema: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    fields = [{"name": n, "type": t} if t else {"name": n} for n, t in schema]
    return {"_producer": PRODUCER, "_schemaURL": SCHEMA_SCHEMA, "fields": fields}
