"""Pages for SQL query logs: upload one, watch it become lineage, read its problems."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import IO, Any, cast

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render

from catalog.auth import OPERATE_INGESTION, has_perm
from ingest import sql_actions, sql_queries
from ingest.models import SqlLogFormat
from ingest.sql.dialects import SUPPORTED_DIALECTS, resolve_dialect

DIALECT_CHOICES = sorted(
    {(resolve_dialect(d).name, resolve_dialect(d).name) for d in SUPPORTED_DIALECTS}
)


def may_ingest_sql_logs(user: Any) -> bool:
    return has_perm(user, OPERATE_INGESTION)


def sql_log_role_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not may_ingest_sql_logs(request.user):
            raise PermissionDenied("SQL logs need the engineer role")
        return view(request, *args, **kwargs)

    return wrapped


class SqlLogForm(forms.Form):
    file = forms.FileField(label="Query log")
    namespace = forms.CharField(
        max_length=1024,
        help_text="The data source the SQL ran on, e.g. postgres://warehouse:5432",
    )
    dialect = forms.ChoiceField(choices=DIALECT_CHOICES, initial="postgres")
    format = forms.ChoiceField(choices=SqlLogFormat.choices, initial=SqlLogFormat.CSV)
    database = forms.CharField(max_length=255, required=False, help_text="Default database")
    schema = forms.CharField(max_length=255, required=False, help_text="Default schema")


@login_required
@sql_log_role_required
def sql_logs(request: HttpRequest) -> HttpResponse:
    form = SqlLogForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            log = sql_actions.create_upload(
                namespace=data["namespace"],
                dialect=data["dialect"],
                fmt=data["format"],
                stream=cast(IO[bytes], data["file"]),
                original_name=data["file"].name or "",
                database=data["database"],
                schema=data["schema"],
                user=request.user,
            )
        except sql_actions.SqlLogInputError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            return redirect("sql-log-detail", upload_id=log.pk)
    status = 400 if request.method == "POST" else 200
    return render(
        request,
        "ingest/sql_logs.html",
        {"form": form, "uploads": sql_queries.recent_uploads(), "nav": "ingestion"},
        status=status,
    )


@login_required
@sql_log_role_required
def sql_log_detail(request: HttpRequest, upload_id: int) -> HttpResponse:
    log = sql_queries.upload(upload_id)
    if log is None:
        raise Http404("No such SQL log")
    return render(
        request,
        "ingest/sql_log_detail.html",
        {"log": log, "problems": sql_queries.problems_of(log), "nav": "ingestion"},
    )


@login_required
@sql_log_role_required
def sql_log_progress(request: HttpRequest, upload_id: int) -> HttpResponse:
    log = sql_queries.upload(upload_id)
    if log is None:
        return JsonResponse({"error": "No such SQL log", "field": "id"}, status=404)
    return JsonResponse(sql_queries.upload_json(log, problems=0))
