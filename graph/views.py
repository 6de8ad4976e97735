"""Graph pages: search, job and run pages, the graph explorer and its data,
impact with exports, and the lineage fragments that catalog pages load.

Every page keeps its state (node, level, direction, depth, asOf, compare) in
the query string so a link can be shared. Reads of the graph go through
``graph.page_data`` (the page-side shapes built on the graph queries).
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.text import slugify
from django.views.decorators.http import require_http_methods

from catalog import auth
from catalog import queries as catalog_queries
from catalog.errors import ApiError, error_response, json_error
from catalog.models import Dataset, Namespace, RetentionPolicy
from catalog.params import choice_param, int_param, optional_instant
from catalog.views import cached, filtered_datasets, platforms
from graph import nodeids, queries, revision
from graph import page_data as data
from graph.details import run_info
from graph.models import Job, Run, RunDataset, TableEdge, Taint
from graph.nodedata import iso
from graph.render import impact_csv, impact_mermaid, lineage_csv, lineage_mermaid
from graph.resolve import direction_param, node_param
from graph.taint import TaintError, clear_taint, mark_tainted

read_required = permission_required(auth.READ_LINEAGE, raise_exception=True)
View = Callable[..., HttpResponse]

SEARCH_LIMIT = 25
MAX_DEPTH = 20
DEFAULT_NODE_LIMIT = 2000
# Orphans change with lineage, not with steward edits, and finding them scans
# every dataset: the worklist is recomputed at most every five minutes.
ROOT_CAUSE_LIMIT = 1000
ORPHANS_CACHE_KEY = "explorer:orphans:v1"
ORPHANS_CACHE_SECONDS = 300
KIND_CHOICES = [
    ("all", "everything"),
    ("datasets", "datasets"),
    ("jobs", "jobs"),
    ("columns", "columns"),
    ("owners", "owners"),
    ("tags", "tags"),
]


def page(*methods: str, json_errors: bool = False) -> Callable[[View], View]:
    """A lineage reader's page (sign-in, the role, GET unless ``methods`` say otherwise);
    a GET reads from one lineage revision, as the API does (graph.revision.pinned; not a
    POST, whose writes, and the tasks they run in this process, must see themselves). Bad
    input (ApiError) is answered with its status: the error page, or the API's JSON error
    for what the page script fetches (``json_errors``), never a 500."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                with revision.pinned() if request.method == "GET" else nullcontext():
                    return view(request, *args, **kwargs)
            except ApiError as exc:
                if json_errors:
                    return json_error(exc.message, exc.status_code, exc.field)
                return error_response(request, exc.status_code, exc.message, exc.field)

        allowed = require_http_methods(list(methods or ("GET",)))
        return login_required(read_required(allowed(wrapper)))

    return decorate


def _iso(value: datetime | None) -> str:
    return iso(value) or ""


@dataclass
class ViewState:
    """The explorer's and impact view's state, as it travels in the query string."""

    node: nodeids.ResolvedNode
    level: str
    direction: queries.DirectionName
    depth: int
    as_of: datetime | None
    compare: datetime | None
    limit: int

    def query(self, **override: Any) -> str:
        values: dict[str, Any] = {
            "node": str(self.node.id),
            "level": self.level,
            "direction": self.direction,
            "depth": self.depth,
            "asOf": _iso(self.as_of),
            "compare": _iso(self.compare),
        }
        values.update(override)
        return urlencode({k: v for k, v in values.items() if v not in ("", None)})


