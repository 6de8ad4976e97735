"""A real worker on PostgreSQL + Redis loses nothing: SIGKILL mid-stream, Redis down and back.

The test posts a few thousand events through the API while a real
``celery -A lineage_site worker`` (with its beat, for the sweep) normalises
them; it kills the worker with SIGKILL half-way, shuts Redis down (losing the
queued tasks) and brings both back. Afterwards every event is done once and
the graph equals the one a clean in-process run of the same events builds.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import pytest
from django.db import connection
from django.db.models import Count

from catalog.models import Namespace
from ingest import actions
from ingest.events import parse_event
from ingest.models import RawEvent
from tests.conftest import REDIS_URL
from tests.ingest_builders import columns, dataset, drop, run_event, schema
from tests.test_ingest_properties import snapshot

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
REDIS_DB = 11  # kept apart from anything else using this Redis


def redis_url() -> str:
    parts = urlparse(REDIS_URL)
    return urlunparse(parts._replace(path=f"/{REDIS_DB}"))


def redis_port() -> str:
    return str(urlparse(REDIS_URL).port or 6379)


def redis_up() -> bool:
    done = subprocess.run(
        ["redis-cli", "-p", redis_port(), "ping"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() == "PONG"


def start_redis() -> None:
    if redis_up():
        return
    subprocess.run(
        [
            "redis-server",
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "--port",
            redis_port(),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        check=True,
        capture_output=True,
    )
    for _ in range(50):
        if redis_up():
            return
        time.sleep(0.1)
    raise RuntimeError("Redis did not come back")


def stop_redis() -> None:
    subprocess.run(
        ["redis-cli", "-p", redis_port(), "shutdown", "nosave"], capture_output=True, check=False
    )
    for _ in range(50):
        if not redis_up():
            return
        time.sleep(0.1)


EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def history(seed: int = 7, jobs: int = 25, days: int = 45) -> list[dict[str, Any]]:
    """A few thousand events: jobs that run daily, change inputs now and then; drops."""
    rnd = random.Random(seed)
    events: list[dict[str, Any]] = []
    sources = [f"raw.t{i}" for i in range(20)]
    n = 0
    for day in range(1, days + 1):
        for j in range(jobs):
            n += 1
            run = f"00000000-0000-4000-9000-{n:012d}"
            picked = sorted(rnd.sample(sources, 2 if (day + j) % 5 else 3))
            ins = [dataset(s, schema=schema("id", "v")) for s in picked]
            mapping = {"id": [(picked[0], "id")], "v": [(p, "v") for p in picked[1:]]}
            out = dataset(f"dw.j{j}", schema=schema("id", "v"), columnLineage=columns(mapping))
            start = EPOCH + timedelta(days=day, hours=j // 10, minutes=j % 10 * 5)
            events.append(run_event("START", run, iso(start), job=f"job{j}", inputs=ins))
            events.append(
                run_event(
                    "COMPLETE",
                    run,
                    iso(start + timedelta(seconds=30)),
                    job=f"job{j}",
                    inputs=ins,
                    outputs=[out],
                )
            )
        if day % 6 == 0:
            events.append(drop(f"raw.t{day % 20}", iso(EPOCH + timedelta(days=day, hours=23))))
    # Producers retry and networks reorder: shuffle locally and repeat a few.
    for i in range(0, len(events) - 8, 8):
        window = events[i : i + 8]
        rnd.shuffle(window)
        events[i : i + 8] = window
    events.extend(rnd.sample(events, 50))
    return events


class Worker:
    """``celery -A lineage_site worker -B`` against the test database, in its own process group."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        db = connection.settings_dict
        env = {
            **os.environ,
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "CELERY_BROKER_URL": redis_url(),
            "INGEST_SWEEP_INTERVAL_SECONDS": "2",
            "INGEST_REQUEUE_AFTER_SECONDS": "3",
            "INGEST_STUCK_AFTER_SECONDS": "4",
            "INGEST_DRAIN_BATCH": "100",
            "LOG_LEVEL": "WARNING",
        }
        celery = str(Path(sys.executable).with_name("celery"))
        handle = self.log.open("ab")
        self.process = subprocess.Popen(
            [
                celery,
                "-A",
                "lineage_site",
                "worker",
                "-B",
                "--concurrency=2",
                "--loglevel=WARNING",
                "--without-gossip",
                "--without-mingle",
                "-s",
                str(self.log.with_suffix(".beat")),
            ],
            cwd=ROOT,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self) -> None:
        """SIGKILL the worker and its pool: no chance to finish or acknowledge anything."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None


@pytest.fixture
def broker(settings: Any) -> Iterator[str]:
    """Point this process's Celery at a dedicated Redis database, as a deployment would."""
    from lineage_site.celery import app

    start_redis()
    subprocess.run(["redis-cli", "-p", redis_port(), "-n", str(REDIS_DB), "flushdb"], check=True)
    saved = (app.conf.broker_url, app.conf.task_always_eager)
    settings.CELERY_TASK_ALWAYS_EAGER = False
    # Set before this process first publishes; kombu keeps pools by URL, so none is closed.
    app.conf.broker_url = redis_url()
    app.conf.task_always_eager = False
    actions._broker_down_until = 0.0
    try:
        yield redis_url()
    finally:
        start_redis()
        app.conf.broker_url, app.conf.task_always_eager = saved
        actions._broker_down_until = 0.0


def wait_until_all_done(expected: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = RawEvent.objects.filter(state="done").count()
        if done == expected:
            return
        time.sleep(0.5)
    states = dict(
        RawEvent.objects.values("state").annotate(n=Count("id")).values_list("state", "n")
    )
    raise AssertionError(f"not all events were processed in time: {done}/{expected} {states}")


def test_a_killed_worker_and_a_redis_outage_lose_nothing(api, producer, broker, tmp_path):
    events = history()
    unique = len({parse_event(e).fingerprint for e in events})
    assert 2000 < len(events) < 4000
    client = api(producer)
    worker = Worker(tmp_path / "worker.log")

    def post(part: list[dict[str, Any]]) -> None:
        for start in range(0, len(part), 40):
            chunk = part[start : start + 40]
            if start % 400 == 0:
                for one in chunk:  # some one by one, as most producers send them
                    assert client.post("/api/v1/lineage", one, format="json").status_code == 201
            else:
                response = client.post("/api/v1/lineage/batch", chunk, format="json")
                assert response.status_code == 201, response.content

    third = len(events) // 3
    t0 = time.monotonic()

    def lap(what: str) -> None:
        print(f"{time.monotonic() - t0:7.1f}s {what}", flush=True)

    try:
        worker.start()
        post(events[:third])
        lap("posted a third")
        time.sleep(2)  # let it get going, then kill it mid-batch
        worker.kill()
        post(events[third : 2 * third])
        stop_redis()  # queued tasks are lost with it
        post(events[2 * third :])  # still accepted: the outbox holds them
        lap("posted all")
        assert RawEvent.objects.count() == unique
        time.sleep(2)
        start_redis()
        worker.start()
        wait_until_all_done(unique, timeout=90)
        lap("all done")
    finally:
        worker.kill()
        start_redis()
    assert not RawEvent.objects.exclude(state="done").exists()
    after_chaos = snapshot()

    # A clean run of the same events, in order, in this process.
    RawEvent.objects.all().delete()
    Namespace.objects.all().delete()
    report = actions.bulk_load(events, batch_size=500)
    lap("clean run")
    assert report.processed == unique
    clean = snapshot()
    for key in clean:
        assert after_chaos[key] == clean[key], key
