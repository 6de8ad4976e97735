"""Reads of the catalog, including the catalog as it was at a past instant."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Exists, Max, OuterRef, Prefetch, Q, QuerySet

from catalog import naming
from catalog.actions import owners_value, tags_value
from catalog.flags import NO_FLAG, FieldFlag, field_flags
from catalog.models import (
    NEWEST_VERSION_FIRST,
    ChangeRecord,
    ChangeSource,
    Dataset,
    DatasetAlias,
    DatasetField,
    DatasetOwnership,
    DatasetVersion,
    FieldGap,
    LifecycleState,
    Namespace,
)
from graph.models import Direction, RunDataset

CHUNK = 5000

DATASET_ATTRIBUTES = ("description", "sensitivity", "retention_policy", "owners", "tags")
FIELD_ATTRIBUTES = ("pii_category", "subject_kind", "sensitivity", "description", "tags")


def datasets_with_details() -> QuerySet[Dataset]:
    """Datasets with everything a list or detail view shows, in a fixed number of queries."""
    return Dataset.objects.select_related("namespace", "retention_policy").prefetch_related(
        Prefetch(
            "ownerships",
            queryset=DatasetOwnership.objects.select_related("owner").order_by("owner__name"),
        ),
        "tags",
        Prefetch("aliases", queryset=DatasetAlias.objects.select_related("namespace")),
        Prefetch(
            "fields",
            queryset=DatasetField.objects.select_related("subject_kind").prefetch_related("tags"),
        ),
    )


def get_dataset(namespace: str, name: str, rows: QuerySet[Dataset] | None = None) -> Dataset | None:
    """The dataset of this name, in any spelling of it (catalog.naming), or of one of its
    aliases; of ``rows`` (by default with every detail a page shows)."""
    namespace, name = naming.canonical(namespace, name)
    rows = datasets_with_details() if rows is None else rows
    found = rows.filter(namespace__name=namespace, name=name).first()
    if found is None:
        pk = aliased_dataset(namespace, name)
        found = None if pk is None else rows.filter(pk=pk).first()
    return found


def aliased_dataset(namespace: str, name: str) -> int | None:
    """The id of the dataset this canonical name is an alias of, if it is one."""
    return (
        DatasetAlias.objects.filter(namespace__name=namespace, name=name)
        .values_list("dataset_id", flat=True)
        .first()
    )


def get_namespace(name: str) -> Namespace | None:
    return Namespace.objects.filter(name=naming.canonical_namespace(name)).first()


def latest_versions(
    dataset: Dataset, limit: int = 50, as_of: datetime | None = None
) -> list[DatasetVersion]:
    versions = dataset.versions.all()
    if as_of is not None:
        versions = versions.filter(created_at__lte=as_of)
    return list(versions.order_by(*NEWEST_VERSION_FIRST)[:limit])


def field_existed_sql(field: str) -> str:
    """SQL telling whether the field row ``field`` (a table or its alias) existed at an
    instant, given four times as parameters: seen by then, not removed by then, and not in
    one of its gaps (FieldGap)."""
    return (
        f"{field}.first_seen <= %s AND ({field}.removed_at IS NULL OR {field}.removed_at > %s) "
        f"AND NOT EXISTS (SELECT 1 FROM catalog_fieldgap g WHERE g.field_id = {field}.id "
        "AND g.removed_at <= %s AND g.returned_at > %s)"
    )


def field_existed(at: datetime) -> Q:
    """The fields that existed at ``at`` (field_existed_sql, for querysets)."""
    gap = FieldGap.objects.filter(field_id=OuterRef("pk"), removed_at__lte=at, returned_at__gt=at)
    return (
        Q(first_seen__lte=at)
        & (Q(removed_at__isnull=True) | Q(removed_at__gt=at))
        & Q(~Exists(gap))
    )


def version_as_of(dataset: Dataset, as_of: datetime) -> DatasetVersion | None:
    """The version in force at ``as_of``."""
    return dataset.versions.filter(created_at__lte=as_of).order_by(*NEWEST_VERSION_FIRST).first()


# What the history's filter shows: edits by people (stewards, catalog imports), what
# lineage and propagation recorded, or everything.
HISTORY_SOURCES: dict[str, tuple[str, ...]] = {
    "people": (ChangeSource.STEWARD, ChangeSource.IMPORT),
    "lineage": (ChangeSource.LINEAGE, ChangeSource.PROPAGATION),
    "all": tuple(ChangeSource.values),
}


def history(
    dataset: Dataset, limit: int = 100, show: str = "all", as_of: datetime | None = None
) -> list[ChangeRecord]:
    """The dataset's change records, newest first: those of ``show``'s sources, and only
    those made by ``as_of`` when given."""
    records = dataset.changes.filter(source__in=HISTORY_SOURCES[show])
    if as_of is not None:
        records = records.filter(at__lte=as_of)
    return list(records.select_related("actor").order_by("-at", "-id")[:limit])


def value_as_of(records: list[ChangeRecord], as_of: datetime, current: Any) -> Any:
    """The value an attribute had at ``as_of``, given its change records in time order.

    The last record at or before ``as_of`` gives its ``new``; failing that the
    first record after gives its ``old``; with no records the value never changed.
    """
    before = [r for r in records if r.at <= as_of]
    if before:
        return before[-1].new
    if records:
        return records[0].old
    return current


# How lineage records that a dataset went away (a schema version with this lifecycle),
# and the dataset's state while it stays away.
CLOSED_STATES = {"DROP": LifecycleState.DROPPED, "RENAMED": LifecycleState.RENAMED}


def _sightings() -> tuple[QuerySet[RunDataset], QuerySet[ChangeRecord]]:
    """Runs reading or writing a dataset, and lifecycle events other than a closing: what,
    with a schema version, says a dataset is there (closing_versions, last_sightings)."""
    declared = ChangeRecord.objects.filter(
        field_name="", attribute="lifecycle", source=ChangeSource.LINEAGE
    )
    for closing in CLOSED_STATES:
        declared = declared.exclude(new=closing)
    # Both directions named: the (dataset, direction, -event_time) index serves it.
    runs = RunDataset.objects.filter(direction__in=[Direction.INPUT, Direction.OUTPUT])
    return runs, declared


def closing_versions(as_of: datetime) -> QuerySet[DatasetVersion]:
    """The schema versions that keep datasets dropped or renamed away at ``as_of``.

    The last schema version by then closed the dataset, and after that, up to then, no run
    read or wrote it and no lifecycle event other than a closing named it. Only a dataset
    closed at some time can be (its ``dropped_at`` is set); a dataset dropped and written
    again is closed only in between. Metadata alone (a dataset event with documentation,
    say) does not bring it back, as ingestion's current state has it (ingest.normalizer).
    """
    later = DatasetVersion.objects.filter(
        dataset=OuterRef("dataset"), created_at__gt=OuterRef("created_at"), created_at__lte=as_of
    )
    runs, declared = _sightings()
    seen = runs.filter(
        dataset=OuterRef("dataset"), event_time__gt=OuterRef("created_at"), event_time__lte=as_of
    )
    declared = declared.filter(
        dataset=OuterRef("dataset"), at__gt=OuterRef("created_at"), at__lte=as_of
    )
    return (
        DatasetVersion.objects.filter(
            dataset__dropped_at__isnull=False,
            lifecycle_state__in=CLOSED_STATES,
            created_at__lte=as_of,
        )
        .exclude(Exists(later))
        .exclude(Exists(seen))
        .exclude(Exists(declared))
        .order_by()
    )


def last_sightings(pks: Iterable[int]) -> dict[int, datetime]:
    """The last instant each of these datasets was seen to be there, as closing_versions
    counts it: a run reading or writing it, a schema version or a lifecycle event other
    than a closing."""
    wanted = sorted({int(pk) for pk in pks})
    out: dict[int, datetime] = {}
    runs, declared = _sightings()
    versions = DatasetVersion.objects.exclude(lifecycle_state__in=CLOSED_STATES)
    for start in range(0, len(wanted), CHUNK):
        chunk = wanted[start : start + CHUNK]
        for rows, stamp in ((runs, "event_time"), (versions, "created_at"), (declared, "at")):
            for pk, at in (
                rows.filter(dataset_id__in=chunk)
                .values("dataset_id")
                .annotate(at=Max(stamp))
                .values_list("dataset_id", "at")
            ):
                if at is not None and (pk not in out or at > out[pk]):
                    out[pk] = at
    return out


def closed_datasets(
    as_of: datetime, among: Iterable[int] | None = None
) -> dict[int, tuple[LifecycleState, datetime]]:
    """Datasets dropped or renamed away at ``as_of`` (of ``among``, when given), with that
    state and since when (closing_versions)."""
    closing = closing_versions(as_of)
    wanted = None if among is None else sorted({int(pk) for pk in among})
    out: dict[int, tuple[LifecycleState, datetime]] = {}
    for start in range(0, 1 if wanted is None else len(wanted), CHUNK):
        rows = (
            closing
            if wanted is None
            else closing.filter(dataset_id__any_of=wanted[start : start + CHUNK])
        )
        for pk, kind, since in rows.values_list("dataset_id", "lifecycle_state", "created_at"):
            out[pk] = (CLOSED_STATES[kind], since)
    return out


def lifecycle_as_of(dataset: Dataset, as_of: datetime) -> tuple[str, datetime | None]:
    """ "Active", "Dropped" or "Renamed" at ``as_of`` and since when (see closed_datasets)."""
    state, since = closed_datasets(as_of, [dataset.pk]).get(dataset.pk, (None, None))
    return ("Active", None) if state is None else (state.label, since)


def dataset_lifecycle(dataset: Dataset, as_of: datetime | None) -> tuple[str, datetime | None]:
    """The dataset's lifecycle now or as of an instant ("Not yet seen" before it existed)."""
    if as_of is None:
        closed = dataset.lifecycle_state != LifecycleState.ACTIVE
        return dataset.get_lifecycle_state_display(), dataset.dropped_at if closed else None
    if dataset.first_seen > as_of:
        return "Not yet seen", None
    return lifecycle_as_of(dataset, as_of)


