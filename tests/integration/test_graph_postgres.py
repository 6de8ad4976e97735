"""The graph engine on real PostgreSQL: revision triggers across connections (bumped at
commit, once per transaction), bulk loads, packed snapshot loading, generate_lineage, node
documents shared between processes and rendered ahead of requests."""

from __future__ import annotations

import os
import threading
import time

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction

from catalog.models import Dataset
from graph import queries, revision, snapshot
from graph.models import ColumnEdge, Direction, GraphChange, GraphRevisionLog, TableEdge
from graph.resolve import resolve_node_id
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


def test_generate_lineage_loads_a_graph_the_queries_can_walk(settings):
    settings.GRAPH_SHARED_NODE_DATA = True
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
    # Every node's document was rendered before any request.
    from graph.models import Job, NodeDocument, NodeDocumentPass

    assert NodeDocument.objects.filter(kind="d").count() == 300
    assert NodeDocument.objects.filter(kind="j").count() == Job.objects.count()
    assert NodeDocumentPass.objects.get().revision == revision.current().value
    # Its declared flags reached their copies, as propagation carries them.
    from catalog.models import DatasetField, FlagSource, PropagatedFlag

    copies = DatasetField.objects.filter(flag_source=FlagSource.PROPAGATED)
    reached = PropagatedFlag.objects.filter(valid_to__isnull=True).values_list(
        "field_id", flat=True
    )
    assert copies.exists()
    assert set(copies.values_list("pk", flat=True)) == set(reached)


# --- node documents shared between processes ----------------------------------------------


def rendered_by(calls: list[list[int]]):
    """nodedata's dataset renderer, recording which pks it was asked for."""
    from graph import nodedata

    def render(pks):
        calls.append(list(pks))
        return nodedata.render_datasets(pks)

    return render


def test_a_node_rendered_in_one_process_is_served_to_another_without_rendering():
    from graph.models import NodeDocument
    from graph.nodecache import DATASET, NodeCache, publisher

    g = LineageBuilder()
    g.chain("a", "b")
    pk = g.ds["b"].pk
    first, second = NodeCache(100, shared=True), NodeCache(100, shared=True)
    calls: list[list[int]] = []
    text = first.entries(DATASET, [pk], rendered_by(calls))[pk].data
    assert calls == [[pk]]
    publisher.flush()
    assert NodeDocument.objects.filter(kind=DATASET, obj_id=pk).exists()
    served = second.entries(DATASET, [pk], rendered_by(calls))
    assert calls == [[pk]]
    assert served[pk].data == text
    assert second.stats()["shared_hits"] == 1
    # Summaries (impact lists: owners' e-mail, field flags) come with the document, too.
    with_info = second.entries(DATASET, [pk], rendered_by(calls), info=True)
    assert with_info[pk].info == first.entries(DATASET, [pk], rendered_by(calls))[pk].info
    assert calls == [[pk]]


def test_a_shared_document_older_than_a_change_to_its_node_is_rendered_again(steward):
    from catalog import actions
    from graph.models import NodeDocument
    from graph.nodecache import DATASET, NodeCache, publisher

    g = LineageBuilder()
    g.chain("a", "b")
    a, b = g.ds["a"].pk, g.ds["b"].pk
    writer, reader = NodeCache(100, shared=True), NodeCache(100, shared=True)
    reader.entries(DATASET, [a], rendered_by([]))  # the reader follows the change log
    writer.entries(DATASET, [b], rendered_by([]))
    publisher.flush()
    stale = NodeDocument.objects.get(kind=DATASET, obj_id=b).revision
    actions.update_dataset(g.ds["b"], {"description": "Bronze orders"}, actions.Actor(user=steward))
    calls: list[list[int]] = []
    served = reader.entries(DATASET, [b], rendered_by(calls))
    assert calls == [[b]]
    assert '"description":"Bronze orders"' in served[b].data
    publisher.flush()
    document = NodeDocument.objects.get(kind=DATASET, obj_id=b)
    assert document.revision > stale
    assert '"description":"Bronze orders"' in document.data
    # The writer has not synced since its render: the change log tells it, too.
    assert '"description":"Bronze orders"' in writer.entries(DATASET, [b], rendered_by([]))[b].data


