"""Lineage retention: compact run-level detail older than a configurable age.

Run facets (Spark plans, environment dumps, …) and error stacks make up most
of the bytes of old lineage and are rarely read after a few weeks. They are
replaced by a small summary — which facets there were and how large — while
jobs, runs (states, times, errors), dataset versions, edges and their
validity intervals stay, so time travel keeps working. Raw events are the
ingest app's to compact (graph never imports ingest).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from graph import revision
from graph.models import GraphChange, GraphRevisionLog, Run

COMPACTED = "_compacted"
MAX_ERROR_STACK = 2000
BATCH = 500


@dataclass(frozen=True)
class CompactionResult:
    runs_compacted: int
    bytes_before: int
    bytes_after: int
    change_log_rows_pruned: int


def summary(facets: dict[str, object], at: datetime) -> dict[str, object]:
    """What is left of a run's facets once compacted."""
    sizes = {key: len(json.dumps(value, default=str)) for key, value in sorted(facets.items())}
    return {
        COMPACTED: {
            "at": at.isoformat(),
            "facets": sorted(sizes),
            "bytes": sum(sizes.values()),
            "sizes": sizes,
        }
    }


def compact_lineage(
    older_than: timedelta, *, now: datetime | None = None, change_log_days: int = 2
) -> CompactionResult:
    """Compact runs that ended (or, unfinished, started) before ``now - older_than``, and
    forget change-log rows older than ``change_log_days`` (idle processes then rebuild
    their snapshots in full). Safe to run twice: compacted runs are skipped."""
    now = now or timezone.now()
    cutoff = now - older_than
    old = (
        Run.objects.filter(Q(ended_at__lt=cutoff) | Q(ended_at__isnull=True, created_at__lt=cutoff))
        .exclude(facets={})
        .exclude(facets__has_key=COMPACTED)
    )
    compacted = before = after = 0
    last_pk = 0
    while True:
        batch = list(old.filter(pk__gt=last_pk).order_by("pk").values_list("pk", "facets")[:BATCH])
        if not batch:
            break
        with transaction.atomic():
            for pk, facets in batch:
                last_pk = pk
                if not isinstance(facets, dict):
                    continue
                small = summary(facets, now)
                stack = Run.objects.filter(pk=pk).values_list("error_stack", flat=True).first()
                updated = (
                    Run.objects.filter(pk=pk)
                    .exclude(facets__has_key=COMPACTED)
                    .update(facets=small, error_stack=(stack or "")[:MAX_ERROR_STACK])
                )
                if updated:
                    compacted += 1
                    before += len(json.dumps(facets, default=str)) + len(stack or "")
                    after += len(json.dumps(small)) + min(len(stack or ""), MAX_ERROR_STACK)
    pruned = prune_change_log(now - timedelta(days=change_log_days))
    return CompactionResult(compacted, before, after, pruned)


def prune_change_log(before: datetime) -> int:
    """Delete change-log rows of revisions logged before ``before`` (never the newest)."""
    current = revision.current()
    with transaction.atomic():
        stale = GraphRevisionLog.objects.filter(at__lt=before, revision__lt=current.value)
        kept = GraphRevisionLog.objects.exclude(pk__in=stale.values("pk")).values("xid")
        xids = list(stale.exclude(xid__in=kept).values_list("xid", flat=True))
        deleted, _ = GraphChange.objects.filter(xid__in=xids).delete()
        stale.delete()
    return int(deleted)
