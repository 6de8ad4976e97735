"""Reads of the lineage graph: every function takes ``depth`` and ``as_of`` explicitly
and returns small dataclasses shared by the API, the pages and the privacy search.

``as_of=None`` means the current graph (every edge still open); an instant
means the graph as it was then: an edge counts when valid_from <= as_of <
valid_to. Depth is counted in jobs (see graph/traverse.py). Answers larger
than ``max_nodes`` keep the nearest nodes and say how many were cut.

The traversals run over the in-process snapshot (graph/snapshot.py); node
details come from the database in a fixed number of queries per answer.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

import numpy as np
from django.db.models import Exists, OuterRef, Q, QuerySet

from catalog import naming
from catalog.flags import copied_flags_as_of, flags_as_of
from catalog.models import Dataset, DatasetField, LifecycleState
from catalog.queries import closing_versions, field_existed
from graph import directory, nodedata, snapshot, traverse
from graph.details import (
    DatasetInfo,
    FieldRow,
    JobInfo,
    OwnerInfo,
    RunInfo,
    edge_descriptions,
    field_rows,
    load_dataset_names,
    load_job_names,
)
from graph.models import Direction, TableEdge, Taint
from graph.nodeids import (
    DatasetNodeId,
    FieldNodeId,
    JobNodeId,
    ResolvedNode,
    dataset_node_id,
    field_node_id,
    job_node_id,
)
from graph.snapshot import SUBTYPES, IntArray, TimeFilter

T = TypeVar("T")
DEFAULT_MAX_NODES = 2000
MAX_NODES_LIMIT = 20_000
MAX_DEPTH = 1000
DirectionName = Literal["upstream", "downstream", "both"]
Side = Literal["root", "upstream", "downstream"]
NodeKind = Literal["DATASET", "JOB", "DATASET_FIELD"]
KIND_DS, KIND_JOB = 0, 1
SIDE_ROOT, SIDE_UP, SIDE_DOWN = 0, 1, 2
SIDE_NAMES: dict[int, Side] = {SIDE_ROOT: "root", SIDE_UP: "upstream", SIDE_DOWN: "downstream"}


@dataclass(frozen=True, slots=True)
class Cut:
    """How many nodes a capped answer left out, by kind."""

    datasets: int = 0
    jobs: int = 0
    fields: int = 0


# Answers build one GraphNode a node and one GraphEdge an edge, thousands for a large one:
# not frozen, whose __init__ sets each field through object.__setattr__ (3.6 µs a node
# against 0.4). Nothing changes them once built, so they hash by value as frozen ones do.
@dataclass(slots=True, unsafe_hash=True)
class GraphNode:
    """A dataset, job or field in a lineage answer.

    ``name`` is the dataset's or job's name (a field's dataset's); ``field``,
    ``dataset_pk``, ``field_type`` and ``subject_kind`` are a field's (empty otherwise).
    ``distance`` is in jobs from the root (between fields, in edges);
    ``hidden_upstream`` / ``hidden_downstream`` count valid neighbours not in the
    answer (for "expand" affordances).
    """

    node_id: str
    kind: NodeKind
    pk: int
    namespace: str
    name: str
    distance: int
    side: Side
    hidden_upstream: int = 0
    hidden_downstream: int = 0
    field: str = ""
    dataset_pk: int = 0
    field_type: str = ""
    subject_kind: str | None = None


@dataclass(slots=True, unsafe_hash=True)
class GraphEdge:
    """A directed edge between two node ids: data flows from origin to destination.

    Between fields, through ``job`` (a job node id, or None), with its transformation.
    """

    origin: str
    destination: str
    job: str | None = None
    transformation_type: str = ""
    transformation_subtype: str = ""
    masking: bool = False
    description: str = ""


@dataclass(frozen=True)
class LineageGraph:
    """A table-level (datasets and jobs) or column-level (fields) lineage answer:
    what graph/render.py draws as JSON, CSV, Mermaid and the explorer's data."""

    level: Literal["table", "column"]
    root: str
    direction: DirectionName
    depth: int
    as_of: datetime | None
    max_nodes: int
    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]
    truncated: bool = False
    cut: Cut = Cut()
    # Every dataset and job pk the traversal reached, before the cap (sorted arrays):
    # what a change must touch to change a table-level answer.
    reached: tuple[IntArray, IntArray] = field(
        default=(snapshot.EMPTY, snapshot.EMPTY), repr=False, compare=False
    )


# --- table lineage -----------------------------------------------------------------------


def _roots(node: ResolvedNode) -> tuple[IntArray, IntArray]:
    if isinstance(node.id, JobNodeId):
        return snapshot.EMPTY, np.asarray([node.pk], dtype=np.int64)
    ds_pk = node.dataset_pk if node.dataset_pk is not None else node.pk
    return np.asarray([ds_pk], dtype=np.int64), snapshot.EMPTY


@dataclass(frozen=True)
class _Selection:
    kinds: IntArray
    pks: IntArray
    dists: IntArray
    sides: IntArray
    truncated: bool
    cut: Cut


def _select(
    parts: list[tuple[int, int, IntArray, IntArray]],
    roots_ds: IntArray,
    roots_job: IntArray,
    max_nodes: int,
) -> _Selection:
    """Merge traversals, each (kind, side, pks, distances): a node reached both ways keeps
    its nearer side; keep the nearest ``max_nodes``."""
    k = np.concatenate([np.full(pks.size, kind, dtype=np.int64) for kind, _, pks, _ in parts])
    s = np.concatenate([np.full(pks.size, side, dtype=np.int64) for _, side, pks, _ in parts])
    p = np.concatenate([pks for _, _, pks, _ in parts])
    d = np.concatenate([dists for *_, dists in parts])
    is_root = ((k == KIND_DS) & np.isin(p, roots_ds)) | ((k == KIND_JOB) & np.isin(p, roots_job))
    s = np.where(is_root, SIDE_ROOT, s)
    order = np.lexsort((s, d, p, k))
    k, p, d, s = k[order], p[order], d[order], s[order]
    keep = np.ones(k.size, dtype=bool)
    if k.size > 1:
        keep[1:] = (k[1:] != k[:-1]) | (p[1:] != p[:-1])
    k, p, d, s = k[keep], p[keep], d[keep], s[keep]
    # Nearest first by hops: from a dataset root a job at distance k is one hop nearer than
    # the datasets it writes (also at k); from a job root, one hop farther than its inputs.
    hops = 2 * d + np.where(k == KIND_JOB, -1, 0) + (1 if roots_job.size else 0)
    chosen, truncated = traverse.nearest(k, p, hops, max_nodes)
    cut = Cut()
    if truncated:
        left = np.ones(k.size, dtype=bool)
        left[chosen] = False
        cut = Cut(
            datasets=int(((k == KIND_DS) & left).sum()), jobs=int(((k == KIND_JOB) & left).sum())
        )
    chosen = np.sort(chosen)
    return _Selection(k[chosen], p[chosen], d[chosen], s[chosen], truncated, cut)


