"""What the explorer pages show, built from the lineage edges and the catalog.

Page-side shapes only: the explorer's JSON (nodes, edges, hidden-neighbour
counts, the instants where the drawn graph changed, diff marks), the impact
report and its exports, the dataset page's lineage summary, search and the
orphans worklist. Walks honour ``as_of`` (only edges valid at that instant)
and a node limit (nearest nodes first, with a flag when cut).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.db.models import Case, Count, Exists, IntegerField, OuterRef, Q, QuerySet, Value, When
from django.db.models.functions import Length
from django.urls import reverse

from catalog.errors import ApiError
from catalog.models import Dataset, DatasetField, LifecycleState, Owner, Tag
from graph import nodeids
from graph.models import ColumnEdge, Direction, Job, TableEdge, Taint

CHUNK = 2000
MAX_INSTANTS = 1000
LIST_FILTERS = ("q", "namespace", "platform", "owner", "retention", "pii")


# --- node ids --------------------------------------------------------------


class NodeNotFound(Exception):
    pass


@dataclass(frozen=True)
class NodeRef:
    """A resolved node: ``kind`` is dataset, job or field; ``pk`` its row."""

    kind: str
    namespace: str
    name: str
    pk: int
    field: str = ""
    dataset_pk: int = 0

    @property
    def id(self) -> str:
        if self.kind == "job":
            return f"job:{self.namespace}:{self.name}"
        if self.kind == "field":
            return f"datasetField:{self.namespace}:{self.name}:{self.field}"
        return f"dataset:{self.namespace}:{self.name}"

    @property
    def label(self) -> str:
        return f"{self.name} · {self.field}" if self.kind == "field" else self.name

    def dataset_ref(self) -> NodeRef:
        return NodeRef("dataset", self.namespace, self.name, self.dataset_pk or self.pk)


def resolve_node(raw: str) -> NodeRef:
    """Resolve a node id (dataset, job or datasetField) to its row; ApiError when malformed."""
    try:
        resolved = nodeids.resolve_node_id(raw)
    except nodeids.MalformedNodeId as exc:
        raise ApiError(str(exc), "node") from exc
    except nodeids.UnknownNodeId as exc:
        raise NodeNotFound(f"Unknown node {raw}") from exc
    node = resolved.id
    if isinstance(node, nodeids.FieldNodeId):
        return NodeRef(
            "field",
            node.namespace,
            node.dataset,
            resolved.pk,
            field=node.field,
            dataset_pk=resolved.dataset_pk or 0,
        )
    if isinstance(node, nodeids.JobNodeId):
        return NodeRef("job", node.namespace, node.name, resolved.pk)
    return NodeRef("dataset", node.namespace, node.name, resolved.pk, dataset_pk=resolved.pk)


# --- walks -----------------------------------------------------------------


def valid_at(as_of: datetime | None) -> Q:
    """Edges valid at ``as_of`` (current edges when None): valid_from ≤ t < valid_to."""
    if as_of is None:
        return Q(valid_to__isnull=True)
    return Q(valid_from__lte=as_of) & (Q(valid_to__isnull=True) | Q(valid_to__gt=as_of))


def _chunks(ids: Iterable[int]) -> Iterator[list[int]]:
    items = list(ids)
    for i in range(0, len(items), CHUNK):
        yield items[i : i + CHUNK]


@dataclass
class Walk:
    """Nodes reached with their signed distance (negative upstream) and the edges between."""

    datasets: dict[int, int] = field(default_factory=dict)
    jobs: dict[int, int] = field(default_factory=dict)
    fields: dict[int, int] = field(default_factory=dict)
    # Table: (job, dataset, direction); column: (source field, target field, job or 0).
    table_edges: set[tuple[int, int, str]] = field(default_factory=set)
    column_edges: dict[tuple[int, int], tuple[int, str, str, bool]] = field(default_factory=dict)
    truncated: bool = False

    @property
    def size(self) -> int:
        return len(self.datasets) + len(self.jobs) + len(self.fields)

    def merge(self, other: Walk) -> None:
        for mine, theirs in (
            (self.datasets, other.datasets),
            (self.jobs, other.jobs),
            (self.fields, other.fields),
        ):
            for pk, dist in theirs.items():
                if pk not in mine or abs(dist) < abs(mine[pk]):
                    mine[pk] = dist
        self.table_edges |= other.table_edges
        self.column_edges.update(other.column_edges)
        self.truncated = self.truncated or other.truncated


def walk_table(
    root: NodeRef, downstream: bool, depth: int, as_of: datetime | None, limit: int
) -> Walk:
    """Breadth-first over table edges, one query per hop; depth counts jobs, as Marquez."""
    walk = Walk()
    sign = 1 if downstream else -1
    into_job = Direction.INPUT if downstream else Direction.OUTPUT
    out_of_job = Direction.OUTPUT if downstream else Direction.INPUT
    valid = valid_at(as_of)
    dataset_frontier: set[int] = set()
    job_frontier: set[int] = set()
    if root.kind == "job":
        walk.jobs[root.pk] = 0
        job_frontier = {root.pk}
    else:
        walk.datasets[root.pk] = 0
        dataset_frontier = {root.pk}
    hop = 0
    while dataset_frontier or job_frontier:
        if dataset_frontier:
            if hop >= depth:
                break
            hop += 1
            job_frontier = set()
            for chunk in _chunks(sorted(dataset_frontier)):
                rows = (
                    TableEdge.objects.filter(valid, dataset_id__in=chunk, direction=into_job)
                    .values_list("job_id", "dataset_id")
                    .order_by("job_id")
                )
                for job_id, dataset_id in rows:
                    if job_id not in walk.jobs:
                        if walk.size >= limit:
                            walk.truncated = True
                            continue
                        walk.jobs[job_id] = hop * sign
                        job_frontier.add(job_id)
                    walk.table_edges.add((job_id, dataset_id, into_job))
            dataset_frontier = set()
        if job_frontier:
            for chunk in _chunks(sorted(job_frontier)):
                rows = (
                    TableEdge.objects.filter(valid, job_id__in=chunk, direction=out_of_job)
                    .values_list("job_id", "dataset_id")
                    .order_by("dataset_id")
                )
                for job_id, dataset_id in rows:
                    if dataset_id not in walk.datasets:
                        if walk.size >= limit:
                            walk.truncated = True
                            continue
                        walk.datasets[dataset_id] = hop * sign
                        dataset_frontier.add(dataset_id)
                    walk.table_edges.add((job_id, dataset_id, out_of_job))
            job_frontier = set()
    return walk


def walk_columns(
    root: NodeRef, downstream: bool, depth: int, as_of: datetime | None, limit: int
) -> Walk:
    """Breadth-first over field-to-field edges; each hop is one transformation."""
    walk = Walk()
    sign = 1 if downstream else -1
    if root.kind == "field":
        frontier = {root.pk}
    else:
        frontier = set(
            DatasetField.objects.filter(dataset_id=root.pk, removed_at__isnull=True).values_list(
                "pk", flat=True
            )
        )
    for pk in frontier:
        walk.fields[pk] = 0
    valid = valid_at(as_of) & Q(target_field__isnull=False)
    near, far = ("source_field_id", "target_field_id")
    if not downstream:
        near, far = far, near
    for hop in range(1, depth + 1):
        if not frontier:
            break
        reached: set[int] = set()
        for chunk in _chunks(sorted(frontier)):
            rows = ColumnEdge.objects.filter(valid, **{f"{near}__in": chunk}).values_list(
                "source_field_id",
                "target_field_id",
                "job_id",
                "transformation_type",
                "transformation_subtype",
                "masking",
            )
            for source, target, job, ttype, subtype, masking in rows.order_by(far):
                other = target if downstream else source
                if other not in walk.fields:
                    if walk.size >= limit:
                        walk.truncated = True
                        continue
                    walk.fields[other] = hop * sign
                    reached.add(other)
                walk.column_edges.setdefault(
                    (source, target), (job or 0, ttype, subtype, bool(masking))
                )
        frontier = reached
    return walk


def walk(
    root: NodeRef,
    level: str,
    direction: str,
    depth: int,
    as_of: datetime | None,
    limit: int,
) -> Walk:
    """The graph around ``root`` in one or both directions, at table or column level."""
    step = walk_columns if level == "column" else walk_table
    if direction != "both":
        return step(root, direction == "downstream", depth, as_of, limit)
    down = step(root, True, depth, as_of, max(limit // 2, 1))
    up = step(root, False, depth, as_of, max(limit - down.size + 1, 1))
    down.merge(up)
    return down


# --- the explorer's JSON ---------------------------------------------------


def _personal_data() -> Q:
    return Q(pii_category__gt="") | Q(subject_kind__isnull=False)


def _dataset_rows(pks: Iterable[int]) -> dict[int, Dataset]:
    rows: dict[int, Dataset] = {}
    pii = DatasetField.objects.filter(_personal_data(), dataset=OuterRef("pk"), removed_at=None)
    subject = DatasetField.objects.filter(
        dataset=OuterRef("pk"), subject_kind__isnull=False, removed_at=None
    )
    for chunk in _chunks(pks):
        for ds in (
            Dataset.objects.filter(pk__in=chunk)
            .select_related("namespace")
            .annotate(has_pii=Exists(pii), has_subject=Exists(subject))
        ):
            rows[ds.pk] = ds
    return rows


def _job_rows(pks: Iterable[int]) -> dict[int, Job]:
    rows: dict[int, Job] = {}
    for chunk in _chunks(pks):
        for job in Job.objects.filter(pk__in=chunk).select_related("namespace", "latest_run"):
            rows[job.pk] = job
    return rows


def _field_rows(pks: Iterable[int]) -> dict[int, DatasetField]:
    rows: dict[int, DatasetField] = {}
    for chunk in _chunks(pks):
        for f in DatasetField.objects.filter(pk__in=chunk).select_related(
            "dataset__namespace", "subject_kind"
        ):
            rows[f.pk] = f
    return rows


def _table_degrees(
    datasets: Iterable[int], jobs: Iterable[int], as_of: datetime | None
) -> tuple[dict[tuple[int, str], int], dict[tuple[int, str], int]]:
    """Edge counts per (dataset, direction) and (job, direction) valid at ``as_of``."""
    valid = valid_at(as_of)
    by_dataset: dict[tuple[int, str], int] = {}
    by_job: dict[tuple[int, str], int] = {}
    for chunk in _chunks(datasets):
        for pk, direction, n in (
            TableEdge.objects.filter(valid, dataset_id__in=chunk)
            .values_list("dataset_id", "direction")
            .annotate(n=Count("id"))
            .order_by()
        ):
            by_dataset[(pk, direction)] = n
    for chunk in _chunks(jobs):
        for pk, direction, n in (
            TableEdge.objects.filter(valid, job_id__in=chunk)
            .values_list("job_id", "direction")
            .annotate(n=Count("id"))
            .order_by()
        ):
            by_job[(pk, direction)] = n
    return by_dataset, by_job


def _column_degrees(
    fields: Iterable[int], as_of: datetime | None
) -> tuple[dict[int, int], dict[int, int]]:
    """Distinct upstream and downstream neighbours per field valid at ``as_of``."""
    valid = valid_at(as_of) & Q(target_field__isnull=False)
    ups: dict[int, int] = {}
    downs: dict[int, int] = {}
    for chunk in _chunks(fields):
        for pk, n in (
            ColumnEdge.objects.filter(valid, target_field_id__in=chunk)
            .values_list("target_field_id")
            .annotate(n=Count("source_field_id", distinct=True))
            .order_by()
        ):
            ups[pk] = n
        for pk, n in (
            ColumnEdge.objects.filter(valid, source_field_id__in=chunk)
            .values_list("source_field_id")
            .annotate(n=Count("target_field_id", distinct=True))
            .order_by()
        ):
            downs[pk] = n
    return ups, downs


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def change_instants(
    level: str, datasets: Iterable[int], jobs: Iterable[int], fields: Iterable[int]
) -> list[str]:
    """The distinct instants where an edge touching these nodes opened or closed, in order."""
    instants: set[datetime] = set()
    if level == "column":
        for chunk in _chunks(fields):
            near = Q(source_field_id__in=chunk) | Q(target_field_id__in=chunk)
            for start, end in (
                ColumnEdge.objects.filter(near).values_list("valid_from", "valid_to").distinct()
            ):
                instants.add(start)
                if end is not None:
                    instants.add(end)
    else:
        for key, ids in (("dataset_id__in", datasets), ("job_id__in", jobs)):
            for chunk in _chunks(ids):
                for start, end in (
                    TableEdge.objects.filter(**{key: chunk})
                    .values_list("valid_from", "valid_to")
                    .distinct()
                ):
                    instants.add(start)
                    if end is not None:
                        instants.add(end)
    ordered = sorted(instants)
    if len(ordered) > MAX_INSTANTS:
        # Thin evenly, keeping the first and the latest changes.
        step = len(ordered) / (MAX_INSTANTS - 1)
        ordered = [ordered[int(i * step)] for i in range(MAX_INSTANTS - 1)] + [ordered[-1]]
    return [value.isoformat().replace("+00:00", "Z") for value in ordered]


def tainted_and_at_risk(as_of: datetime | None) -> tuple[set[int], set[int]]:
    """Datasets marked bad (not cleared) and every dataset downstream of them."""
    tainted = set(
        Taint.objects.filter(cleared_at__isnull=True).values_list("dataset_id", flat=True)
    )
    at_risk: set[int] = set()
    for pk in tainted:
        ref = NodeRef("dataset", "", "", pk)
        reached = walk_table(ref, True, 50, as_of, 20_000)
        at_risk.update(d for d in reached.datasets if d != pk)
        at_risk.update(-j for j in reached.jobs)  # jobs kept apart by sign
    return tainted, at_risk


def dataset_url(namespace: str, name: str) -> str:
    return f"{reverse('dataset-detail')}?{urlencode({'namespace': namespace, 'name': name})}"


def job_url(namespace: str, name: str) -> str:
    return f"{reverse('job-detail')}?{urlencode({'namespace': namespace, 'name': name})}"


def _view_nodes_and_edges(
    result: Walk, level: str, as_of: datetime | None
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    nodes: dict[str, dict[str, Any]] = {}
    edges: dict[str, dict[str, Any]] = {}
    tainted, at_risk = tainted_and_at_risk(as_of)
    if level == "column":
        field_rows = _field_rows(result.fields)
        dataset_pks = {f.dataset_id for f in field_rows.values()}
        datasets = _dataset_rows(dataset_pks)
        ups, downs = _column_degrees(field_rows, as_of)
        for ds in datasets.values():
            node_id = ds.node_id
            nodes[node_id] = {
                "id": node_id,
                "kind": "dataset",
                "label": ds.name,
                "namespace": ds.namespace.name,
                "name": ds.name,
                "pii": ds.has_pii,  # type: ignore[attr-defined]
                "subject": ds.has_subject,  # type: ignore[attr-defined]
                "tainted": ds.pk in tainted,
                "atRisk": ds.pk in at_risk,
                "url": dataset_url(ds.namespace.name, ds.name),
                "compound": True,
            }
        field_ids: dict[int, str] = {}
        for pk, f in field_rows.items():
            ds = datasets[f.dataset_id]
            node_id = f"datasetField:{ds.namespace.name}:{ds.name}:{f.name}"
            field_ids[pk] = node_id
            nodes[node_id] = {
                "id": node_id,
                "kind": "field",
                "label": f.name,
                "namespace": ds.namespace.name,
                "name": ds.name,
                "field": f.name,
                "parent": ds.node_id,
                "distance": result.fields[pk],
                "pii": bool(f.pii_category),
                "piiCategory": f.pii_category,
                "subject": f.subject_kind.name if f.subject_kind else None,
                "propagated": f.flag_source == "propagated",
                "tainted": ds.pk in tainted,
                "atRisk": ds.pk in at_risk,
                "degIn": ups.get(pk, 0),
                "degOut": downs.get(pk, 0),
                "url": dataset_url(ds.namespace.name, ds.name),
            }
        for (source, target), (_job, ttype, subtype, masking) in result.column_edges.items():
            if source not in field_ids or target not in field_ids:
                continue
            edge_id = f"{field_ids[source]}->{field_ids[target]}"
            source_row = field_rows[source]
            edges[edge_id] = {
                "id": edge_id,
                "source": field_ids[source],
                "target": field_ids[target],
                "transformation": f"{ttype}/{subtype}" if subtype else ttype,
                "masking": masking,
                "pii": bool(source_row.pii_category or source_row.subject_kind_id),
            }
        return nodes, edges

    datasets = _dataset_rows(result.datasets)
    jobs = _job_rows(result.jobs)
    by_dataset, by_job = _table_degrees(datasets, jobs, as_of)
    for pk, ds in datasets.items():
        nodes[ds.node_id] = {
            "id": ds.node_id,
            "kind": "dataset",
            "label": ds.name,
            "namespace": ds.namespace.name,
            "name": ds.name,
            "distance": result.datasets[pk],
            "pii": ds.has_pii,  # type: ignore[attr-defined]
            "subject": ds.has_subject,  # type: ignore[attr-defined]
            "dropped": ds.lifecycle_state == LifecycleState.DROPPED,
            "tainted": pk in tainted,
            "atRisk": pk in at_risk,
            # Producers feed a dataset (edges out of jobs), consumers read it.
            "degIn": by_dataset.get((pk, Direction.OUTPUT), 0),
            "degOut": by_dataset.get((pk, Direction.INPUT), 0),
            "url": dataset_url(ds.namespace.name, ds.name),
        }
    for pk, job in jobs.items():
        state = job.latest_run.state if job.latest_run else ""
        nodes[job.node_id] = {
            "id": job.node_id,
            "kind": "job",
            "label": job.name,
            "namespace": job.namespace.name,
            "name": job.name,
            "distance": result.jobs[pk],
            "state": state,
            "atRisk": -pk in at_risk,
            "degIn": by_job.get((pk, Direction.INPUT), 0),
            "degOut": by_job.get((pk, Direction.OUTPUT), 0),
            "url": job_url(job.namespace.name, job.name),
        }
    for job_pk, dataset_pk, direction in result.table_edges:
        if job_pk not in jobs or dataset_pk not in datasets:
            continue
        job_id = jobs[job_pk].node_id
        dataset_id = datasets[dataset_pk].node_id
        tail, head = (dataset_id, job_id) if direction == Direction.INPUT else (job_id, dataset_id)
        edge_id = f"{tail}->{head}"
        edges[edge_id] = {"id": edge_id, "source": tail, "target": head}
    return nodes, edges


def build_view(
    root: NodeRef,
    level: str,
    direction: str,
    depth: int,
    as_of: datetime | None,
    compare: datetime | None,
    limit: int,
) -> dict[str, Any]:
    """The explorer's drawing data; with ``compare``, the union of both instants, diff-marked."""
    result = walk(root, level, direction, depth, as_of, limit)
    nodes, edges = _view_nodes_and_edges(result, level, as_of)
    union = result
    if compare is not None:
        before = walk(root, level, direction, depth, compare, limit)
        old_nodes, old_edges = _view_nodes_and_edges(before, level, compare)
        for node_id, node in nodes.items():
            node["diff"] = "same" if node_id in old_nodes else "added"
        for node_id, node in old_nodes.items():
            if node_id not in nodes:
                nodes[node_id] = {**node, "diff": "removed"}
        for edge_id, edge in edges.items():
            edge["diff"] = "same" if edge_id in old_edges else "added"
        for edge_id, edge in old_edges.items():
            if edge_id not in edges:
                edges[edge_id] = {**edge, "diff": "removed"}
        union = Walk(
            datasets={**before.datasets, **result.datasets},
            jobs={**before.jobs, **result.jobs},
            fields={**before.fields, **result.fields},
            truncated=result.truncated or before.truncated,
        )
    return {
        "root": root.id,
        "level": level,
        "direction": direction,
        "depth": depth,
        "asOf": _iso(as_of),
        "compare": _iso(compare),
        "limit": limit,
        "truncated": union.truncated,
        "nodes": list(nodes.values()),
        "edges": list(edges.values()),
        "instants": change_instants(level, union.datasets, union.jobs, union.fields),
    }


