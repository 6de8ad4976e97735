"""Reads for SQL query logs: uploads, their problems, and dataset reads."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Min, Q, Sum

from catalog.api import iso
from ingest.models import DatasetRead, SqlLogProblem, SqlLogState, SqlLogUpload

ACTIVE_STATES = (SqlLogState.PENDING, SqlLogState.PROCESSING)


@dataclass
class SqlLogSummary:
    """What the ingestion status page shows about SQL logs."""

    uploads: list[SqlLogUpload] = field(default_factory=list)
    problems: list[SqlLogProblem] = field(default_factory=list)
    active: int = 0


def recent_uploads(limit: int = 50) -> list[SqlLogUpload]:
    return list(
        SqlLogUpload.objects.select_related("uploaded_by")
        .prefetch_related("columns_unknown")
        .order_by("-created_at", "-id")[:limit]
    )


def upload(upload_id: int) -> SqlLogUpload | None:
    return (
        SqlLogUpload.objects.select_related("uploaded_by")
        .prefetch_related("columns_unknown")
        .filter(pk=upload_id)
        .first()
    )


def problems_of(log: SqlLogUpload, limit: int = 200) -> list[SqlLogProblem]:
    return list(SqlLogProblem.objects.filter(upload=log).order_by("line", "id")[:limit])


def status_summary(uploads: int = 10, problems: int = 50) -> SqlLogSummary:
    """Recent uploads, and the latest problems (unparseable statements, bad lines) of any."""
    recent = recent_uploads(uploads)
    latest = list(
        SqlLogProblem.objects.select_related("upload").order_by("-upload_id", "line", "id")[
            :problems
        ]
    )
    active = SqlLogUpload.objects.filter(state__in=ACTIVE_STATES).count()
    return SqlLogSummary(recent, latest, active)


@dataclass(frozen=True)
class Reader:
    """Someone who read a dataset with plain SELECTs, per the query logs."""

    reader: str
    reads: int
    statements: int
    first_at: datetime
    last_at: datetime


def readers_of(
    names: Iterable[tuple[str, str]], as_of: datetime | None = None, limit: int = 20
) -> list[Reader]:
    """Who read a dataset under any of its ``names`` (namespace, name), the latest first;
    as of an instant, the days of reads that had all passed by then."""
    named = Q()
    for namespace, name in names:
        named |= Q(namespace=namespace, name=name)
    reads = DatasetRead.objects.filter(named)
    if as_of is not None:
        reads = reads.filter(last_at__lte=as_of)
    rows = (
        reads.values("reader")
        .annotate(
            reads=Sum("count"),
            statements=Count("fingerprint", distinct=True),
            first=Min("first_at"),
            last=Max("last_at"),
        )
        .order_by("-last", "reader")[:limit]
    )
    return [Reader(r["reader"], r["reads"], r["statements"], r["first"], r["last"]) for r in rows]


def upload_json(log: SqlLogUpload, problems: int = 100) -> dict[str, Any]:
    """An upload as the API shows it."""
    return {
        "id": log.pk,
        "state": log.state,
        "namespace": log.namespace,
        "dialect": log.dialect,
        "format": log.format,
        "defaultDatabase": log.default_database or None,
        "defaultSchema": log.default_schema or None,
        "name": log.original_name,
        "sizeBytes": log.size_bytes,
        "source": log.source,
        "createdAt": iso(log.created_at),
        "startedAt": iso(log.started_at),
        "finishedAt": iso(log.finished_at),
        "progress": round(log.progress, 4),
        "bytesRead": log.bytes_read,
        "counts": {
            "records": log.records,
            "statements": log.statements,
            "events": log.events,
            "reads": log.reads,
            "skippedFailed": log.skipped_failed,
            "lineErrors": log.line_errors,
            "parseErrors": log.parse_errors,
            "cacheHits": log.cache_hits,
        },
        "error": log.error or None,
        # Tables read before the catalog knew their columns: processed again once it does.
        "columnsUnknown": [
            {"namespace": c.namespace, "name": c.name} for c in log.columns_unknown.all()
        ],
        "problems": [
            {
                "line": p.line,
                "statement": p.statement,
                "field": p.field or None,
                "message": p.message,
                "excerpt": p.excerpt or None,
            }
            for p in problems_of(log, problems)
        ]
        if problems
        else [],
    }
