"""The outbox: claim once, dead letters, sweep, replay, broker outages, status page, commands."""

from __future__ import annotations

import gzip
import json
import time
from datetime import timedelta
from io import StringIO
from unittest import mock

import pytest
import time_machine
from django.core.management import call_command
from django.db import OperationalError
from django.utils import timezone

from graph.models import Run, TableEdge
from ingest import actions
from ingest.events import parse_event
from ingest.models import RawEvent
from tests.ingest_builders import (
    FIXTURES,
    all_fixture_events,
    at,
    dataset,
    run_event,
    run_id,
)
from tests.test_ingest_properties import snapshot

pytestmark = pytest.mark.django_db


def event(n=1, job="etl.orders"):
    return run_event(
        "COMPLETE", run_id(n), at(1, n), job=job, inputs=[dataset("a")], outputs=[dataset("b")]
    )


def stored(*events):
    result = actions.store_events([parse_event(e) for e in events], "test", enqueue=False)
    return sorted(result.stored.values())


def test_it_claims_an_event_once():
    (pk,) = stored(event())
    assert [e.pk for e in actions.claim([pk])] == [pk]
    assert actions.claim([pk]) == []
    raw = RawEvent.objects.get()
    assert (raw.state, raw.attempts) == ("processing", 1)


def test_a_duplicate_task_does_nothing():
    (pk,) = stored(event())
    assert actions.process_events([pk]).done == [pk]
    assert actions.process_events([pk]).done == []
    assert RawEvent.objects.get().attempts == 1


def test_it_drains_other_pending_events_with_its_own():
    ids = stored(event(1), event(2), event(3))
    result = actions.process_events([ids[0]], extra=5)
    assert sorted(result.done) == ids


def test_it_keeps_a_failing_event_as_a_dead_letter():
    (pk,) = stored(event())
    with mock.patch("ingest.actions.normalize", side_effect=ValueError("no good")):
        result = actions.process_events([pk])
    assert result.failed == [pk]
    raw = RawEvent.objects.get()
    assert raw.state == "failed"
    assert raw.error.startswith("ValueError: no good")
    assert raw.processed_at is not None
    assert not Run.objects.exists()


def test_it_retries_transient_errors_until_attempts_run_out(settings):
    settings.INGEST_MAX_ATTEMPTS = 2
    (pk,) = stored(event())
    with mock.patch("ingest.actions.normalize", side_effect=OperationalError("deadlock detected")):
        assert actions.process_events([pk]).retry == [pk]
        assert RawEvent.objects.get().state == "pending"
        assert actions.process_events([pk]).failed == [pk]
    assert RawEvent.objects.get().state == "failed"


def test_it_isolates_a_bad_event_from_its_batch():
    ids = stored(event(1), event(2, job="poison"), event(3))
    from ingest.normalizer import normalize as real

    def picky(events):
        if any(e.job_name == "poison" for e in events):
            raise KeyError("poison")
        return real(events)

    with mock.patch("ingest.actions.normalize", side_effect=picky):
        result = actions.process_events(ids)
    assert sorted(result.done) == [ids[0], ids[2]]
    assert result.failed == [ids[1]]
    assert Run.objects.count() == 2


