"""The lineage's service level indicators on a scenario whose truth is known: the API, the
Health page and its daily trend, and the runbooks they link to."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from catalog.models import (
    DatasetField,
    DatasetOwnership,
    FlagSource,
    Owner,
    PiiCategory,
    RetentionAction,
    RetentionPolicy,
    Sensitivity,
)
from graph.models import RunState
from ingest.models import EventState, RawEvent
from ops import slis
from ops.models import SliSample
from tests.graph_builders import NS, LineageBuilder

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


@pytest.fixture
def world() -> dict[str, Any]:
    """Five datasets: one no job touches, one whose hourly writer stopped 4 hours ago, two
    holding personal data (one looked after, one not), and events (ten normalised in 1 s,
    two in 100 s, one 2 days ago in 500 s, one dead letter)."""
    now = timezone.now()
    g = LineageBuilder()
    g.dataset("raw.customers", fields=("id", "email"), sensitivity=Sensitivity.RESTRICTED)
    g.dataset("clean.customers", fields=("id", "email"))
    g.datasets("orders", "orphan", "monthly.report")
    DatasetField.objects.filter(pk=g.field("raw.customers.email").pk).update(
        pii_category=PiiCategory.EMAIL
    )
    DatasetField.objects.filter(pk=g.field("clean.customers.email").pk).update(
        pii_category=PiiCategory.EMAIL, flag_source=FlagSource.PROPAGATED
    )
    team = Owner.objects.create(name="team-a")
    DatasetOwnership.objects.create(dataset=g.ds["raw.customers"], owner=team)
    policy = RetentionPolicy.objects.create(
        name="two-years", duration=timedelta(days=730), action=RetentionAction.DELETE
    )
    g.ds["raw.customers"].retention_policy = policy
    g.ds["raw.customers"].save()
    g.job("hourly", reads=["raw.customers"], writes=["clean.customers"])
    g.job("load", reads=["raw.customers"], writes=["orders"])
    g.job("monthly", reads=["orders"], writes=["monthly.report"])
    for hours in range(4, 10):
        g.run("hourly", at=now - hours * HOUR)
    for hours in range(0, 6):
        g.run("load", at=now - hours * HOUR - timedelta(minutes=30))
    g.run("load", state=RunState.FAILED, at=now - 10 * HOUR)
    for months in range(3):
        g.run("monthly", at=now - timedelta(days=30 * months + 30, hours=3))
    for n, (lag, ago) in enumerate([(1, HOUR)] * 10 + [(100, HOUR)] * 2 + [(500, 48 * HOUR)]):
        processed = now - ago
        event(n, EventState.DONE, processed - timedelta(seconds=lag), processed)
    event(99, EventState.FAILED, now - HOUR, now - HOUR, error="EventError: eventTime\nrest")
    return {"g": g, "now": now}


def event(n: int, state: str, received, processed, error: str = "") -> RawEvent:
    return RawEvent.objects.create(
        fingerprint=f"fp-{n}",
        kind="run",
        body="{}",
        event_time=received,
        job_namespace="jobs",
        job_name=f"job-{n}",
        state=state,
        received_at=received,
        processed_at=processed,
        error=error,
    )


def by_name(found: list[slis.Indicator]) -> dict[str, slis.Indicator]:
    return {indicator.name: indicator for indicator in found}


def test_each_indicator_counts_what_the_scenario_holds(world):
    found = by_name(slis.indicators(slis.Scope(), now=world["now"]))
    coverage = found["coverage"]
    assert (coverage.value, coverage.judged, coverage.missing, coverage.met) == (0.8, 5, 1, False)
    assert [m["name"] for m in coverage.misses] == ["orphan"]
    assert coverage.misses[0]["id"] == f"dataset:{NS}:orphan"
    # An hourly job late by hours is stale; a monthly one three hours past its month is not.
    freshness = found["freshness"]
    assert (freshness.judged, freshness.missing) == (3, 1)
    assert freshness.value == round(2 / 3, 4)
    (stale,) = freshness.misses
    assert stale["name"] == "clean.customers"
    assert stale["usualIntervalSeconds"] == 3600
    assert 4 * 3600 - 5 <= stale["ageSeconds"] <= 4 * 3600 + 60
    completeness = found["completeness"]
    assert (completeness.value, completeness.judged, completeness.missing) == (0.5, 2, 1)
    assert completeness.misses[0]["name"] == "clean.customers"
    assert completeness.misses[0]["missingAttributes"] == ["owner", "retention", "pii review"]
    # Twelve events in the last 24 hours, two of them over 30 s: the 95th percentile is one.
    lag = found["ingestionLag"]
    assert (lag.value, lag.judged, lag.missing, lag.met) == (100.0, 12, 2, False)
    assert [m["lagSeconds"] for m in lag.misses] == [100.0, 100.0]
    dead = found["deadLetters"]
    assert (dead.value, dead.missing, dead.met) == (1.0, 1, False)
    assert dead.misses[0]["error"] == "EventError: eventTime"


def test_a_scope_narrows_the_datasets_and_events_judged(world):
    personal = by_name(slis.indicators(slis.Scope(personal=True), now=world["now"]))
    assert (personal["coverage"].value, personal["coverage"].judged) == (1.0, 2)
    assert personal["freshness"].judged == 1
    owned = by_name(slis.indicators(slis.Scope(owner="team-a"), now=world["now"]))
    assert (owned["coverage"].judged, owned["completeness"].value) == (1, 1.0)
    elsewhere = by_name(slis.indicators(slis.Scope(namespace="nowhere"), now=world["now"]))
    assert elsewhere["coverage"].value is None and elsewhere["coverage"].met is None
    assert (elsewhere["ingestionLag"].judged, elsewhere["deadLetters"].value) == (0, 0.0)
    # Misses come a page at a time; the count is the whole.
    paged = by_name(slis.indicators(slis.Scope(), offset=1, limit=1, now=world["now"]))
    assert paged["ingestionLag"].missing == 2 and len(paged["ingestionLag"].misses) == 1


def test_the_api_answers_any_role_with_the_same_figures(world, api, viewer, outsider):
    response = api(viewer).get("/api/v1/slis", {"personal": "true", "limit": 5})
    assert response.status_code == 200
    body = response.json()
    assert body["scope"] == {"namespace": None, "owner": None, "personal": True}
    assert set(body) == {"at", "scope", *slis.NAMES}
    assert body["coverage"]["value"] == 1.0 and body["coverage"]["target"] == 0.9
    assert body["completeness"]["misses"][0]["missingAttributes"] == [
        "owner",
        "retention",
        "pii review",
    ]
    assert body["deadLetters"]["missCount"] == 1
    bad = api(viewer).get("/api/v1/slis", {"personal": "maybe"})
    assert bad.status_code == 400 and bad.json()["field"] == "personal"
    assert api(viewer).get("/api/v1/slis", {"limit": 0}).json()["field"] == "limit"
    assert api(None).get("/api/v1/slis").status_code == 401
    assert api(outsider).get("/api/v1/slis").status_code == 403


def test_the_health_page_shows_each_indicator_its_misses_and_its_runbook(world, client, viewer):
    client.force_login(viewer)
    page = client.get("/health/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "80 %" in text and "orphan" in text and "no owner, no retention, no pii review" in text
    assert "1 of 5 miss" in text and "last written 4.0 h ago, usually every 1.0 h" in text
    assert 'href="/health/runbooks#dead-letters"' in text
    assert "no trend yet" in text
    runbooks = client.get("/health/runbooks")
    assert runbooks.status_code == 200
    assert 'id="dead-letters"' in runbooks.content.decode()
    assert 'id="stale-lineage"' in runbooks.content.decode()
    client.logout()
    assert client.get("/health/").status_code == 302


def test_the_daily_task_keeps_a_trend_the_page_draws(world, client, viewer):
    from ops import tasks

    yesterday = timezone.localdate() - timedelta(days=1)
    for name in slis.NAMES:
        SliSample.objects.create(day=yesterday, name=name, value=0.5, target=0.9)
    recorded = tasks.record_slis.delay().get()
    assert recorded["coverage"] == 0.8 and recorded["deadLetters"] == 1.0
    tasks.record_slis.delay().get()  # again the same day: replaced, not added
    assert SliSample.objects.filter(day=timezone.localdate()).count() == len(slis.NAMES)
    client.force_login(viewer)
    text = client.get("/health/").content.decode()
    assert text.count('<svg class="sparkline"') == len(slis.NAMES)
    assert "Coverage over the last 2 days" in text


@pytest.mark.django_db(transaction=True)
def test_without_a_broker_runserver_runs_the_schedule_after_its_responses(
    world, client, viewer, monkeypatch
):
    """The embedded default has no Celery beat: its server runs each scheduled task once it
    is due, on a thread of its own after a response, so the Health page gets its trend
    there too."""
    import threading

    from django.core.signals import request_finished

    from ops import schedule

    def wait_for_the_schedule() -> None:
        for thread in threading.enumerate():
            if thread.name == "embedded-beat":
                thread.join(timeout=60)

    monkeypatch.setattr(schedule, "_next_run", {})
    monkeypatch.setattr("sys.argv", ["manage.py", "runserver"])
    schedule.connect()
    try:
        client.force_login(viewer)
        client.get("/health/")  # the first response: every task is due
        wait_for_the_schedule()
        assert SliSample.objects.filter(day=timezone.localdate()).count() == len(slis.NAMES)
        assert set(schedule._next_run) == set(settings.CELERY_BEAT_SCHEDULE)
        client.get("/health/")
        wait_for_the_schedule()
        assert schedule.run_due() == []  # none due again before its interval
        hourly = {n for n, e in settings.CELERY_BEAT_SCHEDULE.items() if e["schedule"] <= 3600}
        assert set(schedule.run_due(time.monotonic() + 3601)) == hourly
    finally:
        request_finished.disconnect(dispatch_uid="ops.schedule")


def test_misses_page_through_namespaces_in_name_order(monkeypatch):
    """Completeness misses are read namespace by namespace, coverage misses (on SQLite) by
    chunks of ids: every page, including those that cross from one namespace to the next,
    is the page of all misses sorted by namespace and name."""
    monkeypatch.setattr(slis, "CHUNK", 3)
    g = LineageBuilder()
    team = Owner.objects.create(name="team-b")
    names = {"b://lake": 7, "a://warehouse": 5, "c://mart": 4}
    for namespace, count in names.items():
        for n in range(count):
            ds = g.dataset(f"t{(n * 7) % count}_{n}", fields=("email",), namespace=namespace)
            DatasetField.objects.filter(dataset=ds).update(pii_category=PiiCategory.EMAIL)
            if n % 3 == 0:  # looked after: not a miss
                DatasetOwnership.objects.create(dataset=ds, owner=team)
                ds.sensitivity = Sensitivity.RESTRICTED
                ds.retention_policy = RetentionPolicy.objects.get_or_create(
                    name="year", duration=timedelta(days=365), action=RetentionAction.DELETE
                )[0]
                ds.save()
    expected = sorted(
        (d.namespace.name, d.name)
        for d in slis.Scope().datasets().filter(slis.lacking_stewardship())
    )
    assert len(expected) == sum(count - (count + 2) // 3 for count in names.values())
    everything = sorted((d.namespace.name, d.name) for d in slis.Scope().datasets())
    for offset in range(len(expected) + 1):
        for limit in (1, 3, 20):
            found = by_name(slis.indicators(slis.Scope(), offset=offset, limit=limit))
            completeness = found["completeness"]
            assert completeness.missing == len(expected)
            shown = [(m["namespace"], m["name"]) for m in completeness.misses]
            assert shown == expected[offset : offset + limit]
            # No job touches any of them: every dataset misses coverage.
            uncovered = [(m["namespace"], m["name"]) for m in found["coverage"].misses]
            assert uncovered == everything[offset : offset + limit]
    narrowed = by_name(slis.indicators(slis.Scope(namespace="c://mart"), limit=10))
    assert [m["name"] for m in narrowed["completeness"].misses] == [
        name for ns, name in expected if ns == "c://mart"
    ]


def cadence_table(arrays: tuple[Any, Any]) -> dict[int, tuple[int, float]]:
    last_end, interval = arrays
    return {
        job: (int(last_end[job]), float(interval[job]))
        for job in range(interval.size)
        if interval[job] == interval[job]
    }


@pytest.mark.django_db(transaction=True)
def test_job_cadences_kept_from_the_change_log_match_a_reading_from_scratch():
    """A process keeps every job's cadence and reads again only the jobs whose runs the
    change log shows changed: after any sequence of runs started, finished, failed, moved
    or deleted (and a change log that cannot say what changed), it holds what a reading
    of every run from scratch gives. Each change commits on its own, so it is its own
    revision on PostgreSQL too."""
    import random

    from django.db import transaction

    from graph import revision
    from graph.models import Run

    rng = random.Random(7)
    g = LineageBuilder()
    g.datasets("a", "b", "c", "d")
    names = ["j0", "j1", "j2", "j3"]
    for n, name in enumerate(names):
        g.job(name, reads=["a"], writes=[["b", "c", "d", "a"][n]])
    kept = slis.Cadences()
    base = timezone.now() - timedelta(days=30)
    for step in range(60):
        runs = list(Run.objects.order_by("pk"))
        move = rng.choice(["start"] * 4 + ["finish", "finish", "fail", "shift", "delete", "reset"])
        with transaction.atomic():
            if move == "start" or not runs:
                g.run(
                    rng.choice(names),
                    state=rng.choice([RunState.RUNNING, RunState.COMPLETED]),
                    at=base + timedelta(hours=rng.randrange(600)),
                )
            elif move == "finish":
                Run.objects.filter(pk=rng.choice(runs).pk).update(
                    state=RunState.COMPLETED, ended_at=base + timedelta(hours=rng.randrange(600))
                )
            elif move == "fail":
                Run.objects.filter(pk=rng.choice(runs).pk).update(state=RunState.FAILED)
            elif move == "shift":
                Run.objects.filter(pk=rng.choice(runs).pk).update(
                    created_at=base + timedelta(minutes=rng.randrange(36000))
                )
            elif move == "delete":
                rng.choice(runs).delete()
            else:
                revision.mark_reset()
        if step % 3 == 0 or move == "reset":
            assert cadence_table(kept.sync()) == cadence_table(slis.Cadences().sync()), step
    assert cadence_table(kept.sync()) == cadence_table(slis.Cadences().sync())
    assert len(cadence_table(kept.sync())) >= 2
