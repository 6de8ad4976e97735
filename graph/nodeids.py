"""Typed lineage node ids: ``dataset:{ns}:{name}``, ``job:{ns}:{name}``,
``datasetField:{ns}:{name}:{field}``.

OpenLineage namespaces are URIs holding colons (``postgres://db:5432``) and
names may hold colons, slashes and dots, so an id cannot be split naively: it
is resolved against the namespaces (and, for fields, the datasets) that exist,
preferring the longest namespace that matches. Parse once at the edge, then
pass the typed value around.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings
from django.db import connection
from django.db.models import Q

from catalog import naming
from catalog.models import Dataset, DatasetAlias, DatasetField, Namespace
from catalog.pgsql import bound_cursor
from graph.models import Job

DATASET_PREFIX = "dataset:"
JOB_PREFIX = "job:"
FIELD_PREFIX = "datasetField:"


class MalformedNodeId(ValueError):
    """The text is not shaped like a node id at all (a 400, naming ``nodeId``)."""


class UnknownNodeId(LookupError):
    """The id is well formed but names nothing that exists (a 404, naming the id)."""

    def __init__(self, raw: str) -> None:
        super().__init__(f"Node {raw} not found")
        self.raw = raw


@dataclass(frozen=True, slots=True)
class DatasetNodeId:
    namespace: str
    name: str
    kind: Literal["dataset"] = "dataset"

    def __str__(self) -> str:
        return f"{DATASET_PREFIX}{self.namespace}:{self.name}"


@dataclass(frozen=True, slots=True)
class JobNodeId:
    namespace: str
    name: str
    kind: Literal["job"] = "job"

    def __str__(self) -> str:
        return f"{JOB_PREFIX}{self.namespace}:{self.name}"


@dataclass(frozen=True, slots=True)
class FieldNodeId:
    namespace: str
    dataset: str
    field: str
    kind: Literal["datasetField"] = "datasetField"

    def __str__(self) -> str:
        return f"{FIELD_PREFIX}{self.namespace}:{self.dataset}:{self.field}"

    @property
    def dataset_id(self) -> DatasetNodeId:
        return DatasetNodeId(self.namespace, self.dataset)


NodeId = DatasetNodeId | JobNodeId | FieldNodeId


@dataclass(frozen=True, slots=True)
class ResolvedNode:
    """A node id resolved to its database row: ``pk`` of the dataset, job or field.

    ``dataset_pk`` is the field's dataset for field nodes, the dataset itself
    for dataset nodes and None for jobs.
    """

    id: NodeId
    pk: int
    dataset_pk: int | None = None

    @property
    def kind(self) -> str:
        return self.id.kind

    def __str__(self) -> str:
        return str(self.id)


def dataset_node_id(namespace: str, name: str) -> str:
    return f"{DATASET_PREFIX}{namespace}:{name}"


def job_node_id(namespace: str, name: str) -> str:
    return f"{JOB_PREFIX}{namespace}:{name}"


def field_node_id(namespace: str, dataset: str, field: str) -> str:
    return f"{FIELD_PREFIX}{namespace}:{dataset}:{field}"


def _split_kind(raw: str) -> tuple[str, str]:
    for prefix in (FIELD_PREFIX, DATASET_PREFIX, JOB_PREFIX):
        if raw.startswith(prefix):
            rest = raw[len(prefix) :]
            if ":" not in rest:
                raise MalformedNodeId(
                    f"nodeId {raw!r} must look like {prefix}{{namespace}}:{{name}}"
                    + (":{field}" if prefix == FIELD_PREFIX else "")
                )
            return prefix[:-1], rest
    raise MalformedNodeId(
        f"nodeId {raw!r} must start with dataset:, job: or datasetField: "
        "(e.g. dataset:postgres://db:5432:public.orders)"
    )


def namespace_candidates(rest: str) -> list[str]:
    """Every prefix of ``rest`` that ends just before a colon, longest first."""
    found = [rest[:i] for i, ch in enumerate(rest) if ch == ":" and i > 0]
    return sorted(found, key=len, reverse=True)


def parse_node_id(raw: str, namespaces: Iterable[str]) -> NodeId:
    """Parse ``raw`` given the known namespaces (longest matching namespace wins).

    For field ids the dataset/field boundary is the last colon; use
    :func:`resolve_node_id` to resolve field ids against existing datasets.
    """
    if not isinstance(raw, str) or not raw:
        raise MalformedNodeId("nodeId is required")
    kind, rest = _split_kind(raw)
    known = set(namespaces)
    for namespace in namespace_candidates(rest):
        if namespace not in known:
            continue
        tail = rest[len(namespace) + 1 :]
        if not tail:
            raise MalformedNodeId(f"nodeId {raw!r} has no name after the namespace")
        if kind == "dataset":
            return DatasetNodeId(namespace, tail)
        if kind == "job":
            return JobNodeId(namespace, tail)
        dataset, sep, field = tail.rpartition(":")
        if not sep or not dataset or not field:
            raise MalformedNodeId(f"nodeId {raw!r} must end with :{{dataset}}:{{field}}")
        return FieldNodeId(namespace, dataset, field)
    raise UnknownNodeId(raw)


_RESOLVED: dict[str, tuple[ResolvedNode, float]] = {}
_MAX_RESOLVED = 50_000


def forget_resolved(*args: Any, **kwargs: Any) -> None:
    """Drop every cached resolution (connected to deletions and new namespaces)."""
    _RESOLVED.clear()


def resolve_node_id(raw: str) -> ResolvedNode:
    """Resolve ``raw`` against the database: one query (two for a field id).

    Raises MalformedNodeId when the text is not a node id and UnknownNodeId
    when no namespace, dataset, job or field matches. Found ids are kept for
    NODE_ID_CACHE_SECONDS: rows are never renamed, and a deletion or a new
    namespace in this process clears the cache (elsewhere it runs out).
    """
    clock = time.monotonic()
    hit = _RESOLVED.get(raw) if isinstance(raw, str) else None
    if hit is not None and hit[1] > clock:
        return hit[0]
    resolved = _resolve_node_id(raw)
    if len(_RESOLVED) >= _MAX_RESOLVED:
        _RESOLVED.clear()
    _RESOLVED[raw] = (resolved, clock + float(getattr(settings, "NODE_ID_CACHE_SECONDS", 60)))
    return resolved


def _resolve_node_id(raw: str) -> ResolvedNode:
    try:
        return _resolve_named(raw)
    except UnknownNodeId:
        found = _resolve_alias(raw)
        if found is None:
            raise
        return found


def _resolve_alias(raw: str) -> ResolvedNode | None:
    """A dataset or field id naming a dataset by one of its aliases (the symlinks facet),
    resolved to the dataset's own name."""
    kind, rest = _split_kind(raw)
    if kind == "job":
        return None
    splits = _canonical_splits(
        kind, [(ns, rest[len(ns) + 1 :]) for ns in namespace_candidates(rest)]
    )
    if not splits:
        return None
    query = Q()
    for ns, name, _ in splits:
        query |= Q(namespace__name=ns, name=name)
    found = {
        (ns, name): (pk, target_ns, target)
        for ns, name, pk, target_ns, target in DatasetAlias.objects.filter(query).values_list(
            "namespace__name", "name", "dataset_id", "dataset__namespace__name", "dataset__name"
        )
    }
    for ns, name, field in splits:
        if (ns, name) not in found:
            continue
        pk, target_ns, target = found[(ns, name)]
        if field is None:
            return ResolvedNode(DatasetNodeId(target_ns, target), pk, pk)
        field_pk = (
            DatasetField.objects.filter(dataset_id=pk, name=field).values_list("pk", flat=True)
        ).first()
        if field_pk is not None:
            return ResolvedNode(FieldNodeId(target_ns, target, field), field_pk, pk)
    return None


