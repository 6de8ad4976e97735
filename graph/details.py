"""What a lineage answer shows about each node: datasets with fields, owners, PII and
retention; jobs with their latest run. Loaded in bulk, a fixed number of queries
per answer whatever its size, optionally as of a past instant.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, is_dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from uuid import UUID

import orjson
from django.db import connection

from catalog.flags import chunks, flags_as_of
from catalog.lookups import where_in
from catalog.models import ChangeRecord, LifecycleState, Owner, RetentionPolicy
from catalog.pgsql import bound_cursor
from catalog.queries import (
    DATASET_ATTRIBUTES,
    FIELD_ATTRIBUTES,
    closed_datasets,
    field_existed_sql,
)
from graph.models import TERMINAL_RUN_STATES, RunState
from graph.nodeids import dataset_node_id, job_node_id

# (dataset pk, namespace, dataset name, field name, type, subject kind) of a field.
FieldRow = tuple[int, str, str, str, str, str | None]

# The node summaries below are built by the thousand for a hub's impact: not frozen (see
# graph.queries.GraphNode). Nothing changes them once built; dataclasses.replace makes
# another.


@dataclass(slots=True)
class FieldInfo:
    pk: int
    name: str
    type: str
    description: str
    pii_category: str
    subject_kind: str | None
    flag_source: str
    tags: tuple[str, ...] = ()

    @property
    def is_personal(self) -> bool:
        return bool(self.pii_category) or self.subject_kind is not None


@dataclass(slots=True)
class OwnerInfo:
    name: str
    type: str = ""
    kind: str = ""
    email: str = ""


@dataclass(slots=True)
class RetentionInfo:
    name: str
    duration_days: int | None
    action: str
    legal_basis: str = ""


@dataclass(slots=True)
class DatasetInfo:
    pk: int
    namespace: str
    name: str
    description: str
    platform: str
    location: str
    source_name: str
    sensitivity: str
    lifecycle_state: str
    is_hidden: bool
    created_at: datetime
    updated_at: datetime
    first_seen: datetime
    last_seen: datetime
    fields: tuple[FieldInfo, ...]
    tags: tuple[str, ...]
    owners: tuple[OwnerInfo, ...]
    retention: RetentionInfo | None

    @property
    def node_id(self) -> str:
        return dataset_node_id(self.namespace, self.name)

    @property
    def pii_fields(self) -> tuple[FieldInfo, ...]:
        return tuple(f for f in self.fields if f.is_personal)

    @property
    def has_pii(self) -> bool:
        return any(f.is_personal for f in self.fields)


@dataclass(slots=True)
class RunInfo:
    run_uuid: str
    state: str
    started_at: datetime | None
    ended_at: datetime | None
    error_message: str = ""

    @property
    def duration_ms(self) -> int | None:
        if self.started_at and self.ended_at:
            return int((self.ended_at - self.started_at).total_seconds() * 1000)
        return None

    @property
    def failed(self) -> bool:
        return self.state in (RunState.FAILED, RunState.ABORTED)


@dataclass(slots=True)
class JobInfo:
    pk: int
    namespace: str
    name: str
    job_type: str
    processing_type: str
    integration: str
    description: str
    location: str
    created_at: datetime
    updated_at: datetime
    parent_name: str | None
    latest_run: RunInfo | None

    @property
    def node_id(self) -> str:
        return job_node_id(self.namespace, self.name)


# --- summaries as text (shared node documents carry them, graph/nodecache.py) -----------


def _plain(value: Any) -> Any:
    """A summary as nested JSON lists, fields in declaration order."""
    if is_dataclass(value) and not isinstance(value, type):
        return [_plain(getattr(value, f.name)) for f in fields(value)]
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def info_json(info: DatasetInfo | JobInfo) -> str:
    return orjson.dumps(_plain(info)).decode()


def dataset_info_from_json(text: str | bytes) -> DatasetInfo:
    (
        pk, namespace, name, description, platform, location, source_name, sensitivity,
        lifecycle_state, is_hidden, created_at, updated_at, first_seen, last_seen, field_rows,
        tags, owners, retention,
    ) = orjson.loads(text)  # fmt: skip
    return DatasetInfo(
        pk=pk,
        namespace=namespace,
        name=name,
        description=description,
        platform=platform,
        location=location,
        source_name=source_name,
        sensitivity=sensitivity,
        lifecycle_state=lifecycle_state,
        is_hidden=is_hidden,
        created_at=read_ts(created_at),  # type: ignore[arg-type]
        updated_at=read_ts(updated_at),  # type: ignore[arg-type]
        first_seen=read_ts(first_seen),  # type: ignore[arg-type]
        last_seen=read_ts(last_seen),  # type: ignore[arg-type]
        fields=tuple(
            FieldInfo(f_pk, f_name, f_type, f_desc, pii, kind, source, tuple(f_tags))
            for f_pk, f_name, f_type, f_desc, pii, kind, source, f_tags in field_rows
        ),
        tags=tuple(tags),
        owners=tuple(OwnerInfo(*owner) for owner in owners),
        retention=None if retention is None else RetentionInfo(*retention),
    )


def job_info_from_json(text: str | bytes) -> JobInfo:
    (
        pk, namespace, name, job_type, processing_type, integration, description, location,
        created_at, updated_at, parent_name, run,
    ) = orjson.loads(text)  # fmt: skip
    return JobInfo(
        pk=pk,
        namespace=namespace,
        name=name,
        job_type=job_type,
        processing_type=processing_type,
        integration=integration,
        description=description,
        location=location,
        created_at=read_ts(created_at),  # type: ignore[arg-type]
        updated_at=read_ts(updated_at),  # type: ignore[arg-type]
        parent_name=parent_name,
        latest_run=None
        if run is None
        else RunInfo(run[0], run[1], read_ts(run[2]), read_ts(run[3]), run[4]),
    )


def ts_sql(column: str) -> str:
    # Timestamps cross as text and are parsed here: Django's timezone-aware row loader
    # costs more than the whole query for thousands of values.
    return f"{column}::text" if connection.vendor == "postgresql" else column


def read_ts(value: Any) -> datetime | None:
    """A timestamp read as text (PostgreSQL) or datetime (SQLite), as aware UTC."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _rows(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    # On PostgreSQL the ids go bound, as one array, instead of quoted into the text.
    scope = bound_cursor() if connection.vendor == "postgresql" else connection.cursor()
    with scope as cursor:
        cursor.execute(sql, list(params))
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    return rows


