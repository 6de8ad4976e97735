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
    }


@shared_task(ignore_result=True)
def render_node_documents(full: bool = False) -> dict[str, object]:
    """Write the host's node document file again once many nodes changed since it (scheduled
    every GRAPH_DOCUMENTS_INTERVAL s), or every node with ``full``."""
    result = documents.render_documents(full=full, at_least=documents.REWRITE_AFTER)
    return {
        "full": result.full,
        "revision": result.revision,
        "datasets": result.datasets,
        "jobs": result.jobs,
        "copied": result.copied,
        "seconds": round(result.seconds, 3),
        "skipped": result.skipped,
    }
