"""Reads for subject search: which datasets hold (or were fed by) one data subject's data.

A search starts from the fields *declared* as identifying the subject kind
(as of the instant asked for) and follows column lineage downstream:

* ``direct``: the dataset has such a declared field;
* ``derived``: a field is reached through DIRECT IDENTITY / TRANSFORMATION
  edges only (masked or not: a pseudonym is still personal data), so rows stay
  tied to the subject;
* ``aggregate``: reached only through AGGREGATION or INDIRECT edges — the
  subject contributed, but no row is theirs.

The traversal is the graph engine's ``field_reach`` (graph/queries.py): per
reached field, the path whose weakest transformation is strongest. Each
dataset carries that path (field by field, job by job) as its evidence.
Dataset-level INDIRECT edges (a filter or join key shaping a whole output)
mark the output as ``aggregate`` and stop there: following every field of
that output would call everything downstream of a join "personal".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet

from catalog.auth import SEARCH_SUBJECTS, VIEW_AUDIT, has_perm
from catalog.models import (
    ChangeRecord,
    ChangeSource,
    Dataset,
    DatasetField,
    DatasetOwnership,
    FlagSource,
    LifecycleState,
    RetentionPolicy,
    SubjectKind,
)
from catalog.queries import value_as_of
from graph.details import load_dataset_names, load_job_names
from graph.models import ColumnEdge
from graph.nodeids import dataset_node_id, field_node_id, job_node_id
from graph.queries import PathStep, field_reach
from privacy.models import AuditEntry, AuditValueHash, ErasurePlan, PrivacyRun

DIRECT = "direct"
DERIVED = "derived"
AGGREGATE = "aggregate"
RELATION_RANK = {DIRECT: 0, DERIVED: 1, AGGREGATE: 2}
UNCATEGORISED_KIND = "identifier"

_CHUNK = 900


def _chunks(ids: Sequence[int], size: int = _CHUNK) -> Iterable[Sequence[int]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


# -- catalog state of fields and datasets at an instant ------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldInfo:
    id: int
    dataset_id: int
    name: str
    type: str
    pii_category: str
    subject_kind: str | None
    declared: bool


def _existed(first_seen: datetime, gone_at: datetime | None, as_of: datetime) -> bool:
    return first_seen <= as_of and (gone_at is None or gone_at > as_of)


def _records_by_field(
    dataset_ids: Sequence[int], attributes: Sequence[str], field_level: bool = True
) -> dict[tuple[int, str, str], list[ChangeRecord]]:
    """Return change records in time order, keyed (dataset id, field name, attribute)."""
    found: dict[tuple[int, str, str], list[ChangeRecord]] = defaultdict(list)
    for chunk in _chunks(dataset_ids):
        qs = ChangeRecord.objects.filter(dataset_id__in=chunk, attribute__in=attributes)
        qs = qs.exclude(field_name="") if field_level else qs.filter(field_name="")
        for record in qs.order_by("at", "id"):
            found[(record.dataset_id, record.field_name, record.attribute)].append(record)
    return found


def _declared_as_of(records: list[ChangeRecord], as_of: datetime, current: str) -> bool:
    """Whether the subject flag in force at ``as_of`` was set by a person (not propagation)."""
    before = [r for r in records if r.at <= as_of]
    if before:
        return before[-1].source != ChangeSource.PROPAGATION
    if records:
        return True  # set before history was kept: treat as declared
    return current == FlagSource.DECLARED


def fields_as_of(rows: Iterable[DatasetField], as_of: datetime | None) -> dict[int, FieldInfo]:
    """Return each field's PII category and subject kind at ``as_of``; fields absent then are left out."""
    rows = list(rows)
    if as_of is None:
        return {
            f.id: FieldInfo(
                f.id,
                f.dataset_id,
                f.name,
                f.type,
                f.pii_category,
                f.subject_kind.name if f.subject_kind else None,
                f.flag_source == FlagSource.DECLARED,
            )
            for f in rows
            if f.removed_at is None
        }
    records = _records_by_field(
        sorted({f.dataset_id for f in rows}), ("subject_kind", "pii_category")
    )
    found: dict[int, FieldInfo] = {}
    for f in rows:
        if not _existed(f.first_seen, f.removed_at, as_of):
            continue
        kind_records = records.get((f.dataset_id, f.name, "subject_kind"), [])
        current_kind = f.subject_kind.name if f.subject_kind else None
        found[f.id] = FieldInfo(
            f.id,
            f.dataset_id,
            f.name,
            f.type,
            value_as_of(
                records.get((f.dataset_id, f.name, "pii_category"), []), as_of, f.pii_category
            )
            or "",
            value_as_of(kind_records, as_of, current_kind),
            _declared_as_of(kind_records, as_of, f.flag_source),
        )
    return found


