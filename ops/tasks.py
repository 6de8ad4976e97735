"""Celery tasks of the operations app."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from ops import notify, slis
from ops.models import Delivery


@shared_task(name="ops.record_slis", ignore_result=True)
def record_slis() -> dict[str, float | None]:
    """Measure each indicator and keep it as today's (scheduled hourly): the Health page's
    trends and the ``lineage_sli`` gauges the alert rules read."""
    return {sample.name: sample.value for sample in slis.record_today()}


@shared_task(name="ops.notify_taint", acks_late=True, ignore_result=True)
def notify_taint(taint_id: int) -> int:
    return len(notify.taint_notices(taint_id))


@shared_task(name="ops.notify_schema", acks_late=True, ignore_result=True)
def notify_schema(versions: list[str]) -> int:
    return len(notify.schema_notices(versions))


@shared_task(name="ops.notify_dead_letters", acks_late=True, ignore_result=True)
def notify_dead_letters(event_ids: list[int]) -> int:
    return len(notify.dead_letter_notices(event_ids))


@shared_task(name="ops.notify_stale", ignore_result=True)
def notify_stale() -> int:
    """Tell owners of datasets whose lineage went stale (scheduled hourly)."""
    return len(notify.stale_notices())


@shared_task(name="ops.requeue_deliveries", ignore_result=True)
def requeue_deliveries() -> int:
    """Queue again deliveries whose task was lost (scheduled every few minutes)."""
    return notify.requeue()


@shared_task(name="ops.deliver", bind=True, acks_late=True, ignore_result=True, max_retries=None)
def deliver(self: Any, delivery_id: int) -> str:
    """Send a notice through one channel; tried again with backoff until sent or given up
    (ops.notify.MAX_ATTEMPTS), never sent twice."""
    state = notify.deliver(delivery_id)
    if state == "retry":
        attempts = Delivery.objects.get(pk=delivery_id).attempts
        raise self.retry(countdown=notify.backoff(attempts))
    return state
