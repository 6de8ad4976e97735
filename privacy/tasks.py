"""Celery task running privacy Spark jobs (scan, erasure dry run, erasure apply)."""

from __future__ import annotations

import threading

from celery import shared_task
from django.conf import settings
from django.db import connection

from privacy import actions


@shared_task(name="privacy.run_job", acks_late=True, ignore_result=True)
def run_job(run_id: str) -> None:
    actions.run_privacy_job(run_id)


@shared_task(name="privacy.build_plan", acks_late=True, ignore_result=True)
def build_plan(plan_id: str) -> None:
    """Compute the steps of an erasure plan made with a broker (see create_erasure_plan)."""
    actions.build_erasure_plan(plan_id)


def _run_in_thread(run_id: str) -> None:
    try:
        run_job.apply(args=[run_id])
    finally:
        connection.close()


def enqueue(run_id: str) -> None:
    """Queue a run; without a broker, run it on a background thread so its page can poll.

    ``PRIVACY_RUNS_INLINE`` (tests) runs it synchronously instead.
    """
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        run_job.delay(run_id)
    elif getattr(settings, "PRIVACY_RUNS_INLINE", False):
        run_job.apply(args=[run_id])
    else:
        threading.Thread(target=_run_in_thread, args=(run_id,), daemon=True).start()
