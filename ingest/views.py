"""Ingest pages: the ingestion status page (outbox, lag, throughput, dead letters) and replay."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from catalog import auth
from catalog.errors import ApiError
from catalog.params import MAX_ID, int_param
from ingest import actions, queries, sql_queries
from ingest.models import EventState

read_required = permission_required(auth.READ_LINEAGE, raise_exception=True)
operate_required = permission_required(auth.OPERATE_INGESTION, raise_exception=True)


@login_required
@read_required
def status(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "ingest/status.html",
        {
            "status": queries.ingestion_status(),
            "sql_logs": sql_queries.status_summary(),
            "nav": "ingestion",
        },
    )


@login_required
@operate_required
@require_POST
def replay(request: HttpRequest) -> HttpResponse:
    if request.POST.get("event_id"):
        try:
            event_id = int_param(request.POST, "event_id", 0, 1, MAX_ID)
        except ApiError:
            messages.error(request, "No such event.")
            return redirect("ingestion-status")
        count = actions.replay([event_id], state=None)
    else:
        count = actions.replay(state=EventState.FAILED)
    messages.success(request, f"{count} event{'s' if count != 1 else ''} queued again.")
    return redirect("ingestion-status")
