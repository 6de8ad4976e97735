"""The node directory, mapped from the host's node document file, answers as the database
would, and leaves to the database every node that changed after the file was written."""

from __future__ import annotations

from datetime import timedelta

import pytest

from catalog.models import Dataset, DatasetField, Namespace
from graph import details, directory, documents, nodecache, nodedata, nodeids
from graph.models import Run, RunState
from graph.nodecache import DATASET
from graph.nodeids import UnknownNodeId
from graph.resolve import resolve_node_id
from tests.graph_builders import NS, T0, T1, T2, T3, LineageBuilder

# Committed writes, as in production: the change log follows commits.
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def written() -> directory.Directory:
    """The directory of the host's document file, written now (as a deploy does)."""
    assert documents.render_documents(full=True).full
    found = directory.get()
    assert found is not None
    return found


@pytest.fixture
def g() -> LineageBuilder:
    b = LineageBuilder()
    b.dataset("raw.orders", fields=("id", "email", "amount"))
    b.dataset("clean.orders", fields=("id", "email"))
    b.dataset("s3:/lake/part:v2", fields=("key",))
    b.job(
        "clean",
        reads=["raw.orders"],
        writes=["clean.orders"],
        columns={"clean.orders.email": ["raw.orders.email"]},
    )
    return b


@pytest.fixture
def read(g: LineageBuilder) -> directory.Directory:
    return written()


def fresh(raw: str) -> nodeids.ResolvedNode:
    return resolve_node_id(raw)


def from_database(raw: str, settings) -> nodeids.ResolvedNode:
    settings.GRAPH_SHARED_NODE_DATA = False
    try:
        return fresh(raw)
    finally:
        settings.GRAPH_SHARED_NODE_DATA = True


def test_it_names_nodes_and_fields_as_the_database_does(g, read, settings):
    found = read
    field_pks = [f.pk for f in g.fields.values()]
    assert found.field_rows(field_pks) == details.field_rows(field_pks)
    ds_pks = [d.pk for d in g.ds.values()]
    assert found.node_names(nodecache.DATASET, ds_pks) == details.load_dataset_names(ds_pks)
    job_pks = [j.pk for j in g.jobs.values()]
    assert found.node_names(nodecache.JOB, job_pks) == details.load_job_names(job_pks)
    for raw in (
        g.id("raw.orders"),
        g.id("job:clean"),
        g.id("clean.orders.email"),
        f"datasetField:{g.ns.name}:s3:/lake/part:v2:key",
    ):
        assert fresh(raw) == from_database(raw, settings)


def test_nodes_changed_after_it_was_read_come_from_the_database(g, read):
    raw = g.ds["raw.orders"].pk
    assert nodedata.dataset_names([raw]) == {raw: (NS, "raw.orders")}
    email = g.field("raw.orders.email")
    DatasetField.objects.filter(pk=email.pk).update(name="e_mail")
    late = g.dataset("late.orders", fields=("id",))
    Dataset.objects.filter(pk=g.ds["clean.orders"].pk).delete()

    assert fresh(g.id("raw.orders.e_mail")).pk == email.pk
    assert nodedata.field_rows([email.pk])[email.pk][3] == "e_mail"
    with pytest.raises(UnknownNodeId):
        fresh(g.id("raw.orders.email"))
    assert fresh(g.id("late.orders")).pk == late.pk
    with pytest.raises(UnknownNodeId):
        fresh(f"dataset:{g.ns.name}:clean.orders")
    # Untouched nodes are still answered from memory.
    found = directory.get()
    assert found is not None
    assert found.dataset_pk(g.ns.name, "raw.orders") is None  # changed: its field was renamed
    assert found.job_pk(g.jobs_ns.name, "clean") == g.jobs["clean"].pk
    # A node's names are not taken from the directory once it changed.
    Dataset.objects.filter(pk=raw).update(name="raw.orders_v2")
    assert nodedata.dataset_names([raw]) == {raw: (NS, "raw.orders_v2")}


