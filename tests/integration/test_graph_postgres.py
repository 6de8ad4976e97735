"""The graph engine on real PostgreSQL: revision triggers across connections (bumped at
commit, once per transaction), bulk loads, packed snapshot loading, generate_lineage, and
the files a host's processes share: node documents and snapshot bases."""

from __future__ import annotations

import os
import threading
import time
from io import StringIO

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections, transaction

from catalog.models import Dataset
from graph import docfile, queries, revision, snapshot
from graph.models import ColumnEdge, Direction, GraphChange, GraphRevisionLog, Run, TableEdge
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
    # Another seed's graph names some of the same datasets and jobs: refused before a row.
    with pytest.raises(CommandError, match="already loaded: nothing was written"):
        call_command("generate_lineage", datasets=300, no_progress=True, seed=8)
    assert Dataset.objects.count() == 300
    # Generated runs are no steps of a job's timeline: they read and wrote nothing.
    assert not Run.objects.filter(edges_applied=True).exists()
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
    from graph import docfile
    from graph.models import Job

    mapped = docfile.current()
    assert mapped is not None and mapped.revision == revision.current()
    assert mapped.documents == 300 + Job.objects.count()
    # Its declared flags reached their copies, as propagation carries them.
    from catalog.models import DatasetField, FlagSource, PropagatedFlag

    copies = DatasetField.objects.filter(flag_source=FlagSource.PROPAGATED)
    reached = PropagatedFlag.objects.filter(valid_to__isnull=True).values_list(
        "field_id", flat=True
    )
    assert copies.exists()
    assert set(copies.values_list("pk", flat=True)) == set(reached)


# --- the node store: the host's document file and each process's overlay -------------------


def rendered_by(calls: list[list[int]]):
    """nodedata's dataset renderer, recording which pks it was asked for."""
    from graph import nodedata

    def render(pks):
        calls.append(list(pks))
        return nodedata.render_datasets(pks)

    return render


def shown(process, kind, pks, render) -> dict[int, str]:
    """Node data as a process shows it (graph.nodedata): the documents of the host's file
    it trusts, the rest from its overlay, rendered there when missing."""
    out = {pk: text.decode() for pk, text in process.file_column(kind, pks, "data").items()}
    rest = [pk for pk in pks if pk not in out]
    return out | {pk: entry.data for pk, entry in process.entries(kind, rest, render).items()}


def describe(steward, ds, text: str) -> None:
    from catalog import actions

    actions.update_dataset(ds, {"description": text}, actions.Actor(user=steward))


def test_the_file_holds_every_node_as_rendering_gives_it(settings, monkeypatch):
    from graph import docfile, documents, nodedata
    from graph.details import info_json
    from graph.nodecache import DATASET, JOB, NodeCache

    g = LineageBuilder()
    g.chain("a", "b", "c")
    g.dataset('d "quoted" \\ é')  # an id the API escapes
    first = documents.render_documents()
    assert (first.full, first.datasets, first.jobs, first.copied) == (True, 4, 2, 0)
    mapped = docfile.current()
    assert mapped is not None and mapped.path.parent == settings.DATA_DIR / "nodedocs"
    assert mapped.revision == revision.current() and mapped.documents == 6
    datasets = sorted(ds.pk for ds in g.ds.values())
    jobs = sorted(job.pk for job in g.jobs.values())
    for kind, pks, render in ((DATASET, datasets, nodedata.render_datasets), (JOB, jobs, None)):
        fresh = render(pks) if render else nodedata.render_jobs(pks)
        found = mapped.spliced(kind, [*pks, 10**9], "info")
        assert found == {pk: info_json(e.info).encode() for pk, e in fresh.items()}
        found = mapped.spliced(kind, [*pks, 10**9], "data")
        assert found == {pk: e.data.encode() for pk, e in fresh.items()}
    # A new process takes every node from the file: nothing rendered.
    calls: list[list[int]] = []
    process = NodeCache(100)
    assert set(process.file_column(DATASET, datasets, "info")) == set(datasets)
    fresh = nodedata.render_datasets(datasets)
    served = shown(process, DATASET, datasets, rendered_by(calls))
    assert calls == [] and served == {pk: e.data for pk, e in fresh.items()}
    # So do the summaries that impact and taint lists show.
    monkeypatch.setattr(nodedata, "render_datasets", rendered_by(calls))
    assert nodedata.dataset_infos(datasets) == {pk: e.info for pk, e in fresh.items()}
    assert calls == []


