"""Pages for compliance officers: subject search, Spark runs, erasure plans, audit.

Identifier values arrive only in POST bodies and are re-posted from hidden
fields of a page that is never cached; they never appear in a URL, so a
redirect after a POST carries only a run or plan id.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables
from django.views.decorators.http import require_http_methods, require_POST
from rest_framework.exceptions import APIException

from catalog.auth import SEARCH_SUBJECTS, VIEW_AUDIT, has_perm
from catalog.errors import ApiError, api_exception_handler
from catalog.models import SubjectKind
from graph.page_data import node_links
from privacy import actions, queries
from privacy.api import (
    DEFAULT_LIMIT,
    IDENTIFIER_KINDS,
    MAX_IDENTIFIERS,
    hit_json,
    parse_subject_request,
    plan_json,
    run_json,
)
from privacy.models import AuditAction, PrivacyRun
from privacy.sealing import Concealed, normalise, value_hash

FORM_ROWS = 3
View = Callable[..., HttpResponse]


def privacy_page(perm: str, action: str, post_action: str = "") -> Callable[[View], View]:
    """Sign-in, role check (refusals audited as ``action``, or ``post_action`` for a POST when
    given), no caching, POST values hidden from error reports."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not has_perm(request.user, perm):
                asked = post_action if post_action and request.method == "POST" else action
                actions.log_denied(request.user, asked, request.path)
                raise PermissionDenied("This page needs the compliance role")
            return view(request, *args, **kwargs)

        return login_required(never_cache(sensitive_post_parameters()(wrapper)))

    return decorate


@sensitive_variables()
def form_rows(post: QueryDict | None) -> list[dict[str, str]]:
    """Return the identifier rows of the search form (at least FORM_ROWS, empty ones included)."""
    rows: list[dict[str, str]] = []
    if post is not None:
        for i in range(MAX_IDENTIFIERS):
            value = post.get(f"value-{i}")
            if value is None:
                continue
            rows.append(
                {
                    "value": Concealed(value),
                    "kind": post.get(f"kind-{i}", ""),
                    "field": post.get(f"field-{i}", ""),
                }
            )
    filled = [r for r in rows if r["value"].strip()]
    while len(filled) < FORM_ROWS:
        filled.append({"value": "", "kind": "", "field": ""})
    return [{**row, "index": str(i)} for i, row in enumerate(filled)]


@sensitive_variables()
def form_payload(post: QueryDict, rows: list[dict[str, str]]) -> dict[str, Any]:
    """Return the API-shaped body of a posted form."""
    identifiers = []
    for row in rows:
        if not row["value"].strip():
            continue
        item = {"value": row["value"]}
        if row["kind"]:
            item["kind"] = row["kind"]
        if row["field"].strip():
            item["field"] = row["field"].strip()
        identifiers.append(item)
    payload: dict[str, Any] = {"subjectKind": post.get("subjectKind", "")}
    if post.get("asOf"):
        payload["asOf"] = post["asOf"]
    if identifiers:
        payload["identifiers"] = identifiers
    else:
        payload["value"] = ""
    return payload


def _offset(raw: str | None) -> int:
    try:
        return max(0, int(raw or 0))
    except ValueError:
        return 0


def _form_error(error: APIException) -> dict[str, Any]:
    """Return the error in the API's words (message, field at fault) for the form."""
    response = api_exception_handler(error, {})
    data = response.data if response is not None else {}
    field = data.get("field")
    message = data.get("error") or "Invalid input"
    if field == "value":
        message = "Enter at least one identifier value"
    return {"message": message, "field": field}


def _search_context(request: HttpRequest, rows: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "nav": "privacy",
        "rows": rows,
        "subject_kinds": queries.subject_kinds(),
        "identifier_kinds": IDENTIFIER_KINDS,
        "max_rows": MAX_IDENTIFIERS,
        "posted": request.POST if request.method == "POST" else {},
    }


