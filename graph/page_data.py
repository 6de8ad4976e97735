"""What the explorer pages show, built on the graph queries and the catalog.

Page-side shapes only: the explorer's JSON (the answer graph/render.py draws, with
the catalog's marks, the instants where the drawn graph changed and diff marks), the
impact report, the dataset page's lineage summary, search and the orphans worklist.
Traversals, as-of and caps are graph.queries'; this module turns their dataclasses
into what templates and the page script draw.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any
from urllib.parse import urlencode

from django.db.models import (
    Count,
    Q,
    QuerySet,
    prefetch_related_objects,
)
from django.urls import reverse

from catalog.flags import chunks
from catalog.models import (
    PERSONAL_DATA,
    Dataset,
    DatasetField,
    LifecycleState,
    Namespace,
    Owner,
    Tag,
)
from graph import nodedata, nodeids, queries, render, snapshot
from graph.details import JobInfo, load_datasets, load_jobs
from graph.models import Job, Taint
from graph.nodedata import iso

LIST_FILTERS = ("q", "namespace", "platform", "owner", "retention", "pii")
MAX_INSTANTS = 500


# --- node ids --------------------------------------------------------------


def dataset_ref(dataset: Dataset) -> nodeids.ResolvedNode:
    node = nodeids.DatasetNodeId(dataset.namespace.name, dataset.name)
    return nodeids.ResolvedNode(node, dataset.pk, dataset.pk)


# --- urls ------------------------------------------------------------------


@lru_cache(maxsize=8)
def _page(name: str) -> str:
    return reverse(name)


def dataset_url(namespace: str, name: str) -> str:
    return f"{_page('dataset-detail')}?{urlencode({'namespace': namespace, 'name': name})}"


def job_url(namespace: str, name: str) -> str:
    return f"{_page('job-detail')}?{urlencode({'namespace': namespace, 'name': name})}"


@dataclass(frozen=True)
class NodeLink:
    """A node id as pages show it: a short name, its page, the full id on hover."""

    short: str
    url: str
    full: str


def short_name(name: str, keep: int = 2) -> str:
    """The last ``keep`` segments of a dataset's name (``raw/customers``, ``public.orders``)."""
    sep = "/" if "/" in name else "."  # a path's segments, or a table's schema and name
    parts = [p for p in name.split(sep) if p]
    return sep.join(parts[-keep:]) if parts else name


def node_links(ids: Iterable[str]) -> dict[str, NodeLink]:
    """Links for node ids (datasets, fields and jobs) with their namespaces read in one query;
    an id whose namespace is unknown gets none."""
    wanted = {raw for raw in ids if isinstance(raw, str) and raw}
    candidates: set[str] = set()
    for raw in wanted:
        try:
            candidates.update(nodeids.namespace_candidates(nodeids.split_kind(raw)[1]))
        except nodeids.MalformedNodeId:
            continue
    known = set(Namespace.objects.filter(name__in=candidates).values_list("name", flat=True))
    links: dict[str, NodeLink] = {}
    for raw in wanted:
        try:
            node = nodeids.parse_node_id(raw, known)
        except (nodeids.MalformedNodeId, nodeids.UnknownNodeId):
            continue
        if isinstance(node, nodeids.JobNodeId):
            links[raw] = NodeLink(node.name, job_url(node.namespace, node.name), raw)
        elif isinstance(node, nodeids.FieldNodeId):
            short = f"{short_name(node.dataset)} · {node.field}"
            links[raw] = NodeLink(short, dataset_url(node.namespace, node.dataset), raw)
        else:
            links[raw] = NodeLink(
                short_name(node.name), dataset_url(node.namespace, node.name), raw
            )
    return links


# --- taint -----------------------------------------------------------------


def current_risk() -> render.Risk:
    """Datasets under an active taint and all that they put at risk downstream."""
    taints = list(Taint.objects.filter(cleared_at__isnull=True).only("dataset", "window_start"))
    if not taints:
        return render.Risk()
    snap = snapshot.table()
    datasets: set[int] = set()
    jobs: set[int] = set()
    for taint in taints:
        reach = queries.taint_reach(taint, snap)
        datasets.update(reach.ds.tolist())
        jobs.update(reach.job.tolist())
    tainted = frozenset(t.dataset_id for t in taints)
    return render.Risk(tainted, frozenset(datasets) - tainted, frozenset(jobs))


# --- the explorer's JSON ---------------------------------------------------