def test_compressed_documents_read_back_as_rendered_through_follow_up_passes(steward):
    from graph import docfile, documents, nodedata
    from graph.details import info_json
    from graph.models import Job
    from graph.nodecache import DATASET, JOB

    call_command("generate_lineage", datasets=300, no_progress=True, seed=11)
    datasets = sorted(Dataset.objects.values_list("pk", flat=True))
    jobs = sorted(Job.objects.values_list("pk", flat=True))

    def assert_as_rendered() -> int:
        mapped = docfile.current()
        text = 0
        for kind, pks, render in (
            (DATASET, datasets, nodedata.render_datasets),
            (JOB, jobs, nodedata.render_jobs),
        ):
            fresh = render(pks)
            found = mapped.spliced(kind, pks, "info")
            assert found == {pk: info_json(e.info).encode() for pk, e in fresh.items()}
            spliced = mapped.spliced(kind, pks, "data")
            assert spliced == {pk: e.data.encode() for pk, e in fresh.items()}
            text += sum(len(e.data.encode()) + len(info_json(e.info)) for e in fresh.values())
        return text

    first = documents.render_documents(full=True)
    assert first.full and first.datasets == 300
    text = assert_as_rendered()
    # Node documents repeat their keys and shapes: the file holds them in far less room.
    parts = docfile.current().parts.values()
    stored = sum(int(p.offsets[c][-1]) for p in parts for c in docfile.COLUMNS)
    assert stored < text / 4
    # A follow-up pass keeps the dictionaries: what it copies and what it renders agree.
    describe(steward, Dataset.objects.get(pk=datasets[7]), "Copied from the CRM, nightly")
    follow_up = documents.render_documents()
    assert (follow_up.full, follow_up.datasets, follow_up.copied) == (
        False,
        1,
        len(datasets) + len(jobs) - 1,
    )
    assert_as_rendered()
    described = docfile.current().spliced(DATASET, [datasets[7]], "data")[datasets[7]]
    assert "Copied from the CRM" in described.decode()


def test_a_process_renders_only_the_nodes_changed_since_the_file(steward):
    from graph import documents
    from graph.nodecache import DATASET, JOB, NodeCache

    g = LineageBuilder()
    g.chain("a", "b", "c")
    a, b, c = (g.ds[name].pk for name in ("a", "b", "c"))
    assert documents.render_documents().full
    # Changes after the pass: to one dataset, and to nothing a lineage answer shows.
    describe(steward, g.ds["a"], "Raw")
    g.dataset("d")
    late = NodeCache(100)
    calls: list[list[int]] = []
    served = shown(late, DATASET, [a, b, c], rendered_by(calls))
    assert calls == [[a]]
    assert '"description":"Raw"' in served[a]
    assert shown(late, JOB, [g.jobs["job_0"].pk], lambda pks: {})  # from the file
    # A process that had followed the log since before the change judges it the same way.
    assert '"description":"Raw"' in shown(late, DATASET, [a], rendered_by([]))[a]


def test_a_follow_up_pass_renders_what_changed_and_takes_the_rest_from_the_file(steward):
    from graph import docfile, documents
    from graph.nodecache import DATASET, NodeCache

    g = LineageBuilder()
    g.chain("a", "b", "c")
    a, b, c = (g.ds[name].pk for name in ("a", "b", "c"))
    g.dataset("gone")
    assert documents.render_documents().full
    describe(steward, g.ds["a"], "Raw")
    g.ds["gone"].delete()
    # The scheduled pass waits for more changes than that.
    waiting = documents.render_documents(at_least=3)
    assert waiting.skipped == "2 nodes changed since the file was written"
    follow_up = documents.render_documents()
    assert (follow_up.full, follow_up.datasets, follow_up.jobs, follow_up.copied) == (
        False,
        1,
        0,
        4,
    )
    assert documents.render_documents().skipped == "0 nodes changed since the file was written"
    assert docfile.current().revision.value == follow_up.revision
    assert docfile.current().documents == 5  # the deleted dataset's is gone
    calls: list[list[int]] = []
    served = shown(NodeCache(100), DATASET, [a, b, c], rendered_by(calls))
    assert calls == []
    assert '"description":"Raw"' in served[a]
    # The scheduled task asks for many changes.
    from graph import tasks

    assert tasks.render_node_documents.delay().get()["skipped"].startswith("0 nodes changed")


