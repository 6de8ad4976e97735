"""Celery task running privacy Spark jobs (scan, erasure dry run, erasure apply)."""

from __future__ import annotations

from celery import shared_task

from privacy import actions


@shared_task(name="privacy.run_job", acks_late=True, ignore_result=True)
def run_job(run_id: str) -> None:
    actions.run_privacy_job(run_id)


@shared_task(name="privacy.sweep_runs", ignore_result=True)
def sweep_runs() -> int:
    """Fail the runs whose worker stopped (see actions.abandon_stale_runs)."""
    return actions.abandon_stale_runs()


@shared_task(name="privacy.build_plan", acks_late=True, ignore_result=True)
def build_plan(plan_id: str) -> None:
    """Compute the steps of an erasure plan made with a broker (see create_erasure_plan)."""
    actions.build_erasure_plan(plan_id)