def test_a_process_trusts_no_document_older_than_its_first_look_at_the_change_log(steward):
    from catalog import actions
    from graph.nodecache import DATASET, NodeCache, publisher

    g = LineageBuilder()
    g.chain("a", "b")
    a, b = g.ds["a"].pk, g.ds["b"].pk
    NodeCache(100, shared=True).entries(DATASET, [b], rendered_by([]))
    publisher.flush()
    # Something changes before the new process starts: it cannot tell what, so it renders.
    actions.update_dataset(g.ds["a"], {"description": "Raw"}, actions.Actor(user=steward))
    late = NodeCache(100, shared=True)
    calls: list[list[int]] = []
    late.entries(DATASET, [a, b], rendered_by(calls))
    assert calls == [[a, b]]
    # Documents written from then on are trusted by the process that started later.
    again = NodeCache(100, shared=True)
    again.entries(DATASET, [a], rendered_by([]))
    assert again.horizon == late.horizon


def test_after_a_full_pass_a_new_process_renders_only_nodes_changed_since(steward, settings):
    settings.GRAPH_SHARED_NODE_DATA = True
    from catalog import actions
    from graph import documents, nodedata
    from graph.models import NodeDocument
    from graph.nodecache import DATASET, JOB, NodeCache, publisher

    g = LineageBuilder()
    g.chain("a", "b", "c")
    a, b, c = (g.ds[name].pk for name in ("a", "b", "c"))
    first = documents.render_documents()
    assert (first.full, first.datasets, first.jobs) == (True, 3, 2)
    assert NodeDocument.objects.get(kind=DATASET, obj_id=b).data == (
        nodedata.render_datasets([b])[b].data
    )
    # Changes after the pass: to one dataset, and to nothing a lineage answer shows.
    actions.update_dataset(g.ds["a"], {"description": "Raw"}, actions.Actor(user=steward))
    g.dataset("d")
    late = NodeCache(100, shared=True)
    calls: list[list[int]] = []
    served = late.entries(DATASET, [a, b, c], rendered_by(calls))
    assert calls == [[a]]
    assert '"description":"Raw"' in served[a].data
    assert late.entries(JOB, [g.jobs["job_0"].pk], lambda pks: {})  # from its document
    # A follow-up pass renders what changed and has no newer document (the late process
    # shared its render of a), and only that; then no process renders.
    publisher.flush()
    follow_up = documents.render_documents()
    assert (follow_up.full, follow_up.datasets, follow_up.jobs) == (False, 1, 0)
    assert documents.render_documents().datasets == 0
    again = NodeCache(100, shared=True)
    calls.clear()
    served = again.entries(DATASET, [a, b, c, g.ds["d"].pk], rendered_by(calls))
    assert calls == []
    assert '"description":"Raw"' in served[a].data


def test_documents_and_passes_of_another_release_are_never_served(steward, settings, monkeypatch):
    """A release whose rendering code differs (graph.revision.code_digest) renders every
    node again: the old pass, its file and its documents are not trusted."""
    settings.GRAPH_SHARED_NODE_DATA = True
    from graph import docfile, documents
    from graph import revision as rev
    from graph.models import NodeDocument
    from graph.nodecache import DATASET, NodeCache

    g = LineageBuilder()
    g.chain("a", "b")
    a, b = g.ds["a"].pk, g.ds["b"].pk
    assert documents.render_documents().full
    assert docfile.open_current() is not None
    # What the old release wrote, with a text the new one would never render.
    NodeDocument.objects.filter(kind=DATASET, obj_id=a).update(data='{"old":"release"}')
    monkeypatch.setattr(rev, "code_digest", lambda: "another-release")
    docfile.reset()
    assert docfile.last_pass() is None and docfile.open_current() is None
    calls: list[list[int]] = []
    served = NodeCache(100, shared=True).entries(DATASET, [a, b], rendered_by(calls))
    assert calls == [[a, b]]
    assert "release" not in served[a].data
    # The new release's next pass is a full one, and its documents replace the old ones.
    again = documents.render_documents()
    assert (again.full, again.datasets) == (True, 2)
    assert set(NodeDocument.objects.values_list("code", flat=True)) == {"another-release"}
    calls.clear()
    NodeCache(100, shared=True).entries(DATASET, [a, b], rendered_by(calls))
    assert calls == []