def parse_state(
    params: Any, default_depth: int = 3, default_direction: queries.DirectionName = "both"
) -> ViewState:
    """Read node, level, direction, depth, asOf, compare and limit; ApiError on bad input."""
    if not (params.get("node") or "").strip():
        raise ApiError("Choose a dataset, job or column to start from.", "node")
    node = node_param({"node": params["node"].strip()}, "node")
    level = choice_param(
        params, "level", "column" if node.kind == "datasetField" else "table", ("table", "column")
    )
    direction = direction_param(params, default_direction)
    depth = int_param(params, "depth", default_depth, 1, MAX_DEPTH)
    limit = int_param(params, "limit", DEFAULT_NODE_LIMIT, 10, 10_000)
    if level == "table":
        node = node.dataset()
    if level == "column" and node.kind == "job":
        raise ApiError("Column level starts from a dataset or a column; a job has none.", "level")
    return ViewState(
        node=node,
        level=level,
        direction=direction,
        depth=depth,
        as_of=optional_instant(params, "asOf"),
        compare=optional_instant(params, "compare"),
        limit=limit,
    )


# --- search ----------------------------------------------------------------


def _has_filters(params: Any) -> bool:
    return any(params.get(k) for k in ("namespace", "platform", "owner", "retention", "pii"))


def _has_dataset_filters(params: Any) -> bool:
    """Filters that only datasets (and their columns) have: jobs, owners and tags drop out."""
    return any(params.get(k) for k in ("platform", "owner", "retention", "pii"))


@page()
def search(request: HttpRequest) -> HttpResponse:
    """Datasets, jobs, columns, owners and tags matching ``q``, best matches first."""
    params = request.GET
    q = (params.get("q") or "").strip()[:200]
    kind = params.get("kind") or "all"
    if kind not in dict(KIND_CHOICES):
        kind = "all"
    results = data.SearchResults()
    # Datasets and jobs are listed by name without a query (the job pages' breadcrumb).
    listing = kind in ("datasets", "jobs")
    if q or listing or _has_filters(params):
        datasets = filtered_datasets({k: v for k, v in params.items() if k != "q"})
        results = data.search(
            q,
            datasets,
            kinds=("datasets", "jobs", "columns", "owners", "tags") if kind == "all" else (kind,),
            namespace=params.get("namespace") or None,
            limit=SEARCH_LIMIT,
            filtered=_has_dataset_filters(params),
            pii_only=params.get("pii") == "1",
        )
    return render(
        request,
        "graph/search.html",
        {
            "q": q,
            "kind": kind,
            "kind_choices": KIND_CHOICES,
            "has_filters": _has_filters(params),
            "listing": listing,
            "filters": params,
            "results": results,
            "namespaces": Namespace.objects.order_by("name").values_list("name", flat=True)[:500],
            "platforms": platforms(),
            "policies": RetentionPolicy.objects.order_by("name").values_list("name", flat=True),
            "nav": "search",
            "list_query": urlencode(
                [(k, v) for k, v in params.items() if k in data.LIST_FILTERS and v]
            ),
        },
    )


@page()
def suggest(request: HttpRequest) -> HttpResponse:
    """A short list of the best matches for the search box, as an HTML fragment."""
    q = (request.GET.get("q") or "").strip()[:200]
    results = data.SearchResults()
    if len(q) >= 2:
        results = data.search(
            q,
            Dataset.objects.filter(is_hidden=False),
            kinds=("datasets", "jobs", "columns"),
            limit=6,
        )
    return render(request, "graph/_suggest.html", {"q": q, "results": results})


# --- job and run pages -----------------------------------------------------


@dataclass
class IntervalRow:
    edge: TableEdge
    left: float
    width: float


def interval_rows(edges: list[TableEdge], now: datetime) -> list[IntervalRow]:
    """Each edge with its validity drawn as a bar: left offset and width in % of the span."""
    if not edges:
        return []
    start = min(e.valid_from for e in edges)
    span = max((now - start).total_seconds(), 1.0)
    rows = []
    for e in edges:
        end = e.valid_to or now
        left = (e.valid_from - start).total_seconds() / span * 100
        width = max((end - e.valid_from).total_seconds() / span * 100, 0.8)
        rows.append(IntervalRow(e, round(left, 2), round(min(width, 100 - left), 2)))
    return rows


