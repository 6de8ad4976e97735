"""Celery tasks of the ingest app: thin wrappers over ingest.actions.

Tasks take JSON-safe ids and are safe to run twice: ``process_batch`` claims
its events with a conditional update, so a redelivered or duplicate task
finds nothing left to do.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from ingest import actions


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def process_batch(event_ids: list[int]) -> dict[str, Any]:
    """Normalise these events (and, on a worker, up to INGEST_DRAIN_BATCH more pending ones)."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        result = actions.process_until_settled(event_ids)
    else:
        result = actions.process_events(
            event_ids, extra=actions.setting("INGEST_DRAIN_BATCH", 2000)
        )
    return {"done": len(result.done), "failed": len(result.failed), "retry": len(result.retry)}


@shared_task(ignore_result=True)
def compact_raw_events(older_than_days: int | None = None) -> dict[str, int]:
    """Replace bodies of events normalised over INGEST_RAW_RETENTION_DAYS ago by summaries."""
    from datetime import timedelta

    from ingest import retention

    days = older_than_days if older_than_days is not None else settings.INGEST_RAW_RETENTION_DAYS
    result = retention.compact_raw_events(timedelta(days=days))
    return {
        "events_compacted": result.events_compacted,
        "bytes_before": result.bytes_before,
        "bytes_after": result.bytes_after,
    }


@shared_task(ignore_result=True)
def sweep_events() -> dict[str, int]:
    """Re-queue events whose task was lost and free those whose worker died."""
    result = actions.sweep()
    return {"requeued": result.requeued, "unstuck": result.unstuck, "gave_up": result.gave_up}


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def process_sql_log(upload_id: int) -> dict[str, Any]:
    """Turn an uploaded SQL query log into lineage (see ingest.sql_actions)."""
    from ingest import sql_actions

    upload = sql_actions.process_upload(upload_id)
    return {"state": upload.state if upload else "missing"}


@shared_task(ignore_result=True)
def retake_sql_logs() -> list[int]:
    """Queue again the SQL logs whose tables read with ``*`` now have known columns."""
    from ingest import sql_actions

    return sql_actions.retake_logs()