def test_a_change_the_change_log_cannot_pin_to_nodes_makes_the_next_pass_full(settings):
    settings.GRAPH_SHARED_NODE_DATA = True
    from catalog.models import DatasetOwnership, Owner
    from graph import documents
    from graph.nodecache import DATASET, NodeCache

    g = LineageBuilder()
    g.chain("a", "b")
    owner = Owner.objects.create(name="team-a")
    DatasetOwnership.objects.create(dataset=g.ds["a"], owner=owner)
    assert documents.render_documents().full
    Owner.objects.filter(pk=owner.pk).update(name="team-renamed")  # every dataset's data
    calls: list[list[int]] = []
    NodeCache(100, shared=True).entries(DATASET, [g.ds["a"].pk], rendered_by(calls))
    assert calls == [[g.ds["a"].pk]]
    second = documents.render_documents()
    assert (second.full, second.datasets) == (True, 2)
    served = NodeCache(100, shared=True).entries(DATASET, [g.ds["a"].pk], rendered_by(calls))
    assert len(calls) == 1
    assert "team-renamed" in served[g.ds["a"].pk].data
    assert documents.render_documents(full=True).full


def test_only_one_pass_runs_at_a_time(settings):
    from graph import documents

    settings.GRAPH_SHARED_NODE_DATA = True
    LineageBuilder().chain("a", "b")
    holder = threading.Event()
    release = threading.Event()

    def hold() -> None:
        try:
            with documents._pass_lock() as held:
                assert held
                holder.set()
                release.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    holder.wait(30)
    try:
        assert documents.render_documents().skipped == "another pass is running"
    finally:
        release.set()
        thread.join(30)
    assert documents.render_documents().full


def test_documents_of_datasets_and_jobs_are_taken_together():
    from graph.nodecache import DATASET, JOB, NodeCache, publisher
    from graph.nodedata import render_jobs

    g = LineageBuilder()
    g.chain("a", "b")
    ds, job = g.ds["b"].pk, g.jobs["job_0"].pk
    writer = NodeCache(100, shared=True)
    writer.entries(DATASET, [ds], rendered_by([]))
    writer.entries(JOB, [job], render_jobs)
    publisher.flush()
    reader = NodeCache(100, shared=True)
    reader.preload({DATASET: [ds], JOB: [job]})
    assert reader.stats()["shared_hits"] == 2
    calls: list[list[int]] = []
    assert reader.entries(DATASET, [ds], rendered_by(calls))[ds].data
    assert reader.entries(JOB, [job], rendered_by(calls))[job].data
    assert calls == []


def test_a_follow_up_pass_moves_the_pass_on_once_many_nodes_changed(steward, settings, monkeypatch):
    from catalog import actions
    from graph import documents
    from graph.models import NodeDocument, NodeDocumentPass
    from graph.nodecache import DATASET, NodeCache

    settings.GRAPH_SHARED_NODE_DATA = True
    g = LineageBuilder()
    g.chain("a", "b", "c")
    a, b, c = (g.ds[name].pk for name in ("a", "b", "c"))
    assert documents.render_documents().full
    first = NodeDocumentPass.objects.get().revision
    actions.update_dataset(g.ds["a"], {"description": "Raw"}, actions.Actor(user=steward))
    monkeypatch.setattr(documents, "ADVANCE_AFTER", 0)
    follow_up = documents.render_documents()
    assert (follow_up.full, follow_up.datasets) == (False, 1)
    moved = NodeDocumentPass.objects.get().revision
    assert moved == follow_up.revision > first
    assert set(NodeDocument.objects.values_list("revision", flat=True)) == {moved}
    # A change after it: the new process starts from the moved pass and judges that change.
    actions.update_dataset(g.ds["b"], {"description": "Clean"}, actions.Actor(user=steward))
    late = NodeCache(100, shared=True)
    calls: list[list[int]] = []
    served = late.entries(DATASET, [a, b, c], rendered_by(calls))
    assert late.horizon == moved
    assert calls == [[b]]
    assert '"description":"Raw"' in served[a].data
    assert '"description":"Clean"' in served[b].data


# --- the host's document file ---------------------------------------------------------------


