"""Celery tasks of the operations app."""

from __future__ import annotations

from celery import shared_task

from ops import slis


@shared_task(name="ops.record_slis", ignore_result=True)
def record_slis() -> dict[str, float | None]:
    """Keep today's value of each indicator (scheduled daily): the Health page's trends."""
    return {sample.name: sample.value for sample in slis.record_today()}