def _load_fields(ids: Iterable[int]) -> list[DatasetField]:
    rows: list[DatasetField] = []
    for chunk in _chunks(sorted(set(ids))):
        rows.extend(DatasetField.objects.filter(id__in=chunk).select_related("subject_kind"))
    return rows


def subject_fields(kind: SubjectKind, as_of: datetime | None) -> list[FieldInfo]:
    """Return the fields flagged with the subject kind at ``as_of`` (declared or propagated)."""
    current = DatasetField.objects.filter(subject_kind=kind).select_related("subject_kind")
    if as_of is None:
        current = current.filter(removed_at__isnull=True).exclude(
            dataset__lifecycle_state=LifecycleState.DROPPED
        )
        return sorted(fields_as_of(current, None).values(), key=lambda f: f.id)
    # A field flagged then but not now appears in the flag's history.
    flagged_once = ChangeRecord.objects.filter(attribute="subject_kind").filter(
        Q(new=kind.name) | Q(old=kind.name)
    )
    named = set(flagged_once.values_list("dataset_id", "field_name"))
    candidates = list(current)
    seen = {(f.dataset_id, f.name) for f in candidates}
    wanted = named - seen
    if wanted:
        by_dataset: dict[int, set[str]] = defaultdict(set)
        for dataset_id, name in wanted:
            by_dataset[dataset_id].add(name)
        for dataset_id, names in by_dataset.items():
            candidates.extend(
                DatasetField.objects.filter(dataset_id=dataset_id, name__in=names).select_related(
                    "subject_kind"
                )
            )
    infos = fields_as_of(candidates, as_of)
    alive = _datasets_alive({i.dataset_id for i in infos.values()}, as_of)
    return sorted(
        (i for i in infos.values() if i.subject_kind == kind.name and i.dataset_id in alive),
        key=lambda f: f.id,
    )


def _datasets_alive(ids: Iterable[int], as_of: datetime | None) -> set[int]:
    alive: set[int] = set()
    for chunk in _chunks(sorted(set(ids))):
        qs = Dataset.objects.filter(id__in=chunk)
        if as_of is None:
            alive.update(
                qs.exclude(lifecycle_state=LifecycleState.DROPPED).values_list("id", flat=True)
            )
            continue
        for pk, first_seen, dropped_at in qs.values_list("id", "first_seen", "dropped_at"):
            if _existed(first_seen, dropped_at, as_of):
                alive.add(pk)
    return alive


# -- subject search ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Identifier:
    """One identifier of the subject: which seed fields it applies to (its value is not here).

    ``kind`` is the PII category the seed field must have (``identifier`` for
    fields flagged without one); ``field`` a field name or a full
    ``datasetField:`` node id. Either may be None: no restriction.
    """

    index: int
    kind: str | None = None
    field: str | None = None

    def matches(self, info: FieldInfo, node_id: str) -> bool:
        if self.kind is not None and (info.pii_category or UNCATEGORISED_KIND) != self.kind:
            return False
        return self.field is None or self.field in (info.name, node_id)


@dataclass(frozen=True)
class EvidenceStep:
    job: str | None
    source: str
    target: str
    transformation_type: str
    transformation_subtype: str
    masking: bool
    valid_from: datetime | None
    valid_to: datetime | None