def lineage(
    node: ResolvedNode,
    *,
    depth: int,
    as_of: datetime | None = None,
    direction: DirectionName = "both",
    max_nodes: int = DEFAULT_MAX_NODES,
) -> LineageGraph:
    """Table-level lineage around ``node``: datasets and jobs within ``depth`` jobs.

    ``both`` is the upstream closure plus the downstream closure (each
    following edge direction), not an undirected neighbourhood. A field node
    stands for its dataset.
    """
    snap = snapshot.table()
    tf = TimeFilter.at(as_of)
    roots_ds, roots_job = _roots(node)
    reaches: list[tuple[int, traverse.TableReach]] = []
    if direction in ("upstream", "both"):
        reaches.append((SIDE_UP, traverse.table_reach(snap, "up", depth, tf, roots_ds, roots_job)))
    if direction in ("downstream", "both"):
        reaches.append(
            (SIDE_DOWN, traverse.table_reach(snap, "down", depth, tf, roots_ds, roots_job))
        )
    parts = [
        (kind, side, values, dists)
        for side, reach in reaches
        for kind, values, dists in (
            (KIND_DS, reach.ds, reach.ds_dist),
            (KIND_JOB, reach.job, reach.job_dist),
        )
    ]
    sel = _select(parts, roots_ds, roots_job, max_nodes)
    is_ds = sel.kinds == KIND_DS
    edges = traverse.table_edges(snap, sel.pks[is_ds], sel.pks[~is_ds], tf)
    ds_names = nodedata.dataset_names(sel.pks[is_ds].tolist())
    job_names = nodedata.job_names(sel.pks[~is_ds].tolist())
    ds_ids = {pk: dataset_node_id(*name) for pk, name in ds_names.items()}
    job_ids = {pk: job_node_id(*name) for pk, name in job_names.items()}
    nodes = []
    of_kind: tuple[tuple[NodeKind, Any, Any, Any, Any], ...] = (
        ("DATASET", ds_names, ds_ids, edges.hidden_up_ds, edges.hidden_down_ds),
        ("JOB", job_names, job_ids, edges.hidden_up_job, edges.hidden_down_job),
    )
    # Nodes gone since the traversal (no name any more) are left out, with their edges.
    for kind, pk, dist, side in zip(
        sel.kinds.tolist(), sel.pks.tolist(), sel.dists.tolist(), sel.sides.tolist(), strict=True
    ):
        label, names, ids, up, down = of_kind[kind]
        name = names.get(pk)
        if name is not None:
            nodes.append(
                GraphNode(
                    ids[pk],
                    label,
                    pk,
                    name[0],
                    name[1],
                    dist,
                    SIDE_NAMES[side],
                    up.get(pk, 0),
                    down.get(pk, 0),
                )
            )
    links = []
    for ds, job in zip(edges.read_ds.tolist(), edges.read_job.tolist(), strict=True):
        if ds in ds_ids and job in job_ids:
            links.append(GraphEdge(ds_ids[ds], job_ids[job]))
    for job, ds in zip(edges.write_job.tolist(), edges.write_ds.tolist(), strict=True):
        if ds in ds_ids and job in job_ids:
            links.append(GraphEdge(job_ids[job], ds_ids[ds]))
    return LineageGraph(
        level="table",
        root=str(node),
        direction=direction,
        depth=depth,
        as_of=as_of,
        max_nodes=max_nodes,
        nodes=tuple(nodes),
        edges=tuple(links),
        truncated=sel.truncated,
        cut=sel.cut,
        reached=(
            traverse.distinct(np.concatenate([roots_ds, *(r.ds for _, r in reaches)])),
            traverse.distinct(np.concatenate([roots_job, *(r.job for _, r in reaches)])),
        ),
    )


# --- column lineage ----------------------------------------------------------------------


def _field_roots(node: ResolvedNode, as_of: datetime | None) -> IntArray:
    if isinstance(node.id, FieldNodeId):
        return np.asarray([node.pk], dtype=np.int64)
    if isinstance(node.id, DatasetNodeId):
        found = directory.get()
        fields = None if found is None else found.field_pks(node.pk, as_of)
        if fields is not None:
            return fields
        qs = DatasetField.objects.filter(dataset_id=node.pk)
        if as_of is not None:
            qs = qs.filter(field_existed(as_of))
        else:
            qs = qs.filter(removed_at__isnull=True)
        return np.asarray(list(qs.values_list("pk", flat=True)), dtype=np.int64)
    raise ValueError("column lineage starts from a datasetField or a dataset")