def _param(moment: datetime) -> Any:
    """A datetime as the backend stores it (SQLite keeps naive UTC text)."""
    return connection.ops.adapt_datetimefield_value(moment)


def _json_list(expr: str) -> str:
    """SQL aggregating ``expr`` over a subquery's rows into JSON array text."""
    if connection.vendor == "postgresql":
        return f"json_agg({expr})::text"
    return f"json_group_array({expr})"


def _json_tuple(*exprs: str) -> str:
    function = "json_build_array" if connection.vendor == "postgresql" else "json_array"
    return f"{function}({', '.join(exprs)})"


def _json(text: str | None) -> list[Any]:
    return orjson.loads(text) if text else []


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(sorted(_json(text))) if text else ()


def _days(duration: Any) -> int | None:
    if duration is None:
        return None
    if isinstance(duration, timedelta):
        return duration // timedelta(days=1)
    return int(duration) // (86_400 * 1_000_000)


def load_datasets(
    pks: Iterable[int],
    as_of: datetime | None = None,
    fields: Literal["all", "personal"] = "all",
) -> dict[int, DatasetInfo]:
    """Datasets by pk with fields, tags, owners and retention (at ``as_of`` when given:
    lifecycle, steward edits and flags as they were then).

    ``fields="personal"`` loads only fields with a PII category or subject kind (then,
    with ``as_of``: what impact lists and subject search need). Two queries, and with
    ``as_of`` three or four more, for any number of datasets.
    """
    wanted = sorted({int(pk) for pk in pks})
    if not wanted:
        return {}
    rows: list[tuple[Any, ...]] = []
    field_rows_: list[tuple[Any, ...]] = []
    tags_of = _json_list("t.name")
    owners_of = _json_list(_json_tuple("w.name", "w.kind", "w.email", "o.ownership_type"))
    for chunk in chunks(wanted):
        where, params = where_in("d.id", chunk)
        rows += _rows(
            "SELECT d.id, n.name, d.name, d.description, d.platform, d.location, "
            "d.source_name, d.sensitivity, d.lifecycle_state, d.is_hidden, "
            f"{ts_sql('d.created_at')}, {ts_sql('d.updated_at')}, "
            f"{ts_sql('d.first_seen')}, {ts_sql('d.last_seen')}, "
            "rp.name, rp.duration, rp.action, rp.legal_basis, "
            f"(SELECT {tags_of} FROM catalog_dataset_tags dt "
            "JOIN catalog_tag t ON t.id = dt.tag_id WHERE dt.dataset_id = d.id), "
            f"(SELECT {owners_of} FROM catalog_datasetownership o "
            "JOIN catalog_owner w ON w.id = o.owner_id WHERE o.dataset_id = d.id) "
            "FROM catalog_dataset d JOIN catalog_namespace n ON n.id = d.namespace_id "
            "LEFT JOIN catalog_retentionpolicy rp ON rp.id = d.retention_policy_id "
            f"WHERE {where}",
            params,
        )
        where, params = where_in("f.dataset_id", chunk)
        if as_of is None:
            alive = "f.removed_at IS NULL"
        else:
            alive = field_existed_sql("f")
            params = [*params, *[_param(as_of)] * 4]
        if fields == "personal":
            if as_of is None:
                alive += f" AND ({PERSONAL_NOW})"
            else:
                alive += f" AND ({PERSONAL_NOW} OR {MAYBE_PERSONAL_THEN})"
                params = [*params, _param(as_of)]
        field_rows_ += _rows(
            "SELECT f.id, f.dataset_id, f.name, f.type, f.description, f.pii_category, "
            "sk.name, f.flag_source, "
            f"(SELECT {tags_of} FROM catalog_datasetfield_tags ft "
            "JOIN catalog_tag t ON t.id = ft.tag_id WHERE ft.datasetfield_id = f.id) "
            "FROM catalog_datasetfield f "
            "LEFT JOIN catalog_subjectkind sk ON sk.id = f.subject_kind_id "
            f"WHERE {where} AND {alive} ORDER BY f.dataset_id, f.ordinal, f.name",
            params,
        )
    by_dataset: dict[int, list[FieldInfo]] = defaultdict(list)
    for f_pk, ds_pk, name, ftype, desc, pii, kind, source, ftags in field_rows_:
        by_dataset[ds_pk].append(
            FieldInfo(f_pk, name, ftype, desc, pii, kind, source, _names(ftags))
        )
    found: dict[int, DatasetInfo] = {}
    for row in rows:
        pk = row[0]
        retention = RetentionInfo(row[14], _days(row[15]), row[16], row[17]) if row[14] else None
        found[pk] = DatasetInfo(
            pk=pk,
            namespace=row[1],
            name=row[2],
            description=row[3],
            platform=row[4],
            location=row[5],
            source_name=row[6],
            sensitivity=row[7],
            lifecycle_state=row[8],
            is_hidden=bool(row[9]),
            created_at=read_ts(row[10]),  # type: ignore[arg-type]
            updated_at=read_ts(row[11]),  # type: ignore[arg-type]
            first_seen=read_ts(row[12]),  # type: ignore[arg-type]
            last_seen=read_ts(row[13]),  # type: ignore[arg-type]
            fields=tuple(by_dataset.get(pk, ())),
            tags=_names(row[18]),
            owners=tuple(
                sorted(
                    (
                        OwnerInfo(name, otype, kind, email)
                        for name, kind, email, otype in _json(row[19])
                    ),
                    key=lambda o: (o.name, o.type),
                )
            ),
            retention=retention,
        )
    if as_of is not None:
        found = _rewind(found, as_of)
        if fields == "personal":
            found = {pk: replace(info, fields=info.pii_fields) for pk, info in found.items()}
    return found