def test_the_document_file_holds_every_document_as_the_table_does(settings):
    from graph import docfile, documents
    from graph.models import NodeDocument
    from graph.nodecache import DATASET, JOB, NodeCache

    settings.GRAPH_SHARED_NODE_DATA = True
    g = LineageBuilder()
    g.chain("a", "b", "c")
    assert documents.render_documents().full
    mapped = docfile.open_current()
    assert mapped is not None
    assert mapped.path.parent == settings.DATA_DIR / "nodedocs"
    rows = list(NodeDocument.objects.all())  # (and any a thread of an earlier test wrote)
    assert mapped.documents == len(rows) >= 5
    for row in rows:
        found = mapped.lookup(row.kind, [row.obj_id, 10**9], 0, {}, info=True)
        assert found == {row.obj_id: (row.namespace, row.name, row.data, row.info)}
        # Without the summary asked for, it is left out.
        assert mapped.lookup(row.kind, [row.obj_id], 0, {})[row.obj_id][3] == ""
    # A new process takes all of them from the file: nothing rendered, nothing queried.
    fresh = NodeCache(100, shared=True)
    calls: list[list[int]] = []
    datasets = [g.ds[name].pk for name in ("a", "b", "c")]
    served = fresh.entries(DATASET, datasets, rendered_by(calls))
    jobs = [job.pk for job in g.jobs.values()]
    assert set(fresh.entries(JOB, jobs, lambda pks: {})) == set(jobs)
    assert calls == []
    assert fresh.stats()["file_hits"] == 5
    assert {pk: e.data for pk, e in served.items()} == {
        row.obj_id: row.data for row in rows if row.kind == DATASET and row.obj_id in datasets
    }
    with_info = fresh.entries(DATASET, datasets, rendered_by(calls), info=True)
    assert all(entry.info is not None for entry in with_info.values())


def test_a_document_in_the_file_older_than_a_change_to_its_node_is_not_used(steward, settings):
    from catalog import actions
    from graph import docfile, documents
    from graph.nodecache import DATASET, NodeCache

    settings.GRAPH_SHARED_NODE_DATA = True
    g = LineageBuilder()
    g.chain("a", "b", "c")
    a, b, c = (g.ds[name].pk for name in ("a", "b", "c"))
    assert documents.render_documents().full
    assert docfile.get() is not None
    actions.update_dataset(g.ds["a"], {"description": "Raw"}, actions.Actor(user=steward))
    late = NodeCache(100, shared=True)
    calls: list[list[int]] = []
    served = late.entries(DATASET, [a, b, c], rendered_by(calls))
    assert calls == [[a]]
    assert '"description":"Raw"' in served[a].data
    assert late.stats()["file_hits"] == 2
    # Nor by a process whose horizon is past the file's documents.
    assert docfile.get().lookup(DATASET, [b], late.horizon + 1, {}) == {}


def test_a_new_pass_brings_a_new_file_and_a_file_off_the_timeline_is_not_used(settings):
    from graph import docfile, documents
    from graph.nodecache import DATASET, NodeCache

    settings.GRAPH_SHARED_NODE_DATA = True
    g = LineageBuilder()
    g.chain("a", "b")
    assert documents.render_documents().full
    first = docfile.get()
    assert first is not None
    # Everything changed (a bulk load): the next pass is full, and the next process to
    # start over moves to a file of that pass.
    revision.mark_reset()
    NodeCache(100, shared=True).entries(DATASET, [g.ds["a"].pk], rendered_by([]))
    assert docfile.get() is first  # no pass since: the same file (its documents untrusted)
    second = documents.render_documents()
    assert second.full
    late = NodeCache(100, shared=True)
    calls: list[list[int]] = []
    late.entries(DATASET, [g.ds["a"].pk, g.ds["b"].pk], rendered_by(calls))
    assert calls == []
    assert docfile.get() is not first
    assert docfile.get().pass_revision.value == second.revision
    assert late.stats()["file_hits"] == 2
    # A file written on another timeline (the database restored, or recreated under the
    # same name) is not trusted, whatever its revisions say.
    other = NodeCache(100, shared=True)
    other.sync()
    forged = docfile.get()
    forged.pass_revision = revision.Revision(second.revision, "elsewhere")
    calls.clear()
    other.entries(DATASET, [g.ds["a"].pk], rendered_by(calls))
    assert other.stats()["file_hits"] == 0