def test_a_running_process_maps_the_newer_file_at_its_next_look(steward):
    from graph import docfile, documents
    from graph.nodecache import DATASET, NodeCache

    g = LineageBuilder()
    g.chain("a", "b")
    a, b = g.ds["a"].pk, g.ds["b"].pk
    assert documents.render_documents().full
    process = NodeCache(100)
    shown(process, DATASET, [b], rendered_by([]))
    first = docfile.current()
    describe(steward, g.ds["a"], "Raw")
    second = documents.render_documents()
    calls: list[list[int]] = []
    served = shown(process, DATASET, [a], rendered_by(calls))
    assert calls == [] and '"description":"Raw"' in served[a]
    assert docfile.current() is not first and docfile.current().revision.value == second.revision


def test_a_file_of_another_release_or_timeline_is_never_served(steward, monkeypatch):
    """A release whose rendering code differs (graph.revision.code_digest) renders every node
    again; a file written on another timeline (the database restored, or recreated under
    the same name) is not trusted, whatever its revision says."""
    from graph import docfile, documents
    from graph import revision as rev
    from graph.nodecache import DATASET, NodeCache

    g = LineageBuilder()
    g.chain("a", "b")
    a, b = g.ds["a"].pk, g.ds["b"].pk
    assert documents.render_documents().full
    old = docfile.file_path()
    monkeypatch.setattr(rev, "code_digest", lambda: "another-release")
    assert docfile.file_path() != old and docfile.current() is None
    # The old release's file, where the new one would look for its own.
    docfile.file_path().write_bytes(old.read_bytes())
    with pytest.raises(docfile.CorruptFile, match="written by another release"):
        docfile.DocFile(docfile.file_path())
    calls: list[list[int]] = []
    shown(NodeCache(100), DATASET, [a, b], rendered_by(calls))
    assert calls == [[a, b]]
    again = documents.render_documents()
    assert (again.full, again.datasets) == (True, 2)
    assert not old.exists()  # swept: this database's file of the earlier release
    assert (
        not old.with_suffix(".lock").exists() and docfile.file_path().with_suffix(".lock").exists()
    )
    calls.clear()
    shown(NodeCache(100), DATASET, [a, b], rendered_by(calls))
    assert calls == []
    other = NodeCache(100)
    other.sync()
    docfile.current().revision = revision.Revision(again.revision, "elsewhere")
    other.clear()
    shown(other, DATASET, [a], rendered_by(calls))
    assert calls == [[a]]


def test_a_change_the_change_log_cannot_pin_to_nodes_makes_the_next_pass_full():
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
    shown(NodeCache(100), DATASET, [g.ds["a"].pk], rendered_by(calls))
    assert calls == [[g.ds["a"].pk]]
    second = documents.render_documents()
    assert (second.full, second.datasets) == (True, 2)
    served = shown(NodeCache(100), DATASET, [g.ds["a"].pk], rendered_by(calls))
    assert len(calls) == 1
    assert "team-renamed" in served[g.ds["a"].pk]
    assert documents.render_documents(full=True).full


def test_only_one_pass_runs_at_a_time():
    from graph import documents

    LineageBuilder().chain("a", "b")
    holder = threading.Event()
    release = threading.Event()

    def hold() -> None:
        try:
            with docfile.locked(docfile.file_path(), wait=False) as held:
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


def test_a_lineage_answer_from_the_file_is_the_answer_rendered_afresh(steward, settings):
    from graph import documents, nodecache, responses
    from graph.render import lineage_json

    g = LineageBuilder()
    g.chain("a", "b", "c")
    # Ids the API escapes.
    g.dataset('d "quoted" \\ é')
    g.job("fork → d", reads=["b"], writes=['d "quoted" \\ é'], at=T1)
    g.run("fork → d", at=T1)
    assert documents.render_documents().full
    describe(steward, g.ds["c"], "Gold")
    root = resolve_node_id(g.id("a"))

    def bodies() -> list[bytes]:
        nodecache.cache.clear()
        responses.cache.clear()
        with revision.pinned():
            return [
                lineage_json(queries.lineage(root, depth=5, as_of=as_of))
                for as_of in (None, T1, T2)
            ]

    # Straight from the file; "c", changed since the pass, rendered afresh.
    from_file = bodies()
    assert b'"description":"Gold"' in from_file[0]
    assert f'"dataset:{g.ns.name}:d \\"quoted\\" \\\\ é"'.encode() in from_file[0]
    # Without the host's files at all.
    settings.GRAPH_SHARED_NODE_DATA = False
    assert bodies() == from_file


