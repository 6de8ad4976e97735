"""Celery tasks of the graph app: thin wrappers over graph actions."""

from __future__ import annotations

from dataclasses import asdict
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
    return asdict(retention.compact_lineage(timedelta(days=days)))


@shared_task(ignore_result=True)
def render_node_documents(full: bool = False) -> dict[str, object]:
    """Write the host's node document file again once many nodes changed since it (scheduled
    every GRAPH_DOCUMENTS_INTERVAL s), or every node with ``full``."""
    return asdict(documents.render_documents(full=full, at_least=documents.REWRITE_AFTER))