def column_lineage(
    node: ResolvedNode,
    *,
    depth: int,
    as_of: datetime | None = None,
    with_downstream: bool = False,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> LineageGraph:
    """Field-level lineage: upstream fields of ``node`` (a field, or every field of a
    dataset) within ``depth`` edges, plus downstream ones when ``with_downstream``."""
    snap = snapshot.columns()
    tf = TimeFilter.at(as_of)
    roots = _field_roots(node, as_of)
    reaches = [(SIDE_UP, traverse.field_reach(snap, "up", depth, tf, roots))]
    if with_downstream:
        reaches.append((SIDE_DOWN, traverse.field_reach(snap, "down", depth, tf, roots)))
    # Fields go through as one kind, with no job roots: nearest by distance alone.
    parts = [(KIND_DS, side, r.field, r.dist) for side, r in reaches]
    sel = _select(parts, roots, snapshot.EMPTY, max_nodes)
    pks, dists, sides = sel.pks, sel.dists, sel.sides
    links = traverse.column_edges(snap, pks, tf)
    info = nodedata.field_rows(pks.tolist())
    if as_of is not None:
        info = _subject_kinds_then(info, as_of)
    ids = {pk: field_node_id(row[1], row[2], row[3]) for pk, row in info.items()}
    nodes = tuple(
        GraphNode(
            node_id=ids[pk],
            kind="DATASET_FIELD",
            pk=pk,
            dataset_pk=info[pk][0],
            namespace=info[pk][1],
            name=info[pk][2],
            field=info[pk][3],
            field_type=info[pk][4],
            distance=dist,
            side=SIDE_NAMES[side],
            subject_kind=info[pk][5],
            hidden_upstream=links.hidden_up.get(pk, 0),
            hidden_downstream=links.hidden_down.get(pk, 0),
        )
        for pk, dist, side in zip(pks.tolist(), dists.tolist(), sides.tolist(), strict=True)
        if pk in info
    )
    job_ids = {
        pk: job_node_id(*name)
        for pk, name in nodedata.job_names(j for j in links.job.tolist() if j >= 0).items()
    }
    descriptions = edge_descriptions(links.edge_id[links.described == 1].tolist())
    edges = tuple(
        GraphEdge(
            origin=ids[src],
            destination=ids[tgt],
            job=job_ids.get(job),
            transformation_type="INDIRECT" if ttype else "DIRECT",
            transformation_subtype=SUBTYPES[sub],
            masking=bool(mask),
            description=descriptions.get(edge_id, ""),
        )
        for src, tgt, job, ttype, sub, mask, edge_id in zip(
            links.src.tolist(),
            links.tgt.tolist(),
            links.job.tolist(),
            links.ttype.tolist(),
            links.sub.tolist(),
            links.mask.tolist(),
            links.edge_id.tolist(),
            strict=True,
        )
        if src in ids and tgt in ids
    )
    return LineageGraph(
        level="column",
        root=str(node),
        direction="both" if with_downstream else "upstream",
        depth=depth,
        as_of=as_of,
        max_nodes=max_nodes,
        nodes=nodes,
        edges=edges,
        truncated=sel.truncated,
        cut=Cut(fields=sel.cut.datasets),
    )


def _subject_kinds_then(info: dict[int, FieldRow], as_of: datetime) -> dict[int, FieldRow]:
    """These field rows with the subject kind each field showed at ``as_of``: read again
    (catalog.flags) for the datasets that changed since, and of those whose propagated
    flags alone changed only for the fields propagation ever flagged; the others show it
    as now."""
    changed, flagged = nodedata.changed_datasets(
        sorted({row[0] for row in info.values()}), as_of, flagged=True
    )
    ever = {pk for fields in flagged.values() for pk, _ in fields}
    rewound = [pk for pk, (ds, *_) in info.items() if ds in changed and ds not in flagged]
    copies = [pk for pk, (ds, *_) in info.items() if ds in flagged and pk in ever]
    found = flags_as_of(rewound, as_of, named=False) if rewound else {}
    then = {pk: flag.subject_kind for pk, flag in found.items()}
    if copies:
        then.update({pk: kind for pk, (_, kind) in copied_flags_as_of(copies, as_of).items()})
    return {pk: (*row[:5], then[pk]) if pk in then else row for pk, row in info.items()}


# --- impact and root cause ---------------------------------------------------------------


@dataclass(slots=True)
class ImpactedDataset:
    dataset: DatasetInfo
    distance: int
    # Jobs in the impact that write this dataset, as node ids (why it is impacted).
    via_jobs: tuple[str, ...] = ()
    # For column-level impact: the impacted fields of this dataset.
    fields: tuple[str, ...] = ()

    @property
    def node_id(self) -> str:
        return self.dataset.node_id


@dataclass(slots=True)
class ImpactedJob:
    job: JobInfo
    distance: int

    @property
    def node_id(self) -> str:
        return self.job.node_id


@dataclass(frozen=True)
class Impact:
    """Everything downstream of a dataset, job or field, with who to tell.

    ``datasets[i].dataset.fields`` holds only the dataset's personal-data
    fields (PII category or subject kind). ``edges`` link the node ids shown
    (datasets and jobs; fields and jobs at column level).
    """

    root: str
    level: Literal["table", "column"]
    depth: int
    as_of: datetime | None
    datasets: tuple[ImpactedDataset, ...]
    jobs: tuple[ImpactedJob, ...]
    owners: tuple[OwnerInfo, ...]
    edges: tuple[GraphEdge, ...] = ()
    truncated: bool = False
    cut: Cut = Cut()
    # Table level: every dataset and job pk reached before the cap (see LineageGraph).
    reached: tuple[IntArray, IntArray] = field(
        default=(snapshot.EMPTY, snapshot.EMPTY), repr=False, compare=False
    )

    @property
    def pii_datasets(self) -> tuple[ImpactedDataset, ...]:
        return tuple(d for d in self.datasets if d.dataset.has_pii)


def _owners(datasets: Iterable[DatasetInfo]) -> tuple[OwnerInfo, ...]:
    seen: dict[str, OwnerInfo] = {}
    for ds in datasets:
        for owner in ds.owners:
            seen.setdefault(owner.name, owner)
    return tuple(sorted(seen.values(), key=lambda o: o.name))


def impact(
    node: ResolvedNode,
    *,
    depth: int = MAX_DEPTH,
    as_of: datetime | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> Impact:
    """Everything downstream of ``node`` with distance, owners, PII and retention.

    A field node gives column-level impact (fields reached, grouped by dataset,
    plus datasets that depend on the field as a whole); a dataset or job node
    gives table-level impact.
    """
    if isinstance(node.id, FieldNodeId):
        return _column_impact(node, depth=depth, as_of=as_of, max_nodes=max_nodes)
    graph = lineage(
        node,
        depth=depth,
        as_of=as_of,
        direction="downstream",
        max_nodes=max_nodes + 1,
    )
    truncated, cut = graph.truncated, graph.cut
    nodes = [n for n in graph.nodes if n.side != "root"]
    nodes.sort(key=lambda n: (n.distance, n.kind == "DATASET", n.node_id))
    if len(nodes) > max_nodes:
        dropped = nodes[max_nodes:]
        nodes = nodes[:max_nodes]
        truncated = True
        cut = Cut(
            datasets=cut.datasets + sum(1 for n in dropped if n.kind == "DATASET"),
            jobs=cut.jobs + sum(1 for n in dropped if n.kind == "JOB"),
        )
    shown = {n.node_id for n in nodes} | {graph.root}
    edges = tuple(e for e in graph.edges if e.origin in shown and e.destination in shown)
    writers: dict[str, list[str]] = defaultdict(list)
    for edge in edges:
        if edge.origin.startswith("job:"):
            writers[edge.destination].append(edge.origin)
    details = nodedata.dataset_infos((n.pk for n in nodes if n.kind == "DATASET"), as_of)
    jobs = nodedata.job_infos((n.pk for n in nodes if n.kind == "JOB"), as_of)
    datasets = tuple(
        ImpactedDataset(details[n.pk], n.distance, tuple(sorted(writers.get(n.node_id, ()))))
        for n in sorted(nodes, key=lambda n: (n.distance, n.node_id))
        if n.kind == "DATASET" and n.pk in details
    )
    return Impact(
        root=str(node),
        level="table",
        depth=depth,
        as_of=as_of,
        datasets=datasets,
        jobs=tuple(
            ImpactedJob(jobs[n.pk], n.distance)
            for n in sorted(nodes, key=lambda n: (n.distance, n.node_id))
            if n.kind == "JOB" and n.pk in jobs
        ),
        owners=_owners(d.dataset for d in datasets),
        edges=edges,
        truncated=truncated,
        cut=cut,
        reached=graph.reached,
    )


def _column_impact(
    node: ResolvedNode, *, depth: int, as_of: datetime | None, max_nodes: int
) -> Impact:
    snap = snapshot.columns()
    tf = TimeFilter.at(as_of)
    roots = np.asarray([node.pk], dtype=np.int64)
    reach = traverse.field_reach(snap, "down", depth, tf, roots)
    order = np.lexsort((reach.field, reach.dist))
    fields, dists = reach.field[order], reach.dist[order]
    truncated = fields.size > max_nodes + 1
    cut = Cut(fields=int(fields.size - max_nodes - 1)) if truncated else Cut()
    fields, dists = fields[: max_nodes + 1], dists[: max_nodes + 1]
    # Datasets depending on a reached field as a whole (dataset-level lineage), one step
    # further, within the depth.
    ds_batch = snap.expand("down_ds", fields[dists < depth], tf)
    ds_dist: dict[int, int] = {}
    field_dist = dict(zip(fields.tolist(), dists.tolist(), strict=True))
    for src, tds in zip(ds_batch.src.tolist(), ds_batch.dst.tolist(), strict=True):
        d = field_dist[src] + 1
        ds_dist[tds] = min(ds_dist.get(tds, d), d)
    info = nodedata.field_rows(fields.tolist())
    by_dataset: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for pk, dist in field_dist.items():
        if pk == node.pk or pk not in info:
            continue
        by_dataset[info[pk][0]].append((dist, info[pk][3]))
    links = traverse.column_edges(snap, fields, tf)
    job_dist: dict[int, int] = {}
    for tgt, job in zip(links.tgt.tolist(), links.job.tolist(), strict=True):
        if job >= 0:
            job_dist[job] = min(job_dist.get(job, field_dist[tgt]), field_dist[tgt])
    ds_jobs = snap.column("job", ds_batch)
    for src, job in zip(ds_batch.src.tolist(), ds_jobs.tolist(), strict=True):
        if job >= 0:
            d = field_dist[src] + 1
            job_dist[job] = min(job_dist.get(job, d), d)
    ds_pks = set(by_dataset) | set(ds_dist)
    details = nodedata.dataset_infos(ds_pks, as_of)
    jobs = nodedata.job_infos(job_dist, as_of)
    field_ids = {pk: field_node_id(*row[1:4]) for pk, row in info.items()}
    ds_ids = {pk: d.node_id for pk, d in details.items()}
    job_ids = {pk: j.node_id for pk, j in jobs.items()}
    edges: list[GraphEdge] = []
    for sources, targets, by_edge, shown in (
        (links.src, links.tgt, links.job, field_ids),
        (ds_batch.src, ds_batch.dst, ds_jobs, ds_ids),
    ):
        for src, tgt, job in zip(sources.tolist(), targets.tolist(), by_edge.tolist(), strict=True):
            if src in field_ids and tgt in shown:
                if job in job_ids:
                    edges += [
                        GraphEdge(field_ids[src], job_ids[job]),
                        GraphEdge(job_ids[job], shown[tgt]),
                    ]
                else:
                    edges.append(GraphEdge(field_ids[src], shown[tgt]))
    items = []
    for ds_pk in ds_pks:
        if ds_pk not in details:
            continue
        entries = sorted(by_dataset.get(ds_pk, []))
        distance = min([d for d, _ in entries] + ([ds_dist[ds_pk]] if ds_pk in ds_dist else []))
        items.append(
            ImpactedDataset(details[ds_pk], distance, fields=tuple(sorted({n for _, n in entries})))
        )
    items.sort(key=lambda i: (i.distance, i.node_id))
    return Impact(
        root=str(node),
        level="column",
        depth=depth,
        as_of=as_of,
        datasets=tuple(items),
        jobs=tuple(
            sorted(
                (ImpactedJob(jobs[pk], d) for pk, d in job_dist.items() if pk in jobs),
                key=lambda j: (j.distance, j.node_id),
            )
        ),
        owners=_owners(i.dataset for i in items),
        edges=tuple(dict.fromkeys(edges)),
        truncated=truncated,
        cut=cut,
    )


@dataclass(slots=True)
class UpstreamJob:
    job: JobInfo
    distance: int
    # Node ids of the datasets this job writes within the answer.
    outputs: tuple[str, ...] = ()

    @property
    def node_id(self) -> str:
        return self.job.node_id

    @property
    def run(self) -> RunInfo | None:
        return self.job.latest_run

    @property
    def failed(self) -> bool:
        return self.job.latest_run is not None and self.job.latest_run.failed


@dataclass(frozen=True)
class RootCause:
    """Everything upstream of a node, with the latest run of each job (as of ``as_of``).

    ``graph`` nodes carry names, distances and sides but no details (``jobs`` has the
    job details and runs).
    """

    root: str
    depth: int
    as_of: datetime | None
    graph: LineageGraph
    jobs: tuple[UpstreamJob, ...]
    # Datasets written (directly or further down) by a failed job: the suspects.
    suspects: tuple[str, ...] = ()

    @property
    def failures(self) -> tuple[UpstreamJob, ...]:
        return tuple(j for j in self.jobs if j.failed)


def root_cause(
    node: ResolvedNode,
    *,
    depth: int,
    as_of: datetime | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> RootCause:
    """Upstream lineage with each producing job's latest run state; failures first."""
    graph = lineage(node, depth=depth, as_of=as_of, direction="upstream", max_nodes=max_nodes)
    infos = nodedata.job_infos((n.pk for n in graph.nodes if n.kind == "JOB"), as_of)
    outputs: dict[str, list[str]] = defaultdict(list)
    downstream: dict[str, list[str]] = defaultdict(list)
    for edge in graph.edges:
        downstream[edge.origin].append(edge.destination)
        if edge.origin.startswith("job:"):
            outputs[edge.origin].append(edge.destination)
    jobs = [
        UpstreamJob(infos[n.pk], n.distance, tuple(sorted(outputs.get(n.node_id, ()))))
        for n in graph.nodes
        if n.kind == "JOB" and n.pk in infos
    ]
    jobs.sort(key=lambda j: (not j.failed, j.distance, j.node_id))
    # Suspects: what a failed job's output flows into, within the upstream graph.
    suspects: set[str] = set()
    queue = deque(j.node_id for j in jobs if j.failed)
    while queue:
        current = queue.popleft()
        for nxt in downstream.get(current, ()):
            if nxt not in suspects:
                suspects.add(nxt)
                queue.append(nxt)
    return RootCause(
        root=str(node),
        depth=depth,
        as_of=as_of,
        graph=graph,
        jobs=tuple(jobs),
        suspects=tuple(sorted(s for s in suspects if s.startswith("dataset:"))),
    )


# --- paths -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LineagePath:
    """A shortest lineage path, listed from the upstream end to the downstream end.

    At table level nodes alternate datasets and jobs; at column level fields
    alternate with the jobs between them. ``direction`` says whether the
    target is downstream or upstream of the source.
    """

    level: Literal["table", "column"]
    direction: Literal["downstream", "upstream"]
    nodes: tuple[str, ...]

    @property
    def jobs(self) -> int:
        return sum(1 for n in self.nodes if n.startswith("job:"))


def find_path(
    source: ResolvedNode, target: ResolvedNode, *, as_of: datetime | None = None
) -> LineagePath | None:
    """A shortest path between two nodes either way along edge direction, or None.

    Both nodes must be fields (column level) or both datasets/jobs (table level).
    """
    tf = TimeFilter.at(as_of)
    s_field, t_field = isinstance(source.id, FieldNodeId), isinstance(target.id, FieldNodeId)
    if s_field != t_field:
        raise ValueError("a path joins two fields or two datasets/jobs, not one of each")
    snap = snapshot.columns() if s_field else snapshot.table()

    def key(n: ResolvedNode) -> tuple[str, int]:
        kind = "field" if s_field else "job" if isinstance(n.id, JobNodeId) else "ds"
        return kind, n.pk

    ways: tuple[tuple[Literal["downstream", "upstream"], ResolvedNode, ResolvedNode], ...] = (
        ("downstream", source, target),
        ("upstream", target, source),
    )
    for direction, a, b in ways:
        steps = traverse.path(snap, tf, key(a), key(b))
        if steps is None:
            continue
        ds_names = load_dataset_names(pk for kind, pk in steps if kind == "ds")
        job_names = load_job_names(pk for kind, pk in steps if kind == "job" and pk >= 0)
        fields = field_rows(pk for kind, pk in steps if kind == "field")
        ids: list[str] = []
        for kind, pk in steps:
            if kind == "field":
                ids.append(field_node_id(*fields[pk][1:4]))
            elif kind == "ds":
                ids.append(dataset_node_id(*ds_names[pk]))
            elif pk in job_names or not s_field:  # between fields, a job may be unknown
                ids.append(job_node_id(*job_names[pk]))
        return LineagePath("column" if s_field else "table", direction, tuple(ids))
    return None


# --- diff --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ColumnDiffEdge:
    origin: str
    # A field node id, or a dataset node id for dataset-level dependencies.
    destination: str
    job: str | None


@dataclass(frozen=True)
class GraphDiff:
    """What changed between ``t1`` and ``t2``: edges, datasets and fields added or removed.

    Lists hold at most ``limit`` items each; ``counts`` are exact.
    """

    t1: datetime
    t2: datetime
    root: str | None
    edges_added: tuple[GraphEdge, ...]
    edges_removed: tuple[GraphEdge, ...]
    column_edges_added: tuple[ColumnDiffEdge, ...]
    column_edges_removed: tuple[ColumnDiffEdge, ...]
    datasets_added: tuple[str, ...]
    datasets_removed: tuple[str, ...]
    fields_added: tuple[str, ...]
    fields_removed: tuple[str, ...]
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        lists = {
            "edgesAdded": self.edges_added,
            "edgesRemoved": self.edges_removed,
            "columnEdgesAdded": self.column_edges_added,
            "columnEdgesRemoved": self.column_edges_removed,
            "datasetsAdded": self.datasets_added,
            "datasetsRemoved": self.datasets_removed,
            "fieldsAdded": self.fields_added,
            "fieldsRemoved": self.fields_removed,
        }
        return any(self.counts.get(k, 0) > len(v) for k, v in lists.items())


def _valid_keys(snap: snapshot.Snapshot, tf: TimeFilter, columns: Sequence[str]) -> np.ndarray:
    """Distinct tuples of ``columns`` over edges valid under ``tf`` (rows of a 2-D array)."""
    parts = []
    for layer, pos in snap.all_valid(tf):
        store = snap.store(layer)
        parts.append(np.stack([store.cols[c][pos].astype(np.int64) for c in columns], axis=1))
    if not parts:
        return np.zeros((0, len(columns)), dtype=np.int64)
    return np.unique(np.concatenate(parts), axis=0)


def _minus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rows of ``a`` not in ``b`` (both 2-D int64)."""
    if a.size == 0 or b.size == 0:
        return a
    view = np.dtype((np.void, a.dtype.itemsize * a.shape[1]))
    av = np.ascontiguousarray(a).view(view).ravel()
    bv = np.ascontiguousarray(b).view(view).ravel()
    return a[~np.isin(av, bv)]


def _dataset_at(t: datetime) -> Q:
    """Datasets seen by ``t`` and neither dropped nor renamed away then."""
    return Q(first_seen__lte=t) & ~Q(pk__in=closing_versions(t).values("dataset_id"))


def _scope(
    snap: snapshot.Snapshot,
    node: ResolvedNode,
    depth: int,
    direction: DirectionName,
    *filters: TimeFilter,
) -> tuple[IntArray, IntArray]:
    """The datasets and jobs within ``node``'s lineage (``depth``, ``direction``) under any
    of ``filters``, the node itself included (sorted)."""
    roots_ds, roots_job = _roots(node)
    ds_parts, job_parts = [roots_ds], [roots_job]
    ways: tuple[traverse.Way, ...] = ("up", "down")
    if direction != "both":
        ways = ("up",) if direction == "upstream" else ("down",)
    for tf in filters:
        for way in ways:
            reach = traverse.table_reach(snap, way, depth, tf, roots_ds, roots_job)
            ds_parts.append(reach.ds)
            job_parts.append(reach.job)
    return np.unique(np.concatenate(ds_parts)), np.unique(np.concatenate(job_parts))


def diff(
    t1: datetime,
    t2: datetime,
    *,
    node: ResolvedNode | None = None,
    depth: int = 5,
    direction: DirectionName = "both",
    limit: int = 1000,
) -> GraphDiff:
    """Edges, datasets and fields added and removed between ``t1`` and ``t2``.

    With ``node``, only what lies within its lineage (``depth``, ``direction``)
    at either instant is compared; without, the whole graph.
    """
    table_snap = snapshot.table()
    tf1, tf2 = TimeFilter.at(t1), TimeFilter.at(t2)
    scope_ds: IntArray | None = None
    scope_job: IntArray | None = None
    if node is not None:
        scope_ds, scope_job = _scope(table_snap, node, depth, direction, tf1, tf2)

    cols = ("job", "ds", "out")
    k1, k2 = _valid_keys(table_snap, tf1, cols), _valid_keys(table_snap, tf2, cols)
    if scope_ds is not None and scope_job is not None:
        k1 = k1[np.isin(k1[:, 0], scope_job) & np.isin(k1[:, 1], scope_ds)]
        k2 = k2[np.isin(k2[:, 0], scope_job) & np.isin(k2[:, 1], scope_ds)]
    added, removed = _minus(k2, k1), _minus(k1, k2)

    col_snap = snapshot.columns()
    ccols = ("job", "src", "tgt", "tds")
    c1, c2 = _valid_keys(col_snap, tf1, ccols), _valid_keys(col_snap, tf2, ccols)
    if scope_ds is not None:
        c1 = c1[np.isin(c1[:, 3], scope_ds)]
        c2 = c2[np.isin(c2[:, 3], scope_ds)]
    c_added, c_removed = _minus(c2, c1), _minus(c1, c2)

    datasets = Dataset.objects.all()
    fields = DatasetField.objects.all()
    if scope_ds is not None:
        datasets = datasets.filter(pk__in=scope_ds.tolist())
        fields = fields.filter(dataset_id__in=scope_ds.tolist())
    ds_at1, ds_at2 = _dataset_at(t1), _dataset_at(t2)
    f_at1, f_at2 = field_existed(t1), field_existed(t2)
    ds_added_qs = datasets.filter(ds_at2).exclude(ds_at1)
    ds_removed_qs = datasets.filter(ds_at1).exclude(ds_at2)
    f_added_qs = fields.filter(f_at2).exclude(f_at1)
    f_removed_qs = fields.filter(f_at1).exclude(f_at2)

    def ds_ids(qs: QuerySet[Dataset]) -> tuple[str, ...]:
        rows = qs.order_by("namespace__name", "name").values_list("namespace__name", "name")[:limit]
        return tuple(dataset_node_id(ns, name) for ns, name in rows)

    def f_ids(qs: QuerySet[DatasetField]) -> tuple[str, ...]:
        rows = qs.order_by("dataset__namespace__name", "dataset__name", "name").values_list(
            "dataset__namespace__name", "dataset__name", "name"
        )[:limit]
        return tuple(field_node_id(*row) for row in rows)

    table_rows = np.concatenate([added[:limit], removed[:limit]])
    ds_names = load_dataset_names(table_rows[:, 1].tolist())
    job_names = load_job_names(table_rows[:, 0].tolist())
    col_rows = np.concatenate([c_added[:limit], c_removed[:limit]])
    finfo = field_rows(np.concatenate([col_rows[:, 1], col_rows[:, 2]]).tolist())
    ds_names.update(load_dataset_names(col_rows[:, 3].tolist()))
    job_names.update(load_job_names(col_rows[:, 0].tolist()))

    def table_edge(row: np.ndarray) -> GraphEdge | None:
        job, ds, out = (int(v) for v in row)
        if ds not in ds_names or job not in job_names:
            return None
        d, j = dataset_node_id(*ds_names[ds]), job_node_id(*job_names[job])
        return GraphEdge(j, d) if out else GraphEdge(d, j)

    def column_edge(row: np.ndarray) -> ColumnDiffEdge | None:
        job, src, tgt, tds = (int(v) for v in row)
        if src not in finfo:
            return None
        origin = field_node_id(*finfo[src][1:4])
        if tgt >= 0:
            if tgt not in finfo:
                return None
            destination = field_node_id(*finfo[tgt][1:4])
        elif tds in ds_names:
            destination = dataset_node_id(*ds_names[tds])
        else:
            return None
        return ColumnDiffEdge(
            origin, destination, job_node_id(*job_names[job]) if job in job_names else None
        )

    def collect(rows: np.ndarray, make: Callable[[np.ndarray], T | None]) -> tuple[T, ...]:
        return tuple(x for x in (make(r) for r in rows[:limit]) if x is not None)

    return GraphDiff(
        t1=t1,
        t2=t2,
        root=None if node is None else str(node),
        edges_added=collect(added, table_edge),
        edges_removed=collect(removed, table_edge),
        column_edges_added=collect(c_added, column_edge),
        column_edges_removed=collect(c_removed, column_edge),
        datasets_added=ds_ids(ds_added_qs),
        datasets_removed=ds_ids(ds_removed_qs),
        fields_added=f_ids(f_added_qs),
        fields_removed=f_ids(f_removed_qs),
        counts={
            "edgesAdded": int(added.shape[0]),
            "edgesRemoved": int(removed.shape[0]),
            "columnEdgesAdded": int(c_added.shape[0]),
            "columnEdgesRemoved": int(c_removed.shape[0]),
            "datasetsAdded": ds_added_qs.count(),
            "datasetsRemoved": ds_removed_qs.count(),
            "fieldsAdded": f_added_qs.count(),
            "fieldsRemoved": f_removed_qs.count(),
        },
    )


def change_instants(
    node: ResolvedNode | None = None,
    *,
    depth: int = 5,
    direction: DirectionName = "both",
    limit: int = 500,
    level: str = "table",
) -> tuple[datetime, ...]:
    """The instants at which the graph around ``node`` changed, newest last.

    For a time slider: every valid_from / valid_to of an edge that was ever
    within the node's lineage (or of any edge without a node); at column
    ``level`` also those of the column edges of the jobs and datasets reached,
    so a mapping that changed while the tables stayed the same counts too. At
    most ``limit`` instants, the most recent kept.
    """
    snap = snapshot.table()
    ever = TimeFilter(current=False, lo=np.iinfo(np.int64).min)
    sources: list[tuple[snapshot.Snapshot, list[tuple[int, IntArray]], str]] = [
        (snap, snap.all_valid(ever), "ds")
    ]
    if level == "column":
        columns = snapshot.columns()
        sources.append((columns, columns.all_valid(ever), "tds"))
    if node is not None:
        ds_set, job_set = _scope(snap, node, depth, direction, ever)
        sources = [
            (
                source,
                [
                    (
                        layer,
                        pos[
                            # Ids are dense integers: a lookup table beats sorting 2M edges.
                            np.isin(source.store(layer).cols[ds_column][pos], ds_set, kind="table")
                            & np.isin(source.store(layer).cols["job"][pos], job_set, kind="table")
                        ],
                    )
                    for layer, pos in positions
                ],
                ds_column,
            )
            for source, positions, ds_column in sources
        ]
    stamps = [
        source.store(layer).cols[c][pos]
        for source, positions, _ in sources
        for layer, pos in positions
        for c in ("vf", "vt")
    ]
    if not stamps:
        return ()
    values = np.unique(np.concatenate(stamps))
    values = values[values != snapshot.OPEN][-limit:]
    return tuple(t for t in (snapshot.from_us(int(v)) for v in values) if t is not None)


# --- orphans and sources -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DatasetSummary:
    node_id: str
    namespace: str
    name: str
    last_seen: datetime
    producers: int
    consumers: int


@dataclass(frozen=True)
class DatasetPage:
    total: int
    items: tuple[DatasetSummary, ...]


def _edge_valid(as_of: datetime | None) -> Q:
    if as_of is None:
        return Q(valid_to__isnull=True)
    return Q(valid_from__lte=as_of) & (Q(valid_to__isnull=True) | Q(valid_to__gt=as_of))


def _dataset_page(
    qs: QuerySet[Dataset], as_of: datetime | None, limit: int, offset: int
) -> DatasetPage:
    total = qs.count()
    rows = list(
        qs.order_by("namespace__name", "name").values_list(
            "pk", "namespace__name", "name", "last_seen"
        )[offset : offset + limit]
    )
    snap = snapshot.table()
    tf = TimeFilter.at(as_of)
    pks = np.asarray([r[0] for r in rows], dtype=np.int64)
    consumers = _degree(snap.expand("ds_down", pks, tf))
    producers = _degree(snap.expand("ds_up", pks, tf))
    return DatasetPage(
        total=total,
        items=tuple(
            DatasetSummary(
                dataset_node_id(ns, name),
                ns,
                name,
                last_seen,
                producers.get(pk, 0),
                consumers.get(pk, 0),
            )
            for pk, ns, name, last_seen in rows
        ),
    )


def _degree(batch: snapshot.EdgeBatch) -> dict[int, int]:
    if batch.size == 0:
        return {}
    pairs = traverse.unique_pairs(batch.src, batch.dst)
    nodes, counts = traverse.distinct_counts(pairs[0])
    return dict(zip(nodes.tolist(), counts.tolist(), strict=True))


def _retired(as_of: datetime | None) -> list[int]:
    """The jobs retired at ``as_of`` (now when None): they had written datasets by then and
    write none then, so their reads are no reads. The edge snapshot's (retired_jobs), so
    that lists of datasets agree with lineage."""
    mask = snapshot.table().retired_mask(TimeFilter.at(as_of))
    return [int(pk) for pk in np.flatnonzero(mask)]


def _edges_into(direction: str, as_of: datetime | None) -> QuerySet[TableEdge]:
    """The outer dataset's table edges of ``direction`` valid at ``as_of`` (a subquery),
    without the reads of jobs retired then."""
    edges = TableEdge.objects.filter(dataset=OuterRef("pk"), direction=direction)
    edges = edges.filter(_edge_valid(as_of))
    retired = _retired(as_of) if direction == Direction.INPUT else []
    return edges.exclude(job_id__any_of=retired) if retired else edges


def _existing(as_of: datetime | None, namespace: str | None) -> QuerySet[Dataset]:
    qs = Dataset.objects.filter(is_hidden=False)
    if as_of is None:
        qs = qs.filter(lifecycle_state=LifecycleState.ACTIVE)
    else:
        qs = qs.filter(_dataset_at(as_of))
    if namespace:
        qs = qs.filter(namespace__name=naming.canonical_namespace(namespace))
    return qs


def orphans(
    *,
    as_of: datetime | None = None,
    limit: int = 100,
    offset: int = 0,
    namespace: str | None = None,
) -> DatasetPage:
    """Datasets no job reads (as of ``as_of``), by namespace and name."""
    qs = _existing(as_of, namespace).filter(~Exists(_edges_into(Direction.INPUT, as_of)))
    return _dataset_page(qs, as_of, limit, offset)


def _edges_now(*names: str) -> list[IntArray]:
    """Columns ``names`` of the table edges valid now, from the edge snapshot (a read by a
    retired job, one that wrote datasets and writes none now, is not valid)."""
    snap = snapshot.table()
    parts = [
        [snap.store(layer).cols[name][pos] for name in names]
        for layer, pos in snap.all_valid(TimeFilter())
    ]
    return [
        np.concatenate([snapshot.EMPTY, *(part[n] for part in parts)]).astype(np.int64)
        for n in range(len(names))
    ]


def in_use_now() -> IntArray:
    """The datasets a job reads or writes now: the coverage indicator's rule, and the
    complement of ``untouched``."""
    return np.unique(_edges_now("ds")[0])


def written_now() -> tuple[IntArray, IntArray]:
    """The (dataset, job) pairs of the output edges valid now."""
    datasets, jobs, out = _edges_now("ds", "job", "out")
    return datasets[out == 1], jobs[out == 1]


def untouched(*, limit: int = 100) -> DatasetPage:
    """Datasets no job reads or writes now (a final output a job still writes is in use;
    a read by a retired job, one that wrote datasets and writes none now, does not count)."""
    edges = TableEdge.objects.filter(dataset=OuterRef("pk"), valid_to__isnull=True)
    if retired := _retired(None):
        edges = edges.exclude(direction=Direction.INPUT, job_id__any_of=retired)
    return _dataset_page(_existing(None, None).filter(~Exists(edges)), None, limit, 0)


def sources(
    *,
    as_of: datetime | None = None,
    limit: int = 100,
    offset: int = 0,
    namespace: str | None = None,
) -> DatasetPage:
    """Datasets jobs read but no job writes: where data enters the graph."""
    qs = _existing(as_of, namespace).filter(Exists(_edges_into(Direction.INPUT, as_of)))
    qs = qs.filter(~Exists(_edges_into(Direction.OUTPUT, as_of)))
    return _dataset_page(qs, as_of, limit, offset)


# --- taint -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AtRiskDataset:
    dataset: DatasetInfo
    distance: int
    # Taints (pks) this dataset is at risk from; distance 0 means tainted itself.
    taints: tuple[int, ...]

    @property
    def node_id(self) -> str:
        return self.dataset.node_id


@dataclass(frozen=True, slots=True)
class RerunJob:
    job: JobInfo
    order: int
    distance: int
    # True when the job sits on a cycle, so its place in the order is by distance only.
    in_cycle: bool = False

    @property
    def node_id(self) -> str:
        return self.job.node_id


@dataclass(frozen=True)
class TaintImpact:
    """Every dataset at risk from the given taints, and the jobs to re-run in order."""

    datasets: tuple[AtRiskDataset, ...]
    jobs_to_rerun: tuple[RerunJob, ...]
    owners: tuple[OwnerInfo, ...]
    truncated: bool = False
    cut: Cut = Cut()


def _taint_filter(taint: Taint) -> TimeFilter:
    # Bad data written in the window stays downstream until recomputed: follow every
    # edge valid at any time since the window opened (now, without a window).
    if taint.window_start is None:
        return TimeFilter()
    return TimeFilter.window(taint.window_start)


def taint_reach(taint: Taint, snap: snapshot.Snapshot | None = None) -> traverse.TableReach:
    """The datasets and jobs a taint reaches downstream (its dataset at distance 0)."""
    return traverse.table_reach(
        snap or snapshot.table(),
        "down",
        MAX_DEPTH,
        _taint_filter(taint),
        roots_ds=np.asarray([taint.dataset_id], dtype=np.int64),
    )


def taint_impact(taints: Sequence[Taint], *, max_nodes: int = DEFAULT_MAX_NODES) -> TaintImpact:
    """What the given taints (the cleared ones left out) put at risk downstream."""
    active = [t for t in taints if t.cleared_at is None]
    snap = snapshot.table()
    ds_best: dict[int, int] = {}
    ds_taints: dict[int, set[int]] = defaultdict(set)
    job_best: dict[int, int] = {}
    for taint in active:
        reach = taint_reach(taint, snap)
        for pk, dist in zip(reach.ds.tolist(), reach.ds_dist.tolist(), strict=True):
            ds_best[pk] = min(ds_best.get(pk, dist), dist)
            ds_taints[pk].add(taint.pk)
        for pk, dist in zip(reach.job.tolist(), reach.job_dist.tolist(), strict=True):
            job_best[pk] = min(job_best.get(pk, dist), dist)

    ordered_ds = sorted(ds_best, key=lambda pk: (ds_best[pk], pk))
    truncated = len(ordered_ds) > max_nodes or len(job_best) > max_nodes
    cut = Cut(datasets=max(0, len(ordered_ds) - max_nodes), jobs=max(0, len(job_best) - max_nodes))
    shown_ds = ordered_ds[:max_nodes]
    order, cyclic = _topological_jobs(snap, active, ds_best, job_best)
    shown_jobs = order[:max_nodes]
    details = nodedata.dataset_infos(shown_ds)
    jobs = nodedata.job_infos(shown_jobs)
    datasets = tuple(
        AtRiskDataset(details[pk], ds_best[pk], tuple(sorted(ds_taints[pk])))
        for pk in shown_ds
        if pk in details
    )
    return TaintImpact(
        datasets=datasets,
        jobs_to_rerun=tuple(
            RerunJob(jobs[pk], i + 1, job_best[pk], pk in cyclic)
            for i, pk in enumerate(shown_jobs)
            if pk in jobs
        ),
        owners=_owners(d.dataset for d in datasets),
        truncated=truncated,
        cut=cut if truncated else Cut(),
    )


def _topological_jobs(
    snap: snapshot.Snapshot,
    taints: Sequence[Taint],
    ds_best: dict[int, int],
    job_best: dict[int, int],
) -> tuple[list[int], set[int]]:
    """Jobs ordered so each runs after every job feeding it at-risk data (Kahn's
    algorithm, ties by distance); jobs on cycles go last, by distance."""
    if not job_best:
        return [], set()
    starts = [t.window_start for t in taints if t.window_start is not None]
    # Open edges are valid "since" any instant, so one window covers windowless taints too.
    tf = TimeFilter.window(min(starts)) if starts else TimeFilter()
    jobs = np.asarray(sorted(job_best), dtype=np.int64)
    writes = snap.expand("job_down", jobs, tf)  # job → dataset
    writers: dict[int, set[int]] = defaultdict(set)
    for job, ds in zip(writes.src.tolist(), writes.dst.tolist(), strict=True):
        if ds in ds_best:
            writers[ds].add(job)
    reads = snap.expand("job_up", jobs, tf)  # job ← dataset
    after: dict[int, set[int]] = defaultdict(set)
    indegree = dict.fromkeys(job_best, 0)
    for job, ds in zip(reads.src.tolist(), reads.dst.tolist(), strict=True):
        for writer in writers.get(ds, ()):
            if writer != job and job not in after[writer]:
                after[writer].add(job)
                indegree[job] += 1
    import heapq

    ready = [(job_best[j], j) for j, n in indegree.items() if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, job = heapq.heappop(ready)
        order.append(job)
        for nxt in after.get(job, ()):
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                heapq.heappush(ready, (job_best[nxt], nxt))
    placed = set(order)
    cyclic = {j for j in job_best if j not in placed}
    order += sorted(cyclic, key=lambda j: (job_best[j], j))
    return order, cyclic


# --- field reach (privacy subject search) ------------------------------------------------


@dataclass(slots=True)
class PathStep:
    """One step of an evidence path: the field (or, for a dataset-level dependency, the
    dataset) reached, and the job and transformation that reached it (None for a seed)."""

    field_id: int | None
    dataset_id: int
    job_id: int | None
    transformation_type: str
    transformation_subtype: str
    masking: bool


class FieldReach:
    """The evidence of a ranked field reach (graph.traverse.ranked_field_reach: fields
    reached downstream from seed fields, each by the path whose weakest transformation is
    strongest): ``path(field_id)`` from a seed to that field."""

    def __init__(self, snap: snapshot.Snapshot, arrays: traverse.RankedReach) -> None:
        self._snap = snap
        self._a = arrays
        self._index = {pk: i for i, pk in enumerate(arrays.field.tolist())}

    def __len__(self) -> int:
        return int(self._a.field.size)

    def _step(self, layer: int, pos: int, field_id: int | None, dataset_id: int) -> PathStep:
        store = self._snap.store(layer)
        job = int(store.cols["job"][pos])
        return PathStep(
            field_id=field_id,
            dataset_id=dataset_id,
            job_id=job if job >= 0 else None,
            transformation_type="INDIRECT" if int(store.cols["ttype"][pos]) else "DIRECT",
            transformation_subtype=SUBTYPES[int(store.cols["sub"][pos])],
            masking=bool(store.cols["mask"][pos]),
        )

    def path(self, field_id: int) -> tuple[PathStep, ...]:
        """Seed first, ``field_id`` last; empty when the field was not reached."""
        a = self._a
        steps: list[PathStep] = []
        current: int | None = field_id
        guard = 0
        while current is not None and current in self._index and guard <= len(self):
            guard += 1
            i = self._index[current]
            parent = int(a.parent_field[i])
            if parent < 0:
                steps.append(PathStep(current, int(a.dataset[i]), None, "", "", False))
                break
            steps.append(
                self._step(int(a.parent_layer[i]), int(a.parent_pos[i]), current, int(a.dataset[i]))
            )
            current = parent
        return tuple(reversed(steps))

    def dataset_path(self, dataset_id: int) -> tuple[PathStep, ...]:
        """Evidence for a dataset reached only through a dataset-level dependency."""
        a = self._a
        where = np.flatnonzero(a.ds_only == dataset_id)
        if where.size == 0:
            return ()
        i = int(where[0])
        head = self.path(int(a.ds_only_parent_field[i]))
        last = self._step(
            int(a.ds_only_parent_layer[i]), int(a.ds_only_parent_pos[i]), None, dataset_id
        )
        return (*head, last)
