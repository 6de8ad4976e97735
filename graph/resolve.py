"""Node ids resolved to their database rows: the in-process directory first
(graph/directory.py), then one statement over every split of the id."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import Q

from catalog import naming
from catalog.models import Dataset, DatasetAlias, DatasetField, Namespace
from catalog.pgsql import bound_cursor
from graph import directory as node_directory
from graph.models import Job
from graph.nodeids import (
    DatasetNodeId,
    FieldNodeId,
    JobNodeId,
    MalformedNodeId,
    ResolvedNode,
    UnknownNodeId,
    namespace_candidates,
    split_kind,
)


def resolve_node_id(raw: str) -> ResolvedNode:
    """Resolve ``raw`` against the database: one query (two for a field id).

    Raises MalformedNodeId when the text is not a node id and UnknownNodeId
    when no namespace, dataset, job or field matches.
    """
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
    kind, rest = split_kind(raw)
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
    kind, rest = split_kind(raw)
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
    statement, the pairs bound as two arrays."""
    with bound_cursor() as cursor:
        cursor.execute(
            f"SELECT r.id, n.name, r.name FROM unnest(%s::text[], %s::text[]) AS c(ns, name) "
            f"JOIN catalog_namespace n ON n.name = c.ns "
            f"JOIN {table} r ON r.namespace_id = n.id AND r.name = c.name",
            [[ns for ns, _ in candidates], [name for _, name in candidates]],
        )
        return cursor.fetchall()


def _pg_field(raw: str, candidates: list[tuple[str, str]]) -> ResolvedNode:
    """A field id resolved in one statement over every (namespace, dataset, field)
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