def _resolve_named(raw: str) -> ResolvedNode:
    if not isinstance(raw, str) or not raw.strip():
        raise MalformedNodeId("nodeId is required")
    if len(raw) > 4096:
        raise MalformedNodeId("nodeId is too long")
    kind, rest = _split_kind(raw)
    candidates = [(ns, rest[len(ns) + 1 :]) for ns in namespace_candidates(rest)]
    candidates = _canonical(kind, [(ns, tail) for ns, tail in candidates if tail])
    if not candidates:
        raise UnknownNodeId(raw)
    known = _from_directory(kind, candidates)
    if known is not None:
        return known
    if kind in ("dataset", "job"):
        # One query for every (namespace, name) split; the longest namespace wins.
        model = Dataset if kind == "dataset" else Job
        if connection.vendor == "postgresql":
            rows = _pg_named(model._meta.db_table, candidates)
        else:
            query = Q()
            for ns, tail in candidates:
                query |= Q(namespace__name=ns, name=tail)
            rows = list(model.objects.filter(query).values_list("pk", "namespace__name", "name"))
        if not rows:
            raise UnknownNodeId(raw)
        pk, ns, name = max(rows, key=lambda row: len(row[1]))
        if kind == "dataset":
            return ResolvedNode(DatasetNodeId(ns, name), pk, pk)
        return ResolvedNode(JobNodeId(ns, name), pk)
    if connection.vendor == "postgresql":
        return _pg_field(raw, candidates)
    found = dict(
        Namespace.objects.filter(name__in=[ns for ns, _ in candidates]).values_list("name", "pk")
    )
    for ns, tail in candidates:
        if ns in found:
            resolved = _resolve_field(ns, found[ns], tail)
            if resolved is not None:
                return resolved
    raise UnknownNodeId(raw)