def test_lineage_data_is_read_straight_from_the_file_and_not_kept(steward, settings):
    from catalog import actions
    from graph import docfile, documents
    from graph.api import _dataset_texts, _job_text
    from graph.models import NodeDocument
    from graph.nodecache import DATASET, JOB, NodeCache

    settings.GRAPH_SHARED_NODE_DATA = True
    g = LineageBuilder()
    g.chain("a", "b", "c")
    a, b, c = (g.ds[name].pk for name in ("a", "b", "c"))
    assert documents.render_documents().full
    mapped = docfile.get()
    assert mapped is not None
    table = {(row.kind, row.obj_id): row.data for row in NodeDocument.objects.all()}
    reader = NodeCache(100, shared=True)
    found = reader.file_columns(DATASET, [a, b, c, 10**9], ("data", "quoted", "named"))
    assert found["data"] == {pk: table[(DATASET, pk)].encode() for pk in (a, b, c)}
    # With each node's id escaped as the API renders it.
    for pk, quoted in found["quoted"].items():
        ds = Dataset.objects.get(pk=pk)
        assert (quoted, found["named"][pk]) == _dataset_texts(ds.namespace.name, ds.name)
    jobs = sorted(job.pk for job in g.jobs.values())
    found = reader.file_columns(JOB, jobs, ("data", "quoted", "named"))
    assert found["data"] == {pk: table[(JOB, pk)].encode() for pk in jobs}
    assert found["quoted"] == {j.pk: _job_text(j.namespace.name, j.name) for j in g.jobs.values()}
    assert set(found["named"].values()) == {b""}
    # The file already holds them for every process: this one keeps nothing.
    assert reader.stats()["entries"] == 0
    assert reader.stats()["file_hits"] == 5
    # A node changed since the pass is not read from the file; the others still are.
    actions.update_dataset(g.ds["a"], {"description": "Raw"}, actions.Actor(user=steward))
    assert set(reader.file_columns(DATASET, [a, b, c], ("data",))["data"]) == {b, c}
    # Nor by a process whose horizon is past the file's documents.
    assert mapped.spliced(DATASET, [b], reader.horizon + 1, {}, ("data",)) == {"data": {}}


@pytest.mark.parametrize("code", [*range(1, 128), 0xE9, 0xA0, 0x2028, 0x65E5, 0x1F600])
def test_the_file_escapes_exactly_the_ids_the_api_passes_through(code):
    """PostgreSQL's test for a plain id (written into the file as it is) agrees with the
    API's, character by character; the others are left for readers to escape."""
    from graph import docfile
    from graph.api import _plain

    text = f"dataset:ns:a{chr(code)}b"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT %s ~ '{docfile.PLAIN_ID}'", [text])
        assert cursor.fetchone()[0] is _plain(text)


def test_a_lineage_answer_from_the_file_is_the_answer_rendered_afresh(steward, settings):
    from catalog import actions
    from graph import documents, nodecache, responses
    from graph.api import lineage_body

    settings.GRAPH_SHARED_NODE_DATA = True
    g = LineageBuilder()
    g.chain("a", "b", "c")
    # Ids the file leaves for readers to escape.
    g.dataset('d "quoted" \\ é')
    g.job("fork → d", reads=["b"], writes=['d "quoted" \\ é'], at=T1)
    g.run("fork → d", at=T1)
    assert documents.render_documents().full
    actions.update_dataset(g.ds["c"], {"description": "Gold"}, actions.Actor(user=steward))
    root = resolve_node_id(g.id("a"))

    def bodies() -> list[bytes]:
        nodecache.cache.clear()
        responses.cache.clear()
        with revision.pinned():
            return [
                lineage_body(queries.table_answer(root, depth=5, as_of=as_of))
                for as_of in (None, T1, T2)
            ]

    # Straight from the file; "c", changed since the pass, rendered afresh.
    from_file = bodies()
    assert b'"description":"Gold"' in from_file[0]
    assert b'"dataset:%s:d \\"quoted\\" \\\\ \\u00e9"' % g.ns.name.encode() in from_file[0]
    # Without the file (through the node cache) and without shared documents at all.
    settings.GRAPH_NODE_DOCUMENT_FILE = False
    assert bodies() == from_file
    settings.GRAPH_SHARED_NODE_DATA = False
    assert bodies() == from_file


def test_an_unreadable_document_file_is_written_again(settings, caplog):
    from graph import docfile, documents

    settings.GRAPH_SHARED_NODE_DATA = True
    LineageBuilder().chain("a", "b")
    assert documents.render_documents().full
    path = docfile.file_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"LXDOCS01" + bytes(64))
    with pytest.raises(docfile.CorruptFile, match="an older layout"):
        docfile.DocFile(path)
    path.write_bytes(b"not a document file at all")
    with pytest.raises(docfile.CorruptFile, match="not a node document file"):
        docfile.DocFile(path)
    mapped = docfile.get()
    assert mapped is not None and mapped.documents == 3
    assert "node document file rewritten" in caplog.text
    # Cut short: the sections it names run past its end.
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(docfile.CorruptFile, match="past the end of the file"):
        docfile.DocFile(path)
    docfile.reset()
    assert docfile.get().documents == 3


