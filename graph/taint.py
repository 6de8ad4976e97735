"""Writes for taints: mark a dataset as bad (optionally for a window of data), clear it.

What a taint puts at risk downstream is a read: graph.queries.taint_impact.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from catalog.models import Dataset
from graph.models import Taint
from lineage_site import dispatch

MAX_REASON = 2000


class TaintError(ValueError):
    """Invalid taint input; ``field`` names what is at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def mark_tainted(
    dataset: Dataset,
    *,
    reason: str,
    actor: Any = None,
    window_start: datetime | None = None,
    window_end: datetime | None = None,
) -> Taint:
    """Record that ``dataset`` holds bad data (in [window_start, window_end] when given)."""
    reason = reason.strip()
    if not reason:
        raise TaintError("reason is required", "reason")
    if len(reason) > MAX_REASON:
        raise TaintError(f"reason is longer than {MAX_REASON} characters", "reason")
    if window_end is not None and window_start is None:
        raise TaintError("windowEnd needs a windowStart", "windowStart")
    if window_start is not None and window_end is not None and window_end < window_start:
        raise TaintError("windowEnd is before windowStart", "windowEnd")
    with transaction.atomic():
        taint = Taint.objects.create(
            dataset=dataset,
            reason=reason,
            window_start=window_start,
            window_end=window_end,
            created_at=timezone.now(),
            created_by=actor if getattr(actor, "is_authenticated", False) else None,
        )
        # The owners of the dataset and of everything at risk downstream are told.
        transaction.on_commit(lambda: dispatch.send("ops.notify_taint", [taint.pk]), robust=True)
        return taint


def clear_taint(taint: Taint, *, actor: Any = None) -> Taint:
    """Clear a taint (idempotent): what it put at risk is no longer at risk from it."""
    with transaction.atomic():
        # Conditional update: a repeated clear keeps the first clearer and time.
        Taint.objects.filter(pk=taint.pk, cleared_at__isnull=True).update(
            cleared_at=timezone.now(),
            cleared_by=actor if getattr(actor, "is_authenticated", False) else None,
        )
        return Taint.objects.select_related("dataset__namespace", "created_by", "cleared_by").get(
            pk=taint.pk
        )