def _canonical(kind: str, candidates: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (namespace, rest) splits with dataset names in their canonical spelling
    (catalog.naming): for a field id, under each split of the dataset from the field."""
    if kind == "job":
        return candidates
    return [
        (ns, name if field is None else f"{name}:{field}")
        for ns, name, field in _canonical_splits(kind, candidates)
    ]


def _canonical_splits(
    kind: str, candidates: list[tuple[str, str]]
) -> list[tuple[str, str, str | None]]:
    """(namespace, canonical dataset name, field or None) for each (namespace, rest) split,
    and for a field id each split of the dataset from the field; longest namespace first."""
    found: dict[tuple[str, str, str | None], None] = {}
    for ns, tail in candidates:
        if kind == "dataset":
            found[(*naming.canonical(ns, tail), None)] = None
            continue
        for i, ch in enumerate(tail):
            if ch == ":" and 0 < i < len(tail) - 1:
                found[(*naming.canonical(ns, tail[:i]), tail[i + 1 :])] = None
    return list(found)


def _from_directory(kind: str, candidates: list[tuple[str, str]]) -> ResolvedNode | None:
    """The node from the in-process directory (graph/directory.py) when it can tell for
    sure: a trusted node under the longest namespace that exists, and for a field the
    longest dataset name; None sends the caller to the database."""
    from graph import directory as node_directory

    found = node_directory.get()
    if found is None:
        return None
    known = [(ns, tail) for ns, tail in candidates if ns in found.namespace_ids]
    if not known:
        return None
    ns, tail = known[0]
    if kind == "dataset":
        pk = found.dataset_pk(ns, tail)
        return None if pk is None else ResolvedNode(DatasetNodeId(ns, tail), pk, pk)
    if kind == "job":
        pk = found.job_pk(ns, tail)
        return None if pk is None else ResolvedNode(JobNodeId(ns, tail), pk)
    # The last colon gives the longest dataset name, the one the database would pick.
    dataset, sep, field = tail.rpartition(":")
    if not sep or not dataset or not field:
        return None
    dataset_pk = found.dataset_pk(ns, dataset)
    field_pk = None if dataset_pk is None else found.field_pk(dataset_pk, field)
    if dataset_pk is None or field_pk is None:
        return None
    return ResolvedNode(FieldNodeId(ns, dataset, field), field_pk, dataset_pk)


def _pg_named(table: str, candidates: list[tuple[str, str]]) -> list[tuple[Any, ...]]:
    """Rows (pk, namespace, name) of ``table`` matching any (namespace, name) pair: one
    statement of fixed text, prepared once per connection."""
    with bound_cursor() as cursor:
        cursor.execute(
            f"SELECT r.id, n.name, r.name FROM unnest(%s::text[], %s::text[]) AS c(ns, name) "
            f"JOIN catalog_namespace n ON n.name = c.ns "
            f"JOIN {table} r ON r.namespace_id = n.id AND r.name = c.name",
            [[ns for ns, _ in candidates], [name for _, name in candidates]],
        )
        return cursor.fetchall()


def _pg_field(raw: str, candidates: list[tuple[str, str]]) -> ResolvedNode:
    """A field id resolved in one prepared statement over every (namespace, dataset, field)
    split; the longest namespace wins, then the longest dataset name."""
    triples = [
        (ns, tail[:i], tail[i + 1 :])
        for ns, tail in candidates
        for i, ch in enumerate(tail)
        if ch == ":" and i > 0 and i < len(tail) - 1
    ]
    if not triples:
        raise UnknownNodeId(raw)
    with bound_cursor() as cursor:
        cursor.execute(
            "SELECT f.id, f.dataset_id, n.name, d.name, f.name "
            "FROM unnest(%s::text[], %s::text[], %s::text[]) AS c(ns, dataset, field) "
            "JOIN catalog_namespace n ON n.name = c.ns "
            "JOIN catalog_dataset d ON d.namespace_id = n.id AND d.name = c.dataset "
            "JOIN catalog_datasetfield f ON f.dataset_id = d.id AND f.name = c.field",
            [[t[0] for t in triples], [t[1] for t in triples], [t[2] for t in triples]],
        )
        rows = cursor.fetchall()
    if not rows:
        raise UnknownNodeId(raw)
    pk, dataset_pk, ns, dataset, field = max(rows, key=lambda r: (len(r[2]), len(r[3])))
    return ResolvedNode(FieldNodeId(ns, dataset, field), pk, dataset_pk)


def _resolve_field(namespace: str, ns_pk: int, tail: str) -> ResolvedNode | None:
    # Both dataset and field names may hold colons: try every split, longest dataset first.
    splits = [(tail[:i], tail[i + 1 :]) for i, ch in enumerate(tail) if ch == ":"]
    splits = [(d, f) for d, f in splits if d and f]
    if not splits:
        return None
    query = Q()
    for dataset, field in splits:
        query |= Q(dataset__name=dataset, name=field)
    rows = DatasetField.objects.filter(query, dataset__namespace_id=ns_pk).values_list(
        "pk", "dataset_id", "dataset__name", "name"
    )
    best = max(rows, key=lambda row: len(row[2]), default=None)
    if best is None:
        return None
    return ResolvedNode(FieldNodeId(namespace, best[2], best[3]), best[0], best[1])