# --- impact ----------------------------------------------------------------


@dataclass
class ImpactRow:
    distance: int
    namespace: str
    name: str
    url: str
    owners: list[str]
    pii_fields: list[str]
    subject_fields: list[str]
    retention: str | None
    retention_days: int | None
    via_jobs: list[str]
    reached_fields: list[str] = field(default_factory=list)
    tainted: bool = False


@dataclass
class ImpactReport:
    root: NodeRef
    as_of: datetime | None
    rows: list[ImpactRow]
    owners: list[tuple[str, int]]
    job_count: int
    truncated: bool
    # For the Mermaid export: (source id, source label, source kind, target id, …).
    edges: list[tuple[str, str, str, str, str, str]]

    @property
    def groups(self) -> list[tuple[int, list[ImpactRow]]]:
        by_distance: dict[int, list[ImpactRow]] = defaultdict(list)
        for row in self.rows:
            by_distance[row.distance].append(row)
        return sorted(by_distance.items())

    @property
    def pii_count(self) -> int:
        return sum(1 for r in self.rows if r.pii_fields or r.subject_fields)

    @property
    def no_retention_count(self) -> int:
        return sum(1 for r in self.rows if (r.pii_fields or r.subject_fields) and not r.retention)


def impact(
    root: NodeRef, depth: int, as_of: datetime | None, level: str = "table", limit: int = 5000
) -> ImpactReport:
    """Every dataset downstream of ``root`` with distance, owners to notify, PII and retention."""
    result = walk(root, level, "downstream", depth, as_of, limit)
    reached_fields: dict[int, list[str]] = defaultdict(list)
    distances: dict[int, int] = {}
    if level == "column":
        for f in _field_rows(result.fields).values():
            dist = result.fields[f.pk]
            if dist == 0:
                continue
            reached_fields[f.dataset_id].append(f.name)
            distances[f.dataset_id] = min(distances.get(f.dataset_id, dist), dist)
    else:
        distances = {pk: d for pk, d in result.datasets.items() if d > 0}
    datasets = (
        Dataset.objects.filter(pk__in=list(distances))
        .select_related("namespace", "retention_policy")
        .prefetch_related("ownerships__owner", "fields__subject_kind")
    )
    jobs = _job_rows(result.jobs) if level == "table" else {}
    via: dict[int, list[str]] = defaultdict(list)
    for job_pk, dataset_pk, direction in result.table_edges:
        if direction == Direction.OUTPUT and job_pk in jobs:
            via[dataset_pk].append(jobs[job_pk].name)
    tainted, _ = tainted_and_at_risk(as_of) if Taint.objects.exists() else (set(), set())
    rows: list[ImpactRow] = []
    owner_counts: dict[str, int] = defaultdict(int)
    for ds in datasets:
        live = [f for f in ds.fields.all() if f.removed_at is None]
        owners = [str(o.owner) for o in ds.ownerships.all()]
        for name in owners:
            owner_counts[name] += 1
        policy = ds.retention_policy
        rows.append(
            ImpactRow(
                distance=distances[ds.pk],
                namespace=ds.namespace.name,
                name=ds.name,
                url=dataset_url(ds.namespace.name, ds.name),
                owners=owners,
                pii_fields=[f.name for f in live if f.pii_category],
                subject_fields=[
                    f"{f.name} ({f.subject_kind.name})" for f in live if f.subject_kind
                ],
                retention=policy.name if policy else None,
                retention_days=policy.duration_days if policy else None,
                via_jobs=sorted(via.get(ds.pk, [])),
                reached_fields=sorted(reached_fields.get(ds.pk, [])),
                tainted=ds.pk in tainted,
            )
        )
    rows.sort(key=lambda r: (r.distance, r.namespace, r.name))
    mermaid_edges: list[tuple[str, str, str, str, str, str]] = []
    if level == "table":
        names = {pk: ds for pk, ds in _dataset_rows(result.datasets).items()}
        for job_pk, dataset_pk, direction in sorted(result.table_edges):
            if job_pk not in jobs or dataset_pk not in names:
                continue
            job, ds = jobs[job_pk], names[dataset_pk]
            job_end = (job.node_id, job.name, "job")
            ds_end = (ds.node_id, ds.name, "dataset")
            pair = (ds_end, job_end) if direction == Direction.INPUT else (job_end, ds_end)
            mermaid_edges.append((*pair[0], *pair[1]))
    return ImpactReport(
        root=root,
        as_of=as_of,
        rows=rows,
        owners=sorted(owner_counts.items(), key=lambda kv: (-kv[1], kv[0])),
        job_count=len(result.jobs),
        truncated=result.truncated,
        edges=mermaid_edges,
    )