def test_a_new_namespace_that_captures_an_id_is_seen_at_once():
    old = Namespace.objects.create(name="file")
    Dataset.objects.create(namespace=old, name="a:b", first_seen=T0, last_seen=T0)
    assert fresh("dataset:file:a:b").id.namespace == "file"
    written()
    longer = Namespace.objects.create(name="file:a")
    ds = Dataset.objects.create(namespace=longer, name="b", first_seen=T0, last_seen=T0)
    resolved = fresh("dataset:file:a:b")
    assert (resolved.id.namespace, resolved.pk) == ("file:a", ds.pk)


def test_it_tells_which_datasets_looked_different_in_the_past_as_the_database_does(g):
    added = g.dataset("grown.orders", fields=("id",))
    DatasetField.objects.create(dataset=added, name="late", type="string", ordinal=1, first_seen=T2)
    DatasetField.objects.filter(pk=g.field("clean.orders.email").pk).update(removed_at=T1)
    found = written()
    pks = sorted(d.pk for d in g.ds.values())
    for moment in (T0 - timedelta(days=1), T0, T1, T2 - timedelta(seconds=1), T2, T3):
        changed, reflagged, unknown = found.changed_since(pks, moment)
        assert not unknown
        assert changed == details.changed_since(pks, moment), moment
        assert not reflagged, moment  # fields added and removed, no propagated flag
    for moment in (T0, T1, T3):
        roots = found.field_pks(added.pk, moment)
        assert roots is not None
        alive = DatasetField.objects.filter(dataset=added, first_seen__lte=moment)
        assert roots.tolist() == sorted(alive.values_list("pk", flat=True))


def test_without_shared_node_data_there_is_none(g, read, settings):
    settings.GRAPH_SHARED_NODE_DATA = False
    assert directory.get() is None
    assert fresh(g.id("raw.orders.email")).pk == g.field("raw.orders.email").pk


def test_each_jobs_run_as_of_a_past_instant_is_the_databases_answer(g, settings):
    g.job("idle", reads=["raw.orders"], writes=["clean.orders"])
    g.job("late", reads=["raw.orders"], writes=["clean.orders"])
    g.run("clean", at=T1)
    last = g.run("clean", state=RunState.FAILED, at=T2)
    # The last run ended a week after it started: until then, it was running.
    Run.objects.filter(pk=last.pk).update(
        ended_at=T2 + timedelta(days=7), state_event_time=T2 + timedelta(days=7)
    )
    g.run("late", at=T2)
    pks = sorted(j.pk for j in g.jobs.values())
    moments = (T0, T1, T1 + timedelta(days=1), T2 + timedelta(days=1), T3)

    def answers() -> dict:
        nodecache.cache.clear()
        return {
            moment: (nodedata.job_json(pks, moment), nodedata.job_infos(pks, moment))
            for moment in moments
        }

    found = written()
    clean, late = (g.jobs[name].pk for name in ("clean", "late"))
    with_directory = answers()
    settings.GRAPH_SHARED_NODE_DATA = False
    assert answers() == with_directory
    settings.GRAPH_SHARED_NODE_DATA = True
    assert b'"state":"RUNNING"' in with_directory[T2 + timedelta(days=1)][0][clean]
    # A run added after the directory was read: that job is the database's to answer.
    assert directory.get() is found
    newest = g.run("late", at=T3)
    nodecache.cache.sync()
    assert str(newest.run_uuid).encode() in nodedata.job_json([late], T3)[late]


def test_a_directory_held_past_the_end_of_its_epoch_trusts_nothing(g, monkeypatch):
    g.job("load", reads=["raw.orders"], writes=["clean.orders"])
    g.run("load", at=T1)
    found = written()
    orders = g.ds["clean.orders"].pk
    assert found.node_names(DATASET, [orders]) == {orders: (NS, "clean.orders")}
    # Something changed, and the cache lost track of changes (here: cleared, with more
    # changed since the file than a process reads), so its change log no longer reaches
    # back to the directory's revision.
    monkeypatch.setattr(nodecache, "SYNC_LIMIT", 0)
    g.dataset("elsewhere")
    nodecache.cache.clear()
    nodecache.cache.sync()
    assert directory.get() is None
    assert found.node_names(DATASET, [orders]) == {}
    assert found.dataset_pk(NS, "clean.orders") is None
