"""Celery tasks of the graph app: thin wrappers over graph actions."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings

from graph import documents, retention


@shared_task(ignore_result=True)
def compact_lineage_detail(older_than_days: int | None = None) -> dict[str, int]:
    """Compact run-level detail older than LINEAGE_DETAIL_RETENTION_DAYS (scheduled daily)."""
    days = (
        older_than_days if older_than_days is not None else settings.LINEAGE_DETAIL_RETENTION_DAYS
    )
    result = retention.compact_lineage(timedelta(days=days))
    return {
        "runs_compacted": result.runs_compacted,
        "bytes_before": result.bytes_before,
        "bytes_after": result.bytes_after,
        "change_log_rows_pruned": result.change_log_rows_pruned,
        "node_documents_pruned": result.node_documents_pruned,
    }


@shared_task(ignore_result=True)
def render_node_documents(full: bool = False) -> dict[str, object]:
    """Render node documents ahead of requests (scheduled every GRAPH_DOCUMENTS_INTERVAL s)."""
    result = documents.render_documents(full=full)
    return {
        "full": result.full,
        "revision": result.revision,
        "datasets": result.datasets,
        "jobs": result.jobs,
        "seconds": round(result.seconds, 3),
        "skipped": result.skipped,
    }