def test_an_unreadable_file_is_not_used_and_the_next_pass_writes_it_whole(caplog):
    from graph import docfile, documents
    from graph.nodecache import DATASET, NodeCache

    g = LineageBuilder()
    g.chain("a", "b")
    path = docfile.file_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"LXDOCS01" + bytes(64))
    with pytest.raises(docfile.CorruptFile, match="an older layout"):
        docfile.DocFile(path)
    path.write_bytes(b"not a document file at all")
    assert docfile.current() is None
    assert "node document file not used" in caplog.text
    calls: list[list[int]] = []
    shown(NodeCache(100), DATASET, [g.ds["a"].pk], rendered_by(calls))
    assert calls == [[g.ds["a"].pk]]
    assert documents.render_documents().full
    assert docfile.current().documents == 3
    # Cut short: the sections it names run past its end.
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(docfile.CorruptFile, match="past the end of the file"):
        docfile.DocFile(path)


def test_damaged_document_bytes_never_reach_an_answer_and_the_file_is_written_again(
    steward, settings, caplog
):
    from graph import docfile, documents, nodecache, responses
    from graph.nodecache import DATASET
    from graph.render import lineage_json

    g = LineageBuilder()
    g.chain("a", "b", "c")
    root = resolve_node_id(g.id("a"))

    def damage(pk: int) -> None:
        """Flip a byte in the middle of the node's compressed data, on disk."""
        mapped = docfile.current()
        part = mapped.parts[DATASET]
        at = int(np.searchsorted(part.pks, pk))
        lo, hi = part.offsets["data"][at : at + 2].tolist()
        where = part.starts["data"] + (lo + hi) // 2
        with open(mapped.path, "r+b") as handle:
            handle.seek(where)
            byte = handle.read(1)[0]
            handle.seek(where)
            handle.write(bytes([byte ^ 0x55]))

    def body() -> bytes:
        nodecache.cache.clear()
        responses.cache.clear()
        with revision.pinned():
            return lineage_json(queries.lineage(root, depth=5))

    assert documents.render_documents().full
    path = docfile.file_path()
    whole = body()
    damage(g.ds["b"].pk)
    # The document's checksum fails: the process stops using the file, moved aside.
    assert body() == whole
    assert "node document file no longer used" in caplog.text
    assert "a dataset's data is damaged" in caplog.text
    assert not path.exists() and path.with_suffix(".damaged").exists()
    assert docfile.current() is None
    # The scheduled pass finds no file and writes it whole.
    assert documents.render_documents(at_least=documents.REWRITE_AFTER).full
    assert body() == whole
    # A follow-up pass does not carry damaged bytes on: it renders everything again.
    damage(g.ds["c"].pk)
    describe(steward, g.ds["a"], "Raw")
    assert documents.render_documents().full
    assert "node document file before not used" in caplog.text
    served = body()
    assert b'"description":"Raw"' in served
    settings.GRAPH_SHARED_NODE_DATA = False
    assert body() == served


def test_the_node_directory_is_mapped_from_the_file_and_answers_as_the_database(steward):
    from catalog.models import DatasetField
    from graph import details, directory, documents, nodecache

    g = LineageBuilder()
    g.chain("a", "b", "c")
    g.dataset("s3:/lake/part:v2", fields=("key", "id"))
    assert documents.render_documents().full
    found = directory.get()
    assert found is not None
    fields = list(DatasetField.objects.values_list("pk", flat=True))
    assert found.field_rows(fields) == details.field_rows(fields)
    datasets = [ds.pk for ds in g.ds.values()]
    assert found.node_names(nodecache.DATASET, datasets) == details.load_dataset_names(datasets)
    raw = f"datasetField:{g.ns.name}:s3:/lake/part:v2:key"
    assert resolve_node_id(raw).pk == g.field("s3:/lake/part:v2.key").pk
    # A dataset renamed since the file: the directory leaves it to the database.
    Dataset.objects.filter(pk=g.ds["a"].pk).update(name="a_renamed")
    assert directory.get().dataset_pk(g.ns.name, "a") is None
    assert resolve_node_id(f"dataset:{g.ns.name}:a_renamed").pk == g.ds["a"].pk
    with pytest.raises(LookupError):
        resolve_node_id(g.id("a"))
    assert directory.get().dataset_pk(g.ns.name, "b") == g.ds["b"].pk