@dataclass(frozen=True)
class Evidence:
    """Why a dataset is listed: from which declared field, through which edges."""

    seed: str | None
    steps: tuple[EvidenceStep, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class FieldHit:
    name: str
    node_id: str
    relation: str
    type: str
    pii_category: str
    subject_kind: str | None
    masked: bool
    identifiers: tuple[int, ...]
    source: str | None
    job: str | None


@dataclass(frozen=True)
class Retention:
    name: str
    duration_days: int | None
    action: str | None
    legal_basis: str


@dataclass
class DatasetHit:
    id: int
    namespace: str
    name: str
    node_id: str
    relation: str
    fields: list[FieldHit]
    personal_fields: list[tuple[str, str]]
    owners: list[dict[str, str]]
    retention: Retention | None
    location: str
    storage_format: str
    lifecycle_state: str
    evidence: Evidence


@dataclass(frozen=True)
class IdentifierMatch:
    identifier: Identifier
    seeds: tuple[str, ...]


@dataclass(frozen=True)
class DatasetLink:
    """source dataset → target dataset through a job, among the datasets found."""

    source_id: int
    target_id: int
    job: str | None


@dataclass
class SubjectSearch:
    subject_kind: str
    as_of: datetime | None
    identifiers: list[IdentifierMatch]
    datasets: list[DatasetHit]
    aggregates: list[DatasetHit]
    # Every field reached (for the dataset links an erasure plan orders by).
    reached_fields: frozenset[int] = field(default=frozenset(), repr=False)

    @property
    def all_hits(self) -> list[DatasetHit]:
        return [*self.datasets, *self.aggregates]


@dataclass
class _Merged:
    """One field's best reach over all identifiers: relation, distance, path (seed first)."""

    relation: str
    depth: int
    path: tuple[PathStep, ...]
    identifiers: set[int] = field(default_factory=set)

    @property
    def masked(self) -> bool:
        return any(step.masking for step in self.path)


def _merge_reach(
    merged: dict[int, _Merged],
    dataset_level: dict[int, tuple[PathStep, ...]],
    seed_ids: frozenset[int],
    indexes: Sequence[int],
    as_of: datetime | None,
    depth: int | None,
) -> None:
    reach = field_reach(seed_ids, as_of=as_of, max_depth=depth)
    for reached in reach.fields:
        if reached.field_id in seed_ids:
            relation = DIRECT
        else:
            relation = DERIVED if reached.strength.holds_rows else AGGREGATE
        current = merged.get(reached.field_id)
        if current is None or (RELATION_RANK[relation], reached.distance) < (
            RELATION_RANK[current.relation],
            current.depth,
        ):
            kept = current.identifiers if current is not None else set()
            current = _Merged(relation, reached.distance, reach.path(reached.field_id), kept)
            merged[reached.field_id] = current
        if relation != AGGREGATE:
            current.identifiers.update(indexes)
    for only in reach.dataset_only:
        path = reach.dataset_path(only.dataset_id)
        known = dataset_level.get(only.dataset_id)
        if known is None or len(path) < len(known):
            dataset_level[only.dataset_id] = path


def search_subject(
    kind: SubjectKind,
    identifiers: Sequence[Identifier],
    as_of: datetime | None = None,
    depth: int | None = None,
) -> SubjectSearch:
    """Return every dataset holding, or fed by, data of one subject of ``kind`` at ``as_of``.

    ``depth`` limits how many jobs downstream of a declared field to look (None: all).
    """
    flagged = subject_fields(kind, as_of)
    declared = [f for f in flagged if f.declared]
    names = load_dataset_names(f.dataset_id for f in flagged)

    def node(info: FieldInfo) -> str:
        namespace, name = names[info.dataset_id]
        return field_node_id(namespace, name, info.name)

    matches: list[IdentifierMatch] = []
    groups: dict[frozenset[int], list[int]] = defaultdict(list)
    for identifier in identifiers:
        seeds = [f for f in declared if identifier.matches(f, node(f))]
        matches.append(IdentifierMatch(identifier, tuple(sorted(node(f) for f in seeds))))
        if seeds:
            groups[frozenset(f.id for f in seeds)].append(identifier.index)

    merged: dict[int, _Merged] = {}
    dataset_level: dict[int, tuple[PathStep, ...]] = {}
    for seed_ids, indexes in groups.items():
        _merge_reach(merged, dataset_level, seed_ids, indexes, as_of, depth)
    # Fields flagged by propagation but not reached now still hold the subject's data.
    for info in flagged:
        if info.declared or info.id in merged:
            continue
        matching = {i.index for i in identifiers if i.matches(info, node(info))}
        if matching:
            merged[info.id] = _Merged(DERIVED, 0, (), matching)

    path_fields = {s.field_id for m in merged.values() for s in m.path if s.field_id}
    path_fields.update(s.field_id for p in dataset_level.values() for s in p if s.field_id)
    infos = fields_as_of(_load_fields(set(merged) | path_fields), as_of)
    infos.update({f.id: f for f in flagged})
    hits = _HitBuilder(as_of, infos, merged, dataset_level).build()
    return SubjectSearch(
        subject_kind=kind.name,
        as_of=as_of,
        identifiers=matches,
        datasets=[h for h in hits if h.relation != AGGREGATE],
        aggregates=[h for h in hits if h.relation == AGGREGATE],
        reached_fields=frozenset(merged),
    )


def dataset_links(search: SubjectSearch) -> list[DatasetLink]:
    """Return the lineage between the datasets a search found (source → target, by job)."""
    listed = {h.id for h in search.all_hits}
    found: set[tuple[int, int, int | None]] = set()
    for chunk in _chunks(sorted(search.reached_fields)):
        qs = _valid_at(ColumnEdge.objects.filter(source_field_id__in=chunk), search.as_of)
        for source, target, job in qs.values_list(
            "source_field__dataset_id", "target_dataset_id", "job_id"
        ):
            if source != target and source in listed and target in listed:
                found.add((source, target, job))
    jobs = load_job_names(j for _, _, j in found if j is not None)
    return [
        DatasetLink(source, target, job_node_id(*jobs[job]) if job in jobs else None)
        for source, target, job in sorted(found, key=lambda x: (x[0], x[1], x[2] or 0))
    ]


def _valid_at(qs: QuerySet[ColumnEdge], as_of: datetime | None) -> QuerySet[ColumnEdge]:
    if as_of is None:
        return qs.filter(valid_to__isnull=True)
    return qs.filter(Q(valid_to__isnull=True) | Q(valid_to__gt=as_of), valid_from__lte=as_of)


_EdgeKey = tuple[int, int | None, int, int | None, str, str]


class _HitBuilder:
    """Turns merged reaches into dataset hits with owners, retention and evidence at ``as_of``."""

    def __init__(
        self,
        as_of: datetime | None,
        infos: dict[int, FieldInfo],
        merged: dict[int, _Merged],
        dataset_level: dict[int, tuple[PathStep, ...]],
    ) -> None:
        self.as_of = as_of
        self.infos = infos
        self.merged = merged
        self.dataset_level = dataset_level
        self.jobs: dict[int, str] = {}
        self.datasets: dict[int, Dataset] = {}
        self.dataset_names: dict[int, tuple[str, str]] = {}
        self.validity: dict[_EdgeKey, tuple[datetime, datetime | None]] = {}

    def build(self) -> list[DatasetHit]:
        by_dataset: dict[int, list[int]] = defaultdict(list)
        for field_id in self.merged:
            info = self.infos.get(field_id)
            if info is not None:
                by_dataset[info.dataset_id].append(field_id)
        alive = _datasets_alive(set(by_dataset) | set(self.dataset_level), self.as_of)
        self._load_datasets(alive)
        owners, retention = self._stewardship(sorted(alive))
        personal = self._personal_fields(sorted(alive))
        chosen: list[tuple[Dataset, str, tuple[PathStep, ...], list[int]]] = []
        for dataset_id in sorted(alive):
            dataset = self.datasets[dataset_id]
            if dataset.is_hidden:
                continue
            relation, path = self._relation(dataset_id, by_dataset.get(dataset_id, []))
            chosen.append((dataset, relation, path, by_dataset.get(dataset_id, [])))
        self._load_path_details([path for _, _, path, _ in chosen])
        hits = [
            self._hit(
                dataset,
                relation,
                path,
                field_ids,
                owners.get(dataset.id, []),
                retention.get(dataset.id),
                personal.get(dataset.id, []),
            )
            for dataset, relation, path, field_ids in chosen
        ]
        hits.sort(key=lambda h: (RELATION_RANK[h.relation], h.namespace, h.name))
        return hits

    def _relation(self, dataset_id: int, field_ids: list[int]) -> tuple[str, tuple[PathStep, ...]]:
        """Return the dataset's relation and the path explaining it (its best field's)."""
        best: tuple[int, int, int] | None = None
        for field_id in field_ids:
            entry = self.merged[field_id]
            rank = (RELATION_RANK[entry.relation], len(entry.path), field_id)
            if best is None or rank < best:
                best = rank
        whole = self.dataset_level.get(dataset_id)
        if best is None or (
            whole is not None and best[0] == RELATION_RANK[AGGREGATE] and len(whole) < best[1]
        ):
            return AGGREGATE, whole or ()
        relation = [DIRECT, DERIVED, AGGREGATE][best[0]]
        return relation, self.merged[best[2]].path

    def _load_datasets(self, ids: set[int]) -> None:
        for chunk in _chunks(sorted(ids)):
            for dataset in Dataset.objects.filter(id__in=chunk).select_related(
                "namespace", "retention_policy"
            ):
                self.datasets[dataset.id] = dataset
                self.dataset_names[dataset.id] = (dataset.namespace.name, dataset.name)

    def _load_path_details(self, paths: list[tuple[PathStep, ...]]) -> None:
        """Load job names, target dataset names and edge validity for the chosen paths."""
        jobs: set[int] = set()
        datasets: set[int] = set()
        wanted: set[_EdgeKey] = set()
        for path in paths:
            for before, step in pairwise(path):
                if step.job_id is not None:
                    jobs.add(step.job_id)
                datasets.add(step.dataset_id)
                if before.field_id is not None:
                    wanted.add(self._key(before.field_id, step))
        for m in self.merged.values():
            if len(m.path) > 1 and m.path[-1].job_id is not None:
                jobs.add(m.path[-1].job_id)
        self.jobs = {pk: job_node_id(*names) for pk, names in load_job_names(jobs).items()}
        missing = datasets - set(self.dataset_names)
        self.dataset_names.update(load_dataset_names(missing))
        sources = sorted({key[0] for key in wanted})
        for chunk in _chunks(sources):
            qs = _valid_at(ColumnEdge.objects.filter(source_field_id__in=chunk), self.as_of)
            for row in qs.values_list(
                "source_field_id",
                "target_field_id",
                "target_dataset_id",
                "job_id",
                "transformation_type",
                "transformation_subtype",
                "valid_from",
                "valid_to",
            ):
                key: _EdgeKey = (row[0], row[1], row[2], row[3], row[4], row[5])
                if key in wanted:
                    known = self.validity.get(key)
                    if known is None or row[6] > known[0]:
                        self.validity[key] = (row[6], row[7])

    @staticmethod
    def _key(source_field_id: int, step: PathStep) -> _EdgeKey:
        return (
            source_field_id,
            step.field_id,
            step.dataset_id,
            step.job_id,
            step.transformation_type,
            step.transformation_subtype,
        )

    def _stewardship(
        self, ids: list[int]
    ) -> tuple[dict[int, list[dict[str, str]]], dict[int, Retention]]:
        owners: dict[int, list[dict[str, str]]] = defaultdict(list)
        for chunk in _chunks(ids):
            rows = (
                DatasetOwnership.objects.filter(dataset_id__in=chunk)
                .order_by("owner__name", "ownership_type")
                .values_list("dataset_id", "owner__name", "ownership_type")
            )
            for dataset_id, name, kind in rows:
                owners[dataset_id].append({"name": name, "type": kind})
        retention: dict[int, Retention] = {}
        policies = {p.name: p for p in RetentionPolicy.objects.all()}
        records = (
            _records_by_field(ids, ("owners", "retention_policy"), field_level=False)
            if self.as_of is not None
            else {}
        )
        for dataset_id in ids:
            dataset = self.datasets[dataset_id]
            policy_name = dataset.retention_policy.name if dataset.retention_policy else None
            if self.as_of is not None:
                owners[dataset_id] = value_as_of(
                    records.get((dataset_id, "", "owners"), []), self.as_of, owners[dataset_id]
                )
                policy_name = value_as_of(
                    records.get((dataset_id, "", "retention_policy"), []), self.as_of, policy_name
                )
            if policy_name:
                policy = policies.get(policy_name)
                retention[dataset_id] = Retention(
                    policy_name,
                    policy.duration_days if policy else None,
                    policy.action if policy else None,
                    policy.legal_basis if policy else "",
                )
        return owners, retention

    def _personal_fields(self, ids: list[int]) -> dict[int, list[tuple[str, str]]]:
        rows: list[DatasetField] = []
        for chunk in _chunks(ids):
            rows.extend(
                DatasetField.objects.filter(dataset_id__in=chunk)
                .filter(Q(pii_category__gt="") | Q(subject_kind__isnull=False))
                .select_related("subject_kind")
            )
        found: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for info in sorted(fields_as_of(rows, self.as_of).values(), key=lambda i: i.name):
            if info.pii_category or info.subject_kind:
                found[info.dataset_id].append((info.name, info.pii_category or UNCATEGORISED_KIND))
        return found

    def _field_node(self, field_id: int) -> str:
        info = self.infos[field_id]
        namespace, name = self.dataset_names[info.dataset_id]
        return field_node_id(namespace, name, info.name)

    def _step_target(self, step: PathStep) -> str:
        if step.field_id is not None and step.field_id in self.infos:
            return self._field_node(step.field_id)
        return dataset_node_id(*self.dataset_names[step.dataset_id])

    def _evidence(self, path: tuple[PathStep, ...], note: str = "") -> Evidence:
        if not path:
            return Evidence(None, (), note)
        steps = []
        for before, step in pairwise(path):
            assert before.field_id is not None
            valid_from, valid_to = self.validity.get(self._key(before.field_id, step), (None, None))
            steps.append(
                EvidenceStep(
                    job=self.jobs.get(step.job_id) if step.job_id is not None else None,
                    source=self._field_node(before.field_id),
                    target=self._step_target(step),
                    transformation_type=step.transformation_type,
                    transformation_subtype=step.transformation_subtype,
                    masking=step.masking,
                    valid_from=valid_from,
                    valid_to=valid_to,
                )
            )
        seed = path[0].field_id
        return Evidence(self._field_node(seed) if seed is not None else None, tuple(steps), note)

    def _hit(
        self,
        dataset: Dataset,
        relation: str,
        path: tuple[PathStep, ...],
        field_ids: list[int],
        owners: list[dict[str, str]],
        retention: Retention | None,
        personal: list[tuple[str, str]],
    ) -> DatasetHit:
        fields: list[FieldHit] = []
        for field_id in field_ids:
            entry = self.merged[field_id]
            info = self.infos[field_id]
            last = entry.path[-1] if len(entry.path) > 1 else None
            before = entry.path[-2] if last is not None else None
            fields.append(
                FieldHit(
                    name=info.name,
                    node_id=self._field_node(field_id),
                    relation=entry.relation,
                    type=info.type,
                    pii_category=info.pii_category,
                    subject_kind=info.subject_kind,
                    masked=entry.masked,
                    identifiers=tuple(sorted(entry.identifiers)),
                    source=(
                        self._field_node(before.field_id)
                        if before is not None and before.field_id is not None
                        else None
                    ),
                    job=(
                        self.jobs.get(last.job_id)
                        if last is not None and last.job_id is not None
                        else None
                    ),
                )
            )
        fields.sort(key=lambda f: (RELATION_RANK[f.relation], f.name))
        note = "subject flag propagated" if not path and relation != AGGREGATE else ""
        return DatasetHit(
            id=dataset.id,
            namespace=dataset.namespace.name,
            name=dataset.name,
            node_id=dataset_node_id(dataset.namespace.name, dataset.name),
            relation=relation,
            fields=fields,
            personal_fields=personal,
            owners=owners,
            retention=retention,
            location=dataset.location,
            storage_format=dataset.storage_format,
            lifecycle_state=dataset.lifecycle_state,
            evidence=self._evidence(path, note),
        )


def as_json_safe(value: Any) -> Any:
    """Return ``value`` with datetimes as ISO strings (for JSON columns)."""
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {k: as_json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_json_safe(v) for v in value]
    return value


# -- permission-checked lookups ------------------------------------------------------------------


def _require(user: Any, perm: str) -> None:
    if not has_perm(user, perm):
        raise PermissionDenied("Subject search needs the compliance role")


def access_run(user: Any, run_id: Any) -> PrivacyRun | None:
    """Return a scan or erasure run the user may see (compliance/admin), or None."""
    _require(user, SEARCH_SUBJECTS)
    return PrivacyRun.objects.select_related("plan").filter(pk=run_id).first()


def access_plan(user: Any, plan_id: Any) -> ErasurePlan | None:
    """Return an erasure plan the user may see (compliance/admin), or None."""
    _require(user, SEARCH_SUBJECTS)
    return ErasurePlan.objects.filter(pk=plan_id).first()


def audit_entries(
    user: Any, action: str | None = None, digests: Sequence[str] | None = None
) -> QuerySet[AuditEntry]:
    """Return audit entries newest first, optionally of one action or about given value hashes."""
    _require(user, VIEW_AUDIT)
    qs = AuditEntry.objects.all()
    if action:
        qs = qs.filter(action=action)
    if digests is not None:
        ids = AuditValueHash.objects.filter(digest__in=list(digests)).values("entry_id")
        qs = qs.filter(id__in=ids)
    return qs.order_by("-at", "-id")


def subject_kinds() -> list[tuple[SubjectKind, int]]:
    """Return the subject kinds with how many live fields identify each."""
    kinds = SubjectKind.objects.annotate(
        n=Count("fields", filter=Q(fields__removed_at__isnull=True))
    ).order_by("name")
    return [(k, int(getattr(k, "n", 0))) for k in kinds]
