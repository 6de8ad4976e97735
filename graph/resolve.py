"""Node ids resolved to their database rows: the in-process directory first
(graph/directory.py), then the database, over the splits of the id under the
namespaces that exist."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast, get_args

from django.db.models import Model

from catalog import naming
from catalog.errors import ApiError
from catalog.models import Dataset, DatasetAlias, DatasetField, Namespace
from catalog.params import choice_param
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
from graph.queries import DirectionName

# (namespace, the rest of the id after it), longest namespace first.
Split = tuple[str, str]


def node_param(params: Mapping[str, str], name: str = "nodeId") -> ResolvedNode:
    """The node named by query parameter ``name``: 400 when malformed, 404 when unknown."""
    raw = params.get(name)
    if raw is None or raw == "":
        raise ApiError(f"{name} is required", name)
    try:
        return resolve_node_id(raw)
    except MalformedNodeId as exc:
        raise ApiError(str(exc).replace("nodeId", name, 1), name) from exc
    except UnknownNodeId as exc:
        raise ApiError(f"Node {raw} not found", name, 404, {"nodeId": raw}) from exc


DIRECTIONS: tuple[str, ...] = get_args(DirectionName)


def direction_param(params: Mapping[str, str], default: DirectionName = "both") -> DirectionName:
    """The ``direction`` query parameter, one of DIRECTIONS: 400 otherwise."""
    return cast(DirectionName, choice_param(params, "direction", default, DIRECTIONS))


def resolve_node_id(raw: str) -> ResolvedNode:
    """Resolve ``raw``: the longest namespace that exists wins, then (for a field) the
    longest dataset name; a dataset named by one of its aliases (the symlinks facet)
    resolves to the dataset's own name.

    Raises MalformedNodeId when the text is not a node id and UnknownNodeId
    when no namespace, dataset, job or field matches.
    """
    if not isinstance(raw, str) or not raw.strip():
        raise MalformedNodeId("nodeId is required")
    if len(raw) > 4096:
        raise MalformedNodeId("nodeId is too long")
    kind, rest = split_kind(raw)
    # A dataset's namespace in its canonical spelling (catalog.naming); a job's as sent.
    spell = (lambda ns: ns) if kind == "job" else naming.canonical_namespace
    splits = [
        (spell(ns), rest[len(ns) + 1 :]) for ns in namespace_candidates(rest) if rest[len(ns) + 1 :]
    ]
    found = _from_directory(kind, splits)
    if found is not None:
        return found
    # Only the namespaces that exist are looked into: an id of many colons has as many
    # splits, and a field id as many again under each.
    existing = dict(
        Namespace.objects.filter(name__in={ns for ns, _ in splits}).values_list("name", "pk")
    )
    splits = [(ns, tail) for ns, tail in splits if ns in existing]
    for model in (Job,) if kind == "job" else (Dataset, DatasetAlias):
        found = _from_database(kind, model, splits, existing)
        if found is not None:
            return found
    raise UnknownNodeId(raw)


def _names(kind: str, ns: str, tail: str) -> list[tuple[str, str | None]]:
    """(canonical dataset or job name, field or None) that ``tail`` may name under ``ns``;
    for a field, every split of the dataset from the field, longest dataset first."""
    if kind == "job":
        return [(tail, None)]
    if kind == "dataset":
        return [(naming.canonical(ns, tail)[1], None)]
    return [
        (naming.canonical(ns, tail[:i])[1], tail[i + 1 :])
        for i in range(len(tail) - 2, 0, -1)
        if tail[i] == ":"
    ]


def _from_database(
    kind: str, model: type[Model], splits: list[Split], existing: dict[str, int]
) -> ResolvedNode | None:
    """The node under the longest namespace, then the longest dataset name, of ``model``
    (a job, a dataset, or a dataset's alias); flat IN lists, whatever the splits."""
    wanted = {
        (existing[ns], name, field): ns
        for ns, tail in splits
        for name, field in _names(kind, ns, tail)
    }
    if not wanted:
        return None
    rows = model._default_manager.filter(
        namespace_id__in={pk for pk, _, _ in wanted}, name__in={name for _, name, _ in wanted}
    ).values_list("namespace_id", "name", "pk" if model is not DatasetAlias else "dataset_id")
    named = {(ns, name): pk for ns, name, pk in rows}
    fields: dict[tuple[int, str], int] = {}
    if kind == "datasetField" and named:
        fields = {
            (ds, name): pk
            for pk, ds, name in DatasetField.objects.filter(
                dataset_id__in=set(named.values()),
                name__in={field for _, _, field in wanted},
            ).values_list("pk", "dataset_id", "name")
        }
    for ns_pk, name, field in wanted:  # longest namespace, then longest name, first
        pk = named.get((ns_pk, name))
        if pk is None:
            continue
        if model is DatasetAlias:
            aliased = _aliased(pk, field, fields)
            if aliased is None:
                continue  # the field is not the aliased dataset's: a shorter name may hold it
            return aliased
        if field is None:
            ns = wanted[(ns_pk, name, field)]
            node = JobNodeId(ns, name) if kind == "job" else DatasetNodeId(ns, name)
            return ResolvedNode(node, pk, None if kind == "job" else pk)
        field_pk = fields.get((pk, field))
        if field_pk is not None:
            return ResolvedNode(
                FieldNodeId(wanted[(ns_pk, name, field)], name, field), field_pk, pk
            )
    return None


def _aliased(pk: int, field: str | None, fields: dict[tuple[int, str], int]) -> ResolvedNode | None:
    """The dataset ``pk`` an alias names (or its ``field``), under its own name."""
    ns, name = Dataset.objects.filter(pk=pk).values_list("namespace__name", "name").get()
    if field is None:
        return ResolvedNode(DatasetNodeId(ns, name), pk, pk)
    field_pk = fields.get((pk, field))
    return None if field_pk is None else ResolvedNode(FieldNodeId(ns, name, field), field_pk, pk)


def _from_directory(kind: str, splits: list[Split]) -> ResolvedNode | None:
    """The node from the in-process directory (graph/directory.py) when it can tell for
    sure: a trusted node under the longest namespace that exists, and for a field the
    longest dataset name; None sends the caller to the database."""
    found = node_directory.get()
    if found is None:
        return None
    known = [(ns, tail) for ns, tail in splits if ns in found.namespace_ids]
    if not known:
        return None
    ns, tail = known[0]
    if kind == "job":
        pk = found.job_pk(ns, tail)
        return None if pk is None else ResolvedNode(JobNodeId(ns, tail), pk)
    if kind == "dataset":
        name = naming.canonical(ns, tail)[1]
        pk = found.dataset_pk(ns, name)
        return None if pk is None else ResolvedNode(DatasetNodeId(ns, name), pk, pk)
    # The last colon gives the longest dataset name, the one the database would pick.
    dataset, sep, field = tail.rpartition(":")
    if not sep or not dataset or not field:
        return None
    dataset = naming.canonical(ns, dataset)[1]
    dataset_pk = found.dataset_pk(ns, dataset)
    field_pk = None if dataset_pk is None else found.field_pk(dataset_pk, field)
    if dataset_pk is None or field_pk is None:
        return None
    return ResolvedNode(FieldNodeId(ns, dataset, field), field_pk, dataset_pk)
