"""What a lineage answer shows about each node: datasets with fields, owners, PII and
retention; jobs with their latest run. Loaded in bulk, a fixed number of queries
per answer whatever its size, optionally as of a past instant.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.db.models import OuterRef, Q, Subquery

from catalog.models import (
    ChangeRecord,
    Dataset,
    DatasetField,
    DatasetOwnership,
    RetentionPolicy,
)
from graph.models import Job, Run, RunState
from graph.nodeids import dataset_node_id, field_node_id, job_node_id

# Chunk IN lists so SQLite's variable limit is never reached.
CHUNK = 5000


@dataclass(frozen=True, slots=True)
class FieldInfo:
    pk: int
    name: str
    type: str
    description: str
    pii_category: str
    subject_kind: str | None
    flag_source: str
    sensitivity: str
    tags: tuple[str, ...] = ()

    @property
    def is_personal(self) -> bool:
        return bool(self.pii_category) or self.subject_kind is not None


@dataclass(frozen=True, slots=True)
class OwnerInfo:
    name: str
    type: str = ""
    kind: str = ""
    email: str = ""


@dataclass(frozen=True, slots=True)
class RetentionInfo:
    name: str
    duration_days: int | None
    action: str
    legal_basis: str = ""


@dataclass(frozen=True, slots=True)
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
    dropped_at: datetime | None
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

    def field_node_id(self, field: str) -> str:
        return field_node_id(self.namespace, self.name, field)


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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


def _chunks(values: Sequence[int]) -> Iterable[list[int]]:
    for start in range(0, len(values), CHUNK):
        yield list(values[start : start + CHUNK])


def _days(duration: Any) -> int | None:
    if duration is None:
        return None
    if isinstance(duration, timedelta):
        return duration // timedelta(days=1)
    return int(duration) // (86_400 * 1_000_000)


def load_datasets(pks: Iterable[int], as_of: datetime | None = None) -> dict[int, DatasetInfo]:
    """Datasets by pk with fields, tags, owners and retention (at ``as_of`` when given).

    Five queries (six with ``as_of``) for any number of datasets.
    """
    wanted = sorted({int(pk) for pk in pks})
    if not wanted:
        return {}
    rows: list[tuple[Any, ...]] = []
    fields: dict[int, list[FieldInfo]] = defaultdict(list)
    field_tags: dict[int, list[str]] = defaultdict(list)
    tags: dict[int, list[str]] = defaultdict(list)
    owners: dict[int, list[OwnerInfo]] = defaultdict(list)
    field_rows: list[tuple[Any, ...]] = []
    for chunk in _chunks(wanted):
        rows += Dataset.objects.filter(pk__in=chunk).values_list(
            "pk",
            "namespace__name",
            "name",
            "description",
            "platform",
            "location",
            "source_name",
            "sensitivity",
            "lifecycle_state",
            "is_hidden",
            "created_at",
            "updated_at",
            "first_seen",
            "last_seen",
            "dropped_at",
            "retention_policy__name",
            "retention_policy__duration",
            "retention_policy__action",
            "retention_policy__legal_basis",
        )
        field_filter = Q(dataset_id__in=chunk)
        if as_of is not None:
            field_filter &= Q(first_seen__lte=as_of) & (
                Q(removed_at__isnull=True) | Q(removed_at__gt=as_of)
            )
        else:
            field_filter &= Q(removed_at__isnull=True)
        field_rows += (
            DatasetField.objects.filter(field_filter)
            .order_by("dataset_id", "ordinal", "name")
            .values_list(
                "pk",
                "dataset_id",
                "name",
                "type",
                "description",
                "pii_category",
                "subject_kind__name",
                "flag_source",
                "sensitivity",
            )
        )
        for field_pk, tag in DatasetField.tags.through.objects.filter(
            datasetfield__dataset_id__in=chunk
        ).values_list("datasetfield_id", "tag__name"):
            field_tags[field_pk].append(tag)
        for ds_pk, tag in Dataset.tags.through.objects.filter(dataset_id__in=chunk).values_list(
            "dataset_id", "tag__name"
        ):
            tags[ds_pk].append(tag)
        for ds_pk, name, kind, email, otype in (
            DatasetOwnership.objects.filter(dataset_id__in=chunk)
            .order_by("owner__name", "ownership_type")
            .values_list(
                "dataset_id", "owner__name", "owner__kind", "owner__email", "ownership_type"
            )
        ):
            owners[ds_pk].append(OwnerInfo(name, otype, kind, email))
    for f_pk, ds_pk, name, ftype, desc, pii, kind, source, sens in field_rows:
        fields[ds_pk].append(
            FieldInfo(
                f_pk,
                name,
                ftype,
                desc,
                pii,
                kind,
                source,
                sens,
                tuple(sorted(field_tags.get(f_pk, ()))),
            )
        )
    found: dict[int, DatasetInfo] = {}
    for row in rows:
        pk = row[0]
        retention = RetentionInfo(row[15], _days(row[16]), row[17], row[18]) if row[15] else None
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
            created_at=row[10],
            updated_at=row[11],
            first_seen=row[12],
            last_seen=row[13],
            dropped_at=row[14],
            fields=tuple(fields.get(pk, ())),
            tags=tuple(sorted(tags.get(pk, ()))),
            owners=tuple(owners.get(pk, ())),
            retention=retention,
        )
    if as_of is not None:
        found = _rewind(found, as_of)
    return found


DATASET_ATTRIBUTES = ("description", "sensitivity", "retention_policy", "owners", "tags")
FIELD_ATTRIBUTES = ("pii_category", "subject_kind", "sensitivity", "description")


def _rewind(found: dict[int, DatasetInfo], as_of: datetime) -> dict[int, DatasetInfo]:
    """Steward-edited attributes as they were at ``as_of``.

    An attribute's value at t is the ``old`` of its first change after t (the
    catalog's history rule), so one query over changes after t is enough.
    """
    first_after: dict[tuple[int, str, str], Any] = {}
    for chunk in _chunks(sorted(found)):
        for ds_pk, field_name, attribute, old in (
            ChangeRecord.objects.filter(
                dataset_id__in=chunk,
                at__gt=as_of,
                attribute__in=DATASET_ATTRIBUTES + FIELD_ATTRIBUTES,
            )
            .order_by("at", "id")
            .values_list("dataset_id", "field_name", "attribute", "old")
        ):
            first_after.setdefault((ds_pk, field_name, attribute), old)
    if not first_after:
        return found
    policy_names = {
        value
        for (_, field_name, attribute), value in first_after.items()
        if attribute == "retention_policy" and not field_name and value
    }
    policies = {
        p.name: RetentionInfo(p.name, p.duration_days, p.action, p.legal_basis)
        for p in RetentionPolicy.objects.filter(name__in=policy_names)
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
                OwnerInfo(o.get("name", ""), o.get("type", "")) for o in changes[("", "owners")]
            )
        if ("", "tags") in changes:
            updates["tags"] = tuple(sorted(changes[("", "tags")] or ()))
        new_fields = []
        for f in info.fields:
            field_updates: dict[str, Any] = {
                attribute: (old or "" if attribute != "subject_kind" else old)
                for (field_name, attribute), old in changes.items()
                if field_name == f.name
            }
            new_fields.append(replace(f, **field_updates) if field_updates else f)
        updates["fields"] = tuple(new_fields)
        out[ds_pk] = replace(info, **updates)
    return out


def load_dataset_names(pks: Iterable[int]) -> dict[int, tuple[str, str]]:
    """(namespace, name) of each dataset pk, in one query."""
    wanted = sorted({int(pk) for pk in pks})
    out: dict[int, tuple[str, str]] = {}
    for chunk in _chunks(wanted):
        for pk, ns, name in Dataset.objects.filter(pk__in=chunk).values_list(
            "pk", "namespace__name", "name"
        ):
            out[pk] = (ns, name)
    return out


def load_job_names(pks: Iterable[int]) -> dict[int, tuple[str, str]]:
    wanted = sorted({int(pk) for pk in pks})
    out: dict[int, tuple[str, str]] = {}
    for chunk in _chunks(wanted):
        for pk, ns, name in Job.objects.filter(pk__in=chunk).values_list(
            "pk", "namespace__name", "name"
        ):
            out[pk] = (ns, name)
    return out


def load_jobs(pks: Iterable[int], as_of: datetime | None = None) -> dict[int, JobInfo]:
    """Jobs by pk with their latest run (the latest that had started by ``as_of``).

    One query now; two with ``as_of``.
    """
    wanted = sorted({int(pk) for pk in pks})
    out: dict[int, JobInfo] = {}
    for chunk in _chunks(wanted):
        qs = Job.objects.filter(pk__in=chunk)
        rows: list[tuple[Any, ...]]
        if as_of is None:
            rows = list(
                qs.values_list(
                    "pk",
                    "namespace__name",
                    "name",
                    "job_type",
                    "processing_type",
                    "integration",
                    "description",
                    "location",
                    "created_at",
                    "updated_at",
                    "parent__name",
                    "latest_run__run_uuid",
                    "latest_run__state",
                    "latest_run__started_at",
                    "latest_run__ended_at",
                    "latest_run__error_message",
                    "latest_run__state_event_time",
                )
            )
        else:
            latest = (
                Run.objects.filter(job_id=OuterRef("pk"), created_at__lte=as_of)
                .order_by("-created_at", "-id")
                .values("pk")[:1]
            )
            rows = list(
                qs.annotate(run_pk=Subquery(latest)).values_list(
                    "pk",
                    "namespace__name",
                    "name",
                    "job_type",
                    "processing_type",
                    "integration",
                    "description",
                    "location",
                    "created_at",
                    "updated_at",
                    "parent__name",
                    "run_pk",
                )
            )
        runs: dict[int, RunInfo] = {}
        if as_of is not None:
            run_pks = [row[11] for row in rows if row[11] is not None]
            for pk, uuid, state, started, ended, error, state_at in Run.objects.filter(
                pk__in=run_pks
            ).values_list(
                "pk",
                "run_uuid",
                "state",
                "started_at",
                "ended_at",
                "error_message",
                "state_event_time",
            ):
                runs[pk] = _run_info(uuid, state, started, ended, error, state_at, as_of)
        for row in rows:
            if as_of is None:
                run = (
                    _run_info(row[11], row[12], row[13], row[14], row[15], row[16], None)
                    if row[11] is not None
                    else None
                )
            else:
                run = runs.get(row[11]) if row[11] is not None else None
            out[row[0]] = JobInfo(
                pk=row[0],
                namespace=row[1],
                name=row[2],
                job_type=row[3],
                processing_type=row[4],
                integration=row[5],
                description=row[6],
                location=row[7],
                created_at=row[8],
                updated_at=row[9],
                parent_name=row[10],
                latest_run=run,
            )
    return out


def _run_info(
    uuid: Any,
    state: str,
    started: datetime | None,
    ended: datetime | None,
    error: str,
    state_at: datetime | None,
    as_of: datetime | None,
) -> RunInfo:
    if as_of is not None:
        # Seen from as_of, a run whose outcome came later was still running.
        if ended is not None and ended > as_of:
            ended = None
        if (
            state_at is not None
            and state_at > as_of
            and state
            in (
                RunState.COMPLETED,
                RunState.FAILED,
                RunState.ABORTED,
            )
        ):
            state, error = RunState.RUNNING, ""
    return RunInfo(str(uuid), state, started, ended, error)


def field_rows(pks: Iterable[int]) -> dict[int, tuple[int, str, str, str, str, str | None]]:
    """(dataset pk, namespace, dataset name, field name, type, subject kind) per field pk."""
    wanted = sorted({int(pk) for pk in pks})
    out: dict[int, tuple[int, str, str, str, str, str | None]] = {}
    for chunk in _chunks(wanted):
        for pk, ds_pk, ns, ds, name, ftype, kind in DatasetField.objects.filter(
            pk__in=chunk
        ).values_list(
            "pk",
            "dataset_id",
            "dataset__namespace__name",
            "dataset__name",
            "name",
            "type",
            "subject_kind__name",
        ):
            out[pk] = (ds_pk, ns, ds, name, ftype, kind)
    return out