@page()
def job_detail(request: HttpRequest) -> HttpResponse:
    job = (
        Job.objects.select_related("namespace", "latest_run", "parent__namespace")
        .filter(namespace__name=request.GET.get("namespace", ""), name=request.GET.get("name", ""))
        .first()
    )
    if job is None:
        raise Http404("No such job")
    runs = Paginator(job.runs.order_by("-created_at"), 50).get_page(request.GET.get("page"))
    edges = list(
        job.edges.select_related("dataset__namespace").order_by(
            "direction", "dataset__name", "valid_from"
        )
    )
    rows = interval_rows(edges, timezone.now())
    outputs = [e for e in edges if e.direction == "out"]
    # A job that wrote datasets but writes none now is retired: not in today's graph.
    retired_since = (
        max(e.valid_to for e in outputs if e.valid_to is not None)
        if outputs and all(e.valid_to is not None for e in outputs)
        else None
    )
    state_counts = dict(job.runs.values_list("state").annotate(n=Count("id")).order_by())
    return render(
        request,
        "graph/job_detail.html",
        {
            "job": job,
            "runs": runs,
            "io_sections": [
                ("Inputs", [r for r in rows if r.edge.direction == "in"]),
                ("Outputs", [r for r in rows if r.edge.direction == "out"]),
            ],
            "state_counts": state_counts,
            "retired_since": retired_since,
            "span_start": min((e.valid_from for e in edges), default=None),
            "nav": "search",
        },
    )