def _mermaid_label(text: str) -> str:
    return text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def impact_mermaid(report: ImpactReport) -> str:
    """A Mermaid flowchart of the impacted graph: datasets as boxes, jobs as stadiums."""
    ids: dict[str, str] = {}
    lines = ["flowchart LR"]

    def ref(node_id: str, label: str, kind: str) -> str:
        if node_id not in ids:
            ids[node_id] = f"n{len(ids)}"
            shape = (
                f'(["{_mermaid_label(label)}"])'
                if kind == "job"
                else f'["{_mermaid_label(label)}"]'
            )
            lines.append(f"  {ids[node_id]}{shape}")
        return ids[node_id]

    root = report.root
    root_ref = ref(root.id, root.label, "job" if root.kind == "job" else "dataset")
    for src_id, src_label, src_kind, dst_id, dst_label, dst_kind in report.edges:
        a = ref(src_id, src_label, src_kind)
        b = ref(dst_id, dst_label, dst_kind)
        lines.append(f"  {a} --> {b}")
    if not report.edges:
        for row in report.rows:
            b = ref(f"dataset:{row.namespace}:{row.name}", row.name, "dataset")
            lines.append(f"  {root_ref} --> {b}")
    pii = [
        ids[f"dataset:{r.namespace}:{r.name}"]
        for r in report.rows
        if (r.pii_fields or r.subject_fields) and f"dataset:{r.namespace}:{r.name}" in ids
    ]
    lines.append("  classDef pii fill:#fde9e0,stroke:#9c2c00")
    if pii:
        lines.append(f"  class {','.join(pii)} pii")
    return "\n".join(lines) + "\n"


