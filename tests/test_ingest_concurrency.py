"""Workers racing on the same jobs and datasets: no deadlock, no duplicate, the same result."""

from __future__ import annotations

import random
import threading

import pytest
from django.db import connection

from catalog.models import Namespace
from graph.models import Run, TableEdge
from ingest import actions
from ingest.events import parse_event
from ingest.models import RawEvent
from tests.ingest_builders import at, columns, dataset, drop, run_event, run_id, schema
from tests.test_ingest_properties import snapshot

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def contended_events() -> list[dict]:
    """Runs of four jobs over the same few datasets (both directions), plus drops."""
    events = []
    n = 0
    for day in range(1, 9):
        for job in range(4):
            n += 1
            ins = [dataset(f"shared.t{(job + day) % 3}", schema=schema("id", "v")), dataset("hub")]
            out = dataset(
                f"shared.t{(job + 1) % 3}",
                schema=schema("id", "v"),
                columnLineage=columns({"id": [("hub", "id")]}),
            )
            events.append(run_event("START", run_id(n), at(day, job), job=f"j{job}", inputs=ins))
            events.append(
                run_event(
                    "COMPLETE",
                    run_id(n),
                    at(day, job, 30),
                    job=f"j{job}",
                    inputs=ins,
                    outputs=[out],
                )
            )
        if day % 3 == 0:
            events.append(drop(f"shared.t{day % 3}", at(day, 23)))
    return events


def test_workers_on_the_same_jobs_and_datasets_neither_deadlock_nor_duplicate():
    events = contended_events()
    stored = actions.store_events([parse_event(e) for e in events], "test", enqueue=False)
    ids = sorted(stored.stored.values())
    random.Random(3).shuffle(ids)
    errors: list[BaseException] = []
    shares = [ids[i::4] for i in range(4)]

    def work(share: list[int]) -> None:
        try:
            for start in range(0, len(share), 5):
                actions.process_events(share[start : start + 5])
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(share,)) for share in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors
    assert set(RawEvent.objects.values_list("state", flat=True)) == {"done"}
    assert Run.objects.count() == 32
    raced = snapshot()

    RawEvent.objects.all().delete()
    Namespace.objects.all().delete()
    actions.bulk_load(events, batch_size=1000)
    assert TableEdge.objects.filter(valid_to__isnull=True).count() > 0
    calm = snapshot()
    for key in calm:
        assert raced[key] == calm[key], key