@page()
def run_detail(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    run = (
        Run.objects.select_related("job__namespace", "parent__job").filter(run_uuid=run_id).first()
    )
    if run is None:
        raise Http404(f"No run {run_id} is recorded: look for its job, and the job's runs.")
    io_rows = list(
        run.io.select_related("dataset__namespace", "dataset_version").order_by(
            "direction", "dataset__name"
        )
    )
    return render(
        request,
        "graph/run_detail.html",
        {
            "run": run,
            "io_sections": [
                ("Read", [r for r in io_rows if r.direction == "in"]),
                ("Wrote", [r for r in io_rows if r.direction == "out"]),
            ],
            "facets_json": json.dumps(run.facets, indent=2, sort_keys=True)[:200_000],
            "children": run.children.select_related("job").order_by("started_at")[:50],
            "nav": "search",
        },
    )


# --- explorer --------------------------------------------------------------


@page()
def explorer(request: HttpRequest) -> HttpResponse:
    """The interactive graph page; the drawing itself is fetched from ``explorer_json``."""
    context: dict[str, Any] = {
        "nav": "graph",
        "state": None,
        "error": None,
        "node_value": request.GET.get("node", ""),
    }
    if request.GET.get("node"):
        try:
            state = parse_state(request.GET)
        except ApiError as exc:
            context["error"] = exc
            return render(request, "graph/explorer.html", context, status=exc.status_code)
        context.update(
            state=state,
            node_value=str(state.node.id),
            node_label=state.node.label,
            node_page=_node_page(state.node),
            config={
                "dataUrl": reverse("graph-data"),
                "pageUrl": reverse("graph-explorer"),
                "impactUrl": reverse("impact"),
                "exportUrl": reverse("graph-export"),
                "node": str(state.node.id),
                "level": state.level,
                "direction": state.direction,
                "depth": state.depth,
                "asOf": _iso(state.as_of),
                "compare": _iso(state.compare),
                "focus": request.GET.get("focus", ""),
                "limit": state.limit,
                # The first drawing's data URL, preloaded by the page head so the
                # request runs while the graph library loads.
                "firstData": f"{reverse('graph-data')}?{state.query(limit=state.limit)}",
            },
        )
    return render(request, "graph/explorer.html", context)


def _node_page(node: nodeids.ResolvedNode) -> str:
    shown = node.dataset().id
    if isinstance(shown, nodeids.JobNodeId):
        return data.job_url(shown.namespace, shown.name)
    assert isinstance(shown, nodeids.DatasetNodeId)
    return data.dataset_url(shown.namespace, shown.name)


@page(json_errors=True)
def explorer_json(request: HttpRequest) -> JsonResponse:
    """The graph around a node as the page draws it: nodes, edges, hidden counts, instants."""
    state = parse_state(request.GET)
    graph = data.build_view(
        state.node,
        level=state.level,
        direction=state.direction,
        depth=state.depth,
        as_of=state.as_of,
        compare=state.compare,
        limit=state.limit,
    )
    return JsonResponse(graph)


# --- impact ----------------------------------------------------------------


@page()
def impact(request: HttpRequest) -> HttpResponse:
    """Everything downstream of a node, grouped by distance, with owners, PII and retention."""
    if not request.GET.get("node"):
        return render(request, "graph/impact.html", {"report": None, "nav": "graph"})
    state = parse_state(request.GET, default_depth=MAX_DEPTH, default_direction="downstream")
    report = data.impact(state.node, depth=state.depth, as_of=state.as_of, level=state.level)
    taints: dict[str, Any] = {}
    if state.node.kind != "job":
        start = Dataset.objects.select_related("namespace").get(pk=state.node.dataset().pk)
        taints = _taint_context(request, start, back=request.get_full_path())
    return render(
        request,
        "graph/impact.html",
        {
            **taints,
            "state": state,
            "report": report,
            "node_page": _node_page(state.node),
            "export_query": state.query(direction="downstream"),
            "graph_query": state.query(direction="downstream"),
            "nav": "graph",
        },
    )


@page()
def root_cause(request: HttpRequest) -> HttpResponse:
    """Everything upstream of a node with each job's latest run: failures first, then suspects."""
    if not request.GET.get("node"):
        return render(request, "graph/root_cause.html", {"result": None, "nav": "graph"})
    state = parse_state(request.GET, default_depth=MAX_DEPTH, default_direction="upstream")
    start = state.node.dataset()
    result = queries.root_cause(
        start, depth=state.depth, as_of=state.as_of, max_nodes=ROOT_CAUSE_LIMIT
    )
    names = {n.node_id: n for n in result.graph.nodes}
    lifecycle = "Active"
    if start.kind == "dataset":
        lifecycle, _ = catalog_queries.dataset_lifecycle(
            Dataset.objects.get(pk=start.pk), state.as_of
        )
    return render(
        request,
        "graph/root_cause.html",
        {
            "state": state,
            "start": start,
            "lifecycle": lifecycle,
            "result": result,
            "jobs": [
                {
                    "job": j.job,
                    "distance": j.distance,
                    "run": j.run,
                    "url": data.job_url(j.job.namespace, j.job.name),
                    "run_url": reverse("run-detail", args=[uuid.UUID(j.run.run_uuid)])
                    if j.run
                    else "",
                    "outputs": [
                        {
                            "name": names[o].name,
                            "url": data.dataset_url(names[o].namespace, names[o].name),
                        }
                        for o in j.outputs
                        if o in names
                    ],
                }
                for j in result.jobs
            ],
            "suspects": [
                {"name": names[s].name, "url": data.dataset_url(names[s].namespace, names[s].name)}
                for s in result.suspects
                if s in names
            ],
            "node_page": _node_page(start),
            "graph_query": state.query(direction="upstream"),
            "nav": "graph",
        },
    )


def _export_state(request: HttpRequest, **defaults: Any) -> tuple[ViewState, str]:
    """The state to export and ``format`` (csv or mermaid); ApiError on bad input."""
    state = parse_state(request.GET, **defaults)
    return state, choice_param(request.GET, "format", "csv", ("csv", "mermaid"))


def _download(text: str, fmt: str, stem: str) -> HttpResponse:
    """``text`` as an attachment: CSV, or a Mermaid flowchart (``.mmd``)."""
    kind, suffix = ("text/vnd.mermaid", "mmd") if fmt == "mermaid" else ("text/csv", "csv")
    response = HttpResponse(text, content_type=f"{kind}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{stem}.{suffix}"'
    return response


@page(json_errors=True)
def impact_export(request: HttpRequest) -> HttpResponse:
    """The impact as CSV (``format=csv``) or a Mermaid flowchart (``format=mermaid``).

    The same text the lineage impact API exports, so a page download and an
    API call agree.
    """
    state, fmt = _export_state(request, default_depth=MAX_DEPTH, default_direction="downstream")
    start = data.impact_start(state.node, state.level)
    result = queries.impact(start, depth=state.depth, as_of=state.as_of)
    text = impact_mermaid(result) if fmt == "mermaid" else impact_csv(result)
    return _download(text, fmt, f"impact-{slugify(start.label)[:80] or 'impact'}")


@page(json_errors=True)
def explorer_export(request: HttpRequest) -> HttpResponse:
    """The graph the explorer draws for this state (before any node is expanded), as its
    edge list in CSV (``format=csv``; between fields, a row per job that makes one field
    from another) or a Mermaid flowchart (``format=mermaid``)."""
    state, fmt = _export_state(request)
    graph = data.drawing(
        state.node, state.level, state.direction, state.depth, state.as_of, state.limit
    )
    text = lineage_mermaid(graph) if fmt == "mermaid" else lineage_csv(graph)
    return _download(text, fmt, f"lineage-{slugify(state.node.label)[:80] or 'lineage'}")


# --- fragments for catalog pages ------------------------------------------


def _dataset_from_params(params: Any) -> Dataset:
    dataset = catalog_queries.get_dataset(
        params.get("namespace", ""),
        params.get("name", ""),
        Dataset.objects.select_related("namespace"),
    )
    if dataset is None:
        raise Http404("No such dataset")
    return dataset


@page()
def dataset_lineage_fragment(request: HttpRequest) -> HttpResponse:
    """Producers, consumers and the datasets one job away, plus reach counts."""
    dataset = _dataset_from_params(request.GET)
    as_of = optional_instant(request.GET, "asOf")
    summary = data.lineage_summary(dataset, as_of=as_of)
    lifecycle, since = catalog_queries.dataset_lifecycle(dataset, as_of)
    return render(
        request,
        "graph/_dataset_lineage.html",
        {
            "dataset": dataset,
            "summary": summary,
            "as_of": _iso(as_of),
            "lifecycle": lifecycle,
            "since": since,
        },
    )


@page()
def dataset_runs_fragment(request: HttpRequest) -> HttpResponse:
    """The latest runs that wrote and read the dataset."""
    dataset = _dataset_from_params(request.GET)
    as_of = optional_instant(request.GET, "asOf")
    recent: dict[str, list[RunDataset]] = defaultdict(list)
    for direction in ("out", "in"):
        rows = RunDataset.objects.filter(dataset=dataset, direction=direction)
        if as_of is not None:
            rows = rows.filter(event_time__lte=as_of)
        recent[direction] = list(
            rows.select_related("run__job__namespace").order_by("-event_time")[:15]
        )
        for row in recent[direction]:
            run = row.run
            then = run_info(
                run.run_uuid,
                run.state,
                run.started_at,
                run.ended_at,
                run.error_message,
                run.state_event_time,
                as_of,
            )
            row.state_then = then.state  # type: ignore[attr-defined]
            row.duration_then = then.duration_ms  # type: ignore[attr-defined]
    return render(
        request,
        "graph/_dataset_runs.html",
        {"sections": [("Written by", recent["out"]), ("Read by", recent["in"])], "as_of": as_of},
    )


@page()
def orphans_fragment(request: HttpRequest) -> HttpResponse:
    """Datasets that no current job reads: candidates for archiving."""
    found = cached(ORPHANS_CACHE_KEY, lambda: queries.untouched(limit=50), ORPHANS_CACHE_SECONDS)
    return render(request, "graph/_orphans.html", {"orphans": found.items, "total": found.total})


# --- taints, for engineers ----------------------------------------------------------------


def _taint_context(request: HttpRequest, dataset: Dataset, **extra: Any) -> dict[str, Any]:
    """The dataset's active taints, what they put at risk and the jobs to re-run, in order."""
    active = list(
        Taint.objects.filter(dataset=dataset, cleared_at__isnull=True)
        .select_related("dataset__namespace", "created_by", "cleared_by")
        .order_by("-created_at")
    )
    impact = queries.taint_impact(active, max_nodes=TAINT_LIST_LIMIT) if active else None
    return {
        "dataset": dataset,
        "taints": active,
        "impact": impact,
        "at_risk": [d for d in impact.datasets if d.distance > 0] if impact else [],
        "may_taint": auth.has_perm(request.user, auth.TAINT_DATASET),
        "back": _same_site(request.GET.get("next"), request)
        or data.dataset_url(dataset.namespace.name, dataset.name),
        **extra,
    }


TAINT_LIST_LIMIT = 200


def _same_site(url: str | None, request: HttpRequest) -> str:
    """A path on this site to come back to (never another host)."""
    if (
        url
        and url.startswith("/")
        and url_has_allowed_host_and_scheme(
            url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
    ):
        return url
    return ""


@page("GET", "POST")
def dataset_taints(request: HttpRequest) -> HttpResponse:
    """GET: the dataset's taints and the re-run order (a fragment of the dataset and impact
    pages). POST (engineers): mark the dataset as tainted, for a window of data if given."""
    if request.method == "POST" and not auth.has_perm(request.user, auth.TAINT_DATASET):
        raise PermissionDenied("Marking datasets as tainted needs the engineer role")
    dataset = _dataset_from_params(request.GET)
    if request.method == "GET":
        return render(request, "graph/_taints.html", _taint_context(request, dataset))
    values = {key: request.POST.get(key, "") for key in ("reason", "windowStart", "windowEnd")}
    try:
        start = optional_instant(request.POST, "windowStart")
        end = optional_instant(request.POST, "windowEnd")
        mark_tainted(
            dataset, reason=values["reason"], actor=request.user, window_start=start, window_end=end
        )
    except (ApiError, TaintError) as exc:
        # In the form's words ("from", "to"), not the API's parameter names.
        words = (("reason", "“what is wrong”"), ("windowStart", "“from”"), ("windowEnd", "“to”"))
        error = exc.message
        for name, word in words:
            error = error.replace(name, word)
    else:
        back = _same_site(request.GET.get("next"), request) or data.dataset_url(
            dataset.namespace.name, dataset.name
        )
        messages.success(request, f"{dataset.name} is marked as tainted.")
        return HttpResponseRedirect(f"{back}#taints-h")
    context = _taint_context(request, dataset, error=error, values=values)
    return render(request, "graph/taint_form.html", context, status=422)


@login_required
@permission_required(auth.TAINT_DATASET, raise_exception=True)
@require_http_methods(["POST"])
def clear_taint_page(request: HttpRequest, taint_id: int) -> HttpResponse:
    """Clear a taint (engineers); back to where the button was."""
    taint = Taint.objects.select_related("dataset__namespace").filter(pk=taint_id).first()
    if taint is None:
        raise Http404(f"No taint {taint_id}")
    clear_taint(taint, actor=request.user)
    dataset = taint.dataset
    back = _same_site(request.POST.get("next"), request) or data.dataset_url(
        dataset.namespace.name, dataset.name
    )
    messages.success(request, f"The taint on {dataset.name} is cleared.")
    return HttpResponseRedirect(f"{back}#taints-h")
