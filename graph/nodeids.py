"""Typed lineage node ids: ``dataset:{ns}:{name}``, ``job:{ns}:{name}``,
``datasetField:{ns}:{name}:{field}``.

OpenLineage namespaces are URIs holding colons (``postgres://db:5432``) and
names may hold colons, slashes and dots, so an id cannot be split naively: it
is resolved against the namespaces (and, for fields, the datasets) that exist,
preferring the longest namespace that matches (graph/resolve.py). Parse once at
the edge, then pass the typed value around.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

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

    @property
    def label(self) -> str:
        """What pages and download names call it: its name, or ``dataset · field``."""
        node = self.id
        return f"{node.dataset} · {node.field}" if isinstance(node, FieldNodeId) else node.name

    def dataset(self) -> ResolvedNode:
        """A field's dataset; a dataset or job itself."""
        node = self.id
        if isinstance(node, FieldNodeId) and self.dataset_pk is not None:
            return ResolvedNode(node.dataset_id, self.dataset_pk, self.dataset_pk)
        return self

    def __str__(self) -> str:
        return str(self.id)


def dataset_node_id(namespace: str, name: str) -> str:
    return f"{DATASET_PREFIX}{namespace}:{name}"


def job_node_id(namespace: str, name: str) -> str:
    return f"{JOB_PREFIX}{namespace}:{name}"


def field_node_id(namespace: str, dataset: str, field: str) -> str:
    return f"{FIELD_PREFIX}{namespace}:{dataset}:{field}"


def split_kind(raw: str) -> tuple[str, str]:
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
    :func:`graph.resolve.resolve_node_id` to resolve field ids against existing datasets.
    """
    if not isinstance(raw, str) or not raw:
        raise MalformedNodeId("nodeId is required")
    kind, rest = split_kind(raw)
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