def test_it_finds_a_bad_event_in_a_big_batch_by_halving():
    events = [
        run_event(
            "COMPLETE",
            run_id(n),
            at(1 + n // 20, n % 20),
            job="poison" if n == 37 else "etl.orders",
            inputs=[dataset("a")],
            outputs=[dataset("b")],
        )
        for n in range(1, 65)
    ]
    ids = stored(*events)
    from ingest.normalizer import normalize as real

    sizes = []

    def picky(events):
        sizes.append(len(events))
        if any(e.job_name == "poison" for e in events):
            raise KeyError("poison")
        return real(events)

    with mock.patch("ingest.actions.normalize", side_effect=picky):
        result = actions.process_events(ids)
    assert result.failed == [ids[36]]
    assert sorted(result.done) == [pk for pk in ids if pk != ids[36]]
    assert Run.objects.count() == 63
    # 64 events: the whole batch, then two halves at each of six levels.
    assert len(sizes) == 1 + 2 * 6
    assert RawEvent.objects.get(pk=ids[36]).error.startswith("KeyError")
    assert result.normalized is not None and len(result.normalized.datasets) == 2


def test_the_sweep_requeues_events_whose_task_was_lost(django_capture_on_commit_callbacks):
    ids = stored(event(1), event(2))
    RawEvent.objects.update(queued_at=timezone.now() - timedelta(minutes=10))
    with django_capture_on_commit_callbacks(execute=True):
        result = actions.sweep()
    assert result.requeued == 2
    assert set(RawEvent.objects.values_list("state", flat=True)) == {"done"}
    assert sorted(RawEvent.objects.values_list("pk", flat=True)) == ids


def test_the_sweep_leaves_recently_queued_events_alone():
    stored(event())
    assert actions.sweep().requeued == 0


def test_the_sweep_frees_events_whose_worker_died(settings, django_capture_on_commit_callbacks):
    settings.INGEST_MAX_ATTEMPTS = 3
    ids = stored(event(1), event(2))
    actions.claim(ids)
    RawEvent.objects.filter(pk=ids[1]).update(attempts=3)
    later = timezone.now() + timedelta(hours=1)
    with time_machine.travel(later), django_capture_on_commit_callbacks(execute=True):
        result = actions.sweep()
    assert (result.unstuck, result.gave_up) == (1, 1)
    assert RawEvent.objects.get(pk=ids[0]).state == "done"
    dead = RawEvent.objects.get(pk=ids[1])
    assert dead.state == "failed"
    assert "Gave up" in dead.error


def test_it_stores_events_while_the_broker_is_down(
    api, producer, django_capture_on_commit_callbacks
):
    client = api(producer)
    with mock.patch(
        "lineage_site.dispatch.send", side_effect=ConnectionError("redis down")
    ) as publish:
        with django_capture_on_commit_callbacks(execute=True):
            first = client.post("/api/v1/lineage", event(1), format="json")
        with django_capture_on_commit_callbacks(execute=True):
            second = client.post("/api/v1/lineage", event(2), format="json")
    assert (first.status_code, second.status_code) == (201, 201)
    assert publish.call_count == 1  # then the broker is left alone for a moment
    assert set(RawEvent.objects.values_list("state", flat=True)) == {"pending"}
    actions._broker_down_until = 0.0


def test_it_replays_failed_events(django_capture_on_commit_callbacks):
    (pk,) = stored(event())
    with mock.patch("ingest.actions.normalize", side_effect=ValueError("bug, since fixed")):
        actions.process_events([pk])
    with django_capture_on_commit_callbacks(execute=True):
        assert actions.replay() == 1
    raw = RawEvent.objects.get()
    assert (raw.state, raw.error) == ("done", "")
    assert TableEdge.objects.count() == 2


def test_the_status_page_shows_counts_lag_throughput_and_failures(client, viewer):
    now = timezone.now()
    stored(event(1), event(2), event(3))
    RawEvent.objects.filter(job_name="etl.orders").update(received_at=now - timedelta(seconds=90))
    ids = sorted(RawEvent.objects.values_list("pk", flat=True))
    RawEvent.objects.filter(pk=ids[0]).update(state="done", processed_at=now - timedelta(seconds=5))
    RawEvent.objects.filter(pk=ids[1]).update(
        state="failed", error="KeyError: 'x'\n\nTraceback …", processed_at=now
    )
    client.force_login(viewer)
    with time_machine.travel(now, tick=False):
        page = client.get("/ingestion/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "90.0 s" in html
    assert "KeyError: &#x27;x&#x27;" in html
    assert "Replay" not in html  # viewers see, engineers act
    status = page.context["status"]
    assert status.counts == {"pending": 1, "processing": 0, "done": 1, "failed": 1}
    assert status.processed_last_minute == 1


def test_engineers_replay_from_the_status_page(
    client, engineer, viewer, django_capture_on_commit_callbacks
):
    (pk,) = stored(event())
    RawEvent.objects.update(state="failed", error="ValueError: x")
    client.force_login(viewer)
    assert client.post("/ingestion/replay", {"event_id": pk}).status_code == 403
    client.force_login(engineer)
    assert "Replay" in client.get("/ingestion/").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/ingestion/replay", {"event_id": pk})
    assert response.status_code == 302
    assert RawEvent.objects.get().state == "done"


def test_the_nav_links_to_the_status_page(client, viewer):
    client.force_login(viewer)
    assert 'href="/ingestion/"' in client.get("/ingestion/").content.decode()


# -- functions other apps call ----------------------------------------------------------


def test_ingest_event_dicts_stores_normalises_and_rejects():
    report = actions.ingest_event_dicts([event(1), {"eventTime": "x"}, event(1)], source="sql")
    assert (report.stored, report.duplicates, report.processed) == (1, 0, 1)
    assert [(r.index, r.field) for r in report.rejected] == [(1, "run")]
    assert RawEvent.objects.get().source == "sql"


def test_bulk_load_gives_the_same_graph_as_one_event_at_a_time():
    events = all_fixture_events()
    for e in events:
        actions.ingest_event_dicts([e], inline=True)
    one_by_one = snapshot()
    RawEvent.objects.all().delete()
    from catalog.models import Namespace

    Namespace.objects.all().delete()
    report = actions.bulk_load(events, batch_size=7)
    assert report.processed == len(events)
    in_bulk = snapshot()
    for key in one_by_one:
        assert in_bulk[key] == one_by_one[key], key


# -- commands ---------------------------------------------------------------------------


def call(*args):
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_ingest_events_loads_json_ndjson_and_gzip(tmp_path):
    gz = tmp_path / "dbt.ndjson.gz"
    gz.write_bytes(gzip.compress((FIXTURES / "dbt_jaffle_shop.ndjson").read_bytes()))
    out, _ = call(
        "ingest_events",
        str(FIXTURES / "airflow_shop_daily.json"),
        str(FIXTURES / "spark_orders_etl.ndjson"),
        str(gz),
        "--no-progress",
    )
    assert "15 stored, 0 already there, 15 normalised, 0 failed, 0 skipped" in out
    assert RawEvent.objects.filter(state="done").count() == 15


def test_ingest_events_is_resumable(tmp_path):
    path = FIXTURES / "dbt_jaffle_shop.ndjson"
    call("ingest_events", str(path), "--no-progress")
    # As if interrupted after storing: put some back to pending.
    RawEvent.objects.filter(pk__in=RawEvent.objects.values("pk")[:2]).update(state="pending")
    out, _ = call("ingest_events", str(path), "--no-progress")
    assert "0 stored, 6 already there, 2 normalised" in out
    assert RawEvent.objects.filter(state="done").count() == 6


def test_ingest_events_skips_bad_lines_and_names_them(tmp_path):
    path = tmp_path / "mixed.ndjson"
    no_run_id = {"eventTime": at(1), "run": {}, "job": {"namespace": "a", "name": "b"}}
    lines = [json.dumps(event(1)), "{broken", json.dumps(no_run_id), ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    out, err = call("ingest_events", str(path), "--no-progress")
    assert "1 stored" in out and "2 skipped" in out
    assert f"{path}:2: not JSON" in err
    assert f"{path}:3: run.runId" in err


def test_ingest_events_can_leave_work_to_the_workers(tmp_path, django_capture_on_commit_callbacks):
    path = str(FIXTURES / "spark_orders_etl.ndjson")
    with (
        mock.patch("ingest.actions.enqueue_processing") as enqueue,
        django_capture_on_commit_callbacks(execute=True),
    ):
        out, _ = call("ingest_events", path, "--engine", "celery")
    assert "3 stored" in out
    assert enqueue.call_count == 1
    assert set(RawEvent.objects.values_list("state", flat=True)) == {"pending"}


def test_ingest_events_refuses_missing_files():
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="No such file"):
        call("ingest_events", "/nowhere.json")


def test_replay_events_command_normalises_failed_events():
    stored(event())
    RawEvent.objects.update(state="failed", error="x")
    out, _ = call("replay_events")
    assert "1 normalised, 0 failed again" in out
    assert RawEvent.objects.get().state == "done"


def test_bulk_load_can_skip_the_graph_change_log_for_backfills():
    from graph import revision

    before = revision.current()
    report = actions.bulk_load(all_fixture_events(), quiet_graph=True)
    assert report.processed == report.stored > 0
    assert revision.current() != before
    assert TableEdge.objects.exists()


def test_the_background_publisher_sends_every_id_from_many_threads():
    import threading

    sent: list[list[int]] = []

    def send(ids: list[int]) -> bool:
        sent.append(ids)
        return True

    publisher = actions.Publisher(send)

    def submit(start: int) -> None:
        for i in range(start, start + 100):
            publisher.submit([i])

    threads = [threading.Thread(target=submit, args=(n * 100,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert publisher.flush()
    assert sorted(i for ids in sent for i in ids) == list(range(400))
    assert len(sent) < 400  # ids that gathered while a send was under way share it


def test_the_background_publisher_publishes_at_most_once_per_interval(settings):
    settings.INGEST_PUBLISH_INTERVAL_MS = 300
    sent: list[tuple[float, list[int]]] = []

    def send(ids: list[int]) -> bool:
        sent.append((time.monotonic(), ids))
        return True

    publisher = actions.Publisher(send)
    started = time.monotonic()
    publisher.submit([1])
    assert publisher.flush()
    publisher.submit([2])
    publisher.submit([3])
    assert publisher.flush()
    assert [ids for _, ids in sent] == [[1], [2, 3]]
    assert sent[0][0] - started < 0.25  # after a quiet spell an event goes at once
    assert sent[1][0] - sent[0][0] >= 0.3  # under load, ids wait and share a task


def test_the_background_publisher_survives_a_failing_send():
    calls: list[list[int]] = []

    def send(ids: list[int]) -> bool:
        calls.append(ids)
        if len(calls) == 1:
            raise ConnectionError("broker gone")
        return True

    publisher = actions.Publisher(send)
    publisher.submit([1])
    assert publisher.flush()
    publisher.submit([2])
    assert publisher.flush()
    assert calls == [[1], [2]]


def test_with_a_real_broker_the_request_hands_ids_to_the_publisher(
    api, producer, settings, django_capture_on_commit_callbacks
):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    client = api(producer)
    with (
        mock.patch.object(actions._publisher, "submit") as submit,
        django_capture_on_commit_callbacks(execute=True),
    ):
        assert client.post("/api/v1/lineage", event(1), format="json").status_code == 201
    (ids,) = submit.call_args.args
    assert ids == list(RawEvent.objects.values_list("pk", flat=True))


def test_ingest_events_loads_an_archive_by_event_time(tmp_path, django_capture_on_commit_callbacks):
    newest_first = [event(n) for n in (6, 5, 4)]
    older = [event(n) for n in (3, 1, 2)]
    (tmp_path / "a.ndjson").write_text("\n".join(json.dumps(e) for e in newest_first))
    (tmp_path / "b.json").write_text(json.dumps(older))
    paths = [str(tmp_path / "a.ndjson"), str(tmp_path / "b.json")]

    def queued(*options: str) -> list[str]:
        """The eventTime of each event the load stored, in the order stored."""
        RawEvent.objects.all().delete()
        with (
            mock.patch("ingest.actions.enqueue_processing"),
            django_capture_on_commit_callbacks(execute=True),
        ):
            call("ingest_events", *paths, "--engine", "celery", *options)
        bodies = RawEvent.objects.order_by("pk").values_list("body", flat=True)
        return [json.loads(body)["eventTime"] for body in bodies]

    assert queued("--batch-size", "2") == [at(1, n) for n in (1, 2, 3, 4, 5, 6)]
    assert queued("--order", "file") == [at(1, n) for n in (6, 5, 4, 3, 1, 2)]


def test_the_archive_sort_spills_runs_and_merges_them_by_instant(tmp_path):
    from ingest.files import FileItem, in_event_time_order

    times = [
        "2026-03-01T09:00:00Z",
        "2026-03-01T10:00:00+02:00",  # 08:00 UTC: the earliest
        "not a time",
        "2026-03-01T09:00:00.000Z",  # ties keep the order read
        "2026-03-01T11:00:00",  # no offset: UTC
        "2026-03-01T08:30:00Z",
    ]
    items = [FileItem("f", n, value={"eventTime": t}) for n, t in enumerate(times, 1)]
    items.insert(3, FileItem("f", 99, error="not JSON"))
    out = list(in_event_time_order(items, chunk=2, spill=tmp_path))
    assert [(i.line, i.error) for i in out] == [
        (3, ""),
        (99, "not JSON"),
        (2, ""),
        (6, ""),
        (1, ""),
        (4, ""),
        (5, ""),
    ]
    assert out[2].value == {"eventTime": times[1]}
    assert list(tmp_path.iterdir()) == []  # the spilled runs are gone