@privacy_page(SEARCH_SUBJECTS, AuditAction.SEARCH)
@require_http_methods(["GET", "POST"])
@sensitive_variables()
def search(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return render(request, "privacy/search.html", _search_context(request, form_rows(None)))
    rows = form_rows(request.POST)
    context = _search_context(request, rows)
    try:
        subject = parse_subject_request(form_payload(request.POST, rows))
    except APIException as error:
        context["error"] = _form_error(error)
        return render(request, "privacy/search.html", context, status=400)
    offset = _offset(request.POST.get("offset"))
    result, entry = actions.do_subject_search(
        request.user, subject, limit=DEFAULT_LIMIT, offset=offset
    )
    totals = result.totals
    holding = totals["direct"] + totals["derived"]
    datasets = [hit_json(h, result.scan) for h in result.datasets]
    aggregates = [hit_json(h, result.scan) for h in result.aggregates]
    context.update(
        {
            "result": result,
            "entry": entry,
            "datasets": datasets,
            "aggregates": aggregates,
            "links": node_links(_evidence_ids([*datasets, *aggregates])),
            "confirmed": sum(
                1 for h in result.datasets if result.scan and result.scan.rows.get(h.node_id)
            ),
            "hidden_rows": [r for r in rows if r["value"].strip()],
            "holding_total": holding,
            "next_offset": (
                offset + DEFAULT_LIMIT
                if offset + DEFAULT_LIMIT < max(holding, totals["aggregate"])
                else None
            ),
            "previous_offset": max(0, offset - DEFAULT_LIMIT) if offset else None,
        }
    )
    return render(request, "privacy/search.html", context)


def _evidence_ids(hits: list[dict[str, Any]]) -> list[str]:
    """Every node id the hits' evidence names, to be shown as links."""
    ids: list[str] = []
    for hit in hits:
        for evidence in (hit.get("evidence"), *(hit.get("fields") or [])):
            if not isinstance(evidence, dict):
                continue
            evidence = evidence.get("evidence", evidence)
            ids.append(evidence.get("seed") or "")
            for step in evidence.get("steps") or []:
                ids.extend((step.get("job") or "", step.get("from") or "", step.get("to") or ""))
    return ids


@privacy_page(SEARCH_SUBJECTS, AuditAction.SCAN)
@require_POST
@sensitive_variables()
def start_scan(request: HttpRequest) -> HttpResponse:
    rows = form_rows(request.POST)
    try:
        subject = parse_subject_request(form_payload(request.POST, rows))
    except APIException as error:
        context = _search_context(request, rows)
        context["error"] = _form_error(error)
        return render(request, "privacy/search.html", context, status=400)
    run = actions.request_scan(request.user, subject)
    return redirect("privacy-run", run_id=run.id)


def _run(request: HttpRequest, run_id: UUID) -> PrivacyRun:
    run = queries.access_run(request.user, run_id)
    if run is None:
        raise Http404("No such run")
    return actions.current_run(run)


@privacy_page(SEARCH_SUBJECTS, AuditAction.SCAN)
def run_detail(request: HttpRequest, run_id: UUID) -> HttpResponse:
    run = _run(request, run_id)
    return render(
        request, "privacy/run.html", {"nav": "privacy", "run": run, "data": run_json(run)}
    )


@privacy_page(SEARCH_SUBJECTS, AuditAction.ERASURE_PLAN)
@require_POST
@sensitive_variables()
def create_plan(request: HttpRequest) -> HttpResponse:
    rows = form_rows(request.POST)
    payload = form_payload(request.POST, rows)
    payload.pop("asOf", None)  # a plan is made on the lineage of now
    try:
        subject = parse_subject_request(payload)
    except APIException as error:
        context = _search_context(request, rows)
        context["error"] = _form_error(error)
        return render(request, "privacy/search.html", context, status=400)
    plan = actions.create_erasure_plan(request.user, subject)
    return redirect("privacy-plan", plan_id=plan.id)


def _plan_page(
    request: HttpRequest, plan_id: UUID, error: dict[str, Any] | None = None, status: int = 200
) -> HttpResponse:
    plan = queries.access_plan(request.user, plan_id)
    if plan is None:
        raise Http404("No such erasure plan")
    data = plan_json(plan)
    return render(
        request,
        "privacy/plan.html",
        {
            "nav": "privacy",
            "plan": plan,
            "data": data,
            "links": node_links(
                node_id
                for step in plan.steps
                for node_id in (*step.get("after", []), *step.get("recomputeJobs", []))
            ),
            "rows": [
                {"index": str(i["index"]), "kind": i["kind"] or "", "field": i["field"] or ""}
                for i in plan.identifiers
            ],
            "has_dry_run": any(
                r["kind"] == "dry_run" and r["state"] == "done" for r in data["runs"]
            ),
            "error": error,
        },
        status=status,
    )


@privacy_page(SEARCH_SUBJECTS, AuditAction.ERASURE_PLAN)
def plan_detail(request: HttpRequest, plan_id: UUID) -> HttpResponse:
    return _plan_page(request, plan_id)


@privacy_page(SEARCH_SUBJECTS, AuditAction.ERASURE_DRY_RUN)
@require_POST
@sensitive_variables()
def run_plan(request: HttpRequest, plan_id: UUID) -> HttpResponse:
    plan = queries.access_plan(request.user, plan_id)
    if plan is None:
        raise Http404("No such erasure plan")
    apply = request.POST.get("mode") == "apply"
    rows = form_rows(request.POST)
    payload = form_payload(request.POST, rows)
    payload["subjectKind"] = plan.subject_kind
    payload.pop("asOf", None)
    try:
        subject = parse_subject_request(payload)
        if apply and request.POST.get("confirm") != "yes":
            raise ApiError("Tick the box to confirm the erasure", "confirm")
        run = actions.request_erasure_run(
            request.user,
            plan,
            subject,
            apply,
            lineage_url=settings.LINEAGE_BASE_URL,
        )
    except APIException as error:
        return _plan_page(request, plan_id, _form_error(error), status=400)
    except actions.PrivacyError as error:
        return _plan_page(request, plan_id, {"message": str(error), "field": error.field}, 400)
    return redirect("privacy-run", run_id=run.id)


@privacy_page(VIEW_AUDIT, AuditAction.AUDIT_READ, post_action=AuditAction.LOOKUP)
@require_http_methods(["GET", "POST"])
def audit(request: HttpRequest) -> HttpResponse:
    action = request.GET.get("action") or None
    if action not in (None, *AuditAction.values):
        action = None
    digests = None
    lookup_error = ""
    if request.method == "POST":
        digests, lookup_error = _lookup_digests(request)
    entries = queries.audit_entries(request.user, action=action, digests=digests)
    page = Paginator(entries, 100).get_page(request.GET.get("page"))
    return render(
        request,
        "privacy/audit.html",
        {
            "nav": "privacy",
            "page": page,
            "actions": AuditAction.choices,
            "action": action or "",
            "lookup": digests is not None,
            "lookup_error": lookup_error,
            "subject_kinds": queries.subject_kinds(),
        },
    )


@sensitive_variables()
def _lookup_digests(request: HttpRequest) -> tuple[list[str] | None, str]:
    """Return the keyed hashes a looked-up value may have been audited under; audits the lookup."""
    kind = request.POST.get("subjectKind", "")
    value = request.POST.get("value", "")
    if not kind or not value.strip():
        return None, "Choose a subject kind and enter a value"
    if not SubjectKind.objects.filter(name=kind).exists():
        return None, "Choose one of the subject kinds"
    digests = sorted({value_hash(kind, normalise(value, k)) for k in (None, "email")})
    actions.log_audit(
        request.user,
        AuditAction.LOOKUP,
        subject_kind=kind,
        hashes=[
            {"index": i, "kind": None, "field": None, "hash": d} for i, d in enumerate(digests)
        ],
    )
    return digests, ""
