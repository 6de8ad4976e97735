"""The cycle collector of a serving process: run between requests, never walking what the
process keeps again, and never keeping garbage for good."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from django.core.signals import request_finished
from django.test import Client

from lineage_site import collector


class Node:
    """A container object the cycle collector tracks."""

    def __init__(self) -> None:
        self.other: Node | None = None


def tracked(obj: object) -> bool:
    """Whether a collection would walk ``obj`` (frozen objects are in no generation)."""
    return any(o is obj for o in gc.get_objects())


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(collector, "INTERVAL", 3)
    monkeypatch.setattr(collector, "THAW_EVERY", 9)
    monkeypatch.setattr(collector, "_served", iter(range(1, 1000)))
    try:
        yield
    finally:
        gc.unfreeze()


def test_what_outlives_an_interval_is_frozen_and_walked_no_more(served):
    kept = Node()
    collector.after_response()
    collector.after_response()
    assert tracked(kept)
    collector.after_response()  # the third request: settle
    assert not tracked(kept)
    assert gc.get_freeze_count() > 0


def test_cycles_that_died_before_an_interval_are_collected_not_frozen(served):
    cycle = Node()
    cycle.other = cycle
    alive = weakref.ref(cycle)
    del cycle
    for _ in range(3):
        collector.after_response()
    assert alive() is None


def test_cycles_frozen_while_in_use_are_collected_at_the_next_thaw(served):
    cycle = Node()
    cycle.other = cycle
    alive = weakref.ref(cycle)
    for _ in range(3):
        collector.after_response()
    del cycle  # garbage now, but frozen: plain collections leave it
    for _ in range(3):
        collector.after_response()
    gc.collect()
    assert alive() is not None
    for _ in range(3):
        collector.after_response()  # the ninth request: thaw, collect, freeze
    assert alive() is None


@pytest.mark.django_db
def test_a_served_request_counts_once_it_has_been_closed(served, monkeypatch):
    counted: list[int] = []
    monkeypatch.setattr(collector, "settle", lambda thaw=False: counted.append(thaw))
    request_finished.connect(collector.after_response, dispatch_uid="test-collector")
    try:
        client = Client()
        for _ in range(3):
            assert client.get("/api/v1/namespaces").status_code == 401
    finally:
        request_finished.disconnect(dispatch_uid="test-collector")
    assert counted == [False]