def marks(graph: queries.LineageGraph) -> render.Marks:
    """The catalog's marks on the nodes of ``graph``, as of its instant: at column level
    its datasets with their fields; at table level each dataset's personal-data, subject
    and dropped marks and each job's run state (a hub's answer marks two thousand nodes:
    a few queries, not two thousand node summaries read back)."""
    if graph.level == "column":
        return render.Marks(
            datasets=load_datasets({n.dataset_pk for n in graph.nodes}, graph.as_of)
        )
    return render.Marks(
        flags=dataset_marks([n.pk for n in graph.nodes if n.kind == "DATASET"], graph.as_of),
        states=run_states([n.pk for n in graph.nodes if n.kind == "JOB"], graph.as_of),
    )


def dataset_marks(pks: list[int], as_of: datetime | None) -> dict[int, dict[str, bool]]:
    """Each dataset's marks (pii, subject, dropped) as of ``as_of``: from the rows as they
    are, but for the datasets changed since, read from the history."""
    changed = set() if as_of is None else nodedata.changed_datasets(pks, as_of)[0]
    flags: dict[int, dict[str, bool]] = {}
    for chunk in chunks([pk for pk in pks if pk not in changed]):
        personal = DatasetField.objects.filter(
            PERSONAL_DATA, removed_at__isnull=True, dataset_id__any_of=chunk
        ).order_by()
        for dataset_pk, subject in personal.values_list("dataset_id", "subject_kind_id"):
            entry = flags.setdefault(dataset_pk, {"pii": True, "subject": False})
            entry["subject"] = entry["subject"] or subject is not None
        dropped = Dataset.objects.filter(pk__any_of=chunk, lifecycle_state=LifecycleState.DROPPED)
        for dataset_pk in dropped.values_list("pk", flat=True):
            flags.setdefault(dataset_pk, {"pii": False, "subject": False})["dropped"] = True
    for pk, info in load_datasets(sorted(changed), as_of, "personal").items():
        flags[pk] = {
            "pii": info.has_pii,
            "subject": any(f.subject_kind for f in info.fields),
            "dropped": info.lifecycle_state == LifecycleState.DROPPED,
        }
    return flags


def run_states(pks: list[int], as_of: datetime | None) -> dict[int, str]:
    """Each job's latest run's state as of ``as_of`` (seen from then; none yet: left out)."""
    states: dict[int, str] = {}
    for chunk in chunks(pks):
        states.update(
            Job.objects.filter(pk__any_of=chunk, latest_run__isnull=False).values_list(
                "pk", "latest_run__state"
            )
        )
    if as_of is None:
        return states
    shown, runs = nodedata.runs_as_of(pks, as_of)
    then = {pk: states[pk] for pk in shown if pk in states}
    return then | {pk: run.state for pk, run in runs.items()}


def drawing(
    root: nodeids.ResolvedNode,
    level: str,
    direction: queries.DirectionName,
    depth: int,
    as_of: datetime | None,
    limit: int,
) -> queries.LineageGraph:
    """The lineage answer the explorer draws (and exports) for this state."""
    if level == "column":
        graph = queries.column_lineage(
            root,
            depth=depth,
            as_of=as_of,
            with_downstream=direction != "upstream",
            max_nodes=limit,
        )
        return render.on_side(graph, direction)
    return queries.lineage(
        root,
        depth=depth,
        as_of=as_of,
        direction=direction,
        max_nodes=limit,
    )


