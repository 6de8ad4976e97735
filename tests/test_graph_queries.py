"""graph/queries.py on small known graphs: depth, direction, as-of, cycles, caps,
column lineage, impact, root cause, paths, diffs, orphans and sources."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from catalog.models import ChangeRecord, DatasetOwnership, Owner, PiiCategory, RetentionPolicy
from graph import queries, render
from graph.models import ColumnEdge, Direction, RunState, TransformationSubtype
from graph.resolve import resolve_node_id
from tests.graph_builders import T0, T1, T2, T3, LineageBuilder

pytestmark = pytest.mark.django_db


def node(g: LineageBuilder, name: str):
    return resolve_node_id(g.id(name))


def ids(graph) -> set[str]:
    return {n.node_id for n in graph.nodes}


def names(graph) -> set[str]:
    return {n.name for n in graph.nodes}


def shown(graph, node_id: str):
    return next((n for n in graph.nodes if n.node_id == node_id), None)


@pytest.fixture
def chain():
    """a → j0 → b → j1 → c → j2 → d → j3 → e"""
    g = LineageBuilder()
    g.chain("a", "b", "c", "d", "e")
    return g


def test_it_counts_depth_in_jobs_downstream(chain):
    graph = queries.lineage(node(chain, "a"), depth=2, direction="downstream")
    assert names(graph) == {"a", "job_0", "b", "job_1", "c"}
    dist = {n.name: n.distance for n in graph.nodes}
    assert dist == {"a": 0, "job_0": 1, "b": 1, "job_1": 2, "c": 2}
    assert {(e.origin, e.destination) for e in graph.edges} == {
        (chain.id("a"), chain.id("job:job_0")),
        (chain.id("job:job_0"), chain.id("b")),
        (chain.id("b"), chain.id("job:job_1")),
        (chain.id("job:job_1"), chain.id("c")),
    }


def test_it_walks_upstream_and_marks_sides(chain):
    graph = queries.lineage(node(chain, "c"), depth=1, direction="upstream")
    assert names(graph) == {"c", "job_1", "b"}
    graph = queries.lineage(node(chain, "c"), depth=1, direction="both")
    sides = {n.name: n.side for n in graph.nodes}
    assert sides == {
        "c": "root",
        "job_1": "upstream",
        "b": "upstream",
        "job_2": "downstream",
        "d": "downstream",
    }


def test_it_starts_from_a_job_with_its_inputs_and_outputs_at_distance_zero(chain):
    graph = queries.lineage(node(chain, "job:job_1"), depth=0, direction="both")
    assert names(graph) == {"job_1", "b", "c"}
    graph = queries.lineage(node(chain, "job:job_1"), depth=1, direction="downstream")
    assert names(graph) == {"job_1", "c", "job_2", "d"}


def test_both_is_not_an_undirected_neighbourhood():
    # a → j1 → hub ← j2 ← b: b is neither upstream nor downstream of a.
    g = LineageBuilder()
    g.datasets("a", "b", "hub", "mart")
    g.job("j1", reads=["a"], writes=["hub"])
    g.job("j2", reads=["b"], writes=["hub"])
    g.job("j3", reads=["hub"], writes=["mart"])
    graph = queries.lineage(node(g, "a"), depth=5, direction="both")
    assert names(graph) == {"a", "j1", "hub", "j3", "mart"}
    hub = shown(graph, g.id("hub"))
    assert hub is not None and hub.hidden_upstream == 1  # j2 is hidden


def test_an_edge_with_several_intervals_counts_once():
    # j1 read "a" twice in the past (overlapping intervals), stopped, and reads it again
    # now; "b" is a second reader of "a" that stays out of a depth-0 answer.
    g = LineageBuilder()
    g.datasets("a", "out", "b_out")
    g.job("j1", writes=["out"])
    g.job("j2", reads=["a"], writes=["b_out"])
    g.edge("j1", "a", Direction.INPUT, at=T0, until=T2)
    g.edge("j1", "a", Direction.INPUT, at=T1, until=T3)
    g.edge("j1", "a", Direction.INPUT, at=T3)
    for as_of in (None, T1 + timedelta(days=1)):
        graph = queries.lineage(node(g, "job:j1"), depth=0, direction="upstream", as_of=as_of)
        reads = [(e.origin, e.destination) for e in graph.edges]
        assert reads.count((g.id("a"), g.id("job:j1"))) == 1
        a = shown(graph, g.id("a"))
        assert a is not None and a.hidden_downstream == 1  # j2, once


def test_it_sees_the_graph_as_of_an_instant(chain):
    # job_0 read "a" until T2, then "x" from T2 on.
    chain.dataset("x")
    chain.close_read("job_0", "a", T2)
    chain.edge("job_0", "x", Direction.INPUT, at=T2)
    before = queries.lineage(node(chain, "b"), depth=1, direction="upstream", as_of=T1)
    after = queries.lineage(node(chain, "b"), depth=1, direction="upstream", as_of=T3)
    now = queries.lineage(node(chain, "b"), depth=1, direction="upstream")
    assert names(before) == {"b", "job_0", "a"}
    assert names(after) == {"b", "job_0", "x"} == names(now)
    # The instant the edge closed belongs to the new state: [valid_from, valid_to).
    at_close = queries.lineage(node(chain, "b"), depth=1, direction="upstream", as_of=T2)
    assert names(at_close) == {"b", "job_0", "x"}
    # Before anything existed there is only the root.
    empty = queries.lineage(node(chain, "b"), depth=3, as_of=T0 - timedelta(days=1))
    assert names(empty) == {"b"}


def test_cycles_are_safe():
    g = LineageBuilder()
    g.datasets("a", "b")
    g.job("ab", reads=["a"], writes=["b"])
    g.job("ba", reads=["b"], writes=["a"])
    graph = queries.lineage(node(g, "a"), depth=100, direction="both")
    assert names(graph) == {"a", "ab", "b", "ba"}
    assert {n.name: n.distance for n in graph.nodes}["b"] == 1


def test_it_caps_large_answers_at_the_nearest_nodes_and_counts_the_rest():
    g = LineageBuilder()
    g.dataset("hub")
    for i in range(30):
        g.dataset(f"out{i}")
        g.job(f"reader{i}", reads=["hub"], writes=[f"out{i}"])
    graph = queries.lineage(node(g, "hub"), depth=5, direction="downstream", max_nodes=40)
    assert graph.truncated
    assert len(graph.nodes) == 40
    # The 30 readers (distance 1) and the hub come before the outputs.
    assert sum(1 for n in graph.nodes if n.kind == "JOB") == 30
    assert graph.cut.datasets == 21 and graph.cut.jobs == 0
    full = queries.lineage(node(g, "hub"), depth=5, direction="downstream")
    assert not full.truncated and len(full.nodes) == 61


def test_it_answers_with_node_details_in_a_fixed_number_of_queries(
    chain, django_assert_max_num_queries
):
    """Traversal and the rendered answer, node data included, however many nodes."""
    for i in range(20):
        chain.dataset(f"wide{i}")
        chain.job(f"w{i}", reads=["a"], writes=[f"wide{i}"])
    queries.lineage(node(chain, "a"), depth=1)  # warm the snapshot
    root = node(chain, "a")
    with django_assert_max_num_queries(10):
        body = json.loads(render.lineage_json(queries.lineage(root, depth=5, direction="both")))
    assert len(body["graph"]) > 40
    dataset = next(n for n in body["graph"] if n["id"] == chain.id("wide3"))
    assert [f["name"] for f in dataset["data"]["fields"]] == ["id", "value"]


def test_it_sees_new_and_closed_edges_without_a_restart(chain):
    before = queries.lineage(node(chain, "e"), depth=1, direction="downstream")
    assert names(before) == {"e"}
    chain.dataset("f")
    chain.job("ef", reads=["e"], writes=["f"])
    after = queries.lineage(node(chain, "e"), depth=1, direction="downstream")
    assert names(after) == {"e", "ef", "f"}
    chain.close("ef", "e", Direction.INPUT, T1)
    closed = queries.lineage(node(chain, "e"), depth=1, direction="downstream")
    assert names(closed) == {"e"}


# --- column level ------------------------------------------------------------------------


@pytest.fixture
def columns():
    g = LineageBuilder()
    g.dataset("raw.customers", fields=("id", "email", "country"))
    g.dataset("clean.customers", fields=("customer_id", "email_hash", "country"))
    g.dataset("mart.by_country", fields=("country", "customers"))
    g.job(
        "clean",
        reads=["raw.customers"],
        writes=["clean.customers"],
        columns={
            "clean.customers.customer_id": ["raw.customers.id"],
            "clean.customers.email_hash": [
                ("raw.customers.email", TransformationSubtype.TRANSFORMATION)
            ],
            "clean.customers.country": ["raw.customers.country"],
        },
    )
    g.job(
        "report",
        reads=["clean.customers"],
        writes=["mart.by_country"],
        columns={
            "mart.by_country.country": ["clean.customers.country"],
            "mart.by_country.customers": [
                ("clean.customers.customer_id", TransformationSubtype.AGGREGATION)
            ],
        },
    )
    return g


def test_it_walks_column_lineage_up_and_down(columns):
    root = node(columns, "clean.customers.customer_id")
    up = queries.column_lineage(root, depth=5)
    assert {n.field for n in up.nodes} == {"customer_id", "id"}
    both = queries.column_lineage(root, depth=5, with_downstream=True)
    assert {(n.name, n.field) for n in both.nodes} == {
        ("raw.customers", "id"),
        ("clean.customers", "customer_id"),
        ("mart.by_country", "customers"),
    }
    link = next(e for e in both.edges if e.destination.endswith(":customers"))
    assert link.transformation_type == "DIRECT"
    assert link.transformation_subtype == "AGGREGATION"
    assert link.job == columns.id("job:report")


def test_column_lineage_of_a_dataset_starts_from_all_its_fields(columns):
    graph = queries.column_lineage(node(columns, "clean.customers"), depth=1)
    assert {n.field for n in graph.nodes} == {
        "id",
        "email",
        "country",
        "customer_id",
        "email_hash",
    }


def test_column_lineage_honours_as_of(columns):
    columns.close_read("report", "clean.customers", T2)
    root = node(columns, "mart.by_country.country")
    assert len(queries.column_lineage(root, depth=5, as_of=T1).nodes) == 3
    assert len(queries.column_lineage(root, depth=5).nodes) == 1


def test_column_edges_show_their_description_where_they_have_one(columns):
    described = ColumnEdge.objects.get(
        source_field=columns.fields["raw.customers.email"],
        target_field=columns.fields["clean.customers.email_hash"],
    )
    described.description = "sha256 of the lower-cased address"
    described.save()
    graph = queries.column_lineage(node(columns, "clean.customers"), depth=1, with_downstream=True)
    by_target = {e.destination.rsplit(":", 1)[1]: e.description for e in graph.edges}
    assert by_target["email_hash"] == "sha256 of the lower-cased address"
    assert by_target["customer_id"] == ""


def test_column_lineage_names_fields_as_they_are_now(columns):
    root = node(columns, "clean.customers.customer_id")
    assert "id" in {n.field for n in queries.column_lineage(root, depth=5).nodes}
    field = columns.fields["raw.customers.id"]
    field.name = "customer_key"
    field.save()
    renamed = queries.column_lineage(root, depth=5)
    assert {n.field for n in renamed.nodes} == {"customer_id", "customer_key"}
    assert any(e.origin.endswith(":customer_key") for e in renamed.edges)


def test_traversals_one_after_another_do_not_see_each_others_nodes(columns):
    first = queries.column_lineage(
        node(columns, "raw.customers.email"), depth=5, with_downstream=True
    )
    other = node(columns, "raw.customers.country")
    again = queries.column_lineage(other, depth=5, with_downstream=True)
    assert {n.field for n in first.nodes} == {"email", "email_hash"}
    assert {(n.name, n.field) for n in again.nodes} == {
        ("raw.customers", "country"),
        ("clean.customers", "country"),
        ("mart.by_country", "country"),
    }
    ups = [
        names(queries.lineage(node(columns, n), depth=5, direction="upstream"))
        for n in ("mart.by_country", "raw.customers", "mart.by_country")
    ]
    assert ups[0] == ups[2]
    assert ups[1] == {"raw.customers"}


# --- impact and root cause ---------------------------------------------------------------


def test_impact_lists_downstream_with_owners_pii_and_retention(columns):
    mart = columns.ds["mart.by_country"]
    team = Owner.objects.create(name="analytics")
    DatasetOwnership.objects.create(dataset=mart, owner=team, ownership_type="DATA_OWNER")
    policy = RetentionPolicy.objects.create(
        name="one-year", duration=timedelta(days=365), action="delete"
    )
    mart.retention_policy = policy
    mart.save()
    clean = columns.field("clean.customers.email_hash")
    clean.pii_category = PiiCategory.EMAIL
    clean.save()
    result = queries.impact(node(columns, "raw.customers"))
    assert [(d.dataset.name, d.distance) for d in result.datasets] == [
        ("clean.customers", 1),
        ("mart.by_country", 2),
    ]
    assert [o.name for o in result.owners] == ["analytics"]
    assert result.datasets[1].dataset.retention.duration_days == 365
    assert [d.dataset.name for d in result.pii_datasets] == ["clean.customers"]
    assert [j.job.name for j in result.jobs] == ["clean", "report"]
    assert result.datasets[0].via_jobs == (columns.id("job:clean"),)


def test_impact_of_a_field_is_column_level(columns):
    result = queries.impact(node(columns, "raw.customers.email"))
    assert result.level == "column"
    assert [(d.dataset.name, d.fields) for d in result.datasets] == [
        ("clean.customers", ("email_hash",))
    ]


def test_impact_as_of_shows_owners_as_they_were(columns):
    mart = columns.ds["mart.by_country"]
    team = Owner.objects.create(name="new-team")
    Owner.objects.create(name="old-team", kind="person", email="old@example.com")
    DatasetOwnership.objects.create(dataset=mart, owner=team)
    ChangeRecord.objects.create(
        at=T2,
        source="steward",
        dataset=mart,
        attribute="owners",
        old=[{"name": "old-team", "type": ""}],
        new=[{"name": "new-team", "type": ""}],
    )
    then = queries.impact(node(columns, "raw.customers"), as_of=T1)
    assert [(o.name, o.kind, o.email) for o in then.owners] == [
        ("old-team", "person", "old@example.com")
    ]
    assert [o.name for o in queries.impact(node(columns, "raw.customers")).owners] == ["new-team"]


def test_root_cause_puts_failed_jobs_first_with_suspects(chain):
    chain.run("job_0", RunState.COMPLETED, T1)
    chain.run("job_1", RunState.FAILED, T1)
    chain.run("job_2", RunState.COMPLETED, T1)
    result = queries.root_cause(node(chain, "d"), depth=10)
    assert [j.job.name for j in result.jobs] == ["job_1", "job_2", "job_0"]
    assert [j.job.name for j in result.failures] == ["job_1"]
    assert result.failures[0].run.error_message == "boom"
    assert result.suspects == (chain.id("c"), chain.id("d"))


def test_root_cause_as_of_reads_the_run_state_then(chain):
    chain.run("job_1", RunState.COMPLETED, T1)
    chain.run("job_1", RunState.FAILED, T3)
    assert queries.root_cause(node(chain, "c"), depth=1, as_of=T2).failures == ()
    assert len(queries.root_cause(node(chain, "c"), depth=1).failures) == 1


# --- paths and diffs ---------------------------------------------------------------------


def test_it_finds_paths_either_way(chain):
    down = queries.find_path(node(chain, "a"), node(chain, "c"))
    assert down is not None and down.direction == "downstream" and down.jobs == 2
    assert down.nodes == (
        chain.id("a"),
        chain.id("job:job_0"),
        chain.id("b"),
        chain.id("job:job_1"),
        chain.id("c"),
    )
    up = queries.find_path(node(chain, "c"), node(chain, "a"))
    assert up is not None and up.direction == "upstream" and up.nodes == down.nodes
    chain.dataset("island")
    assert queries.find_path(node(chain, "a"), node(chain, "island")) is None


def test_it_finds_column_paths(columns):
    path = queries.find_path(
        node(columns, "raw.customers.id"), node(columns, "mart.by_country.customers")
    )
    assert path is not None and path.level == "column"
    assert path.nodes == (
        columns.id("raw.customers.id"),
        columns.id("job:clean"),
        columns.id("clean.customers.customer_id"),
        columns.id("job:report"),
        columns.id("mart.by_country.customers"),
    )
    with pytest.raises(ValueError):
        queries.find_path(node(columns, "raw.customers.id"), node(columns, "raw.customers"))


def test_diff_lists_edges_datasets_and_fields_added_and_removed(chain):
    chain.dataset("x", at=T2)
    chain.close_read("job_0", "a", T2)
    chain.edge("job_0", "x", Direction.INPUT, at=T2)
    result = queries.diff(T1, T3)
    assert result.edges_added == (queries.GraphEdge(chain.id("x"), chain.id("job:job_0")),)
    assert result.edges_removed == (queries.GraphEdge(chain.id("a"), chain.id("job:job_0")),)
    assert result.datasets_added == (chain.id("x"),)
    assert set(result.fields_added) == {chain.id("x.id"), chain.id("x.value")}
    assert result.counts["edgesAdded"] == 1 and not result.truncated
    scoped = queries.diff(T1, T3, node=node(chain, "d"), depth=1)
    assert scoped.edges_added == () and scoped.edges_removed == ()


def test_change_instants_lists_when_the_graph_changed(chain):
    chain.close_read("job_0", "a", T2)
    assert queries.change_instants(node(chain, "b"), depth=1) == (T0, T2)


def test_change_instants_at_column_level_count_a_mapping_that_changed_alone(chain):
    ColumnEdge.objects.filter(
        job=chain.jobs["job_0"], source_field=chain.fields["a.value"], valid_to=None
    ).update(valid_to=T3)
    chain.column("job_0", "a.id", "b.value", at=T3)
    b = node(chain, "b")
    assert queries.change_instants(b, depth=1) == (T0,)
    assert queries.change_instants(b, depth=1, level="column") == (T0, T3)
    assert queries.change_instants(node(chain, "e"), depth=1, level="column") == (T0,)


# --- orphans and sources -----------------------------------------------------------------


def test_orphans_and_sources(chain):
    chain.dataset("lonely")
    orphans = queries.orphans()
    assert [i.name for i in orphans.items] == ["e", "lonely"] and orphans.total == 2
    sources = queries.sources()
    assert [i.name for i in sources.items] == ["a"]
    assert sources.items[0].consumers == 1 and sources.items[0].producers == 0
    chain.close("job_3", "d", Direction.INPUT, T2)
    assert [i.name for i in queries.orphans(as_of=T1).items] == ["e", "lonely"]
    assert "d" in [i.name for i in queries.orphans().items]


def test_a_read_by_a_retired_job_makes_no_dataset_read_now_or_then(chain):
    """job_3 reads d and stopped writing e at T2: from then on it is retired, and its read
    counts for orphans and sources as it counts for lineage (no consumer)."""
    chain.close("job_3", "e", Direction.OUTPUT, T2)
    for as_of in (None, T3):
        orphans = {i.name: i.consumers for i in queries.orphans(as_of=as_of).items}
        assert orphans == {"d": 0, "e": 0}, as_of
        assert [i.name for i in queries.sources(as_of=as_of).items] == ["a"]
        graph = queries.lineage(node(chain, "d"), depth=1, direction="downstream", as_of=as_of)
        assert names(graph) == {"d"}
    # Before it stopped, job_3 read d.
    assert [i.name for i in queries.orphans(as_of=T1).items] == ["e"]
    chain.close("job_0", "b", Direction.OUTPUT, T2)
    assert [i.name for i in queries.sources().items] == ["b"]  # a's reader is retired too
