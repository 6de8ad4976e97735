"""The graph engine on real PostgreSQL: revision triggers across connections (bumped at
commit, once per transaction), bulk loads, packed snapshot loading, generate_lineage."""

from __future__ import annotations

import threading

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction

from catalog.models import Dataset
from graph import queries, revision, snapshot
from graph.models import ColumnEdge, Direction, GraphChange, GraphRevisionLog, TableEdge
from graph.nodeids import resolve_node_id
from graph.snapshot import OPEN, to_us
from tests.graph_builders import T1, T2, LineageBuilder

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def names(graph) -> set[str]:
    return {n.name for n in graph.nodes}


def in_other_connection(work, *, before_commit=None):
    """Run ``work`` in a transaction on another connection; call ``before_commit`` while it
    is still open."""
    errors: list[BaseException] = []
    opened, go_on = threading.Event(), threading.Event()

    def run() -> None:
        try:
            with transaction.atomic():
                work()
                opened.set()
                go_on.wait(30)
        except BaseException as exc:
            errors.append(exc)
            opened.set()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    opened.wait(30)
    if before_commit is not None:
        before_commit()
    go_on.set()
    thread.join(30)
    if errors:
        raise errors[0]


def test_a_commit_elsewhere_is_seen_by_the_next_read_and_not_before():
    g = LineageBuilder()
    g.chain("a", "b")
    g.dataset("c")
    root = resolve_node_id(g.id("a"))
    assert names(queries.lineage(root, depth=5, direction="downstream")) == {"a", "job_0", "b"}
    seen_before: list[set[str]] = []

    def write() -> None:
        g.job("bc", reads=["b"], writes=["c"])

    def read_while_open() -> None:
        seen_before.append(names(queries.lineage(root, depth=5, direction="downstream")))

    in_other_connection(write, before_commit=read_while_open)
    assert seen_before == [{"a", "job_0", "b"}]
    after = queries.lineage(root, depth=5, direction="downstream")
    assert names(after) == {"a", "job_0", "b", "bc", "c"}


def test_the_revision_moves_once_per_transaction_at_commit():
    g = LineageBuilder()
    g.datasets("a", "b")
    start = revision.current()
    logged = GraphRevisionLog.objects.count()
    with transaction.atomic():
        g.job("ab", reads=["a"], writes=["b"])
        g.close("ab", "a", Direction.INPUT, T2)
    now = revision.current()
    assert now.value == start.value + 1 and now.token != start.token
    assert GraphRevisionLog.objects.count() == logged + 1
    xid = GraphRevisionLog.objects.get(revision=now.value).xid
    assert set(GraphChange.objects.filter(xid=xid).values_list("kind", flat=True)) >= {"t", "j"}


def test_a_bulk_load_skips_the_log_and_records_one_reset():
    g = LineageBuilder()
    g.datasets("a", "b")
    g.job("ab")
    before = GraphChange.objects.filter(kind="t").count()
    with revision.bulk_load():
        TableEdge.objects.bulk_create(
            [
                TableEdge(job=g.jobs["ab"], dataset=g.ds["a"], direction="in", valid_from=T1),
                TableEdge(job=g.jobs["ab"], dataset=g.ds["b"], direction="out", valid_from=T1),
            ]
        )
    assert GraphChange.objects.filter(kind="t").count() == before
    assert GraphChange.objects.filter(kind="*").exists()
    root = resolve_node_id(g.id("a"))
    assert names(queries.lineage(root, depth=2, direction="downstream")) == {"a", "ab", "b"}


def test_snapshots_load_packed_rows_exactly():
    g = LineageBuilder()
    g.dataset("s", fields=("k", "v"))
    g.dataset("t", fields=("k",))
    g.job("copy", reads=["s"], writes=["t"], columns={"t.k": ["s.k", "s.v"]})
    g.close("copy", "s", Direction.INPUT, T2)
    ColumnEdge.objects.filter(source_field=g.field("s.v")).update(valid_to=T2)
    for kind, model in ((snapshot.TABLE, TableEdge), (snapshot.COLUMN, ColumnEdge)):
        snap = snapshot.build(kind, revision.current())
        rows = sorted(model.objects.values_list("pk", "valid_from", "valid_to"))
        assert snap.base.cols["id"].tolist() == [pk for pk, _, _ in rows]
        assert snap.base.cols["vf"].tolist() == [to_us(vf) for _, vf, _ in rows]
        assert snap.base.cols["vt"].tolist() == [
            OPEN if vt is None else to_us(vt) for *_, vt in rows
        ]


def test_generate_lineage_loads_a_graph_the_queries_can_walk():
    call_command("generate_lineage", datasets=300, no_progress=True, seed=7)
    assert Dataset.objects.count() == 300
    assert TableEdge.objects.filter(valid_to__isnull=False).exists()
    snap = snapshot.table()
    assert snap.edge_count == TableEdge.objects.count()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT dataset_id FROM graph_tableedge WHERE direction = 'in' "
            "GROUP BY dataset_id ORDER BY count(*) DESC LIMIT 1"
        )
        hub = cursor.fetchone()[0]
    ds = Dataset.objects.select_related("namespace").get(pk=hub)
    graph = queries.lineage(resolve_node_id(ds.node_id), depth=3, direction="downstream")
    assert len(graph.nodes) > 3
    impact = queries.impact(resolve_node_id(ds.node_id))
    assert impact.owners
