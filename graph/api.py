"""Lineage API: Marquez's graph shapes plus as-of, direction, caps, impact, root cause,
paths, diffs, orphans/sources and taints. Views parse, call one query or action,
render.

Edges are always ``{"origin": upstream id, "destination": downstream id}``.
Large answers are cut at ``maxNodes`` (default 2,000): the response says
``truncated`` and how many datasets, jobs or fields were ``cut``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, TypedDict

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog.auth import CanReadLineage, CanTaint
from catalog.errors import ApiError
from catalog.models import Dataset
from catalog.params import (
    InstantField,
    TextField,
    bool_param,
    int_param,
    optional_instant,
    parse_instant,
)
from catalog.schema import (
    NODE_ID_PATTERNS,
    instant_parameter,
    int_parameter,
    node_id_parameter,
    paging_parameters,
)
from graph import nodedata, queries, render, responses, revision, schema
from graph.details import DatasetInfo, OwnerInfo, RunInfo
from graph.models import Taint
from graph.nodedata import iso
from graph.nodeids import (
    DatasetNodeId,
    FieldNodeId,
    ResolvedNode,
)
from graph.render import dumps as _dumps
from graph.resolve import DIRECTIONS, direction_param, node_param
from graph.taint import TaintError, clear_taint, mark_tainted

DEFAULT_DEPTH = 20


class _TextRenderer(BaseRenderer):
    """Lets ``?format=csv|mermaid`` through content negotiation; views answer with text.

    Errors raised on those requests still come out as the JSON error shape.
    """

    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        if isinstance(data, str):
            return data.encode()
        return _dumps(data).encode()


class CsvRenderer(_TextRenderer):
    media_type = "text/csv"
    format = "csv"


class MermaidRenderer(_TextRenderer):
    media_type = "text/vnd.mermaid"
    format = "mermaid"


# Base of the graph API views: one lineage revision per request (see graph.revision.pinned);
# an unknown ``format`` is a 400 naming it. (A comment: the API reference would show a
# docstring as each route's description.)
class GraphView(APIView):
    permission_classes = [CanReadLineage]

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        with revision.pinned():
            return super().dispatch(request, *args, **kwargs)

    def handle_exception(self, exc: Exception) -> Response:
        response = super().handle_exception(exc)
        # The JSON error shape, whatever format was asked for (CSV, Mermaid).
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type
        return response

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        fmt = request.query_params.get("format")
        if fmt and not force:
            known = sorted({r.format for r in self.get_renderers()})
            if fmt not in known:
                raise ApiError(f"format must be one of {', '.join(known)}, got {fmt!r}", "format")
        return super().perform_content_negotiation(request, force)


def _depth(params: Mapping[str, str], default: int = DEFAULT_DEPTH) -> int:
    return int_param(params, "depth", default, 0, queries.MAX_DEPTH)


def _max_nodes(params: Mapping[str, str]) -> int:
    return int_param(params, "maxNodes", queries.DEFAULT_MAX_NODES, 1, queries.MAX_NODES_LIMIT)


def _text(body: str, content_type: str, filename: str | None = None) -> HttpResponse:
    response = HttpResponse(body, content_type=f"{content_type}; charset=utf-8")
    if filename:
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _json(body: str | bytes, status: int = 200) -> HttpResponse:
    return HttpResponse(body, content_type="application/json", status=status)


def _depth_parameter(default: object) -> OpenApiParameter:
    return int_parameter(
        "depth", 0, queries.MAX_DEPTH, f"jobs away from the node, default {default}"
    )


AS_OF_AND_CAP = [
    instant_parameter("asOf", description="the graph as it was then"),
    int_parameter("maxNodes", 1, queries.MAX_NODES_LIMIT, "cap on nodes returned (default 2000)"),
]
COMMON_PARAMETERS = [_depth_parameter(DEFAULT_DEPTH), *AS_OF_AND_CAP]


# --- table lineage -----------------------------------------------------------------------


def _table_query(params: Mapping[str, str]) -> tuple[ResolvedNode, dict[str, Any]]:
    """The node and the asking of ``GET /api/v1/lineage`` (ApiError for bad parameters)."""
    return node_param(params), {
        "depth": _depth(params),
        "as_of": optional_instant(params),
        "direction": direction_param(params),
        "max_nodes": _max_nodes(params),
    }


def lineage_json(params: Mapping[str, str]) -> bytes:
    """The JSON body of ``GET /api/v1/lineage`` for ``params`` (ApiError for bad ones); large
    answers are kept until a change touches a node they reached (graph/responses.py)."""
    node, asked = _table_query(params)

    def build() -> tuple[bytes, responses.Reached]:
        graph = queries.lineage(node, **asked)
        return render.lineage_json(graph), graph.reached

    return responses.cache.through(("lineage", node.kind, node.pk, *asked.values()), build)


# GET /api/v1/lineage (POST on the same path is the ingest endpoint).
class LineageView(GraphView):
    renderer_classes = [JSONRenderer, CsvRenderer, MermaidRenderer]

    @extend_schema(
        responses={
            200: schema.LINEAGE,
            (200, "text/csv"): OpenApiTypes.STR,
            (200, "text/vnd.mermaid"): OpenApiTypes.STR,
        },
        summary="Table-level lineage graph around a dataset or job (Marquez's shape)",
        operation_id="getLineage",
        parameters=[
            node_id_parameter(),
            OpenApiParameter("direction", str, enum=list(DIRECTIONS), description="default both"),
            OpenApiParameter("format", str, enum=["json", "csv", "mermaid"]),
            *COMMON_PARAMETERS,
        ],
    )
    def get(self, request: Request) -> HttpResponse:
        params = request.query_params
        fmt = request.accepted_renderer.format
        if fmt == "json":
            return _json(lineage_json(params))
        node, asked = _table_query(params)
        return _text_answer(queries.lineage(node, **asked), fmt)


# --- column lineage ----------------------------------------------------------------------


def _text_answer(graph: queries.LineageGraph, fmt: str) -> HttpResponse:
    """A lineage answer as CSV (an attachment) or Mermaid text."""
    if fmt == "csv":
        name = "column-lineage.csv" if graph.level == "column" else "lineage.csv"
        return _text(render.lineage_csv(graph), "text/csv", name)
    return _text(render.lineage_mermaid(graph), "text/vnd.mermaid")


def column_graph(params: Mapping[str, str]) -> queries.LineageGraph:
    """The column-level answer ``GET /api/v1/column-lineage`` asks for (ApiError for bad
    parameters)."""
    node = node_param(params)
    if not isinstance(node.id, FieldNodeId | DatasetNodeId):
        raise ApiError("Column lineage needs a datasetField:… or dataset:… id", "nodeId")
    return queries.column_lineage(
        node,
        depth=_depth(params),
        as_of=optional_instant(params),
        with_downstream=bool_param(params, "withDownstream", False),
        max_nodes=_max_nodes(params),
    )


class ColumnLineageView(GraphView):
    renderer_classes = [JSONRenderer, CsvRenderer, MermaidRenderer]

    @extend_schema(
        responses={
            200: schema.COLUMN_LINEAGE,
            (200, "text/csv"): OpenApiTypes.STR,
            (200, "text/vnd.mermaid"): OpenApiTypes.STR,
        },
        summary="Column-level lineage of a field (or every field of a dataset)",
        operation_id="getColumnLineage",
        parameters=[
            node_id_parameter(kinds=("datasetField", "dataset")),
            OpenApiParameter("withDownstream", bool, description="also downstream (false)"),
            OpenApiParameter("format", str, enum=["json", "csv", "mermaid"]),
            *COMMON_PARAMETERS,
        ],
    )
    def get(self, request: Request) -> HttpResponse:
        graph = column_graph(request.query_params)
        fmt = request.accepted_renderer.format
        return _json(render.lineage_json(graph)) if fmt == "json" else _text_answer(graph, fmt)


# --- impact and root cause ---------------------------------------------------------------


def owner_json(owner: OwnerInfo) -> dict[str, Any]:
    return {
        "name": owner.name,
        "type": owner.type or None,
        "kind": owner.kind or None,
        "email": owner.email or None,
    }


def retention_json(info: DatasetInfo) -> dict[str, Any] | None:
    policy = info.retention
    if policy is None:
        return None
    return {
        "name": policy.name,
        "durationDays": policy.duration_days,
        "action": policy.action or None,
    }


def run_json(run: RunInfo | None) -> dict[str, Any] | None:
    shown = nodedata.run_json(run)
    return None if shown is None or run is None else {**shown, "failed": run.failed}


def edges_json(edges: Iterable[queries.GraphEdge]) -> list[dict[str, str]]:
    return [{"origin": e.origin, "destination": e.destination} for e in edges]


def impact_json(impact: queries.Impact) -> dict[str, Any]:
    return {
        "root": impact.root,
        "level": impact.level,
        "depth": impact.depth,
        "asOf": iso(impact.as_of),
        "truncated": impact.truncated,
        "cut": render.cut_json(impact.cut),
        "datasets": [
            {
                "nodeId": item.node_id,
                "namespace": item.dataset.namespace,
                "name": item.dataset.name,
                "distance": item.distance,
                "owners": [owner_json(o) for o in item.dataset.owners],
                "pii": item.dataset.has_pii,
                "piiFields": [
                    {"name": f.name, "pii": f.pii_category or None, "subjectKind": f.subject_kind}
                    for f in item.dataset.pii_fields
                ],
                "retentionPolicy": retention_json(item.dataset),
                "fields": list(item.fields),
                "viaJobs": list(item.via_jobs),
            }
            for item in impact.datasets
        ],
        "jobs": [
            {"nodeId": j.node_id, "distance": j.distance, "latestRun": run_json(j.job.latest_run)}
            for j in impact.jobs
        ],
        "owners": [owner_json(o) for o in impact.owners],
        "edges": edges_json(impact.edges),
        "counts": {
            "datasets": len(impact.datasets),
            "jobs": len(impact.jobs),
            "piiDatasets": len(impact.pii_datasets),
            "owners": len(impact.owners),
        },
    }


class ImpactView(GraphView):
    renderer_classes = [JSONRenderer, CsvRenderer, MermaidRenderer]

    @extend_schema(
        responses={
            200: schema.IMPACT,
            (200, "text/csv"): OpenApiTypes.STR,
            (200, "text/vnd.mermaid"): OpenApiTypes.STR,
        },
        summary="Everything downstream of a dataset, job or field, with owners, PII, retention",
        parameters=[
            node_id_parameter(kinds=("dataset", "job", "datasetField")),
            OpenApiParameter("format", str, enum=["json", "csv", "mermaid"]),
            _depth_parameter(f"every job downstream (at most {queries.MAX_DEPTH})"),
            *AS_OF_AND_CAP,
        ],
    )
    def get(self, request: Request) -> HttpResponse:
        params = request.query_params
        node = node_param(params)
        fmt = params.get("format") or "json"
        depth = _depth(params, queries.MAX_DEPTH)
        as_of = optional_instant(params)
        max_nodes = _max_nodes(params)

        def build() -> tuple[bytes, responses.Reached | None]:
            impact = queries.impact(node, depth=depth, as_of=as_of, max_nodes=max_nodes)
            body = _dumps(impact_json(impact)).encode()
            return body, impact.reached if impact.level == "table" else None

        if fmt not in ("csv", "mermaid"):
            key = ("impact", node.kind, node.pk, depth, as_of, max_nodes)
            return _json(responses.cache.through(key, build))
        impact = queries.impact(node, depth=depth, as_of=as_of, max_nodes=max_nodes)
        if fmt == "csv":
            return _text(render.impact_csv(impact), "text/csv", "impact.csv")
        return _text(render.impact_mermaid(impact), "text/vnd.mermaid")


class RootCauseView(GraphView):
    @extend_schema(
        responses={200: schema.ROOT_CAUSE},
        summary="Everything upstream with each job's latest run; failures first",
        parameters=[
            node_id_parameter(kinds=("dataset", "job", "datasetField")),
            *COMMON_PARAMETERS,
        ],
    )
    def get(self, request: Request) -> HttpResponse:
        params = request.query_params
        node = node_param(params)
        result = queries.root_cause(
            node,
            depth=_depth(params),
            as_of=optional_instant(params),
            max_nodes=_max_nodes(params),
        )
        jobs = [
            {
                "nodeId": j.node_id,
                "distance": j.distance,
                "failed": j.failed,
                "latestRun": run_json(j.run),
                "outputs": list(j.outputs),
            }
            for j in result.jobs
        ]
        meta = {
            "root": result.root,
            "depth": result.depth,
            "asOf": iso(result.as_of),
            "jobs": jobs,
            "failures": [j.node_id for j in result.failures],
            "suspects": list(result.suspects),
            "truncated": result.graph.truncated,
            "cut": render.cut_json(result.graph.cut),
        }
        edges = edges_json(result.graph.edges)
        graph = [
            {"id": n.node_id, "type": n.kind, "distance": n.distance} for n in result.graph.nodes
        ]
        return _json(_dumps({**meta, "nodes": graph, "edges": edges}))


# --- path, diff, changes -----------------------------------------------------------------


class PathView(GraphView):
    @extend_schema(
        responses={200: schema.PATH},
        summary="A shortest lineage path between two nodes (either direction)",
        parameters=[
            node_id_parameter("from", kinds=("dataset", "job", "datasetField")),
            node_id_parameter("to", kinds=("dataset", "job", "datasetField")),
            instant_parameter("asOf"),
        ],
    )
    def get(self, request: Request) -> HttpResponse:
        params = request.query_params
        source = node_param(params, "from")
        target = node_param(params, "to")
        as_of = optional_instant(params)
        try:
            path = queries.find_path(source, target, as_of=as_of)
        except ValueError as exc:
            raise ApiError(str(exc), "to") from exc
        body: dict[str, Any] = {
            "from": str(source),
            "to": str(target),
            "asOf": iso(as_of),
            "found": path is not None,
        }
        if path is not None:
            body.update(
                {
                    "level": path.level,
                    "direction": path.direction,
                    "jobs": path.jobs,
                    "nodes": list(path.nodes),
                    "edges": [
                        {"origin": a, "destination": b}
                        for a, b in zip(path.nodes, path.nodes[1:], strict=False)
                    ],
                }
            )
        return _json(_dumps(body))


def _required_instant(params: Mapping[str, str], name: str) -> datetime:
    raw = params.get(name)
    if not raw:
        raise ApiError(f"{name} is required (ISO-8601)", name)
    return parse_instant(raw, name)


class _Around(TypedDict):
    node: ResolvedNode | None
    depth: int
    direction: queries.DirectionName
    limit: int


def _around(params: Mapping[str, str], limit: int) -> _Around:
    """The optional node, depth, direction and limit of a diff or of change instants."""
    return {
        "node": node_param(params) if params.get("nodeId") else None,
        "depth": int_param(params, "depth", 5, 0, queries.MAX_DEPTH),
        "direction": direction_param(params),
        "limit": int_param(params, "limit", limit, 1, 10_000),
    }


def _around_parameters(node: str, limit: str) -> list[OpenApiParameter]:
    return [
        node_id_parameter(required=False, description=node),
        int_parameter("depth", 0, queries.MAX_DEPTH, "default 5"),
        OpenApiParameter("direction", str, enum=list(DIRECTIONS)),
        int_parameter("limit", 1, 10_000, limit),
    ]


class DiffView(GraphView):
    @extend_schema(
        responses={200: schema.DIFF},
        summary="Edges, datasets and fields added or removed between two instants",
        parameters=[
            instant_parameter("t1", required=True),
            instant_parameter("t2", required=True),
            *_around_parameters("limit to this node's lineage", "items per list (default 1000)"),
        ],
    )
    def get(self, request: Request) -> HttpResponse:
        params = request.query_params
        t1 = _required_instant(params, "t1")
        t2 = _required_instant(params, "t2")
        result = queries.diff(t1, t2, **_around(params, limit=1000))

        def column_edges(items: tuple[queries.ColumnDiffEdge, ...]) -> list[dict[str, Any]]:
            return [{"origin": e.origin, "destination": e.destination, "job": e.job} for e in items]

        return _json(
            _dumps(
                {
                    "t1": iso(result.t1),
                    "t2": iso(result.t2),
                    "root": result.root,
                    "edgesAdded": edges_json(result.edges_added),
                    "edgesRemoved": edges_json(result.edges_removed),
                    "columnEdgesAdded": column_edges(result.column_edges_added),
                    "columnEdgesRemoved": column_edges(result.column_edges_removed),
                    "datasetsAdded": list(result.datasets_added),
                    "datasetsRemoved": list(result.datasets_removed),
                    "fieldsAdded": list(result.fields_added),
                    "fieldsRemoved": list(result.fields_removed),
                    "counts": result.counts,
                    "truncated": result.truncated,
                }
            )
        )


class ChangesView(GraphView):
    @extend_schema(
        responses={200: schema.CHANGES},
        summary="Instants at which the graph around a node (or anywhere) changed",
        parameters=[
            *_around_parameters("around this node (or anywhere)", "default 500"),
        ],
    )
    def get(self, request: Request) -> HttpResponse:
        params = request.query_params
        instants = queries.change_instants(**_around(params, limit=500))
        return _json(_dumps({"instants": [iso(t) for t in instants]}))


# --- orphans and sources -----------------------------------------------------------------


def page_json(page: queries.DatasetPage) -> dict[str, Any]:
    return {
        "totalCount": page.total,
        "datasets": [
            {
                "nodeId": item.node_id,
                "namespace": item.namespace,
                "name": item.name,
                "lastSeen": iso(item.last_seen),
                "producers": item.producers,
                "consumers": item.consumers,
            }
            for item in page.items
        ],
    }


LIST_PARAMETERS = [
    instant_parameter("asOf"),
    OpenApiParameter("namespace", str),
    *paging_parameters(),
]


class OrphansView(GraphView):
    query = staticmethod(queries.orphans)

    @extend_schema(
        responses={200: schema.DATASET_PAGE},
        summary="Datasets no job reads",
        parameters=LIST_PARAMETERS,
    )
    def get(self, request: Request) -> HttpResponse:
        params = request.query_params
        page = self.query(
            as_of=optional_instant(params),
            limit=int_param(params, "limit", 100, 1, 1000),
            offset=int_param(params, "offset", 0, 0, 10**9),
            namespace=params.get("namespace") or None,
        )
        return _json(_dumps(page_json(page)))


class SourcesView(OrphansView):
    query = staticmethod(queries.sources)

    @extend_schema(
        responses={200: schema.DATASET_PAGE},
        summary="Datasets jobs read but no job writes",
        parameters=LIST_PARAMETERS,
    )
    def get(self, request: Request) -> HttpResponse:
        return super().get(request)


# --- taints ------------------------------------------------------------------------------


def taint_json(taint: Taint) -> dict[str, Any]:
    return {
        "id": taint.pk,
        "dataset": taint.dataset.node_id,
        "reason": taint.reason,
        "windowStart": iso(taint.window_start),
        "windowEnd": iso(taint.window_end),
        "createdAt": iso(taint.created_at),
        "createdBy": taint.created_by.get_username() if taint.created_by else None,
        "clearedAt": iso(taint.cleared_at),
        "clearedBy": taint.cleared_by.get_username() if taint.cleared_by else None,
        "active": taint.cleared_at is None,
    }


def at_risk_json(impact: queries.TaintImpact) -> dict[str, Any]:
    return {
        "datasets": [
            {
                "nodeId": d.node_id,
                "distance": d.distance,
                "taints": list(d.taints),
                "owners": [owner_json(o) for o in d.dataset.owners],
            }
            for d in impact.datasets
        ],
        "jobsToRerun": [
            {
                "nodeId": j.node_id,
                "order": j.order,
                "distance": j.distance,
                "inCycle": j.in_cycle,
            }
            for j in impact.jobs_to_rerun
        ],
        "owners": [owner_json(o) for o in impact.owners],
        "truncated": impact.truncated,
        "cut": render.cut_json(impact.cut),
    }


class TaintInput(serializers.Serializer[Any]):
    nodeId = serializers.RegexField(NODE_ID_PATTERNS["dataset"], max_length=4096)
    reason = TextField(max_length=2000)
    windowStart = InstantField(required=False, allow_null=True, default=None)
    windowEnd = InstantField(required=False, allow_null=True, default=None)


def _taints() -> QuerySet[Taint]:
    return Taint.objects.select_related("dataset__namespace", "created_by", "cleared_by")


class TaintListView(GraphView):
    def get_permissions(self) -> list[Any]:
        return [CanTaint()] if self.request.method == "POST" else [CanReadLineage()]

    @extend_schema(
        responses={200: schema.TAINTS},
        summary="Active taints (all with ?all=true) and what they put at risk",
        operation_id="listTaints",
        parameters=[OpenApiParameter("all", bool)],
    )
    def get(self, request: Request) -> HttpResponse:
        include_all = bool_param(request.query_params, "all", False)
        active = list(_taints().filter(cleared_at__isnull=True))
        impact = queries.taint_impact(active)
        listed = list(_taints()) if include_all else active
        return _json(
            _dumps(
                {
                    "taints": [taint_json(t) for t in listed],
                    "atRisk": at_risk_json(impact),
                }
            )
        )

    @extend_schema(
        request=TaintInput,
        responses={201: schema.TAINT_WITH_RISK},
        summary="Mark a dataset as bad (optionally for a window); downstream is at risk",
        operation_id="createTaint",
    )
    def post(self, request: Request) -> Response:
        if not isinstance(request.data, dict):
            raise ApiError("Request body must be a JSON object", "body")
        serializer = TaintInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        node = node_param({"nodeId": data["nodeId"]})
        if not isinstance(node.id, DatasetNodeId):
            raise ApiError("Only datasets can be tainted: use a dataset:… id", "nodeId")
        dataset = Dataset.objects.get(pk=node.pk)
        try:
            taint = mark_tainted(
                dataset,
                reason=data["reason"],
                actor=request.user,
                window_start=data["windowStart"],
                window_end=data["windowEnd"],
            )
        except TaintError as exc:
            raise ApiError(exc.message, exc.field) from exc
        taint = _taints().get(pk=taint.pk)
        impact = queries.taint_impact([taint])
        return Response(
            {"taint": taint_json(taint), "atRisk": at_risk_json(impact)},
            status=201,
        )


class TaintDetailView(GraphView):
    def get_permissions(self) -> list[Any]:
        return [CanTaint()] if self.request.method == "DELETE" else [CanReadLineage()]

    def _taint(self, taint_id: int) -> Taint:
        taint = _taints().filter(pk=taint_id).first()
        if taint is None:
            raise ApiError(f"Taint {taint_id} not found", "taint_id", 404)
        return taint

    @extend_schema(
        responses={200: schema.TAINT_WITH_RISK},
        summary="One taint and what it puts at risk",
        operation_id="getTaint",
    )
    def get(self, request: Request, taint_id: int) -> Response:
        taint = self._taint(taint_id)
        impact = queries.taint_impact([taint])
        return Response({"taint": taint_json(taint), "atRisk": at_risk_json(impact)})

    @extend_schema(
        responses={200: schema.CLEARED}, summary="Clear a taint", operation_id="clearTaint"
    )
    def delete(self, request: Request, taint_id: int) -> Response:
        taint = clear_taint(self._taint(taint_id), actor=request.user)
        return Response({"taint": taint_json(taint)})