# Fields flagged now, and (with the instant as a parameter) those that may have been
# flagged then: declared anew since, or ever flagged by propagation (a superset: their
# flags then are worked out after).
PERSONAL_NOW = "f.pii_category <> '' OR f.subject_kind_id IS NOT NULL"
MAYBE_PERSONAL_THEN = (
    "EXISTS (SELECT 1 FROM catalog_propagatedflag p WHERE p.field_id = f.id) "
    "OR EXISTS (SELECT 1 FROM catalog_changerecord c WHERE c.dataset_id = f.dataset_id "
    "AND c.field_name = f.name AND c.attribute IN ('pii_category', 'subject_kind') "
    "AND c.at > %s)"
)


# Where copied fields changed what they show without a row of theirs changing: their source
# was declared anew while the flag it propagated held (f: the copy, c: the declaration).
SOURCES_REDECLARED = (
    "FROM catalog_propagatedflag p "
    "JOIN catalog_datasetfield f ON f.id = p.field_id "
    "JOIN catalog_datasetfield s ON s.id = p.source_id "
    "JOIN catalog_changerecord c ON c.dataset_id = s.dataset_id AND c.field_name = s.name "
    "WHERE c.attribute IN ('pii_category', 'subject_kind') AND c.source <> 'propagation' "
    "AND c.at >= p.valid_from AND (p.valid_to IS NULL OR c.at < p.valid_to)"
)


