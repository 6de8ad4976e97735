"""OpenLineage endpoint (Marquez's, so any producer points here unchanged) and read API.

``POST /api/v1/lineage`` answers 201 once the event is durably stored;
normalisation happens after, in a task. Errors use the project's shape,
``{"error", "field"}``: 400 not JSON, 413 too large, 415 unknown encoding,
422 not a valid OpenLineage event; never a 500 on bad input.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast
from uuid import UUID

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog import api as catalog_api
from catalog import naming
from catalog import queries as catalog_queries
from catalog.api import JsonOnlyNegotiation, PlainJsonNegotiation, iso, paged
from catalog.auth import CanOperateIngestion, CanPostLineage, CanReadLineage
from catalog.errors import ApiError
from catalog.models import Dataset, DatasetVersion
from catalog.params import MAX_ID, check_text, choice_param, int_param, optional_instant
from catalog.schema import BODY_REQUIRED, instant_parameter, int_parameter, paging_parameters
from graph.models import Direction, Job, Run
from graph.nodeids import dataset_node_id, job_node_id
from ingest import actions, queries, schema
from ingest.events import EventError, InvalidItem, ParsedEvent, decode_body, parse_event
from ingest.models import EventState, RawEvent
from ingest.normalizer import collector_paused


def read_json_body(request: Request, items: bool = False) -> Any:
    """The request's JSON, gunzipped if sent so, within LINEAGE_MAX_BODY_BYTES (``items`` is
    ``ingest.events.loads``'s)."""
    limit = int(settings.LINEAGE_MAX_BODY_BYTES)
    try:
        return decode_body(
            _raw_body(request, limit), request.META.get("HTTP_CONTENT_ENCODING", ""), limit, items
        )
    except EventError as exc:
        raise _api_error(exc) from exc


def _raw_body(request: Request, limit: int) -> bytes:
    meta = request.META
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError as exc:
        raise ApiError("Content-Length is not a number", "Content-Length") from exc
    if length > limit:
        raise ApiError(
            f"Body is {length} bytes; the limit is {limit}", "body", 413, {"limit": limit}
        )
    if not meta.get("CONTENT_LENGTH") and "chunked" in meta.get("HTTP_TRANSFER_ENCODING", ""):
        return _chunked_body(meta, limit)
    try:
        raw = request.body
    except RequestDataTooBig as exc:
        raise ApiError(f"Body is larger than the {limit}-byte limit", "body", 413) from exc
    if len(raw) > limit:
        raise ApiError(f"Body is larger than the {limit}-byte limit", "body", 413)
    return raw


def _chunked_body(meta: Mapping[str, Any], limit: int) -> bytes:
    """A body sent in chunks, without Content-Length: Django reads such a body as empty, but
    a server that decodes the chunks and says so (``wsgi.input_terminated``, as gunicorn
    does) lets it be read to its end."""
    if not meta.get("wsgi.input_terminated"):
        raise ApiError(
            "A chunked body needs Content-Length with this server (or a server that decodes "
            "chunks, such as gunicorn)",
            "Content-Length",
            411,
        )
    stream = meta["wsgi.input"]
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        part = stream.read(min(65536, limit + 1 - size))
        if not part:
            return b"".join(parts)
        parts.append(part)
        size += len(part)
    raise ApiError(f"Body is larger than the {limit}-byte limit", "body", 413)


def _api_error(exc: EventError, prefix: str = "") -> ApiError:
    field = f"{prefix}{exc.field}" if prefix and exc.field else exc.field
    message = f"{prefix}{exc.message}" if prefix else exc.message
    return ApiError(message, field, exc.status)


class LineageView(PlainJsonNegotiation, APIView):
    """POST one OpenLineage RunEvent, DatasetEvent or JobEvent."""

    content_negotiation_class = JsonOnlyNegotiation

    permission_classes = [CanPostLineage]
    parser_classes: list[Any] = []

    @extend_schema(
        request=schema.EVENT_REQUEST,
        responses={201: schema.STORED},
        summary="Send an OpenLineage event (RunEvent, DatasetEvent or JobEvent)",
        operation_id="postLineageEvent",
        extensions={BODY_REQUIRED: True},
    )
    def post(self, request: Request) -> Response:
        body = read_json_body(request)
        try:
            event = parse_event(body)
            result = actions.store_events([event], source="api", refuse_reused_runs=True)
        except EventError as exc:
            raise _api_error(exc) from exc
        return Response(
            {
                "status": result.status(event.fingerprint),
                "fingerprint": event.fingerprint,
                "warnings": event.warnings,
            },
            status=201,
        )