@dataclass
class FieldState:
    name: str
    type: str
    description: str
    flag: FieldFlag
    sensitivity: str
    tags: list[str] = field(default_factory=list)

    @property
    def pii_category(self) -> str:
        return self.flag.pii

    @property
    def subject_kind(self) -> str | None:
        return self.flag.subject_kind


@dataclass
class DatasetState:
    """A dataset's steward-visible attributes at one instant."""

    description: str
    sensitivity: str
    retention_policy: str | None
    owners: list[dict[str, str]]
    tags: list[str]
    fields: list[FieldState] = field(default_factory=list)
    exists: bool = True
    lifecycle: str = "Active"
    lifecycle_since: datetime | None = None

    @property
    def pii_count(self) -> int:
        return sum(1 for f in self.fields if f.pii_category or f.subject_kind)

    @property
    def subject_count(self) -> int:
        return sum(1 for f in self.fields if f.subject_kind)


def dataset_state_as_of(dataset: Dataset, as_of: datetime) -> DatasetState:
    """The dataset as it was at ``as_of``: attributes from history, fields from schema versions."""
    by_key: dict[tuple[str, str], list[ChangeRecord]] = defaultdict(list)
    for record in dataset.changes.order_by("at", "id"):
        by_key[(record.field_name, record.attribute)].append(record)

    def attr(name: str, current: Any, field_name: str = "") -> Any:
        return value_as_of(by_key.get((field_name, name), []), as_of, current)

    state = DatasetState(
        description=attr("description", dataset.description),
        sensitivity=attr("sensitivity", dataset.sensitivity),
        retention_policy=attr(
            "retention_policy",
            dataset.retention_policy.name if dataset.retention_policy else None,
        ),
        owners=attr("owners", owners_value(dataset)),
        tags=attr("tags", tags_value(dataset)),
        exists=dataset.first_seen <= as_of,
    )
    if not state.exists:
        return state
    state.lifecycle, state.lifecycle_since = lifecycle_as_of(dataset, as_of)
    version = version_as_of(dataset, as_of)
    current_fields = {
        f.name: f for f in dataset.fields.select_related("subject_kind").prefetch_related("tags")
    }
    if version is not None:
        schema = version.fields
    elif dataset.versions.exists():
        schema = []  # its first schema came later: none known at that instant
    else:
        schema = [{"name": f.name, "type": f.type} for f in current_fields.values()]
    flags = field_flags(list(current_fields.values()), as_of)
    for item in schema:
        name = item["name"]
        live = current_fields.get(name)
        state.fields.append(
            FieldState(
                name=name,
                type=item.get("type") or "",
                description=attr("description", live.description if live else "", name),
                flag=flags[live.pk] if live else NO_FLAG,
                sensitivity=attr("sensitivity", live.sensitivity if live else "", name),
                tags=attr("tags", sorted(t.name for t in live.tags.all()) if live else [], name)
                or [],
            )
        )
    return state