# When a dataset's lifecycle may last have changed: for one ever dropped or renamed away,
# its last closing or its last sighting (which may have opened it again); NULL otherwise.
# A bound on catalog.queries.closing_versions, which tells the lifecycle at an instant.
LIFECYCLE_CHANGED = (
    "CASE WHEN dropped_at IS NULL THEN NULL WHEN last_seen > dropped_at THEN last_seen "
    "ELSE dropped_at END"
)


def changed_since(pks: list[int], as_of: datetime) -> set[int]:
    """Datasets whose shown data differed at ``as_of``: fields added or removed since,
    steward-edited attributes changed since, propagated flags that began or ended since,
    sources declared anew since while their flags held, or a lifecycle that may have
    changed since (one query)."""
    if not pks:
        return set()
    attributes = list(DATASET_ATTRIBUTES + FIELD_ATTRIBUTES)
    attr_marks = ", ".join(["%s"] * len(attributes))
    when = connection.ops.adapt_datetimefield_value(as_of)
    out: set[int] = set()
    for chunk in chunks(pks):
        fields_in, params = where_in("dataset_id", chunk)
        changes_in, more = where_in("dataset_id", chunk)
        ds_in, ds_params = where_in("id", chunk)
        args = [*params, when, when, *more, when, *attributes, *params, when, when, *params, when]
        rows = _rows(
            f"SELECT dataset_id FROM catalog_datasetfield WHERE {fields_in} "
            "AND (first_seen > %s OR removed_at > %s) "
            f"UNION SELECT dataset_id FROM catalog_changerecord WHERE {changes_in} "
            f"AND at > %s AND attribute IN ({attr_marks}) "
            "UNION SELECT f.dataset_id FROM catalog_propagatedflag p "
            f"JOIN catalog_datasetfield f ON f.id = p.field_id WHERE f.{fields_in} "
            "AND (p.valid_from > %s OR p.valid_to > %s) "
            f"UNION SELECT f.dataset_id {SOURCES_REDECLARED} AND f.{fields_in} AND c.at > %s "
            f"UNION SELECT id FROM catalog_dataset WHERE {ds_in} AND {LIFECYCLE_CHANGED} > %s "
            "UNION SELECT f.dataset_id FROM catalog_fieldgap g "
            f"JOIN catalog_datasetfield f ON f.id = g.field_id WHERE f.{fields_in} "
            "AND g.returned_at > %s",
            [*args, *ds_params, when, *params, when],
        )
        out.update(row[0] for row in rows)
    return out


def _rewind(found: dict[int, DatasetInfo], as_of: datetime) -> dict[int, DatasetInfo]:
    """Lifecycle, steward-edited attributes and personal-data flags as they were at
    ``as_of``."""
    closed = closed_datasets(as_of, found)
    found = {
        pk: replace(info, lifecycle_state=closed[pk][0] if pk in closed else LifecycleState.ACTIVE)
        for pk, info in found.items()
    }
    found = _rewind_edits(found, as_of)
    ever = _ever_flagged(found)
    flagged = [f.pk for info in found.values() for f in info.fields if f.pk in ever]
    if not flagged:
        return found
    flags = flags_as_of(flagged, as_of, named=False)
    out = {}
    for ds_pk, info in found.items():
        new_fields = tuple(
            replace(
                f,
                pii_category=flags[f.pk].pii,
                subject_kind=flags[f.pk].subject_kind,
                flag_source=flags[f.pk].source,
            )
            if f.pk in flags
            else f
            for f in info.fields
        )
        out[ds_pk] = replace(info, fields=new_fields)
    return out


