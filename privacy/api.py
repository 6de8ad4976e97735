"""Privacy REST API: subject search, Spark scans, erasure plans and runs, audit.

Subject identifiers travel only in POST bodies and are never echoed back:
responses name identifiers by index, kind and field. Only the JSON renderer
is used, so no browsable page can repeat a posted body.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, NoReturn
from uuid import UUID

from django.conf import settings
from django.core.validators import RegexValidator
from django.http import HttpResponse
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_variables
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog import actions as catalog_actions
from catalog.auth import VIEW_AUDIT, CanSearchSubjects, ManageSubjectKinds
from catalog.errors import ApiError
from catalog.models import PiiCategory, SubjectKind
from catalog.params import StrictInput, TextField, int_param, parse_instant, strict_body
from catalog.schema import paging_parameters
from privacy import actions, erasure, queries, schema
from privacy.models import AuditAction, AuditEntry, ErasurePlan, PrivacyRun
from privacy.queries import (
    UNCATEGORISED_KIND,
    DatasetHit,
    Evidence,
    ScanFindings,
    SubjectSearch,
)

MAX_IDENTIFIERS = 20
MAX_VALUE_LENGTH = 512
DEFAULT_LIMIT = 100
MAX_LIMIT = 5000
IDENTIFIER_KINDS = sorted({*PiiCategory.values, UNCATEGORISED_KIND})


def iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


# -- input -------------------------------------------------------------------------------------


def _reject_unknown(payload: dict[str, Any], allowed: set[str], prefix: str = "") -> None:
    unknown = sorted(set(payload) - allowed)
    if unknown:
        raise ApiError(f"Unknown key {unknown[0]!r}", f"{prefix}{unknown[0]}")


class IdentifierInput(StrictInput):
    value = TextField(max_length=MAX_VALUE_LENGTH)
    kind = serializers.ChoiceField(choices=IDENTIFIER_KINDS, required=False, allow_null=True)
    field = TextField(max_length=2048, required=False, allow_null=True)


class SubjectInput(StrictInput):
    subjectKind = TextField(max_length=64)
    value = TextField(max_length=MAX_VALUE_LENGTH, required=False)
    identifiers = serializers.ListField(
        child=IdentifierInput(), required=False, min_length=1, max_length=MAX_IDENTIFIERS
    )
    asOf = TextField(max_length=64, required=False, allow_null=True, allow_blank=True)

    def validate_subjectKind(self, value: str) -> SubjectKind:
        kind = SubjectKind.objects.filter(name=value).first()
        if kind is None:
            known = ", ".join(SubjectKind.objects.values_list("name", flat=True)) or "none"
            raise serializers.ValidationError(f"Unknown subject kind {value!r} (known: {known})")
        return kind


class SearchInput(SubjectInput):
    """What a subject search takes: the subject, and which page of the answer."""

    limit = serializers.IntegerField(required=False, min_value=1, max_value=5000)
    offset = serializers.IntegerField(required=False, min_value=0)


class PlanInput(StrictInput):
    """What an erasure plan or a scan of one takes: the subject, as of now."""

    subjectKind = TextField(max_length=64)
    value = TextField(max_length=MAX_VALUE_LENGTH, required=False)
    identifiers = serializers.ListField(
        child=IdentifierInput(), required=False, min_length=1, max_length=MAX_IDENTIFIERS
    )


class RunInput(PlanInput):
    confirm = serializers.BooleanField(required=False, help_text="true to apply an erasure")


SUBJECT_KEYS = {"subjectKind", "value", "identifiers", "asOf"}
PAGE_KEYS = {"limit", "offset"}


@sensitive_variables()
def parse_subject_request(
    payload: Any, allow_as_of: bool = True, extra_keys: frozenset[str] = frozenset()
) -> actions.SubjectRequest:
    """Return the validated subject request of a JSON body; errors name the field at fault."""
    if not isinstance(payload, dict):
        raise ApiError("Request body must be a JSON object", "body")
    _reject_unknown(payload, SUBJECT_KEYS | extra_keys)
    data = {k: v for k, v in payload.items() if k in SUBJECT_KEYS}
    identifiers = data.get("identifiers")
    if isinstance(identifiers, list):
        for index, item in enumerate(identifiers):
            if isinstance(item, dict):
                _reject_unknown(item, {"value", "kind", "field"}, f"identifiers[{index}].")
    serializer = SubjectInput(data=data)
    serializer.is_valid(raise_exception=True)
    valid = serializer.validated_data
    has_value = "value" in valid
    if has_value == ("identifiers" in valid):
        raise ApiError("Give either value or identifiers (not both)", "value")
    raw: list[tuple[str | None, str | None, str]]
    if has_value:
        raw = [(None, None, valid["value"])]
    else:
        raw = [(i.get("kind"), i.get("field"), i["value"]) for i in valid["identifiers"]]
    as_of = None
    if valid.get("asOf"):
        if not allow_as_of:
            raise ApiError("asOf is not accepted here: erasure works on the lineage of now", "asOf")
        as_of = parse_instant(valid["asOf"], "asOf")
    for index, (_, _, value) in enumerate(raw):
        if not value.strip():
            field = "value" if has_value else f"identifiers[{index}].value"
            raise ApiError(f"{field}: This field may not be blank.", field)
    return actions.SubjectRequest.build(valid["subjectKind"], raw, as_of)


def parse_page(payload: dict[str, Any]) -> tuple[int, int]:
    """Return (limit, offset) of a search body; each list of the answer is paged alike."""
    page = PageInput(data={k: v for k, v in payload.items() if k in PAGE_KEYS})
    page.is_valid(raise_exception=True)
    return page.validated_data.get("limit", DEFAULT_LIMIT), page.validated_data.get("offset", 0)


class PageInput(serializers.Serializer[Any]):
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_LIMIT)
    offset = serializers.IntegerField(required=False, min_value=0)


# -- output ------------------------------------------------------------------------------------


def evidence_json(evidence: Evidence) -> dict[str, Any]:
    return {
        "seed": evidence.seed,
        "steps": [
            {
                "job": step.job,
                "from": step.source,
                "to": step.target,
                "transformation": {
                    "type": step.transformation_type,
                    "subtype": step.transformation_subtype or None,
                    "masking": step.masking,
                },
                "validFrom": iso(step.valid_from),
                "validTo": iso(step.valid_to),
            }
            for step in evidence.steps
        ],
        "note": evidence.note or None,
    }


def hit_json(hit: DatasetHit, scan: ScanFindings | None = None) -> dict[str, Any]:
    storage = erasure.storage_target(hit)
    found = scan.for_dataset(hit.node_id) if scan else None
    return {
        "namespace": hit.namespace,
        "name": hit.name,
        "nodeId": hit.node_id,
        "relation": hit.relation,
        "distance": hit.distance,
        "fields": [
            {
                "name": f.name,
                "nodeId": f.node_id,
                "relation": f.relation,
                "type": f.type or None,
                "pii": f.pii_category or None,
                "subjectKind": f.subject_kind,
                "masked": f.masked,
                "identifiers": list(f.identifiers),
                "from": f.source,
                "job": f.job,
            }
            for f in hit.fields
        ],
        "personalFields": [{"name": name, "pii": pii} for name, pii in hit.personal_fields],
        "owners": [{"name": o["name"], "type": o.get("type") or None} for o in hit.owners],
        "retentionPolicy": (
            {
                "name": hit.retention.name,
                "durationDays": hit.retention.duration_days,
                "action": hit.retention.action,
                "legalBasis": hit.retention.legal_basis or None,
            }
            if hit.retention
            else None
        ),
        "location": storage.location or None,
        "storageFormat": hit.storage_format or None,
        "scannable": storage.scannable,
        "notScannableReason": storage.reason or None,
        "lifecycleState": hit.lifecycle_state,
        "evidence": evidence_json(hit.evidence),
        # Lineage says the dataset may hold the subject's rows; a scan says whether it does.
        "scan": {"rows": found["rows"], "at": iso(found["at"])} if found else None,
        # A scan that tried the dataset and could not compare it: "unmatchable" or "error".
        "scanProblem": scan.problems.get(hit.node_id) if scan else None,
    }


def search_json(search: SubjectSearch, entry: AuditEntry | None = None) -> dict[str, Any]:
    totals = search.totals
    holding = totals["direct"] + totals["derived"]
    return {
        "subjectKind": search.subject_kind,
        "asOf": iso(search.as_of),
        "auditId": entry.pk if entry else None,
        "identifiers": [
            {
                "index": m.identifier.index,
                "kind": m.identifier.kind,
                "field": m.identifier.field,
                "seedFields": list(m.seeds),
                "seedFieldCount": m.seed_count,
                "matched": m.seed_count > 0,
            }
            for m in search.identifiers
        ],
        "counts": totals,
        "page": {
            "offset": search.offset,
            "limit": search.limit,
            "datasetsTotal": holding,
            "aggregatesTotal": totals["aggregate"],
            "complete": search.complete,
        },
        "datasets": [hit_json(h, search.scan) for h in search.datasets],
        "aggregates": [hit_json(h, search.scan) for h in search.aggregates],
        "scannedAt": iso(search.scan.finished_at) if search.scan else None,
    }


def run_json(run: PrivacyRun) -> dict[str, Any]:
    targets = []
    for target in run.targets:
        result = run.results.get(target["key"])
        targets.append(
            {
                "namespace": target["namespace"],
                "name": target["name"],
                "nodeId": target["key"],
                "relation": target["relation"],
                "location": target["location"],
                "format": target["format"],
                "columns": [c["name"] for c in target["columns"]],
                "operation": target.get("operation"),
                "runnable": target["runnable"],
                "reason": target["reason"] or None,
                "owners": target.get("owners", []),
                "result": result,
            }
        )
    return {
        "id": str(run.id),
        "kind": run.kind,
        "state": run.state,
        "plan": str(run.plan_id) if run.plan_id else None,
        "subjectKind": run.subject_kind,
        "asOf": iso(run.as_of),
        "createdAt": iso(run.created_at),
        "createdBy": run.created_by_name,
        "startedAt": iso(run.started_at),
        "finishedAt": iso(run.finished_at),
        "progress": {"done": run.progress_done, "total": run.progress_total},
        "error": run.error or None,
        "datasets": targets,
    }


def plan_json(plan: ErasurePlan) -> dict[str, Any]:
    return {
        "id": str(plan.id),
        "subjectKind": plan.subject_kind,
        "createdAt": iso(plan.created_at),
        "createdBy": plan.created_by_name,
        "identifiers": plan.identifiers,
        "state": plan.state,
        "error": plan.error or None,
        "summary": plan.summary,
        "ownersToNotify": plan.owners,
        "steps": plan.steps,
        "runs": [
            {"id": str(r.id), "kind": r.kind, "state": r.state, "createdAt": iso(r.created_at)}
            for r in plan.runs.order_by("-created_at")
        ],
    }


def audit_json(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.pk,
        "at": iso(entry.at),
        "actor": entry.actor_name,
        "action": entry.action,
        "outcome": entry.outcome,
        "subjectKind": entry.subject_kind or None,
        "valueHashes": [h["hash"] for h in entry.value_hashes],
        "asOf": iso(entry.as_of),
        "resultCount": entry.result_count,
        "reference": str(entry.reference) if entry.reference else None,
        "detail": entry.detail,
    }


# -- views -------------------------------------------------------------------------------------


class CanViewAudit(CanSearchSubjects):
    perm = VIEW_AUDIT
    message = "The privacy audit needs the compliance role"


# Base of the privacy API: compliance/admin only (unless a view says otherwise), JSON only,
# denied attempts audited. (A comment: the API reference shows a docstring as each route's
# description.)
@method_decorator(never_cache, name="dispatch")
class PrivacyView(APIView):
    permission_classes = [CanSearchSubjects]
    renderer_classes = [JSONRenderer]
    audit_action: str = AuditAction.SEARCH

    def permission_denied(
        self, request: Request, message: str | None = None, code: Any = None
    ) -> NoReturn:
        if request.user and request.user.is_authenticated:
            actions.log_denied(request.user, self.audit_action, request.path)
        super().permission_denied(request, message, code)


def _run_or_404(request: Request, run_id: UUID) -> PrivacyRun:
    run = queries.access_run(request.user, run_id)
    if run is None:
        raise ApiError(f"Run {run_id} not found", "id", status_code=404)
    return actions.current_run(run)


def _plan_or_404(request: Request, plan_id: UUID) -> ErasurePlan:
    plan = queries.access_plan(request.user, plan_id)
    if plan is None:
        raise ApiError(f"Erasure plan {plan_id} not found", "id", status_code=404)
    return plan


def _raise(error: actions.PrivacyError) -> None:
    raise ApiError(str(error), error.field, status_code=error.status)


SEARCH_EXAMPLES = [
    OpenApiExample("one identifier", value={"subjectKind": "customer", "value": "4242"}),
    OpenApiExample(
        "several identifiers, as of a date",
        value={
            "subjectKind": "customer",
            "identifiers": [
                {"kind": "identifier", "value": "4242"},
                {"kind": "email", "value": "ada@example.com"},
            ],
            "asOf": "2025-01-01T00:00:00Z",
        },
    ),
]


class SubjectSearchView(PrivacyView):
    @extend_schema(
        request=SearchInput,
        responses={200: schema.SEARCH},
        examples=SEARCH_EXAMPLES,
        summary="Every dataset holding or derived from one data subject's data",
    )
    @method_decorator(sensitive_variables())
    def post(self, request: Request) -> Response:
        subject = parse_subject_request(request.data, extra_keys=frozenset(PAGE_KEYS))
        limit, offset = parse_page(request.data)
        search, entry = actions.do_subject_search(request.user, subject, limit=limit, offset=offset)
        return Response(search_json(search, entry))


class ScanListView(PrivacyView):
    audit_action = AuditAction.SCAN

    @extend_schema(
        request=SubjectInput,
        responses={202: schema.RUN_ACCEPTED},
        summary="Verify on Spark: count the subject's rows in each candidate dataset",
    )
    @method_decorator(sensitive_variables())
    def post(self, request: Request) -> Response:
        subject = parse_subject_request(request.data)
        run = actions.request_scan(request.user, subject)
        body = run_json(run)
        body["statusUrl"] = reverse("privacy-api-run", args=[run.id])
        return Response(body, status=status.HTTP_202_ACCEPTED)


class RunDetailView(PrivacyView):
    audit_action = AuditAction.SCAN  # a Spark run: a scan, or an erasure applied

    @extend_schema(responses={200: schema.RUN}, summary="State, progress and counts of a run")
    def get(self, request: Request, run_id: UUID) -> Response:
        return Response(run_json(_run_or_404(request, run_id)))


class ErasurePlanListView(PrivacyView):
    audit_action = AuditAction.ERASURE_PLAN

    @extend_schema(
        request=PlanInput,
        responses={201: schema.PLAN, 202: schema.PLAN_ACCEPTED},
        summary="Make an erasure plan: ordered steps per dataset, owners to notify",
    )
    @method_decorator(sensitive_variables())
    def post(self, request: Request) -> Response:
        subject = parse_subject_request(request.data, allow_as_of=False)
        plan = actions.create_erasure_plan(request.user, subject)
        body = plan_json(plan)
        if not plan.is_ready:  # computed by a task: poll the plan until "state" is "ready"
            body["statusUrl"] = reverse("privacy-api-plan", args=[plan.id])
            return Response(body, status=status.HTTP_202_ACCEPTED)
        return Response(body, status=status.HTTP_201_CREATED)


class ErasurePlanDetailView(PrivacyView):
    audit_action = AuditAction.ERASURE_PLAN

    @extend_schema(responses={200: schema.PLAN}, summary="One erasure plan")
    def get(self, request: Request, plan_id: UUID) -> Response:
        return Response(plan_json(_plan_or_404(request, plan_id)))


def export_response(plan: ErasurePlan, fmt: str) -> HttpResponse:
    """Return the plan as a CSV or JSON download."""
    filename = f"erasure-plan-{plan.id}.{fmt}"
    if fmt == "csv":
        response = HttpResponse(
            erasure.plan_csv(plan.steps), content_type="text/csv; charset=utf-8"
        )
    else:
        response = HttpResponse(
            json.dumps(plan_json(plan), indent=2), content_type="application/json"
        )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response


class ErasurePlanExportView(PrivacyView):
    audit_action = AuditAction.EXPORT

    @extend_schema(
        responses={(200, "text/csv"): OpenApiTypes.STR, (200, "application/json"): schema.PLAN},
        summary="Plan as CSV or JSON",
    )
    def get(self, request: Request, plan_id: UUID, fmt: str) -> HttpResponse:
        plan = _plan_or_404(request, plan_id)
        try:
            actions.require_ready(plan)
        except actions.PrivacyError as error:
            _raise(error)
        actions.log_export(request.user, plan, fmt)
        return export_response(plan, fmt)


class ErasureRunView(PrivacyView):
    audit_action = AuditAction.ERASURE_DRY_RUN
    apply = False

    @extend_schema(
        request=RunInput,
        responses={202: schema.RUN_ACCEPTED},
        summary="Run the plan on Spark: dry-run counts, or apply (needs a dry run and confirm)",
    )
    @method_decorator(sensitive_variables())
    def post(self, request: Request, plan_id: UUID) -> Response:
        plan = _plan_or_404(request, plan_id)
        subject = parse_subject_request(
            request.data, allow_as_of=False, extra_keys=frozenset({"confirm"})
        )
        if self.apply and request.data.get("confirm") is not True:
            raise ApiError('Applying an erasure needs "confirm": true', "confirm")
        try:
            run = actions.request_erasure_run(
                request.user, plan, subject, self.apply, lineage_url=settings.LINEAGE_BASE_URL
            )
        except actions.PrivacyError as error:
            _raise(error)
            raise  # pragma: no cover - _raise always raises
        body = run_json(run)
        body["statusUrl"] = reverse("privacy-api-run", args=[run.id])
        return Response(body, status=status.HTTP_202_ACCEPTED)


class ErasureApplyView(ErasureRunView):
    audit_action = AuditAction.ERASURE_APPLY
    apply = True


class AuditListView(PrivacyView):
    permission_classes = [CanViewAudit]
    audit_action = AuditAction.AUDIT_READ

    @extend_schema(
        responses={200: schema.AUDIT},
        summary="The privacy audit log, newest first",
        parameters=[
            *paging_parameters(),
            OpenApiParameter("action", str, enum=list(AuditAction.values)),
        ],
    )
    def get(self, request: Request) -> Response:
        limit = int_param(request.query_params, "limit", 100, 1, 1000)
        offset = int_param(request.query_params, "offset", 0, 0, 10**9)
        action = request.query_params.get("action") or None
        if action is not None and action not in AuditAction.values:
            raise ApiError(
                f"action must be one of {', '.join(AuditAction.values)}, got {action!r}", "action"
            )
        qs = queries.audit_entries(request.user, action=action)
        rows = list(qs[offset : offset + limit])
        return Response({"totalCount": qs.count(), "entries": [audit_json(e) for e in rows]})


def subject_kind_json(kind: SubjectKind, fields: int) -> dict[str, Any]:
    return {"name": kind.name, "description": kind.description or None, "fields": fields}


class SubjectKindInput(StrictInput):
    name = TextField(
        max_length=64,
        trim_whitespace=False,
        validators=[
            RegexValidator(catalog_actions.SUBJECT_KIND_NAME, catalog_actions.SUBJECT_KIND_RULE)
        ],
    )
    description = TextField(required=False, allow_blank=True, max_length=2000, default="")


class SubjectKindPatchInput(StrictInput):
    # Optional as in any PATCH: an empty body changes nothing and answers the kind.
    description = TextField(required=False, allow_blank=True, max_length=2000)


class SubjectKindListView(PrivacyView):
    permission_classes = [ManageSubjectKinds]
    audit_action = AuditAction.SUBJECT_KINDS

    @extend_schema(
        responses={200: schema.SUBJECT_KINDS}, summary="Subject kinds and identifier kinds"
    )
    def get(self, request: Request) -> Response:
        kinds = queries.subject_kinds()
        return Response(
            {
                "subjectKinds": [subject_kind_json(k, n) for k, n in kinds],
                "identifierKinds": IDENTIFIER_KINDS,
            }
        )

    @extend_schema(
        request=SubjectKindInput,
        responses={201: schema.SUBJECT_KIND},
        summary="Define a kind of data subject (stewards)",
    )
    def post(self, request: Request) -> Response:
        data = strict_body(SubjectKindInput, request.data)
        try:
            kind = catalog_actions.create_subject_kind(data["name"], data["description"])
        except catalog_actions.SubjectKindError as exc:
            raise ApiError(exc.message, exc.field, exc.status) from exc
        return Response(subject_kind_json(kind, 0), status=status.HTTP_201_CREATED)


class SubjectKindDetailView(PrivacyView):
    permission_classes = [ManageSubjectKinds]
    audit_action = AuditAction.SUBJECT_KINDS

    @extend_schema(
        request=SubjectKindPatchInput,
        responses={200: schema.SUBJECT_KIND},
        summary="Describe a kind of data subject (stewards; the name stays)",
    )
    def patch(self, request: Request, name: str) -> Response:
        kind = SubjectKind.objects.filter(name=name).first()
        if kind is None:
            raise ApiError(f"Subject kind {name!r} not found", "name", 404)
        data = strict_body(SubjectKindPatchInput, request.data)
        if "description" in data:
            kind = catalog_actions.describe_subject_kind(kind, data["description"])
        return Response(
            subject_kind_json(kind, kind.fields.filter(removed_at__isnull=True).count())
        )
