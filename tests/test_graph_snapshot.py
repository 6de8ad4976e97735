"""The in-memory snapshot: validity filters, CSR gathers, refresh by delta from the
revision change log, full rebuilds when the log cannot say, and the node cache."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import transaction

from catalog import actions
from graph import nodedata, queries, revision, snapshot
from graph.models import ColumnEdge, Direction, TableEdge
from graph.resolve import resolve_node_id
from graph.snapshot import OPEN, Adjacency, TimeFilter, to_us
from tests.graph_builders import T0, T1, T2, T3, LineageBuilder


def test_time_filters_follow_half_open_intervals():
    vf = np.asarray([to_us(T0), to_us(T0), to_us(T2)])
    vt = np.asarray([to_us(T2), OPEN, OPEN])
    assert TimeFilter.at(None).mask(vf, vt).tolist() == [False, True, True]
    assert TimeFilter.at(T1).mask(vf, vt).tolist() == [True, True, False]
    assert TimeFilter.at(T2).mask(vf, vt).tolist() == [False, True, True]
    assert TimeFilter.window(T1).mask(vf, vt).tolist() == [True, True, True]
    assert TimeFilter.window(T3, T3).mask(vf, vt).tolist() == [False, True, True]


def test_adjacency_gathers_every_node_of_a_frontier():
    keys = np.asarray([2, 0, 2, -1, 1, 2], dtype=np.int64)
    for size in (3, None):
        adj = Adjacency(keys, size)
        assert sorted(adj.positions(np.asarray([2])).tolist()) == [0, 2, 5]
        assert sorted(adj.positions(np.asarray([0, 2, 7])).tolist()) == [0, 1, 2, 5]
        assert adj.positions(np.asarray([], dtype=np.int64)).size == 0


pytestmark = pytest.mark.django_db


def names(graph) -> set[str]:
    return {n.name for n in graph.nodes}


@pytest.fixture
def chain():
    g = LineageBuilder()
    g.chain("a", "b", "c")
    return g


def down(g, name, **kw):
    return queries.lineage(resolve_node_id(g.id(name)), depth=5, direction="downstream", **kw)


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """The kinds of snapshot built in full from here on, in order."""
    built: list[str] = []
    build = snapshot.build

    def counted(kind, current):
        built.append(kind.name)
        return build(kind, current)

    monkeypatch.setattr(snapshot, "build", counted)
    return built


def test_it_refreshes_by_delta_when_edges_change(chain, builds):
    down(chain, "a")
    builds.clear()
    chain.dataset("d")
    chain.job("cd", reads=["c"], writes=["d"])
    assert names(down(chain, "a")) == {"a", "job_0", "b", "job_1", "c", "cd", "d"}
    assert builds == []
    # The two new edges sit in the overlay (inside one test transaction on PostgreSQL the
    # whole transaction's edges are re-read: re-applying a change is harmless).
    assert snapshot.table().overlay.size >= 2


def test_closed_and_deleted_edges_are_masked_in_the_base(chain):
    down(chain, "a")
    chain.close("job_1", "b", Direction.INPUT, T2)
    assert names(down(chain, "a")) == {"a", "job_0", "b"}
    assert names(down(chain, "a", as_of=T1)) == {"a", "job_0", "b", "job_1", "c"}
    TableEdge.objects.filter(job=chain.jobs["job_0"]).delete()
    assert names(down(chain, "a", as_of=T1)) == {"a"}


def test_a_rolled_back_change_is_never_served(chain):
    down(chain, "a")
    chain.dataset("x")
    with pytest.raises(RuntimeError), transaction.atomic():
        chain.job("cx", reads=["c"], writes=["x"])
        assert "x" in names(down(chain, "c"))
        raise RuntimeError("roll back")
    assert names(down(chain, "c")) == {"c"}


def test_a_reset_rebuilds_in_full(chain, builds):
    down(chain, "a")
    builds.clear()
    with transaction.atomic():
        revision.mark_reset()
    down(chain, "a")
    assert builds == ["table"]


def test_column_snapshot_follows_column_edge_changes():
    g = LineageBuilder()
    g.dataset("s", fields=("k",))
    g.dataset("t", fields=("k",))
    g.job("copy", reads=["s"], writes=["t"], columns={"t.k": ["s.k"]})
    root = resolve_node_id(g.id("s.k"))
    assert len(queries.column_lineage(root, depth=3, with_downstream=True).nodes) == 2
    ColumnEdge.objects.update(valid_to=T2)
    assert len(queries.column_lineage(root, depth=3, with_downstream=True).nodes) == 1
    assert len(queries.column_lineage(root, depth=3, with_downstream=True, as_of=T1).nodes) == 2


def test_a_large_overlay_is_folded_into_a_new_base(chain, monkeypatch, settings):
    settings.GRAPH_BACKGROUND_REBUILD = False
    monkeypatch.setattr(snapshot, "OVERLAY_LIMIT_MIN", 1)
    down(chain, "a")
    chain.dataset("d")
    chain.job("cd", reads=["c"], writes=["d"])
    # Over the limit: answered correctly from base + overlay, or rebuilt in full.
    assert "d" in names(down(chain, "a"))


def test_the_node_cache_drops_datasets_that_changed(chain, steward):
    pk = chain.ds["b"].pk
    first = nodedata.lineage_data([pk], [], None)[0][pk]
    assert b'"description":null' in first
    actions.update_dataset(
        chain.ds["b"], {"description": "Bronze orders"}, actions.Actor(user=steward)
    )
    assert b'"description":"Bronze orders"' in nodedata.lineage_data([pk], [], None)[0][pk]


def test_one_revision_read_per_pinned_block(chain, django_assert_max_num_queries):
    revision.current()
    # One read (on PostgreSQL in a test transaction, plus one to fire pending triggers).
    with revision.pinned(), django_assert_max_num_queries(2):
        first = revision.current()
        with revision.pinned():  # within another: that one
            second = revision.current()
    assert first == second


def test_warming_builds_both_snapshots_before_any_request(chain):
    snapshot.reset()
    assert snapshot.warm() is True
    assert set(snapshot.held_revisions()) == {"table", "column"}
    assert snapshot.table().edge_count >= 4


def test_warming_without_a_usable_database_is_logged_not_raised(monkeypatch, caplog):
    from django.db import ProgrammingError

    def broken() -> None:
        raise ProgrammingError('relation "graph_tableedge" does not exist')

    monkeypatch.setattr(snapshot, "table", broken)
    assert snapshot.warm() is False
    assert "not built at start" in caplog.text