class LineageBatchView(PlainJsonNegotiation, APIView):
    """POST a JSON array of events (OpenLineage's /lineage/batch); each gets its own status."""

    content_negotiation_class = JsonOnlyNegotiation

    permission_classes = [CanPostLineage]
    parser_classes: list[Any] = []

    @extend_schema(
        request=schema.BATCH_REQUEST,
        responses={201: schema.BATCH, 207: schema.BATCH},
        summary="Send a batch of OpenLineage events",
        operation_id="postLineageBatch",
        extensions={BODY_REQUIRED: True},
    )
    def post(self, request: Request) -> Response:
        # Hundreds of decoded events stay alive until the response: the collector
        # would walk them over and over (a third of the time per event).
        with collector_paused():
            return self._store_batch(request)

    def _store_batch(self, request: Request) -> Response:
        body = read_json_body(request, items=True)
        if isinstance(body, dict) and isinstance(body.get("events"), list):
            body = body["events"]
        if not isinstance(body, list):
            raise ApiError("Body must be a JSON array of events", "body", 422)
        max_events = int(getattr(settings, "LINEAGE_MAX_BATCH_EVENTS", 10000))
        if len(body) > max_events:
            raise ApiError(f"A batch holds at most {max_events} events", "body", 422)
        statuses: list[dict[str, Any]] = []
        accepted: list[tuple[int, ParsedEvent]] = []
        for index, item in enumerate(body):
            try:
                if isinstance(item, InvalidItem):
                    raise item.error
                accepted.append((index, parse_event(item)))
                statuses.append({"index": index})
            except EventError as exc:
                field = f"[{index}].{exc.field}" if exc.field else f"[{index}]"
                statuses.append(
                    {"index": index, "status": "rejected", "error": exc.message, "field": field}
                )
        reused = actions.reused_run_ids([e for _, e in accepted])
        for position, error in reused.items():
            index = accepted[position][0]
            statuses[index].update(
                status="rejected", error=error.message, field=f"[{index}].{error.field}"
            )
        accepted = [pair for position, pair in enumerate(accepted) if position not in reused]
        result = actions.store_events([e for _, e in accepted], source="api")
        seen: set[str] = set()
        for index, event in accepted:
            # The same event twice in one batch is stored once: the second is a duplicate.
            status = "duplicate" if event.fingerprint in seen else result.status(event.fingerprint)
            seen.add(event.fingerprint)
            statuses[index].update(
                {"status": status, "fingerprint": event.fingerprint, "warnings": event.warnings}
            )
        rejected = [s for s in statuses if s["status"] == "rejected"]
        summary = {
            "stored": sum(1 for s in statuses if s["status"] == "stored"),
            "duplicates": sum(1 for s in statuses if s["status"] == "duplicate"),
            "rejected": len(rejected),
            "events": statuses,
        }
        if rejected and not accepted:
            first = rejected[0]
            raise ApiError(first["error"], first["field"], 422, {"events": statuses})
        return Response(summary, status=207 if rejected else 201)


def _graph_lineage_view() -> Any:
    """The graph app's GET /api/v1/lineage view, which shares this path."""
    from graph import urls as graph_urls

    for pattern in graph_urls.api_urlpatterns:
        try:
            match = pattern.resolve("lineage")
        except Resolver404:
            continue
        if match:
            return match.func
    return None


_post_view = LineageView.as_view()


# What /api/v1/lineage answers to, between the two apps' views.
LINEAGE_METHODS = "GET, POST, HEAD, OPTIONS"


@csrf_exempt
def lineage_endpoint(request: HttpRequest) -> HttpResponse:
    """``/api/v1/lineage``: POST stores an event here; GET is the graph app's lineage query."""
    view = _post_view
    if request.method in ("GET", "HEAD", "OPTIONS"):
        view = _graph_lineage_view() or _post_view
    response = cast(HttpResponse, view(request))
    if response.has_header("Allow"):
        response["Allow"] = LINEAGE_METHODS
    return response


# The OpenAPI generator reads the view class from here, so POST is documented on this path.
lineage_endpoint.cls = LineageView  # type: ignore[attr-defined]
lineage_endpoint.initkwargs = {}  # type: ignore[attr-defined]


# -- read API in Marquez's shapes -----------------------------------------------------------


def dataset_id_json(namespace: str, name: str) -> dict[str, str]:
    return {"namespace": namespace, "name": name}


