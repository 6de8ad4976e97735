"""Large answers kept for every server process of a host (graph/responses.py)."""

from __future__ import annotations

import itertools
import logging
import os
import time
from urllib.parse import urlencode

import numpy as np
import pytest

from graph import responses
from graph import revision as rev
from tests.graph_builders import LineageBuilder


def url(path: str, **params: object) -> str:
    return f"/api/v1/{path}?{urlencode(params)}"


@pytest.fixture(autouse=True)
def _every_answer_is_large(monkeypatch):
    monkeypatch.setattr(responses, "MIN_NODES", 1)
    assert responses.shared.flush()
    responses.cache.clear()


@pytest.fixture
def chain():
    """raw.orders → clean → clean.orders → report → mart.daily."""
    g = LineageBuilder()
    for name in ("raw.orders", "clean.orders", "mart.daily", "elsewhere.a", "elsewhere.b"):
        g.dataset(name, fields=("id", "amount"))
    g.job("clean", reads=["raw.orders"], writes=["clean.orders"])
    g.job("report", reads=["clean.orders"], writes=["mart.daily"])
    return g


def downstream(chain: LineageBuilder) -> str:
    return url("lineage", nodeId=chain.id("raw.orders"), depth=5, direction="downstream")


def files() -> list[str]:
    assert responses.shared.flush()
    return sorted(p.name for p in responses.shared.root().glob("*/*.resp"))


def test_it_serves_a_body_another_process_kept(api, viewer, chain):
    client = api(viewer)
    first = client.get(downstream(chain))
    assert len(files()) == 1
    # Another process of the host has the file but not the body in memory.
    assert responses.shared.flush()
    responses.cache.clear()
    hits = responses.shared.hits
    again = client.get(downstream(chain))
    assert again.content == first.content
    assert responses.shared.hits == hits + 1
    # Once read, the body is this process's too.
    assert client.get(downstream(chain)).content == first.content
    assert responses.shared.hits == hits + 1


def test_it_keeps_impact_answers_too(api, viewer, chain):
    client = api(viewer)
    path = url("lineage/impact", nodeId=chain.id("raw.orders"))
    first = client.get(path).json()
    assert responses.shared.flush()
    responses.cache.clear()
    hits = responses.shared.hits
    assert client.get(path).json() == first
    assert responses.shared.hits == hits + 1


# Committed writes, each in its own transaction, as in production.
@pytest.mark.django_db(transaction=True)
def test_it_drops_a_shared_body_that_a_change_touched(api, viewer, chain):
    client = api(viewer)
    client.get(downstream(chain))
    # A change away from the answer: the file still serves another process.
    chain.job("unrelated", reads=["elsewhere.a"], writes=["elsewhere.b"])
    assert responses.shared.flush()
    responses.cache.clear()
    hits, shared_hits = responses.cache.hits, responses.shared.hits
    client.get(downstream(chain))
    assert responses.cache.hits == hits + 1 and responses.shared.hits == shared_hits + 1
    # An edge from a node the answer reached: the file is not served, and is replaced.
    chain.dataset("mart.weekly")
    chain.job("weekly", reads=["mart.daily"], writes=["mart.weekly"])
    assert responses.shared.flush()
    responses.cache.clear()
    nodes = {n["id"] for n in client.get(downstream(chain)).json()["graph"]}
    assert chain.id("mart.weekly") in nodes
    # The file now holds the new body: another process is served it as it is.
    assert responses.shared.flush()
    responses.cache.clear()
    hits = responses.shared.hits
    nodes = {n["id"] for n in client.get(downstream(chain)).json()["graph"]}
    assert chain.id("mart.weekly") in nodes
    assert responses.shared.hits == hits + 1 and len(files()) == 1


def test_it_ignores_a_damaged_file_and_writes_it_again(api, viewer, chain, caplog):
    client = api(viewer)
    first = client.get(downstream(chain)).content
    assert responses.shared.flush()
    (path,) = responses.shared.root().glob("*/*.resp")
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.truncate(size - 10)
    responses.cache.clear()
    with caplog.at_level(logging.WARNING, logger="graph.responses"):
        assert client.get(downstream(chain)).content == first
    assert "wrong length" in caplog.text
    assert responses.shared.flush()
    assert path.stat().st_size == size


def test_it_reads_no_file_written_by_another_release(api, viewer, chain, monkeypatch):
    client = api(viewer)
    client.get(downstream(chain))
    monkeypatch.setattr(responses, "code_digest", lambda: "another-release")
    assert responses.shared.flush()
    responses.cache.clear()
    hits = responses.shared.hits
    client.get(downstream(chain))
    assert responses.shared.hits == hits
    assert len(files()) == 2