def _ever_flagged(found: dict[int, DatasetInfo]) -> set[int]:
    """Fields of these datasets that propagation ever flagged: their flags then come from
    catalog.flags, which knows propagated flags as of any instant."""
    ids = sorted(f.pk for info in found.values() for f in info.fields)
    out: set[int] = set()
    for chunk in chunks(ids):
        where, params = where_in("field_id", chunk)
        out.update(
            row[0]
            for row in _rows(
                f"SELECT DISTINCT field_id FROM catalog_propagatedflag WHERE {where}", params
            )
        )
    return out


def _rewind_edits(found: dict[int, DatasetInfo], as_of: datetime) -> dict[int, DatasetInfo]:
    """Steward-edited attributes as they were at ``as_of``, by the catalog's history rule
    (catalog.queries.value_as_of) for those changed since: the ``new`` of the last change
    by then, else the ``old`` of the first change after. (A history whose records do not
    chain, as two merged datasets' do, needs both.)"""
    first_after: dict[tuple[int, str, str], Any] = {}
    for chunk in chunks(sorted(found)):
        for ds_pk, field_name, attribute, old in (
            ChangeRecord.objects.filter(
                dataset_id__any_of=chunk,
                at__gt=as_of,
                attribute__in=DATASET_ATTRIBUTES + FIELD_ATTRIBUTES,
            )
            .order_by("at", "id")
            .values_list("dataset_id", "field_name", "attribute", "old")
        ):
            first_after.setdefault((ds_pk, field_name, attribute), old)
    if not first_after:
        return found
    for chunk in chunks(sorted({pk for pk, _, _ in first_after})):
        for ds_pk, field_name, attribute, new in (
            ChangeRecord.objects.filter(
                dataset_id__any_of=chunk,
                at__lte=as_of,
                field_name__in=sorted({name for _, name, _ in first_after}),
                attribute__in=sorted({attribute for _, _, attribute in first_after}),
            )
            .order_by("at", "id")
            .values_list("dataset_id", "field_name", "attribute", "new")
        ):
            if (ds_pk, field_name, attribute) in first_after:
                first_after[(ds_pk, field_name, attribute)] = new
    policy_names = {
        value
        for (_, field_name, attribute), value in first_after.items()
        if attribute == "retention_policy" and not field_name and value
    }
    policies = {
        p.name: RetentionInfo(p.name, p.duration_days, p.action, p.legal_basis)
        for p in RetentionPolicy.objects.filter(name__in=policy_names)
    }
    # The history keeps an owner's name and type of ownership; who the owner is (a team or
    # a person) and how to reach them are the owner's own, as they are now.
    owner_names = {
        o.get("name", "")
        for (_, field_name, attribute), value in first_after.items()
        if attribute == "owners" and not field_name
        for o in value or ()
    }
    contacts = {
        name: (kind, email)
        for name, kind, email in Owner.objects.filter(name__in=owner_names).values_list(
            "name", "kind", "email"
        )
    }
    out = dict(found)
    for ds_pk, info in found.items():
        changes = {
            (field_name, attribute): old
            for (pk, field_name, attribute), old in first_after.items()
            if pk == ds_pk
        }
        if not changes:
            continue
        updates: dict[str, Any] = {}
        for attribute in ("description", "sensitivity"):
            if ("", attribute) in changes:
                updates[attribute] = changes[("", attribute)] or ""
        if ("", "retention_policy") in changes:
            name = changes[("", "retention_policy")]
            updates["retention"] = (
                policies.get(name, RetentionInfo(name, None, "")) if name else None
            )
        if ("", "owners") in changes:
            updates["owners"] = tuple(
                OwnerInfo(
                    o.get("name", ""),
                    o.get("type", ""),
                    *contacts.get(o.get("name", ""), ("", "")),
                )
                for o in changes[("", "owners")] or ()
            )
        if ("", "tags") in changes:
            updates["tags"] = tuple(sorted(changes[("", "tags")] or ()))
        new_fields = []
        for f in info.fields:
            field_updates: dict[str, Any] = {
                attribute: _field_value(attribute, old)
                for (field_name, attribute), old in changes.items()
                if field_name == f.name and attribute in FIELD_SHOWN
            }
            new_fields.append(replace(f, **field_updates) if field_updates else f)
        updates["fields"] = tuple(new_fields)
        out[ds_pk] = replace(info, **updates)
    return out