def run_json(run: Run) -> dict[str, Any]:
    """Marquez's run shape, plus parent run, error and node id of the job."""
    io = list(run.io.all())

    def versions(direction: str) -> list[dict[str, Any]]:
        return [
            {
                "datasetVersionId": {
                    "namespace": row.dataset.namespace.name,
                    "name": row.dataset.name,
                    "version": str(row.dataset_version.version) if row.dataset_version else None,
                },
                "facets": {},
            }
            for row in io
            if row.direction == direction
        ]

    job = run.job
    return {
        "id": str(run.run_uuid),
        "createdAt": iso(run.created_at),
        "updatedAt": iso(run.updated_at),
        "nominalStartTime": iso(run.nominal_start_time),
        "nominalEndTime": iso(run.nominal_end_time),
        "state": run.state,
        "startedAt": iso(run.started_at),
        "endedAt": iso(run.ended_at),
        "durationMs": run.duration_ms,
        "args": {},
        "jobVersion": {"namespace": job.namespace.name, "name": job.name, "version": None},
        "inputDatasetVersions": versions(Direction.INPUT),
        "outputDatasetVersions": versions(Direction.OUTPUT),
        "context": {},
        "facets": run.facets,
        "parentRunId": str(run.parent_run_uuid) if run.parent_run_uuid else None,
        "errorMessage": run.error_message or None,
        "jobNodeId": job.node_id,
    }


def job_json(job: Job) -> dict[str, Any]:
    """Marquez's job shape; inputs and outputs are the job's current (open) edges."""
    edges = getattr(job, "open_edges", None)
    if edges is None:
        edges = list(job.edges.filter(valid_to__isnull=True).select_related("dataset__namespace"))
    latest = job.latest_run
    return {
        "id": {"namespace": job.namespace.name, "name": job.name},
        "type": job.processing_type or "BATCH",
        "name": job.name,
        "simpleName": job.name.rsplit(".", 1)[-1],
        "parentJobName": job.parent.name if job.parent else None,
        "createdAt": iso(job.created_at),
        "updatedAt": iso(job.updated_at),
        "namespace": job.namespace.name,
        "inputs": [
            dataset_id_json(e.dataset.namespace.name, e.dataset.name)
            for e in edges
            if e.direction == Direction.INPUT
        ],
        "outputs": [
            dataset_id_json(e.dataset.namespace.name, e.dataset.name)
            for e in edges
            if e.direction == Direction.OUTPUT
        ],
        "location": job.location or None,
        "description": job.description or None,
        "latestRun": run_json(latest) if latest is not None else None,
        "facets": job.facets,
        "currentVersion": None,
        "labels": [],
        "tags": [],
        "nodeId": job.node_id,
        "jobType": job.job_type or None,
        "integration": job.integration or None,
        "sql": job.sql or None,
    }


def version_json(version: DatasetVersion, runs: dict[UUID, Run]) -> dict[str, Any]:
    ds = version.dataset
    run = runs.get(version.run_uuid) if version.run_uuid else None
    return {
        "id": {"namespace": ds.namespace.name, "name": ds.name, "version": str(version.version)},
        "type": "DB_TABLE",
        "name": ds.name,
        "physicalName": ds.name,
        "createdAt": iso(version.created_at),
        "version": str(version.version),
        "namespace": ds.namespace.name,
        "sourceName": ds.source_name or ds.namespace.name,
        "fields": [
            {
                "name": f.get("name"),
                "type": f.get("type") or None,
                "tags": [],
                "description": f.get("description") or None,
            }
            for f in version.fields or []
        ],
        "tags": [],
        "lifecycleState": version.lifecycle_state or None,
        "description": ds.description or None,
        "createdByRun": run_json(run) if run is not None else None,
        "createdByRunId": str(version.run_uuid) if version.run_uuid else None,
        "schemaHash": version.schema_hash,
        "facets": {},
    }


PAGING = paging_parameters()


def fetch_job(namespace: str, name: str) -> Job:
    job = queries.get_job(namespace, name)
    if job is None:
        raise ApiError(f"Job {namespace}:{name} not found", "job", status_code=404)
    return job


class JobListView(APIView):
    permission_classes = [CanReadLineage]

    @extend_schema(
        responses={200: schema.JOBS},
        summary="Jobs of a namespace",
        operation_id="listJobs",
        parameters=PAGING,
    )
    def get(self, request: Request, namespace: str) -> Response:
        rows, total = paged(request, queries.jobs_of_namespace(namespace))
        return Response({"totalCount": total, "jobs": [job_json(j) for j in rows]})