def test_without_a_pass_there_is_no_file_and_documents_come_from_the_table(settings):
    from graph import docfile
    from graph.nodecache import DATASET, NodeCache, publisher

    settings.GRAPH_SHARED_NODE_DATA = True
    g = LineageBuilder()
    g.chain("a", "b")
    NodeCache(100, shared=True).entries(DATASET, [g.ds["a"].pk], rendered_by([]))
    publisher.flush()
    assert docfile.get() is None
    assert not docfile.file_path().exists()
    again = NodeCache(100, shared=True)
    calls: list[list[int]] = []
    again.entries(DATASET, [g.ds["a"].pk], rendered_by(calls))
    assert calls == []
    assert again.stats() | {"entries": 0} == again.stats() | {
        "entries": 0,
        "shared_hits": 1,
        "file_hits": 0,
    }


def test_processes_of_a_host_share_one_snapshot_base_and_catch_up_from_it(settings, caplog):
    settings.GRAPH_SHARED_NODE_DATA = True
    g = LineageBuilder()
    g.chain("a", "b", "c")
    root = resolve_node_id(g.id("a"))

    def downstream() -> set[str]:
        with revision.pinned():
            return names(queries.lineage(root, depth=5, direction="downstream"))

    path = docfile_host_path("table")
    # The base of an earlier release goes when this one's is written, and so does what a
    # writer that died left behind; another database's stays, and a write under way.
    earlier = path.with_name(path.name.replace(path.name.split("-")[-2], "0123456789ab"))
    elsewhere = path.with_name(f"other-{path.name}")
    died, writing = path.with_name(".writing-died"), path.with_name(".writing-now")
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in (earlier, elsewhere, died, writing):
        stale.write_bytes(b"an earlier base")
    os.utime(died, (time.time() - 7200, time.time() - 7200))
    assert downstream() == {"a", "b", "c", "job_0", "job_1"}
    assert path.exists() and elsewhere.exists() and writing.exists()
    assert not earlier.exists() and not died.exists()
    built = snapshot.stats()["builds"]
    # A new process: it maps the host's base and catches up by delta with what changed
    # since, without reading every edge again.
    g.close("job_1", "c", Direction.OUTPUT, T1)
    g.dataset("d")
    g.job("job_2", reads=["b"], writes=["d"])
    snapshot.reset()
    assert downstream() == {"a", "b", "d", "job_0", "job_1", "job_2"}
    assert snapshot.stats()["builds"] == built
    assert not snapshot.table().base.cols["id"].flags.writeable  # the map, not a copy
    # Edges loaded without per-row change logging: the base is not caught up but rebuilt.
    with revision.bulk_load():
        TableEdge.objects.filter(job=g.jobs["job_2"]).delete()
    snapshot.reset()
    assert downstream() == {"a", "b", "job_0", "job_1"}
    assert snapshot.stats()["builds"] == built + 1
    # A file that is not a base (cut short, or not ours) is written again.
    whole = path.read_bytes()
    for broken in (whole[: len(whole) // 2], b"not a snapshot at all" + bytes(64)):
        # Replaced, as a writer does: the file this process maps is never cut short.
        path.with_suffix(".new").write_bytes(broken)
        path.with_suffix(".new").replace(path)
        snapshot.reset()
        assert downstream() == {"a", "b", "job_0", "job_1"}
    assert "lineage snapshot file" in caplog.text
    assert path.read_bytes() == whole


def docfile_host_path(kind: str):
    from graph import docfile

    return docfile.host_path("snapshots", f"-{kind}.snap")


def test_without_a_writable_data_directory_each_process_builds_its_own_snapshots(
    settings, caplog, tmp_path
):
    settings.GRAPH_SHARED_NODE_DATA = True
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the data directory should be")
    settings.DATA_DIR = blocked
    g = LineageBuilder()
    g.chain("a", "b")
    snapshot.reset()
    with revision.pinned():
        graph = queries.lineage(resolve_node_id(g.id("a")), depth=5, direction="downstream")
    assert names(graph) == {"a", "b", "job_0"}
    assert "lineage snapshots not shared between processes" in caplog.text