# --- dataset page summary --------------------------------------------------


@dataclass
class Neighbour:
    dataset: Dataset
    via: list[str]


@dataclass
class LineageSummary:
    producers: list[Job]
    consumers: list[Job]
    consumer_count: int
    upstream: list[Neighbour]
    downstream: list[Neighbour]
    upstream_reach: int
    downstream_reach: int
    upstream_cut: bool
    downstream_cut: bool


def lineage_summary(
    dataset: Dataset, as_of: datetime | None, reach_depth: int = 5
) -> LineageSummary:
    """Jobs writing and reading the dataset, datasets one job away, and reach at depth 5."""
    ref = NodeRef("dataset", dataset.namespace.name, dataset.name, dataset.pk)
    valid = valid_at(as_of)
    producer_ids = TableEdge.objects.filter(valid, dataset=dataset, direction=Direction.OUTPUT)
    consumer_ids = TableEdge.objects.filter(valid, dataset=dataset, direction=Direction.INPUT)
    producers = list(
        Job.objects.filter(pk__in=producer_ids.values("job_id"))
        .select_related("namespace", "latest_run")
        .order_by("name")[:20]
    )
    consumers = list(
        Job.objects.filter(pk__in=consumer_ids.values("job_id"))
        .select_related("namespace", "latest_run")
        .order_by("name")[:20]
    )
    consumer_count = len(consumers) if len(consumers) < 20 else consumer_ids.count()
    limit = 2000
    down = walk_table(ref, True, reach_depth, as_of, limit)
    up = walk_table(ref, False, reach_depth, as_of, limit)
    near = [pk for pk, d in {**down.datasets, **up.datasets}.items() if abs(d) == 1]
    rows = {
        ds.pk: ds for ds in Dataset.objects.filter(pk__in=near[:200]).select_related("namespace")
    }
    job_names = dict(
        Job.objects.filter(
            pk__in=[j for j, d in {**down.jobs, **up.jobs}.items() if abs(d) == 1][:400]
        ).values_list("pk", "name")
    )
    via: dict[int, set[str]] = defaultdict(set)
    for job_pk, dataset_pk, _direction in down.table_edges | up.table_edges:
        if job_pk in job_names:
            via[dataset_pk].add(job_names[job_pk])

    def neighbours(reached: dict[int, int]) -> list[Neighbour]:
        found = [
            Neighbour(rows[pk], sorted(via.get(pk, set())))
            for pk, d in reached.items()
            if abs(d) == 1 and pk in rows
        ]
        return sorted(found, key=lambda n: n.dataset.name)[:20]

    return LineageSummary(
        producers=producers,
        consumers=consumers,
        consumer_count=consumer_count,
        upstream=neighbours(up.datasets),
        downstream=neighbours(down.datasets),
        upstream_reach=len(up.datasets) - 1,
        downstream_reach=len(down.datasets) - 1,
        upstream_cut=up.truncated,
        downstream_cut=down.truncated,
    )