# The steward-edited attributes of a field that lineage answers show (FieldInfo holds them).
FIELD_SHOWN = frozenset(FIELD_ATTRIBUTES) & {f.name for f in fields(FieldInfo)}


def _field_value(attribute: str, recorded: Any) -> Any:
    """A field's attribute as FieldInfo holds it, from a history record's value."""
    if attribute == "subject_kind":
        return recorded
    if attribute == "tags":
        return tuple(sorted(recorded or ()))
    return recorded or ""


def _load_names(table: str, pks: Iterable[int]) -> dict[int, tuple[str, str]]:
    """(namespace, name) of each pk of ``table`` (catalog_dataset or graph_job)."""
    out: dict[int, tuple[str, str]] = {}
    for chunk in chunks(sorted({int(pk) for pk in pks})):
        where, params = where_in("t.id", chunk)
        for pk, ns, name in _rows(
            f"SELECT t.id, n.name, t.name FROM {table} t "
            f"JOIN catalog_namespace n ON n.id = t.namespace_id WHERE {where}",
            params,
        ):
            out[pk] = (ns, name)
    return out


def load_dataset_names(pks: Iterable[int]) -> dict[int, tuple[str, str]]:
    """(namespace, name) of each dataset pk, in one query."""
    return _load_names("catalog_dataset", pks)


def load_job_names(pks: Iterable[int]) -> dict[int, tuple[str, str]]:
    return _load_names("graph_job", pks)


def load_jobs(pks: Iterable[int], as_of: datetime | None = None) -> dict[int, JobInfo]:
    """Jobs by pk with their latest run (as of ``as_of``: _latest_run_join), one query
    whatever the number of jobs."""
    out: dict[int, JobInfo] = {}
    for chunk in chunks(sorted({int(pk) for pk in pks})):
        where, params = where_in("j.id", chunk)
        run_join, run_params = _latest_run_join(as_of)
        params = [*run_params, *params]
        for row in _rows(
            "SELECT j.id, n.name, j.name, j.job_type, j.processing_type, j.integration, "
            f"j.description, j.location, {ts_sql('j.created_at')}, "
            f"{ts_sql('j.updated_at')}, p.name, {_run_columns()} "
            "FROM graph_job j JOIN catalog_namespace n ON n.id = j.namespace_id "
            f"LEFT JOIN graph_job p ON p.id = j.parent_id LEFT {run_join} WHERE {where}",
            params,
        ):
            out[row[0]] = JobInfo(
                pk=row[0],
                namespace=row[1],
                name=row[2],
                job_type=row[3],
                processing_type=row[4],
                integration=row[5],
                description=row[6],
                location=row[7],
                created_at=read_ts(row[8]),  # type: ignore[arg-type]
                updated_at=read_ts(row[9]),  # type: ignore[arg-type]
                parent_name=row[10],
                latest_run=_run_of(row[11:], as_of),
            )
    return out


def _latest_run_join(as_of: datetime | None) -> tuple[str, list[Any]]:
    """``JOIN graph_run r`` on each job ``j``'s latest run, and its parameters.

    Ingestion keeps the run with the newest state event (graph.actions._run_time_key). As
    of an instant it is the same rule seen from then, where a run's key is its state
    event's time if that came by then, else its creation: the latest run of now once its
    key came by then; else, of the run with the newest state event by then and the run
    created last by then (one index probe each), the one with the newer key. No other run
    can have a newer one: a run still unsettled then was created no later than the last
    created, and a settled one's event came no later than the newest."""
    if as_of is None:
        return "JOIN graph_run r ON r.id = j.latest_run_id", []
    key = "CASE WHEN c.state_event_time <= %s THEN c.state_event_time ELSE c.created_at END"
    return (
        "JOIN graph_run r ON r.id = CASE WHEN EXISTS (SELECT 1 FROM graph_run l "
        "WHERE l.id = j.latest_run_id AND COALESCE(l.state_event_time, l.created_at) "
        "<= %s) THEN j.latest_run_id ELSE (SELECT c.id FROM graph_run c WHERE c.id IN ("
        "(SELECT s.id FROM graph_run s WHERE s.job_id = j.id AND s.state_event_time <= %s "
        "ORDER BY s.state_event_time DESC, s.run_uuid DESC LIMIT 1), "
        "(SELECT m.id FROM graph_run m WHERE m.job_id = j.id AND m.created_at <= %s "
        "ORDER BY m.created_at DESC, m.run_uuid DESC LIMIT 1)) "
        f"ORDER BY {key} DESC, c.run_uuid DESC LIMIT 1) END"
    ), [_param(as_of)] * 4