def build_view(
    root: nodeids.ResolvedNode,
    level: str,
    direction: queries.DirectionName,
    depth: int,
    as_of: datetime | None,
    compare: datetime | None,
    limit: int,
) -> dict[str, Any]:
    """The explorer's drawing data; with ``compare``, the union of both instants, diff-marked."""
    risk = current_risk()
    graph = drawing(root, level, direction, depth, as_of, limit)
    nodes, edges = render.explorer_drawing(graph, risk, marks(graph))
    truncated = graph.truncated
    if compare is not None:
        then = drawing(root, level, direction, depth, compare, limit)
        old_nodes, old_edges = render.explorer_drawing(then, risk, marks(then))
        truncated = truncated or then.truncated
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
    # The slider's instants: when the graph around the node ever changed (at this level).
    instants = queries.change_instants(
        root.dataset(),
        depth=depth,
        direction=direction,
        limit=MAX_INSTANTS,
        level=level,
    )
    return {
        "root": str(root.id),
        "level": level,
        "direction": direction,
        "depth": depth,
        "asOf": iso(as_of),
        "compare": iso(compare),
        "limit": limit,
        "truncated": truncated,
        # Pages of nodes: the client adds ?namespace=…&name=… (cheaper than a URL per node).
        "pages": {"dataset": _page("dataset-detail"), "job": _page("job-detail")},
        "nodes": list(nodes.values()),
        "edges": list(edges.values()),
        "instants": [iso(t) for t in instants],
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
    root: nodeids.ResolvedNode
    level: str
    as_of: datetime | None
    rows: list[ImpactRow]
    owners: list[tuple[str, int]]
    job_count: int
    truncated: bool
    # Datasets and jobs beyond the nearest ones shown.
    cut_datasets: int = 0
    cut_jobs: int = 0

    @property
    def total_datasets(self) -> int:
        return len(self.rows) + self.cut_datasets

    @property
    def total_jobs(self) -> int:
        return self.job_count + self.cut_jobs

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


def impact_start(root: nodeids.ResolvedNode, level: str) -> nodeids.ResolvedNode:
    """The node an impact starts from: a column only at column level."""
    return root if level == "column" else root.dataset()


def impact(
    root: nodeids.ResolvedNode,
    depth: int,
    as_of: datetime | None,
    level: str = "table",
    limit: int = 500,
) -> ImpactReport:
    """Every dataset downstream of ``root`` with distance, owners to notify, PII and retention."""
    start = impact_start(root, level)
    result = queries.impact(start, depth=depth, as_of=as_of, max_nodes=limit)
    job_names = {j.node_id: j.job.name for j in result.jobs}
    tainted = set(Taint.objects.filter(cleared_at__isnull=True).values_list("dataset", flat=True))
    rows: list[ImpactRow] = []
    owner_counts: dict[str, int] = defaultdict(int)
    for item in result.datasets:
        ds = item.dataset
        owners = [o.name for o in ds.owners]
        for name in owners:
            owner_counts[name] += 1
        rows.append(
            ImpactRow(
                distance=item.distance,
                namespace=ds.namespace,
                name=ds.name,
                url=dataset_url(ds.namespace, ds.name),
                owners=owners,
                pii_fields=[f.name for f in ds.fields if f.pii_category],
                subject_fields=[
                    f"{f.name} ({f.subject_kind})" for f in ds.fields if f.subject_kind
                ],
                retention=ds.retention.name if ds.retention else None,
                retention_days=ds.retention.duration_days if ds.retention else None,
                via_jobs=sorted(job_names.get(j, j) for j in item.via_jobs),
                reached_fields=list(item.fields),
                tainted=ds.pk in tainted,
            )
        )
    return ImpactReport(
        root=start,
        level=result.level,
        as_of=as_of,
        rows=rows,
        owners=sorted(owner_counts.items(), key=lambda kv: (-kv[1], kv[0])),
        job_count=len(result.jobs),
        truncated=result.truncated,
        cut_datasets=result.cut.datasets + result.cut.fields,
        cut_jobs=result.cut.jobs,
    )


# --- dataset page summary --------------------------------------------------


@dataclass
class Neighbour:
    namespace: str
    name: str
    url: str


SIDES = ("upstream", "downstream")


@dataclass
class LineageSummary:
    producers: list[JobInfo]
    consumers: list[JobInfo]
    consumer_count: int
    upstream: list[Neighbour]
    downstream: list[Neighbour]
    upstream_near: int
    downstream_near: int
    upstream_reach: int
    downstream_reach: int
    truncated: bool


def lineage_summary(
    dataset: Dataset, as_of: datetime | None, reach_depth: int = 5, limit: int = 2000
) -> LineageSummary:
    """Jobs writing and reading the dataset, datasets one job away, and reach within 5 jobs."""
    graph = queries.lineage(
        dataset_ref(dataset),
        depth=reach_depth,
        as_of=as_of,
        direction="both",
        max_nodes=limit,
    )
    near_jobs = sorted(
        (n for n in graph.nodes if n.kind == "JOB" and n.distance == 1), key=lambda n: n.name
    )
    # Only the jobs listed need their latest run: a hub has thousands of readers.
    shown = {side: [n for n in near_jobs if n.side == side][:20] for side in SIDES}
    jobs = load_jobs([n.pk for side in SIDES for n in shown[side]], as_of)

    def job_list(side: str) -> list[JobInfo]:
        return [jobs[n.pk] for n in shown[side] if n.pk in jobs]

    near = {
        side: sorted(
            (
                Neighbour(n.namespace, n.name, dataset_url(n.namespace, n.name))
                for n in graph.nodes
                if n.kind == "DATASET" and n.side == side and n.distance == 1
            ),
            key=lambda n: n.name,
        )
        for side in SIDES
    }

    return LineageSummary(
        producers=job_list("upstream"),
        consumers=job_list("downstream"),
        consumer_count=sum(1 for n in near_jobs if n.side == "downstream"),
        upstream=near["upstream"][:20],
        downstream=near["downstream"][:20],
        upstream_near=len(near["upstream"]),
        downstream_near=len(near["downstream"]),
        upstream_reach=sum(1 for n in graph.nodes if n.kind == "DATASET" and n.side == "upstream"),
        downstream_reach=sum(
            1 for n in graph.nodes if n.kind == "DATASET" and n.side == "downstream"
        ),
        truncated=graph.truncated,
    )


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


CANDIDATES = 150


def name_rank(name: str, q: str) -> tuple[int, int, str]:
    """0 the whole name, 1 its last segment, 2 a prefix, 3 anywhere; shorter names first."""
    lowered, term = name.lower(), q.lower()
    if lowered == term:
        tier = 0
    elif lowered.endswith((f".{term}", f"/{term}")):
        tier = 1
    elif lowered.startswith(term):
        tier = 2
    else:
        tier = 3
    return tier, len(name), name


def ranked(
    qs: QuerySet[Any],
    field_name: str,
    q: str,
    limit: int,
    extra: tuple[Q, ...] = (),
    indexed_equality: bool = False,
) -> tuple[list[Any], bool]:
    """The best ``limit`` rows for ``q``: exact names, then the best of the first matches.

    Other matches are the first ``CANDIDATES`` rows the trigram index yields
    (unordered, so the scan stops early), ranked here: a term found in tens of
    thousands of names costs no more than a rare one. With
    ``indexed_equality`` exact names come first from the name index, wherever
    they lie. ``extra`` conditions (a description match) fill what names leave.
    """
    qs = qs.order_by()
    found: list[Any] = []
    if indexed_equality:
        found = list(qs.filter(Q(**{field_name: q}) | Q(**{field_name: q.lower()}))[: limit + 1])
    seen = {row.pk for row in found}
    lookup = "icontains" if len(q) >= 3 else "istartswith"
    candidates = [
        row
        for row in qs.filter(**{f"{field_name}__{lookup}": q})[:CANDIDATES]
        if row.pk not in seen
    ]
    candidates.sort(key=lambda row: name_rank(getattr(row, field_name), q))
    found += candidates
    for more in extra:
        if len(found) > limit:
            break
        seen = {row.pk for row in found}
        rows = qs.filter(more).exclude(pk__in=seen) if seen else qs.filter(more)
        found += list(rows[: limit + 1 - len(found)])
    return found[:limit], len(found) > limit


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
        qs = datasets.select_related("namespace", "retention_policy")
        if q:
            extra = (Q(description__icontains=q),) if len(q) >= 3 else ()
            results.datasets, results.more["datasets"] = ranked(
                qs, "name", q, limit, extra, indexed_equality=True
            )
        else:
            results.datasets, results.more["datasets"] = _top(qs.order_by("name", "pk"), limit)
        prefetch_related_objects(results.datasets, "ownerships__owner")
    if "columns" in kinds and q:
        cols = DatasetField.objects.filter(removed_at__isnull=True)
        if filtered or namespace:
            cols = cols.filter(dataset__in=datasets.values("pk"))
        else:
            cols = cols.filter(dataset__is_hidden=False)
        if pii_only:
            cols = cols.filter(PERSONAL_DATA)
        results.columns, results.more["columns"] = ranked(
            cols.select_related("dataset__namespace", "subject_kind"), "name", q, limit
        )
    if "jobs" in kinds and not filtered:
        jobs = Job.objects.select_related("namespace", "latest_run")
        if namespace:
            jobs = jobs.filter(namespace__name=namespace)
        if q:
            results.jobs, results.more["jobs"] = ranked(jobs, "name", q, limit)
        else:
            # By namespace, then name: the order of the index on both.
            results.jobs, results.more["jobs"] = _top(jobs.order_by("namespace_id", "name"), limit)
    if "owners" in kinds and q and not (filtered or namespace):
        results.owners, results.more["owners"] = ranked(
            Owner.objects.annotate(n=Count("ownerships")),
            "name",
            q,
            min(limit, 10),
            (Q(display_name__icontains=q),),
        )
    if "tags" in kinds and q and not (filtered or namespace):
        results.tags, results.more["tags"] = ranked(
            Tag.objects.annotate(n=Count("datasets")), "name", q, min(limit, 10)
        )
        tagged_fields = {
            row["tag_id"]: row["fields"]
            for row in DatasetField.tags.through.objects.filter(
                tag_id__in=[tag.pk for tag in results.tags], datasetfield__removed_at__isnull=True
            )
            .values("tag_id")
            .annotate(fields=Count("id"))
        }
        for tag in results.tags:
            tag.fields_n = tagged_fields.get(tag.pk, 0)  # type: ignore[attr-defined]
    return results