# --- orphans ---------------------------------------------------------------


def orphans(limit: int = 50) -> tuple[list[Dataset], int]:
    """Active datasets that no current edge touches: nothing writes or reads them any more."""
    current = TableEdge.objects.filter(dataset=OuterRef("pk"), valid_to__isnull=True)
    qs = Dataset.objects.filter(is_hidden=False, lifecycle_state=LifecycleState.ACTIVE).exclude(
        Exists(current)
    )
    rows = list(qs.select_related("namespace").order_by("-last_seen", "name")[:limit])
    total = len(rows) if len(rows) < limit else qs.count()
    return rows, total


# --- search ----------------------------------------------------------------


@dataclass
class SearchResults:
    datasets: list[Dataset] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    columns: list[DatasetField] = field(default_factory=list)
    owners: list[Owner] = field(default_factory=list)
    tags: list[Tag] = field(default_factory=list)
    more: dict[str, bool] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return (
            len(self.datasets)
            + len(self.jobs)
            + len(self.columns)
            + len(self.owners)
            + len(self.tags)
        )


def rank(field_name: str, q: str) -> Case:
    """0 exact, 1 last name segment, 2 prefix, 3 anywhere, 4 only in the description."""
    return Case(
        When(**{f"{field_name}__iexact": q}, then=Value(0)),
        When(**{f"{field_name}__iendswith": f".{q}"}, then=Value(1)),
        When(**{f"{field_name}__iendswith": f"/{q}"}, then=Value(1)),
        When(**{f"{field_name}__istartswith": q}, then=Value(2)),
        When(**{f"{field_name}__icontains": q}, then=Value(3)),
        default=Value(4),
        output_field=IntegerField(),
    )