def test_it_writes_no_files_when_turned_off(api, viewer, chain, settings):
    settings.GRAPH_SHARED_RESPONSES = False
    client = api(viewer)
    first = client.get(downstream(chain)).content
    assert files() == []
    # This process still keeps the body.
    hits = responses.cache.hits
    assert client.get(downstream(chain)).content == first
    assert responses.cache.hits == hits + 1


def test_it_removes_the_least_recently_used_files_past_its_size(settings):
    settings.GRAPH_SHARED_RESPONSE_MB = 1
    store = responses.SharedStore()
    body = b"x" * 300_000
    reached = np.arange(3, dtype=np.int64)
    kept = responses.Cached(body, rev.Revision(1, "t"), reached, reached)
    for n in range(3):
        store.save(("k", n), kept)
        store.flush()
        os.utime(store.path(("k", n))[0], (1_000 + n, 1_000 + n))
    # The oldest file was just used: it outlives the second.
    assert store.load(("k", 0)) is not None
    for n in range(3, 5):
        store.save(("k", n), kept)
        store.flush()
    names = {store.path(("k", n))[0].name: n for n in range(5)}
    left = sorted(names[name] for name in files())
    total = sum(p.stat().st_size for p in store.root().glob("*/*.resp"))
    assert total <= 2**20
    assert left == [0, 3, 4]


def test_it_tells_one_key_from_another_in_the_same_file(settings):
    store = responses.SharedStore()
    reached = np.arange(2, dtype=np.int64)
    store.save(("k", 1), responses.Cached(b"{}", rev.Revision(1, "t"), reached, reached))
    store.flush()
    # Two keys whose files collide: the file names the key it holds.
    store.path(("k", 1))[0].rename(store.path(("k", 2))[0])
    assert store.load(("k", 2)) is None
    assert store.load(("k", 1)) is None


def test_it_writes_files_in_the_background():
    reached = np.arange(2, dtype=np.int64)
    entry = responses.Cached(b"{}", rev.Revision(1, "t"), reached, reached)
    for n in range(20):
        responses.shared.save(("k", n), entry)
    assert responses.shared.flush()
    assert len(files()) == 20
    assert responses.shared.load(("k", 7)) is not None


def test_its_writer_outlives_a_file_it_cannot_write(caplog):
    reached = np.arange(2, dtype=np.int64)
    entry = responses.Cached(b"{}", rev.Revision(1, "t"), reached, reached)
    responses.shared.root().parent.mkdir(parents=True, exist_ok=True)
    responses.shared.root().write_text("not a directory")
    with caplog.at_level(logging.WARNING, logger="graph.responses"):
        responses.shared.save(("k", 1), entry)
        assert responses.shared.flush()
    assert "could not keep a response" in caplog.text
    responses.shared.root().unlink()
    responses.shared.save(("k", 2), entry)
    assert responses.shared.flush()
    assert responses.shared.load(("k", 2)) is not None


_settled = itertools.count(int(time.time()) - 3600)


def settle(folder) -> None:
    """Date ``folder``'s last change an hour back (a new second each time), as if nothing
    had touched it since."""
    moment = next(_settled)
    os.utime(folder, (moment, moment))


def test_it_opens_no_file_its_settled_directory_does_not_list(tmp_path):
    store = responses.SharedStore()
    folder = tmp_path / "answers"
    assert not store.may_hold(folder, "a.resp")  # no directory yet
    folder.mkdir()
    settle(folder)
    assert not store.may_hold(folder, "a.resp")
    kept = store.listing
    assert kept is not None and kept[2] == frozenset()
    # Another process writes a file: the directory has just changed, so its files are
    # looked for, and it is not listed again until it has settled.
    (folder / "a.resp").write_bytes(b"")
    assert store.may_hold(folder, "a.resp") and store.may_hold(folder, "b.resp")
    assert store.listing is kept
    settle(folder)
    assert store.may_hold(folder, "a.resp") and not store.may_hold(folder, "b.resp")
    assert store.listing is not kept and store.listing[2] == {"a.resp"}
    # A directory it cannot read is left for opening the file to report.
    (tmp_path / "file").write_text("not a directory")
    assert store.may_hold(tmp_path / "file" / "x", "a.resp")


def test_it_finds_a_body_kept_after_its_listing_of_the_directory():
    reached = np.arange(2, dtype=np.int64)
    entry = responses.Cached(b"{}", rev.Revision(1, "t"), reached, reached)
    other = responses.SharedStore()
    other.save(("k", 1), entry)
    assert other.flush()
    folder = responses.shared.directory()
    settle(folder)
    assert responses.shared.load(("k", 2)) is None
    assert responses.shared.listing is not None
    misses = responses.shared.misses
    assert responses.shared.load(("k", 3)) is None  # told by the listing alone
    assert responses.shared.misses == misses + 1
    other.save(("k", 2), entry)
    assert other.flush()
    assert responses.shared.load(("k", 2)) is not None
    settle(folder)
    assert responses.shared.load(("k", 2)) is not None
