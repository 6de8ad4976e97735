"""As of a past instant, every answer shows what was true then: what the app showed at
that moment, and what the catalog's own history says."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest

from ingest.events import parse_event
from ingest.normalizer import normalize
from tests.ingest_builders import at, dataset, run_event, run_id

pytestmark = pytest.mark.django_db

JOB = "job:spark:etl.orders"


def _latest_run(api, viewer, as_of: str | None = None) -> tuple[str, str]:
    params = {"nodeId": JOB, "depth": 1} | ({"asOf": as_of} if as_of else {})
    body = api(viewer).get(f"/api/v1/lineage?{urlencode(params)}").json()
    (node,) = [n for n in body["graph"] if n["id"] == JOB]
    run = node["data"]["latestRun"]
    return run["id"], run["state"]


def test_a_jobs_latest_run_as_of_an_instant_is_the_one_shown_then(api, viewer):
    # Two runs overlap: the first to start is the first to finish.
    reads, writes = [dataset("a")], [dataset("c")]
    events = [
        run_event("START", run_id(1), at(1, 1), inputs=reads),
        run_event("START", run_id(2), at(1, 2), inputs=reads),
        run_event("COMPLETE", run_id(1), at(1, 3), inputs=reads, outputs=writes),
        run_event("COMPLETE", run_id(2), at(1, 4), inputs=reads, outputs=writes),
    ]
    shown_then = {}
    seen_at = (at(1, 1, 30), at(1, 2, 30), at(1, 3, 30), at(1, 4, 30))
    for event, seen in zip(events, seen_at, strict=True):
        normalize([parse_event(event)])  # each arrives on time
        shown_then[seen] = _latest_run(api, viewer)
    assert shown_then[at(1, 3, 30)] == (run_id(1), "COMPLETED")
    assert {seen: _latest_run(api, viewer, seen) for seen in shown_then} == shown_then
