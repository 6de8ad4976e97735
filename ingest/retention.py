"""Retention of raw events: old bodies are replaced by small summaries.

A stored event's body is kept verbatim while it may still be needed: until it
is normalised, while it is failed (to be replayed) and for
INGEST_RAW_RETENTION_DAYS after it was normalised. After that, what it
produced lives on in the catalog and the graph (runs, versions, edges and
their validity intervals), so the body is replaced by a summary — what it
was about and how large it was — and the fingerprint stays, so the same
event sent again is still recognised as a duplicate. The graph app compacts
its own run-level detail (graph.retention).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from ingest.models import EventState, RawEvent

COMPACTED = "_compacted"
BATCH = 500


@dataclass(frozen=True)
class RawCompactionResult:
    events_compacted: int
    bytes_before: int
    bytes_after: int


def _names(datasets: Any) -> list[str]:
    if not isinstance(datasets, list):
        return []
    return [
        f"{d.get('namespace')}:{d.get('name')}"
        for d in datasets
        if isinstance(d, dict) and d.get("name") is not None
    ]


def summary(body: str, at: datetime) -> dict[str, Any]:
    """What is left of an event once compacted: its identity, datasets and facet names."""
    try:
        event = json.loads(body)
    except ValueError:
        event = {}
    if not isinstance(event, dict):
        event = {}
    kept: dict[str, Any] = {
        key: event[key]
        for key in ("eventType", "eventTime", "producer", "schemaURL")
        if key in event
    }
    for key in ("run", "job", "dataset"):
        part = event.get(key)
        if isinstance(part, dict):
            kept[key] = {k: v for k, v in part.items() if k != "facets"}
            facets = part.get("facets")
            if isinstance(facets, dict):
                kept[key]["facets"] = sorted(facets)
    for key in ("inputs", "outputs"):
        if key in event:
            kept[key] = _names(event[key])
    kept[COMPACTED] = {"at": at.isoformat(), "bytes": len(body.encode("utf-8"))}
    return kept


def compact_raw_events(
    older_than: timedelta, *, now: datetime | None = None
) -> RawCompactionResult:
    """Compact events normalised before ``now - older_than``; failed and pending ones are kept.

    Safe to run twice and alongside workers: each update re-checks the state.
    """
    now = now or timezone.now()
    cutoff = now - older_than
    old = RawEvent.objects.filter(
        state=EventState.DONE, processed_at__lt=cutoff, compacted_at__isnull=True
    )
    compacted = before = after = 0
    last_pk = 0
    while True:
        batch = list(old.filter(pk__gt=last_pk).order_by("pk").values_list("pk", "body")[:BATCH])
        if not batch:
            break
        with transaction.atomic():
            for pk, body in batch:
                last_pk = pk
                small = json.dumps(summary(body, now), separators=(",", ":"))
                updated = RawEvent.objects.filter(
                    pk=pk, state=EventState.DONE, compacted_at__isnull=True
                ).update(body=small, compacted_at=now)
                if updated:
                    compacted += 1
                    before += len(body)
                    after += len(small)
    return RawCompactionResult(compacted, before, after)