def _run_columns() -> str:
    """A run's columns as :func:`_run_of` takes them (``r``: the run of _latest_run_join)."""
    return (
        f"r.run_uuid, r.state, {ts_sql('r.started_at')}, {ts_sql('r.ended_at')}, "
        f"r.error_message, {ts_sql('r.state_event_time')}"
    )


def _run_of(row: Sequence[Any], as_of: datetime | None) -> RunInfo | None:
    """The run of _run_columns' values (None when there is none)."""
    uuid, state, started, ended, error, state_at = row
    if uuid is None:
        return None
    return run_info(uuid, state, read_ts(started), read_ts(ended), error, read_ts(state_at), as_of)


def latest_runs(pks: Iterable[int], as_of: datetime | None = None) -> dict[int, RunInfo]:
    """Each job's latest run (as of ``as_of``: _latest_run_join, seen from then), one
    query."""
    out: dict[int, RunInfo] = {}
    for chunk in chunks(sorted({int(pk) for pk in pks})):
        where, params = where_in("j.id", chunk)
        run_join, run_params = _latest_run_join(as_of)
        for pk, *run in _rows(
            f"SELECT j.id, {_run_columns()} FROM graph_job j {run_join} WHERE {where}",
            [*run_params, *params],
        ):
            if (found := _run_of(run, as_of)) is not None:
                out[pk] = found
    return out


def run_info(
    uuid: Any,
    state: str,
    started: datetime | None,
    ended: datetime | None,
    error: str,
    state_at: datetime | None,
    as_of: datetime | None,
) -> RunInfo:
    """A run as seen from ``as_of`` (now when None)."""
    if as_of is not None:
        # Seen from as_of, a run whose outcome came later was still running: its state's
        # time says when the outcome came, or (without one) its end.
        outcome = state_at if state_at is not None else ended
        if ended is not None and ended > as_of:
            ended = None
        if outcome is not None and outcome > as_of and state in TERMINAL_RUN_STATES:
            state, error = RunState.RUNNING, ""
    # SQLite keeps a uuid as 32 hex digits: shown as everywhere else.
    return RunInfo(str(UUID(str(uuid))), state, started, ended, error)


def edge_descriptions(edge_ids: Iterable[int]) -> dict[int, str]:
    """The transformation description of each column edge that has one."""
    out: dict[int, str] = {}
    for chunk in chunks(sorted({int(pk) for pk in edge_ids})):
        where, params = where_in("e.id", chunk)
        out.update(
            _rows(
                f"SELECT e.id, e.description FROM graph_columnedge e WHERE {where} "
                "AND e.description <> ''",
                params,
            )
        )
    return out


def field_rows(pks: Iterable[int]) -> dict[int, FieldRow]:
    """(dataset pk, namespace, dataset name, field name, type, subject kind) per field pk."""
    out: dict[int, FieldRow] = {}
    for chunk in chunks(sorted({int(pk) for pk in pks})):
        where, params = where_in("f.id", chunk)
        for pk, ds_pk, ns, ds, name, ftype, kind in _rows(
            "SELECT f.id, f.dataset_id, n.name, d.name, f.name, f.type, sk.name "
            "FROM catalog_datasetfield f JOIN catalog_dataset d ON d.id = f.dataset_id "
            "JOIN catalog_namespace n ON n.id = d.namespace_id "
            "LEFT JOIN catalog_subjectkind sk ON sk.id = f.subject_kind_id "
            f"WHERE {where}",
            params,
        ):
            out[pk] = (ds_pk, ns, ds, name, ftype, kind)
    return out