def _top(qs: QuerySet[Any], limit: int) -> tuple[list[Any], bool]:
    rows = list(qs[: limit + 1])
    return rows[:limit], len(rows) > limit


def search(
    q: str,
    datasets: QuerySet[Dataset],
    kinds: tuple[str, ...],
    namespace: str | None = None,
    limit: int = 25,
    filtered: bool = False,
    pii_only: bool = False,
) -> SearchResults:
    """Best matches for ``q`` per kind.

    ``datasets`` already carries the dataset filters; ``filtered`` says some
    apply only to datasets (owner, retention, platform, PII), which leaves
    jobs, owners and tags out.
    """
    results = SearchResults()
    if "datasets" in kinds:
        qs = datasets
        if q:
            qs = qs.filter(Q(name__icontains=q) | Q(description__icontains=q)).annotate(
                rank=rank("name", q)
            )
            qs = qs.order_by("rank", Length("name"), "name")
        else:
            qs = qs.order_by("name")
        results.datasets, results.more["datasets"] = _top(
            qs.select_related("namespace", "retention_policy").prefetch_related(
                "ownerships__owner"
            ),
            limit,
        )
    if "columns" in kinds and q:
        cols = DatasetField.objects.filter(name__icontains=q, removed_at__isnull=True)
        if filtered or namespace:
            cols = cols.filter(dataset__in=datasets.values("pk"))
        else:
            cols = cols.filter(dataset__is_hidden=False)
        if pii_only:
            cols = cols.filter(_personal_data())
        cols = cols.annotate(rank=rank("name", q)).order_by("rank", Length("name"), "name", "pk")
        results.columns, results.more["columns"] = _top(
            cols.select_related("dataset__namespace", "subject_kind"), limit
        )
    if "jobs" in kinds and q and not filtered:
        jobs = Job.objects.filter(name__icontains=q)
        if namespace:
            jobs = jobs.filter(namespace__name=namespace)
        jobs = jobs.annotate(rank=rank("name", q)).order_by("rank", Length("name"), "name")
        results.jobs, results.more["jobs"] = _top(
            jobs.select_related("namespace", "latest_run"), limit
        )
    if "owners" in kinds and q and not (filtered or namespace):
        owners = (
            Owner.objects.filter(Q(name__icontains=q) | Q(display_name__icontains=q))
            .annotate(rank=rank("name", q), n=Count("ownerships"))
            .order_by("rank", "name")
        )
        results.owners, results.more["owners"] = _top(owners, min(limit, 10))
    if "tags" in kinds and q and not (filtered or namespace):
        tags = (
            Tag.objects.filter(name__icontains=q)
            .annotate(rank=rank("name", q), n=Count("datasets"))
            .order_by("rank", "name")
        )
        results.tags, results.more["tags"] = _top(tags, min(limit, 10))
    return results