class JobDetailView(APIView):
    permission_classes = [CanReadLineage]

    @extend_schema(responses={200: schema.JOB}, summary="One job", operation_id="getJob")
    def get(self, request: Request, namespace: str, job: str) -> Response:
        return Response(job_json(fetch_job(namespace, job)))


class JobRunsView(APIView):
    permission_classes = [CanReadLineage]

    @extend_schema(
        responses={200: schema.RUNS},
        summary="Runs of a job, newest first",
        operation_id="listJobRuns",
        parameters=PAGING,
    )
    def get(self, request: Request, namespace: str, job: str) -> Response:
        found = Job.objects.filter(namespace__name=namespace, name=job).first()
        if found is None:
            raise ApiError(f"Job {namespace}:{job} not found", "job", status_code=404)
        rows, total = paged(request, queries.runs_of_job(found))
        return Response({"totalCount": total, "runs": [run_json(r) for r in rows]})


class RunDetailView(APIView):
    permission_classes = [CanReadLineage]

    @extend_schema(
        responses={200: schema.RUN},
        summary="One run",
        operation_id="getRun",
        parameters=[OpenApiParameter("run_id", OpenApiTypes.UUID, OpenApiParameter.PATH)],
    )
    def get(self, request: Request, run_id: str) -> Response:
        try:
            run_uuid = UUID(run_id)
        except ValueError as exc:
            raise ApiError(f"run id is not a UUID: {run_id!r}", "id") from exc
        run = queries.get_run(run_uuid)
        if run is None:
            raise ApiError(f"Run {run_uuid} not found", "id", status_code=404)
        return Response(run_json(run))


class DatasetVersionsView(catalog_api.UnderDatasetName):
    permission_classes = [CanReadLineage]
    tail = "/versions"

    @extend_schema(
        responses={200: schema.VERSIONS},
        summary="Schema versions of a dataset, newest first",
        operation_id="listDatasetVersions",
        parameters=PAGING,
    )
    def get(self, request: Request, namespace: str, name: str) -> Response:
        if whole := catalog_api.whole_name(namespace, name, self.tail):
            return catalog_api.as_dataset(request, namespace, whole)
        # In any spelling, or by an alias.
        dataset = catalog_queries.get_dataset(
            namespace, name, Dataset.objects.select_related("namespace")
        )
        if dataset is None:
            raise ApiError(f"Dataset {namespace}:{name} not found", "name", status_code=404)
        qs = queries.dataset_versions(dataset).select_related("dataset__namespace")
        rows, total = paged(request, qs)
        runs = queries.runs_by_uuid({v.run_uuid for v in rows if v.run_uuid})
        return Response({"totalCount": total, "versions": [version_json(v, runs) for v in rows]})


def event_body(raw: RawEvent) -> Any:
    import json

    return json.loads(raw.body)


