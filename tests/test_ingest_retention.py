"""Raw-event retention: old bodies become summaries; the catalog, graph and dedup stay."""

from __future__ import annotations

import json
from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from ingest import actions, tasks
from ingest.events import parse_event
from ingest.models import RawEvent
from ingest.retention import COMPACTED, compact_raw_events
from tests.ingest_builders import at, dataset, run_event, run_id, schema
from tests.test_ingest_properties import snapshot

pytestmark = pytest.mark.django_db


def event(n: int) -> dict:
    return run_event(
        "COMPLETE",
        run_id(n),
        at(1, n),
        job=f"etl.job_{n}",
        inputs=[dataset("shop.orders", schema=schema("id", "amount"))],
        outputs=[dataset(f"dw.out_{n}")],
    )


def load(*events: dict) -> list[RawEvent]:
    report = actions.bulk_load([parse_event(e) for e in events], source="test")
    assert report.failed == 0
    return list(RawEvent.objects.order_by("pk"))


def age(raw: RawEvent, days: int) -> None:
    RawEvent.objects.filter(pk=raw.pk).update(processed_at=timezone.now() - timedelta(days=days))


def test_it_replaces_old_bodies_by_summaries_and_keeps_the_rest_verbatim():
    old, recent, failed = load(event(1), event(2), event(3))
    age(old, 40)
    age(failed, 40)
    RawEvent.objects.filter(pk=failed.pk).update(state="failed")
    bodies = {raw.pk: raw.body for raw in (recent, failed)}
    result = compact_raw_events(timedelta(days=30))
    assert result.events_compacted == 1
    assert result.bytes_after < result.bytes_before
    old.refresh_from_db()
    kept = json.loads(old.body)
    assert kept["run"]["runId"] == run_id(1)
    assert kept["job"]["name"] == "etl.job_1"
    assert kept["inputs"] == ["postgres://shop-db:5432:shop.orders"]
    assert kept["outputs"] == ["postgres://shop-db:5432:dw.out_1"]
    assert kept[COMPACTED]["bytes"] > len(old.body)  # the schema facet is gone
    assert old.compacted_at is not None
    for raw in (recent, failed):
        raw.refresh_from_db()
        assert raw.body == bodies[raw.pk] and raw.compacted_at is None


def test_the_catalog_and_graph_stay_and_a_resent_event_is_still_a_duplicate():
    (raw,) = load(event(1))
    before = snapshot()
    age(raw, 40)
    compact_raw_events(timedelta(days=30))
    assert snapshot() == before
    result = actions.store_events([parse_event(event(1))], "test", enqueue=False)
    assert result.status(raw.fingerprint) == "duplicate"


def test_it_is_idempotent_and_replay_leaves_compacted_events_alone():
    (raw,) = load(event(1))
    age(raw, 40)
    assert compact_raw_events(timedelta(days=30)).events_compacted == 1
    assert compact_raw_events(timedelta(days=30)).events_compacted == 0
    assert actions.replay(state=None) == 0
    raw.refresh_from_db()
    assert raw.state == "done"


def test_the_daily_task_uses_the_retention_setting(settings):
    (raw,) = load(event(1))
    age(raw, 10)
    settings.INGEST_RAW_RETENTION_DAYS = 30
    assert tasks.compact_raw_events()["events_compacted"] == 0
    settings.INGEST_RAW_RETENTION_DAYS = 7
    outcome = tasks.compact_raw_events()
    assert outcome["events_compacted"] == 1 and outcome["bytes_after"] < outcome["bytes_before"]
    assert "ingest-compact-raw-events" in settings.CELERY_BEAT_SCHEDULE


def test_a_body_that_is_not_json_still_compacts():
    (raw,) = load(event(1))
    age(raw, 40)
    RawEvent.objects.filter(pk=raw.pk).update(body="not json")
    with mock.patch("ingest.retention.BATCH", 1):
        assert compact_raw_events(timedelta(days=30)).events_compacted == 1
    raw.refresh_from_db()
    assert json.loads(raw.body)[COMPACTED]["bytes"] == len("not json")