def test_without_a_file_every_node_is_rendered_once_per_process():
    from graph import docfile
    from graph.nodecache import DATASET, NodeCache

    g = LineageBuilder()
    g.chain("a", "b")
    process = NodeCache(100)
    calls: list[list[int]] = []
    shown(process, DATASET, [g.ds["a"].pk], rendered_by(calls))
    shown(process, DATASET, [g.ds["a"].pk], rendered_by(calls))
    assert calls == [[g.ds["a"].pk]]
    assert docfile.current() is None and not docfile.file_path().exists()


def counted_builds(monkeypatch) -> list[str]:
    """The kinds of snapshot built from the edges from now on, in order."""
    builds: list[str] = []
    build = snapshot.build

    def counted(kind: snapshot.Kind, at: revision.Revision) -> snapshot.Snapshot:
        builds.append(kind.name)
        return build(kind, at)

    monkeypatch.setattr(snapshot, "build", counted)
    return builds


def test_processes_of_a_host_share_one_snapshot_base_and_catch_up_from_it(
    settings, caplog, monkeypatch
):
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
    builds = counted_builds(monkeypatch)
    # A new process: it maps the host's base and catches up by delta with what changed
    # since, without reading every edge again.
    g.close("job_1", "c", Direction.OUTPUT, T1)
    g.dataset("d")
    g.job("job_2", reads=["b"], writes=["d"])
    snapshot.reset()
    # job_1 writes nothing now: retired, it is not part of today's graph.
    assert downstream() == {"a", "b", "d", "job_0", "job_2"}
    assert builds == []
    assert not snapshot.table().base.cols["id"].flags.writeable  # the map, not a copy
    # Edges loaded without per-row change logging: the base is not caught up but rebuilt.
    with revision.bulk_load():
        TableEdge.objects.filter(job=g.jobs["job_2"]).delete()
    snapshot.reset()
    assert downstream() == {"a", "b", "job_0"}
    assert builds == ["table"]
    # A file that is not a base (cut short, or not ours) is written again.
    whole = path.read_bytes()
    written = docfile.DocFile(path)
    for broken in (whole[: len(whole) // 2], b"not a snapshot at all" + bytes(64)):
        # Replaced, as a writer does: the file this process maps is never cut short.
        path.with_suffix(".new").write_bytes(broken)
        path.with_suffix(".new").replace(path)
        snapshot.reset()
        assert downstream() == {"a", "b", "job_0"}
    assert "lineage snapshot file" in caplog.text
    again = docfile.DocFile(path)
    assert (again.revision, again.meta) == (written.revision, written.meta)
    assert again.arrays.keys() == written.arrays.keys()
    assert all(np.array_equal(again.arrays[k], a) for k, a in written.arrays.items())


def test_a_deploy_writes_the_snapshot_bases_so_a_server_process_starts_without_building(
    settings, monkeypatch
):
    settings.GRAPH_SHARED_NODE_DATA = True
    g = LineageBuilder()
    g.chain("a", "b", "c")
    snapshot.reset()
    out = StringIO()
    call_command("render_node_documents", stdout=out)
    assert out.getvalue().startswith("Full pass at revision ")
    assert "Lineage snapshot bases of this host ready in " in out.getvalue()
    assert docfile_host_path("table").exists() and docfile_host_path("column").exists()
    builds = counted_builds(monkeypatch)
    # A server process started after the deploy maps both bases: it builds none.
    snapshot.reset()
    assert snapshot.warm()
    with revision.pinned():
        graph = queries.lineage(resolve_node_id(g.id("a")), depth=5, direction="downstream")
    assert names(graph) == {"a", "b", "c", "job_0", "job_1"}
    assert builds == []
    # Run again (a cron job, a second deploy step): nothing to render, the bases kept.
    out = StringIO()
    call_command("render_node_documents", stdout=out)
    assert out.getvalue().startswith("Nothing rendered: 0 nodes changed since the file")
    assert builds == []


def docfile_host_path(kind: str):
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