class EventListView(APIView):
    permission_classes = [CanReadLineage]

    @extend_schema(
        responses={200: schema.EVENTS},
        summary="Raw OpenLineage events as received, by event time",
        operation_id="listLineageEvents",
        parameters=[
            instant_parameter("before"),
            instant_parameter("after"),
            OpenApiParameter("sortDirection", str, enum=["desc", "asc"]),
            *PAGING,
        ],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        before: datetime | None = optional_instant(params, "before")
        after: datetime | None = optional_instant(params, "after")
        direction = choice_param(params, "sortDirection", "desc", ("desc", "asc"))
        qs = queries.raw_events(before, after, ascending=direction == "asc")
        rows, total = paged(request, qs)
        return Response({"totalCount": total, "events": [event_body(r) for r in rows]})


def status_json() -> dict[str, Any]:
    status = queries.ingestion_status(failures=20)
    return {
        "counts": status.counts,
        "oldestPendingAt": iso(status.oldest_pending_at),
        "lagSeconds": status.lag_seconds,
        "processedLastMinute": status.processed_last_minute,
        "processedLastHour": status.processed_last_hour,
        "failures": [
            {
                **_listed(e),
                "attempts": e.attempts,
                "error": e.error.split("\n", 1)[0],
            }
            for e in status.failures
        ],
        "eventsWithFacetsLeftOut": status.warned_count,
        "facetsLeftOut": [{**_listed(e), "warnings": e.warning_list} for e in status.warned],
    }


def _listed(event: RawEvent) -> dict[str, Any]:
    """What the status lists of a stored event."""
    return {
        "id": event.pk,
        "fingerprint": event.fingerprint,
        "kind": event.kind,
        "eventType": event.event_type or None,
        "eventTime": iso(event.event_time),
        "job": event.job_label or None,
        "receivedAt": iso(event.received_at),
    }


class IngestionStatusView(APIView):
    permission_classes = [CanReadLineage]

    @extend_schema(
        responses={200: schema.STATUS},
        summary="Outbox counts by state, lag, throughput and failures",
        operation_id="getIngestionStatus",
    )
    def get(self, request: Request) -> Response:
        return Response(status_json())


# Events a replay names at most, each a parameter of one statement.
MAX_REPLAY_IDS = 10_000


class ReplayView(APIView):
    permission_classes: list[type[BasePermission]] = [CanOperateIngestion]

    @extend_schema(
        request=schema.REPLAY_REQUEST,
        responses={200: schema.REPLAYED},
        summary="Replay events: {'ids': [...]} or {'state': 'failed'}",
        operation_id="replayLineageEvents",
    )
    def post(self, request: Request) -> Response:
        data = request.data
        if not isinstance(data, dict):
            raise ApiError("Request body must be a JSON object", "body")
        for key in sorted(set(data) - {"ids", "state"})[:1]:
            raise ApiError(f"Unknown key {key!r}", key)
        ids = data.get("ids")
        state = data.get("state", EventState.FAILED if ids is None else None)
        if "ids" in data and (
            not isinstance(ids, list) or not all(type(i) is int and 0 < i <= MAX_ID for i in ids)
        ):
            raise ApiError("ids must be a list of event ids", "ids")
        if ids is not None and len(ids) > MAX_REPLAY_IDS:
            raise ApiError(
                f"ids lists {len(ids):,} events; at most {MAX_REPLAY_IDS:,} a request "
                '(or {"state": "failed"} for every failed event)',
                "ids",
            )
        if "state" in data and state not in (EventState.FAILED, EventState.PENDING):
            raise ApiError("state must be failed or pending", "state")
        count = actions.replay(ids, state=state)
        return Response({"replayed": count})


# --- search (Marquez's GET /api/v1/search) ------------------------------------------------

SEARCH_FILTERS = ("DATASET", "JOB")
SEARCH_SORTS = ("NAME", "UPDATE_AT")


class SearchView(APIView):
    """Datasets and jobs whose names hold ``q`` (any case), in Marquez's shape: by name, or
    the most recently updated first; hidden datasets are left out, as on the pages."""

    permission_classes = [CanReadLineage]

    @extend_schema(
        responses={200: schema.SEARCH},
        summary="Datasets and jobs by name (Marquez's search)",
        operation_id="search",
        parameters=[
            OpenApiParameter(
                "q",
                {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": r"\S"},
                required=True,
                description="part of a name, any case",
            ),
            OpenApiParameter("filter", str, enum=list(SEARCH_FILTERS), description="one kind"),
            OpenApiParameter("sort", str, enum=list(SEARCH_SORTS), description="default NAME"),
            int_parameter("limit", 1, 1000, "1 to 1000, default 10"),
            OpenApiParameter("namespace", str, description="only this namespace"),
            instant_parameter("before", description="updated before this instant or date"),
            instant_parameter("after", description="updated at or after this instant or date"),
        ],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        q = check_text(params.get("q") or "", "q").strip()
        if not q:
            raise ApiError("q is required: part of a dataset's or job's name", "q")
        if len(q) > 1024:
            raise ApiError("q is longer than any name (1,024 characters)", "q")
        kind = params.get("filter") or None
        if kind is not None and kind not in SEARCH_FILTERS:
            raise ApiError(f"filter must be DATASET or JOB, got {kind[:64]!r}", "filter")
        sort = choice_param(params, "sort", "NAME", SEARCH_SORTS)
        limit = int_param(params, "limit", 10, 1, 1000)
        namespace = params.get("namespace")
        found = queries.search_names(
            q,
            kinds=SEARCH_FILTERS if kind is None else (kind,),
            by_name=sort == "NAME",
            limit=limit,
            namespace=naming.canonical_namespace(check_text(namespace, "namespace"))
            if namespace
            else None,
            before=optional_instant(params, "before"),
            after=optional_instant(params, "after"),
        )
        results = [
            {
                "type": label,
                "name": name,
                "updatedAt": iso(updated),
                "namespace": ns,
                "nodeId": (dataset_node_id if label == "DATASET" else job_node_id)(ns, name),
            }
            for label, ns, name, updated in found
        ]
        return Response({"totalCount": len(results), "results": results})
