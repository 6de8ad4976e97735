"""Reads for subject search: which datasets hold (or were fed by) one data subject's data.

A search starts from the fields *declared* as identifying the subject kind
(as of the instant asked for) and follows column lineage downstream:

* ``direct``: the dataset has such a declared field;
* ``derived``: a field is reached through DIRECT IDENTITY / TRANSFORMATION
  edges only (masked or not: a pseudonym is still personal data), so rows stay
  tied to the subject;
* ``aggregate``: reached only through AGGREGATION or INDIRECT edges — the
  subject contributed, but no row is theirs.

The traversal is the graph engine's ``ranked_field_reach`` (graph/traverse.py): per
reached field, the path whose weakest transformation is strongest. Each
dataset carries that path (field by field, job by job) as its evidence.
Dataset-level INDIRECT edges (a filter or join key shaping a whole output)
mark the output as ``aggregate`` and stop there: following every field of
that output would call everything downstream of a join "personal".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.db.models import Count, Q, QuerySet

from catalog.auth import SEARCH_SUBJECTS, VIEW_AUDIT, has_perm
from catalog.flags import chunks, propagated_sources, timelines, union_kinds
from catalog.lookups import where_in
from catalog.models import (
    ChangeRecord,
    Dataset,
    DatasetField,
    FlagSource,
    LifecycleState,
    SubjectKind,
)
from catalog.queries import closed_datasets, field_existed_sql
from graph import revision, snapshot, traverse
from graph.details import FieldInfo as GraphFieldInfo
from graph.details import (
    field_rows,
    load_dataset_names,
    load_datasets,
    load_job_names,
    read_ts,
    ts_sql,
)
from graph.nodeids import dataset_node_id, field_node_id, job_node_id
from graph.queries import FieldReach, PathStep
from graph.snapshot import STRENGTH_TRANSFORMATION, TimeFilter
from privacy.models import AuditEntry, AuditValueHash, ErasurePlan, PrivacyRun

DIRECT = "direct"
DERIVED = "derived"
AGGREGATE = "aggregate"
RELATION_RANK = {DIRECT: 0, DERIVED: 1, AGGREGATE: 2}
UNCATEGORISED_KIND = "identifier"

# -- catalog state of fields and datasets at an instant ------------------------------------------


class FieldInfo(NamedTuple):
    """A field holding a subject kind (tens of thousands per search: a tuple is built in C)."""

    id: int
    dataset_id: int
    name: str
    type: str
    pii_category: str
    subject_kind: str | None
    declared: bool


_FIELD_COLUMNS = "id, dataset_id, name, type, pii_category, flag_source"


def subject_fields(
    kind: SubjectKind,
    as_of: datetime | None,
    excluded: npt.NDArray[np.int64] | None = None,
) -> list[FieldInfo]:
    """Return the fields flagged with the subject kind at ``as_of`` (declared or propagated).

    Fields of datasets that are hidden, or absent at ``as_of``, are left out
    (``excluded``: those datasets' ids, when the caller has them).
    """
    if excluded is None:
        excluded = _unlisted_datasets(as_of).all
    if as_of is None:
        gone = set(excluded.tolist())
        rows = _field_rows("subject_kind_id = %s AND removed_at IS NULL ORDER BY id", [kind.pk])
        return [
            FieldInfo(pk, ds, name, ftype, pii, kind.name, source == FlagSource.DECLARED)
            for pk, ds, name, ftype, pii, source in rows
            if ds not in gone
        ]
    holding = _holding_then(kind, as_of)
    return _placed(kind, holding, as_of, excluded, list(holding))


_SIZE = 20_000  # ids per query (one array parameter)


def _holding_then(kind: SubjectKind, as_of: datetime) -> dict[int, tuple[str, bool]]:
    """The fields that held ``kind`` at ``as_of``: field id -> (category, declared)."""
    candidates, own, _ = _declared_then(kind, as_of)
    holding = {pk: (pii, True) for pk, pii in own.items()}
    holding.update((pk, (pii, False)) for pk, pii in _copies_then(kind, as_of, candidates).items())
    return holding


class _DeclaredThen(NamedTuple):
    candidates: set[int]  # the fields that might have declared the kind then
    own: dict[int, str]  # those that did: field id -> category
    placed: list[FieldInfo]  # and of those, the ones that existed then, in datasets listed


def _declared_then(
    kind: SubjectKind, as_of: datetime, excluded: npt.NDArray[np.int64] | None = None
) -> _DeclaredThen:
    """The fields that might have declared ``kind`` at ``as_of`` (declaring it now, or named
    in its history), and of those, the ones that did."""
    stamp = connection.ops.adapt_datetimefield_value(as_of)
    rows = {
        row[0]: row
        for row in _field_rows(
            "subject_kind_id = %s AND flag_source = %s",
            [kind.pk, FlagSource.DECLARED],
            existed_at=stamp,
        )
    }
    named: dict[int, set[str]] = defaultdict(set)
    for dataset_id, name in (
        ChangeRecord.objects.filter(attribute="subject_kind")
        .filter(Q(new=kind.name) | Q(old=kind.name))
        .values_list("dataset_id", "field_name")
    ):
        named[dataset_id].add(name)
    for chunk in chunks(sorted(named), _SIZE):
        where, params = where_in("dataset_id", list(chunk))
        for row in _field_rows(where, params, existed_at=stamp):
            if row[2] in named[row[1]]:
                rows[row[0]] = row
    # A field propagation reached then was neither declared nor blocked then (catalog.flags),
    # and its declarations replayed say so.
    own = {}
    for pk, line in timelines(rows).items():
        pii, declared_kind = line.values_at(as_of)
        if declared_kind == kind.name:
            own[pk] = pii
    gone = set() if excluded is None else set(excluded.tolist())
    placed = [
        FieldInfo(pk, ds, name, ftype, own[pk], kind.name, True)
        for pk, ds, name, ftype, _, _, existed in (rows[pk] for pk in sorted(own))
        if existed and ds not in gone
    ]
    return _DeclaredThen(set(rows), own, placed)


def _copies_then(
    kind: SubjectKind,
    as_of: datetime,
    candidates: set[int],
    skip: npt.NDArray[np.int64] | None = None,
) -> dict[int, str]:
    """The fields propagation had given ``kind`` at ``as_of`` from these candidate sources,
    but for those in ``skip`` (sorted): field id -> category."""
    stamp = connection.ops.adapt_datetimefield_value(as_of)
    valid = "valid_from <= %s AND (valid_to IS NULL OR valid_to > %s)"
    # The fields the candidates reached then; where each field is comes after, for the
    # fields holding the kind only (joining every row to its field made PostgreSQL scan all
    # fields).
    reached: list[tuple[int]] = []
    with connection.cursor() as cursor:
        for chunk in chunks(sorted(candidates), _SIZE):
            where, params = where_in("source_id", list(chunk))
            cursor.execute(
                f"SELECT field_id FROM catalog_propagatedflag WHERE {where} AND {valid}",
                [*params, stamp, stamp],
            )
            reached.extend(cursor.fetchall())
        fields = np.unique(np.asarray(reached, dtype=np.int64).reshape(-1))
        if skip is not None:
            fields = np.setdiff1d(fields, skip, assume_unique=True)
        # Every row reaching each of them then: a field's flag is the union of its sources.
        found_rows: list[tuple[int, int]] = []
        for chunk in chunks(fields.tolist(), _SIZE):
            where, params = where_in("field_id", list(chunk))
            cursor.execute(
                f"SELECT field_id, source_id FROM catalog_propagatedflag WHERE {where} AND {valid}",
                [*params, stamp, stamp],
            )
            found_rows.extend(cursor.fetchall())
    pairs = np.asarray(found_rows, dtype=np.int64).reshape(-1, 2)
    lines = timelines(np.unique(pairs[:, 1]).tolist())
    then = {pk: line.values_at(as_of) for pk, line in lines.items()}
    copies, categories = union_kinds(pairs[:, 0], pairs[:, 1], then).with_kind(kind.name)
    return dict(zip(copies, categories, strict=True))


def _placed(
    kind: SubjectKind,
    holding: dict[int, tuple[str, bool]],
    as_of: datetime,
    excluded: npt.NDArray[np.int64],
    ids: Iterable[int],
) -> list[FieldInfo]:
    """``FieldInfo`` of these fields of ``holding`` that existed at ``as_of``, in datasets not
    ``excluded``, by id."""
    stamp = connection.ops.adapt_datetimefield_value(as_of)
    existed = field_existed_sql("catalog_datasetfield")
    gone = set(excluded.tolist())
    found = []
    for chunk in chunks(sorted(ids), _SIZE):
        where, params = where_in("id", list(chunk))
        for pk, ds, name, ftype, _, _ in _field_rows(
            f"{where} AND {existed}", [*params, *[stamp] * 4]
        ):
            if ds not in gone:
                pii, declared = holding[pk]
                found.append(FieldInfo(pk, ds, name, ftype, pii, kind.name, declared))
    return sorted(found, key=lambda f: f.id)


def _field_rows(
    where: str, params: list[Any], with_kind: bool = False, existed_at: Any = None
) -> list[tuple[Any, ...]]:
    """Rows of ``_FIELD_COLUMNS`` (and the subject kind, and whether the field existed at
    ``existed_at``, when asked)."""
    columns = _FIELD_COLUMNS + (", subject_kind_id" if with_kind else "")
    before: list[Any] = []
    if existed_at is not None:
        columns += f", ({field_existed_sql('catalog_datasetfield')})"
        before = [existed_at] * 4
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM catalog_datasetfield WHERE {where}", [*before, *params]
        )
        return list(cursor.fetchall())


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

    def matches(self, info: FieldInfo, node_id: Callable[[FieldInfo], str]) -> bool:
        if self.kind is not None and (info.pii_category or UNCATEGORISED_KIND) != self.kind:
            return False
        if self.field is None or self.field == info.name:
            return True
        return ":" in self.field and self.field == node_id(info)


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
    # Its rows hold only pseudonyms of the subject's values (every path masks); ``hashed``:
    # they may hold some (a path masks), which a scan matches too.
    masked: bool
    identifiers: tuple[int, ...]
    source: str | None
    job: str | None
    hashed: bool = False


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
    distance: int
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
    seed_count: int


@dataclass(frozen=True)
class DatasetLink:
    """source dataset → target dataset through a job, among the datasets found."""

    source_id: int
    target_id: int
    job: str | None


@dataclass(frozen=True)
class ScanFindings:
    """What a finished Spark scan found for a subject: rows per dataset node id it compared,
    and why it could not compare the others it tried ("unmatchable": no column matched the
    identifiers; "error")."""

    run_id: str
    finished_at: datetime
    rows: dict[str, int]
    problems: dict[str, str]

    def for_dataset(self, node_id: str) -> dict[str, Any] | None:
        """``{"rows": N, "at": …}`` when the scan compared the dataset, else None."""
        if node_id not in self.rows:
            return None
        return {"rows": self.rows[node_id], "at": self.finished_at}


def scan_findings(subject_kind: str, hashes: Sequence[str]) -> ScanFindings | None:
    """The newest finished scan for these identifiers (their keyed hashes), if any."""
    wanted = sorted(hashes)
    runs = PrivacyRun.objects.filter(
        kind="scan", state="done", subject_kind=subject_kind, finished_at__isnull=False
    ).order_by("-finished_at")[:50]
    for run in runs:
        if sorted(h["hash"] for h in run.value_hashes) == wanted:
            results = {k: r for k, r in (run.results or {}).items() if isinstance(r, dict)}
            rows = {
                key: int(result["rowsFound"])
                for key, result in results.items()
                if result.get("status", "scanned") == "scanned"
                and isinstance(result.get("rowsFound"), int)
            }
            problems = {
                key: str(result["status"])
                for key, result in results.items()
                if result.get("status") in ("unmatchable", "error")
            }
            assert run.finished_at is not None
            return ScanFindings(str(run.id), run.finished_at, rows, problems)
    return None


@dataclass
class SubjectSearch:
    """A search's answer: totals for every relation, and one page of hydrated datasets.

    Lineage says which datasets *may* hold the subject's rows; ``scan`` (the newest
    finished Spark scan for the same subject and identifiers, if any) says per dataset
    whether they are really there.
    """

    subject_kind: str
    as_of: datetime | None
    identifiers: list[IdentifierMatch]
    datasets: list[DatasetHit]
    aggregates: list[DatasetHit]
    totals: dict[str, int] = field(default_factory=dict)
    offset: int = 0
    limit: int | None = None
    # Every field reached and its dataset (for the links an erasure plan orders by).
    reached_fields: Any = field(default=None, repr=False)
    reached_datasets: Any = field(default=None, repr=False)
    scan: ScanFindings | None = None

    @property
    def all_hits(self) -> list[DatasetHit]:
        return [*self.datasets, *self.aggregates]

    @property
    def complete(self) -> bool:
        """Whether this page holds every dataset found."""
        return self.offset == 0 and (
            self.limit is None
            or max(
                self.totals.get(DIRECT, 0) + self.totals.get(DERIVED, 0),
                self.totals.get(AGGREGATE, 0),
            )
            <= self.limit
        )


_SEED_CODE, _DERIVED_CODE, _AGGREGATE_CODE = 0, 1, 2
_RELATIONS = (DIRECT, DERIVED, AGGREGATE)
_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class _Group:
    """One traversal: the identifiers sharing a seed set, and what their seeds reach."""

    indexes: list[int]
    reach: FieldReach
    arrays: traverse.RankedReach
    codes: npt.NDArray[np.int64]


@dataclass
class _Best:
    """Per reached field (sorted by id): best relation code, distance and traversal."""

    field: npt.NDArray[np.int64]
    dataset: npt.NDArray[np.int64]
    code: npt.NDArray[np.int64]
    dist: npt.NDArray[np.int64]
    group: npt.NDArray[np.int64]
    masked: npt.NDArray[np.int64]
    parent: npt.NDArray[np.int64]
    job: npt.NDArray[np.int64]
    hashed: npt.NDArray[np.int64]


def blocked_fields(as_of: datetime | None) -> npt.NDArray[np.int64]:
    """The fields a steward had blocked personal-data flags on (now, or at ``as_of``)."""
    current = set(
        DatasetField.objects.filter(propagation_blocked=True).values_list("pk", flat=True)
    )
    if as_of is None:
        return np.asarray(sorted(current), dtype=np.int64)
    named = set(
        ChangeRecord.objects.filter(attribute="propagation_blocked").values_list(
            "dataset_id", "field_name"
        )
    )
    candidates = set(current)
    for dataset_id, name in named:
        candidates.update(
            DatasetField.objects.filter(dataset_id=dataset_id, name=name).values_list(
                "pk", flat=True
            )
        )
    lines = timelines(candidates)
    return np.asarray(
        sorted(pk for pk, line in lines.items() if line.blocked_at(as_of)), dtype=np.int64
    )


def _traverse(seeds: list[FieldInfo], as_of: datetime | None, depth: int | None) -> _Group:
    """Fields downstream of the seeds, in two classes: rows still held, or only contributed to."""
    snap = snapshot.columns()
    arrays = traverse.ranked_field_reach(
        snap,
        np.asarray([s.id for s in seeds], dtype=np.int64),
        np.asarray([s.dataset_id for s in seeds], dtype=np.int64),
        TimeFilter.at(as_of),
        depth,
        levels=(STRENGTH_TRANSFORMATION, 0),
        blocked=blocked_fields(as_of),
    )
    codes = np.where(
        arrays.parent_field < 0,
        _SEED_CODE,
        np.where(arrays.strength >= STRENGTH_TRANSFORMATION, _DERIVED_CODE, _AGGREGATE_CODE),
    ).astype(np.int64)
    return _Group([], FieldReach(snap, arrays), arrays, codes)


def _best_per_field(
    groups: list[_Group], extra: list[FieldInfo], sources: dict[int, list[tuple[int, bool]]]
) -> _Best:
    """Merge the traversals: each field keeps its strongest relation, then its nearest path;
    masked when every traversal reaching it so masks, hashed when one does. ``extra``:
    fields no traversal reaches, masked and hashed by their propagated flags' ``sources``
    ((source, masked) each)."""
    parts = [
        (
            g.arrays.field,
            g.arrays.dataset,
            g.codes,
            g.arrays.dist,
            np.full(g.codes.size, i),
            g.arrays.masked,
            g.arrays.parent_field,
            g.arrays.parent_job,
            g.arrays.hashed,
        )
        for i, g in enumerate(groups)
    ]
    if extra:  # flagged by propagation, reached by nothing: derived, without a path
        ids = np.asarray([f.id for f in extra], dtype=np.int64)
        none = np.full(ids.size, -1)
        datasets = np.asarray([f.dataset_id for f in extra], dtype=np.int64)
        zero = np.zeros(ids.size, dtype=np.int64)
        masks = [[masked for _, masked in sources.get(f.id, [])] for f in extra]
        masked = np.asarray([bool(m) and all(m) for m in masks], dtype=np.int64)
        hashed = np.asarray([any(m) for m in masks], dtype=np.int64)
        parts.append(
            (
                ids,
                datasets,
                np.full(ids.size, _DERIVED_CODE),
                zero,
                none,
                masked,
                none,
                none,
                hashed,
            )
        )
    if not parts:
        return _Best(*([_EMPTY] * 9))
    cols = [np.concatenate([p[i] for p in parts]).astype(np.int64) for i in range(9)]
    order = np.lexsort((cols[3], cols[2], cols[0]))
    sorted_cols = [c[order] for c in cols]
    _, first, counts = np.unique(sorted_cols[0], return_index=True, return_counts=True)
    best = [c[first] for c in sorted_cols]
    if first.size:
        # Of the traversals reaching it with its best relation only (one that only
        # aggregates into a copy says nothing of the values it holds).
        as_best = sorted_cols[2] == np.repeat(best[2], counts)
        best[5] = np.minimum.reduceat(np.where(as_best, sorted_cols[5], 1), first)
        best[8] = np.maximum.reduceat(np.where(as_best, sorted_cols[8], 0), first)
    return _Best(*best)


class _Unlisted(NamedTuple):
    """The datasets a search never lists (``all``, sorted ids): hidden ones, and ``absent``
    ones (not yet seen, dropped or renamed away)."""

    all: npt.NDArray[np.int64]
    absent: npt.NDArray[np.int64]


_UNLISTED: dict[str, tuple[Any, _Unlisted]] = {}


def _unlisted_datasets(as_of: datetime | None) -> _Unlisted:
    """Return the datasets never listed at ``as_of``.

    Lineage already hides most of them (a drop closes a dataset's edges); this
    also catches seeds and stray open edges. A hidden dataset (a scratch table)
    is not listed, but a field declared there still leads to its copies. Now-answers
    are cached until the graph revision moves (any dataset change moves it).
    """
    params: list[Any]
    if as_of is None:
        current = revision.current()
        cached = _UNLISTED.get("now")
        if cached is not None and cached[0] == current:
            return cached[1]
        gone, params = "lifecycle_state = %s", [LifecycleState.DROPPED.value]
    else:
        gone, params = "first_seen > %s", [connection.ops.adapt_datetimefield_value(as_of)]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, {gone} FROM catalog_dataset WHERE is_hidden OR {gone}", params * 2
        )
        rows = cursor.fetchall()
    absent = [pk for pk, is_gone in rows if is_gone]
    if as_of is not None:
        absent += closed_datasets(as_of)
    found = _Unlisted(
        np.unique(np.asarray([pk for pk, _ in rows] + absent, dtype=np.int64)),
        np.unique(np.asarray(absent, dtype=np.int64)),
    )
    if as_of is None:
        _UNLISTED["now"] = (current, found)
    return found


@revision.pinned()  # every traversal and list of one search from one lineage revision
def search_subject(
    kind: SubjectKind,
    identifiers: Sequence[Identifier],
    as_of: datetime | None = None,
    depth: int | None = None,
    *,
    limit: int | None = None,
    offset: int = 0,
) -> SubjectSearch:
    """Return every dataset holding, or fed by, data of one subject of ``kind`` at ``as_of``.

    Relations are decided for every dataset reached; only the page
    ``[offset, offset + limit)`` of each list (holding datasets, aggregates)
    is filled in with fields, owners, retention and evidence. Lists are
    ordered by relation, then distance from the declared fields, then name.
    ``depth`` limits how many jobs downstream of a declared field to look.
    """
    unlisted = _unlisted_datasets(as_of)
    excluded = unlisted.all
    # As of an instant, where the copies were is read only for those the traversal below
    # does not reach (the others come with it): tens of thousands of fields at 100,000
    # datasets, a few unreached. Fields declared in hidden datasets are seeds too.
    candidates: set[int] = set()
    if as_of is None:
        flagged = subject_fields(kind, None, unlisted.absent)
    else:
        candidates, _, flagged = _declared_then(kind, as_of, unlisted.absent)
    declared = [f for f in flagged if f.declared]
    names: dict[int, tuple[str, str]] = {}
    if any(i.field and ":" in i.field for i in identifiers):
        names.update(load_dataset_names(f.dataset_id for f in flagged))

    def node(info: FieldInfo) -> str:
        if info.dataset_id not in names:
            names.update(load_dataset_names([info.dataset_id]))
        return field_node_id(*names[info.dataset_id], info.name)

    matches: list[IdentifierMatch] = []
    groups_by_seeds: dict[frozenset[int], _Group] = {}
    seeds_of: dict[frozenset[int], list[FieldInfo]] = {}
    picked = [[f for f in declared if i.matches(f, node)] for i in identifiers]
    names.update(load_dataset_names(f.dataset_id for seeds in picked for f in seeds[:SHOWN_SEEDS]))
    for identifier, seeds in zip(identifiers, picked, strict=True):
        shown = tuple(sorted(node(f) for f in seeds[:SHOWN_SEEDS]))
        matches.append(IdentifierMatch(identifier, shown, len(seeds)))
        if seeds:
            key = frozenset(f.id for f in seeds)
            if key not in groups_by_seeds:
                groups_by_seeds[key], seeds_of[key] = _traverse(seeds, as_of, depth), seeds
            groups_by_seeds[key].indexes.append(identifier.index)
    groups = list(groups_by_seeds.values())
    reached = set().union(*(set(g.arrays.field.tolist()) for g in groups)) if groups else set()
    if as_of is not None:  # the copies the traversal did not reach, with where they are
        walked = [g.arrays.field for g in groups] or [np.empty(0, dtype=np.int64)]
        copies = _copies_then(kind, as_of, candidates, np.unique(np.concatenate(walked)))
        flagged += _placed(
            kind, {pk: (pii, False) for pk, pii in copies.items()}, as_of, excluded, copies
        )
    # Copies propagation flagged that no walk reached: listed without a path, but for those
    # beyond ``depth`` (a walk without it reaches them).
    unreached = [f for f in flagged if not f.declared and f.id not in reached]
    if depth is not None and unreached:
        beyond: set[int] = set()
        for seeds in seeds_of.values():
            beyond.update(_traverse(seeds, as_of, None).arrays.field.tolist())
        unreached = [f for f in unreached if f.id not in beyond]
    # Such a copy holds the values of the declared fields its flag came from: it is listed
    # for the identifiers naming those, masked and hashed as their paths say.
    sources = propagated_sources([f.id for f in unreached], as_of)
    naming: dict[int, set[int]] = defaultdict(set)  # seed -> the identifiers picking it
    for identifier, seeds in zip(identifiers, picked, strict=True):
        for seed in seeds:
            naming[seed.id].add(identifier.index)
    kept = {f.id: [(s, m) for s, m in sources.get(f.id, []) if naming[s]] for f in unreached}
    extra_identifiers = {f.id: {i for s, _ in kept[f.id] for i in naming[s]} for f in unreached}
    extra = [f for f in unreached if extra_identifiers[f.id]]
    best = _best_per_field(groups, extra, kept)

    # Per dataset: the best of its fields, or a dataset-level dependency (aggregate).
    ds_parts = [(best.dataset, best.code, best.dist, best.field, np.full(best.field.size, -1))]
    for i, g in enumerate(groups):
        a = g.arrays
        if a.ds_only.size:
            position = {f: k for k, f in enumerate(a.field.tolist())}
            parent_dist = np.asarray(
                [a.dist[position[f]] for f in a.ds_only_parent_field.tolist()], dtype=np.int64
            )
            ds_parts.append(
                (
                    a.ds_only,
                    np.full(a.ds_only.size, _AGGREGATE_CODE),
                    parent_dist + 1,
                    np.full(a.ds_only.size, -1),
                    np.full(a.ds_only.size, i),
                )
            )
    cols = [np.concatenate([p[k] for p in ds_parts]).astype(np.int64) for k in range(5)]
    order = np.lexsort((cols[2], cols[1], cols[0]))
    cols = [c[order] for c in cols]
    datasets, first = np.unique(cols[0], return_index=True)
    ds_code, ds_dist, ds_field, ds_group = (c[first] for c in cols[1:])

    keep = ~np.isin(datasets, excluded)
    datasets, ds_code, ds_dist, ds_field, ds_group = (
        c[keep] for c in (datasets, ds_code, ds_dist, ds_field, ds_group)
    )
    # Nearest first: by relation, then distance from a declared field (then id, for stability).
    order = np.lexsort((datasets, ds_dist, ds_code))
    holding = order[ds_code[order] != _AGGREGATE_CODE]
    aggregates = order[ds_code[order] == _AGGREGATE_CODE]
    totals = {
        DIRECT: int(np.count_nonzero(ds_code == _SEED_CODE)),
        DERIVED: int(np.count_nonzero(ds_code == _DERIVED_CODE)),
        AGGREGATE: int(aggregates.size),
    }
    end = None if limit is None else offset + limit
    page = np.concatenate([holding[offset:end], aggregates[offset:end]])

    hydrator = _Hydrator(as_of, groups, best, extra_identifiers)
    hits = hydrator.hits(
        [
            (
                int(datasets[k]),
                _RELATIONS[int(ds_code[k])],
                int(ds_dist[k]),
                int(ds_field[k]),
                int(ds_group[k]),
            )
            for k in page.tolist()
        ]
    )
    hits.sort(key=lambda h: (RELATION_RANK[h.relation], h.distance, h.namespace, h.name))
    return SubjectSearch(
        subject_kind=kind.name,
        as_of=as_of,
        identifiers=matches,
        datasets=[h for h in hits if h.relation != AGGREGATE],
        aggregates=[h for h in hits if h.relation == AGGREGATE],
        totals=totals,
        offset=offset,
        limit=limit,
        reached_fields=best.field,
        reached_datasets=best.dataset,
    )


SHOWN_SEEDS = 50


def dataset_links(search: SubjectSearch) -> list[DatasetLink]:
    """Return the lineage between the datasets a search found (source → target, by job).

    Read from the same column snapshot the search walked: one vectorised pass
    over the edges valid at the search's instant, however many datasets.
    """
    listed = np.asarray(sorted({h.id for h in search.all_hits}), dtype=np.int64)
    if search.reached_fields is None or not listed.size:
        return []
    fields, datasets = search.reached_fields, search.reached_datasets
    keep = np.isin(datasets, listed)
    sources, source_datasets = fields[keep], datasets[keep]
    order = np.argsort(sources)
    sources, source_datasets = sources[order], source_datasets[order]
    snap = snapshot.columns()
    found: set[tuple[int, int, int | None]] = set()
    for layer, pos in snap.all_valid(TimeFilter.at(search.as_of)):
        cols = snap.store(layer).cols
        src, tds = cols["src"][pos], cols["tds"][pos]
        hit = np.isin(src, sources, kind="table") & np.isin(tds, listed, kind="table")
        if not hit.any():
            continue
        src, tds, job = src[hit], tds[hit], cols["job"][pos][hit]
        origin = source_datasets[np.searchsorted(sources, src)]
        for source, target, job_id in set(
            zip(origin.tolist(), tds.tolist(), job.tolist(), strict=True)
        ):
            if source != target:
                found.add((source, target, job_id if job_id >= 0 else None))
    jobs = load_job_names(j for _, _, j in found if j is not None)
    return [
        DatasetLink(source, target, job_node_id(*jobs[job]) if job in jobs else None)
        for source, target, job in sorted(found, key=lambda x: (x[0], x[1], x[2] or 0))
    ]


def _valid_sql(as_of: datetime | None) -> tuple[str, list[Any]]:
    """SQL keeping the edges valid at ``as_of`` (None: the open ones)."""
    if as_of is None:
        return "valid_to IS NULL", []
    stamp = connection.ops.adapt_datetimefield_value(as_of)
    return "valid_from <= %s AND (valid_to IS NULL OR valid_to > %s)", [stamp, stamp]


_EdgeKey = tuple[int, int | None, int, int | None, str, str]


class _Hydrator:
    """Fills in one page of datasets: fields, owners, retention and evidence at ``as_of``."""

    def __init__(
        self,
        as_of: datetime | None,
        groups: list[_Group],
        best: _Best,
        extra_identifiers: dict[int, set[int]],
    ) -> None:
        self.as_of = as_of
        self.extra_identifiers = extra_identifiers
        self.groups = groups
        self.best = best
        self.dataset_names: dict[int, tuple[str, str]] = {}
        self.field_names: dict[int, tuple[int, str, str]] = {}
        self.jobs: dict[int, str] = {}
        self.validity: dict[_EdgeKey, tuple[datetime, datetime | None]] = {}

    def hits(self, page: list[tuple[int, str, int, int, int]]) -> list[DatasetHit]:
        if not page:
            return []
        ids = [p[0] for p in page]
        infos = load_datasets(ids, self.as_of, fields="personal")
        self.dataset_names.update({pk: (i.namespace, i.name) for pk, i in infos.items()})
        formats = dict(Dataset.objects.filter(id__in=ids).values_list("id", "storage_format"))
        in_page = np.isin(self.best.dataset, np.asarray(ids, dtype=np.int64))
        field_ids = self.best.field[in_page].tolist()
        by_dataset: dict[int, list[int]] = defaultdict(list)
        for k, dataset_id in zip(
            np.flatnonzero(in_page).tolist(), self.best.dataset[in_page].tolist(), strict=True
        ):
            by_dataset[dataset_id].append(k)
        identifiers = self._identifiers(field_ids)
        # One path per dataset (its evidence); a field shows only its last step.
        evidence_paths: dict[int, tuple[PathStep, ...]] = {}
        for dataset_id, _, _, field_id, group in page:
            if field_id >= 0:
                evidence_paths[dataset_id] = self._path(self._index(field_id))
            else:
                evidence_paths[dataset_id] = self.groups[group].reach.dataset_path(dataset_id)
        parents = [p for p in self.best.parent[in_page].tolist() if p >= 0]
        jobs = [j for j in self.best.job[in_page].tolist() if j >= 0]
        self._load_details(list(evidence_paths.values()), [*field_ids, *parents], jobs)
        hits = []
        for dataset_id, relation, distance, _, _ in page:
            info = infos[dataset_id]
            fields_by_id = {f.pk: f for f in info.fields}
            found = [
                self._field_hit(k, fields_by_id, identifiers)
                for k in by_dataset.get(dataset_id, [])
            ]
            found.sort(key=lambda f: (RELATION_RANK[f.relation], f.name))
            path = evidence_paths[dataset_id]
            note = "subject flag propagated" if not path and relation != AGGREGATE else ""
            hits.append(
                DatasetHit(
                    id=dataset_id,
                    namespace=info.namespace,
                    name=info.name,
                    node_id=dataset_node_id(info.namespace, info.name),
                    relation=relation,
                    distance=distance,
                    fields=found,
                    personal_fields=sorted(
                        (f.name, f.pii_category or UNCATEGORISED_KIND)
                        for f in info.fields
                        if f.pii_category or f.subject_kind
                    ),
                    owners=[{"name": o.name, "type": o.type} for o in info.owners],
                    retention=(
                        Retention(
                            info.retention.name,
                            info.retention.duration_days,
                            info.retention.action or None,
                            info.retention.legal_basis,
                        )
                        if info.retention
                        else None
                    ),
                    location=info.location,
                    storage_format=formats.get(dataset_id, ""),
                    lifecycle_state=info.lifecycle_state,
                    evidence=self._evidence(path, note),
                )
            )
        return hits

    def _index(self, field_id: int) -> int:
        return int(np.searchsorted(self.best.field, field_id))

    def _path(self, k: int) -> tuple[PathStep, ...]:
        group = int(self.best.group[k])
        if group < 0:
            return ()
        return self.groups[group].reach.path(int(self.best.field[k]))

    def _identifiers(self, field_ids: list[int]) -> dict[int, set[int]]:
        """For each field, the identifiers whose declared fields reach it with its rows."""
        found: dict[int, set[int]] = defaultdict(set)
        for field_id in field_ids:
            found[field_id].update(self.extra_identifiers.get(field_id, ()))
        wanted = np.asarray(field_ids, dtype=np.int64)
        if len(self.groups) == 1:  # one traversal: its identifiers hold every field it keeps
            keeps = self.best.code[np.searchsorted(self.best.field, wanted)] != _AGGREGATE_CODE
            for field_id in wanted[keeps].tolist():
                found[field_id].update(self.groups[0].indexes)
            return found
        for g in self.groups:
            holding = g.arrays.field[g.codes != _AGGREGATE_CODE]
            if holding.size == 0 or wanted.size == 0:
                continue
            for field_id in wanted[np.isin(wanted, holding, kind="table")].tolist():
                found[field_id].update(g.indexes)
        return found

    def _field_hit(
        self,
        k: int,
        fields_by_id: dict[int, GraphFieldInfo],
        identifiers: dict[int, set[int]],
    ) -> FieldHit:
        field_id = int(self.best.field[k])
        info = fields_by_id.get(field_id)  # personal fields, as of the search's instant
        dataset_id, name, ftype = self.field_names[field_id]
        parent, job = int(self.best.parent[k]), int(self.best.job[k])
        return FieldHit(
            name=name,
            node_id=field_node_id(*self.dataset_names[dataset_id], name),
            relation=_RELATIONS[int(self.best.code[k])],
            type=ftype,
            pii_category=info.pii_category if info else "",
            subject_kind=info.subject_kind if info else None,
            masked=bool(self.best.masked[k]),
            identifiers=tuple(sorted(identifiers.get(field_id, ()))),
            source=self._field_node(parent) if parent >= 0 else None,
            job=self.jobs.get(job) if job >= 0 else None,
            hashed=bool(self.best.hashed[k]),
        )

    def _load_details(
        self, paths: list[tuple[PathStep, ...]], shown: list[int], shown_jobs: list[int]
    ) -> None:
        """Load field, dataset and job names and edge validity for the fields and paths shown."""
        fields: set[int] = set(shown)
        datasets: set[int] = set()
        jobs: set[int] = set(shown_jobs)
        wanted: set[_EdgeKey] = set()
        for path in paths:
            for step in path:
                if step.field_id is not None:
                    fields.add(step.field_id)
                datasets.add(step.dataset_id)
                if step.job_id is not None:
                    jobs.add(step.job_id)
            for before, step in pairwise(path):
                if before.field_id is not None:
                    wanted.add(self._key(before.field_id, step))
        for pk, (ds_pk, namespace, ds_name, name, ftype, _) in field_rows(fields).items():
            self.field_names[pk] = (ds_pk, name, ftype)
            self.dataset_names.setdefault(ds_pk, (namespace, ds_name))
        missing = datasets - set(self.dataset_names)
        self.dataset_names.update(load_dataset_names(missing))
        self.jobs = {pk: job_node_id(*names) for pk, names in load_job_names(jobs).items()}
        self._load_validity(wanted)

    def _load_validity(self, wanted: set[_EdgeKey]) -> None:
        """Load when each edge shown was valid: one query, timestamps as text (cheap to parse)."""
        if not wanted:
            return
        sources = sorted({key[0] for key in wanted})
        targets = sorted({key[2] for key in wanted})
        where_source, params = where_in("source_field_id", sources)
        where_target, more = where_in("target_dataset_id", targets)
        params += more
        valid, stamps = _valid_sql(self.as_of)
        params += stamps
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT source_field_id, target_field_id, target_dataset_id, job_id, "
                "transformation_type, transformation_subtype, "
                f"{ts_sql('valid_from')}, {ts_sql('valid_to')} FROM graph_columnedge "
                f"WHERE {where_source} AND {where_target} AND {valid}",
                params,
            )
            rows = cursor.fetchall()
        for row in rows:
            key: _EdgeKey = (row[0], row[1], row[2], row[3], row[4], row[5])
            if key not in wanted:
                continue
            start, end = read_ts(row[6]), read_ts(row[7])
            known = self.validity.get(key)
            if start is not None and (known is None or start > known[0]):
                self.validity[key] = (start, end)

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

    def _field_node(self, field_id: int) -> str:
        dataset_id, name, _ = self.field_names[field_id]
        return field_node_id(*self.dataset_names[dataset_id], name)

    def _step_target(self, step: PathStep) -> str:
        if step.field_id is not None and step.field_id in self.field_names:
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
