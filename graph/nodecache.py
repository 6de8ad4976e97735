"""A per-process cache of what lineage answers show about nodes: names and rendered data.

Hub answers hold up to 2,000 nodes; rendering their data (20,000 fields)
costs far more than walking the graph, and hubs are asked for again and
again. Entries are keyed by (kind, pk) and evicted precisely: the revision
triggers log every change to a dataset, its fields, owners and tags, or a
job (graph/revision.py), and :meth:`NodeCache.sync` drops the changed
entries — or everything, when the change log cannot say. Bounded LRU.

On PostgreSQL the rendered text is also shared between processes through
``graph_nodedoc`` (graph.models.NodeDocument), so a node is rendered once,
not once per server process: most lineage answers name nodes that the
answering process has not seen yet. A document carries the revision its
writer had synced to. A process trusts it when the document is at least as
new as the moment the process started following the change log (``horizon``)
and the process saw no change to that node after the document's revision;
anything else is rendered again and the newer document replaces the old. A
process that starts after a full rendering pass (graph/documents.py) reads the
change log from that pass on, so its horizon is the pass, not its own start.
The processes of one host read the documents of that pass from a file they all
map (graph/docfile.py) rather than from the table, by the same rule.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection

from catalog.pgsql import bound_cursor
from graph import docfile
from graph import revision as rev
from graph.details import dataset_info_from_json, info_json, job_info_from_json

log = logging.getLogger(__name__)

# The kinds of node a document is of, as the change log names them.
DATASET, JOB = rev.Kind.DATASET, rev.Kind.JOB
SYNC_LIMIT = 20_000
# Nodes whose last change this process remembers (for judging shared documents); past
# this, it forgets them all and trusts only documents written from then on.
CHANGED_LIMIT = 200_000


@dataclass(slots=True)
class Entry:
    namespace: str
    name: str
    # The node's Marquez ``data`` as JSON text.
    data: str
    # A small summary object (graph.details.DatasetInfo with personal fields only, or JobInfo).
    info: Any


Render = Callable[[list[int]], dict[int, Entry]]
# (dataset pk, namespace, dataset name, field name, type, subject kind) of a field.
FieldRow = tuple[int, str, str, str, str, str | None]
LoadFields = Callable[[list[int]], dict[int, FieldRow]]


class NodeCache:
    def __init__(self, max_entries: int, shared: bool | None = None) -> None:
        self.max_entries = max_entries
        self.max_fields = 10 * max_entries
        self.lock = threading.Lock()
        self.revision: rev.Revision | None = None
        self._entries: OrderedDict[tuple[str, int], Entry] = OrderedDict()
        # Field rows (column lineage names every field it shows), dropped with their dataset.
        self._fields: OrderedDict[int, FieldRow] = OrderedDict()
        self._fields_of: dict[int, set[int]] = {}
        # Shared documents: None follows the database (PostgreSQL shares).
        self.shared = shared
        # Revision from which this process has seen every change, and the revision at which
        # it saw each changed node last.
        self.horizon = 0
        self.changed: dict[tuple[str, int], int] = {}
        # Counts the times this process lost track of changes and started over (clear,
        # a reset, a change log too long to read): what was read in an earlier epoch
        # (graph/directory.py) cannot be judged by ``changed``.
        self.epoch = 0
        self.hits = 0
        self.misses = 0
        self.shared_hits = 0
        # Of those, documents read from the host's document file.
        self.file_hits = 0
        # (file, epoch, whether its pass is on the timeline) last judged.
        self._file_checked: tuple[int, int, bool] = (0, -1, False)

    def clear(self) -> None:
        with self.lock:
            self._entries.clear()
            self._fields.clear()
            self._fields_of.clear()
            self.revision = None
            self.changed.clear()
            self.horizon = 0
            self.epoch += 1

    def _sharing(self) -> bool:
        if self.shared is not None:
            return self.shared
        return connection.vendor == "postgresql" and bool(settings.GRAPH_SHARED_NODE_DATA)

    def sync(self) -> rev.Revision:
        """Drop entries changed since the cache's revision (one query when nothing moved);
        gives the revision synced to."""
        current = rev.current()
        if current == self.revision:
            return current
        with self.lock:
            known = self.revision
            if known == current:
                return current
            changes = None
            if known is not None and current.value > known.value and rev.on_timeline(known):
                changes = rev.changes_between(
                    known.value,
                    current.value,
                    (rev.Kind.DATASET, rev.Kind.JOB, rev.Kind.ALL_DATA),
                    SYNC_LIMIT,
                )
            if changes is None or any(
                kind in (rev.Kind.RESET, rev.Kind.ALL_DATA) for kind, _ in changes
            ):
                self._entries.clear()
                self._fields.clear()
                self._fields_of.clear()
                self._start_epoch(current)
            else:
                for kind, obj in changes:
                    if obj is not None:
                        self._entries.pop((kind, obj), None)
                        self.changed[(kind, obj)] = current.value
                        if kind == DATASET:
                            for field in self._fields_of.pop(obj, ()):
                                self._fields.pop(field, None)
                if len(self.changed) > CHANGED_LIMIT:
                    self._start_epoch(current)
            self.revision = current
        return current

    def _start_epoch(self, current: rev.Revision) -> None:
        """Start following the change log afresh at ``current``: no earlier document is
        trusted, unless the last full rendering pass (graph/documents.py) is on the change
        log's timeline and few enough nodes changed since it to remember them all."""
        self.changed.clear()
        self.horizon = current.value
        self.epoch += 1
        if not self._sharing():
            return
        with bound_cursor() as cursor:
            cursor.execute(
                "SELECT revision, token FROM graph_nodedoc_pass WHERE id = 1 AND code = %s",
                [rev.code_digest()],
            )
            row = cursor.fetchone()
        if row is None:
            return
        floor = rev.Revision(int(row[0]), str(row[1]))
        docfile.refresh(floor)
        since = node_changes(floor, current, SYNC_LIMIT)
        if since is not None:
            self.changed.update(since)
            self.horizon = floor.value

    def _get(self, kind: str, pks: Iterable[int]) -> tuple[dict[int, Entry], list[int]]:
        found: dict[int, Entry] = {}
        missing: list[int] = []
        with self.lock:
            for pk in pks:
                entry = self._entries.get((kind, pk))
                if entry is None:
                    missing.append(pk)
                else:
                    self._entries.move_to_end((kind, pk))
                    found[pk] = entry
        self.hits += len(found)
        self.misses += len(missing)
        return found, missing

    def _put(self, kind: str, items: dict[int, Entry]) -> None:
        with self.lock:
            for pk, entry in items.items():
                self._entries[(kind, pk)] = entry
                self._entries.move_to_end((kind, pk))
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def entries(
        self, kind: str, pks: Iterable[int], render: Render, info: bool = False
    ) -> dict[int, Entry]:
        """Entries by pk; misses are taken from the shared documents or rendered by
        ``render`` in one call, and kept. With ``info``, every entry has its summary
        object (read from the document's summary when it has one)."""
        # What this thread renders is at least as new as this revision (another thread may
        # move self.revision on meanwhile): documents are stamped with it.
        synced = self.sync()
        found, missing = self._get(kind, pks)
        if info:
            lacking = [pk for pk, entry in found.items() if entry.info is None]
            for pk in lacking:
                del found[pk]
            missing += lacking
        if not missing:
            return found
        sharing = self._sharing()
        if sharing:
            shared = self._shared_many({kind: missing}, info).get(kind, {})
            if shared:
                found.update(shared)
                self._put(kind, shared)
                self.shared_hits += len(shared)
                missing = [pk for pk in missing if pk not in shared]
        if missing:
            rendered = render(missing)
            found.update(rendered)
            self._put(kind, rendered)
            if sharing:
                publisher.submit(kind, synced.value, rendered)
        return found

    def file_columns(
        self, kind: str, pks: list[int], columns: tuple[str, ...]
    ) -> dict[str, dict[int, bytes]]:
        """Each of ``columns`` (graph.docfile.COLUMNS, UTF-8) of those of these nodes whose
        document in the host's document file this process trusts, read straight from the
        file. Nothing is kept: the file holds every document for all the host's processes,
        and reading a few thousand from it costs no more than finding them here."""
        self.sync()
        mapped = self._document_file()
        if mapped is None:
            return {column: {} for column in columns}
        found = mapped.spliced(kind, pks, self.horizon, self.changed, columns)
        self.file_hits += len(found[columns[0]])
        return found

    def fields(self, pks: Iterable[int], load: LoadFields) -> dict[int, FieldRow]:
        """Field rows by pk; misses are loaded by ``load`` in one call and kept until their
        dataset changes (a field's rename or retyping is logged as its dataset's change)."""
        self.sync()
        found: dict[int, FieldRow] = {}
        missing: list[int] = []
        with self.lock:
            for pk in pks:
                row = self._fields.get(pk)
                if row is None:
                    missing.append(pk)
                else:
                    self._fields.move_to_end(pk)
                    found[pk] = row
        if not missing:
            return found
        loaded = load(missing)
        found.update(loaded)
        with self.lock:
            for pk, row in loaded.items():
                self._fields[pk] = row
                self._fields_of.setdefault(row[0], set()).add(pk)
            while len(self._fields) > self.max_fields:
                pk, row = self._fields.popitem(last=False)
                self._fields_of.get(row[0], set()).discard(pk)
        return found

    def preload(self, wanted: dict[str, list[int]]) -> None:
        """Take the shared documents of the datasets and jobs in ``wanted`` (pks by kind)
        that this process lacks in one query, rather than one per kind."""
        if not self._sharing():
            return
        self.sync()
        with self.lock:
            missing = {
                kind: [pk for pk in pks if (kind, pk) not in self._entries]
                for kind, pks in wanted.items()
            }
        if sum(1 for pks in missing.values() if pks) < 2:
            return  # one kind: entries() asks for it in one query anyway
        for kind, shared in self._shared_many(missing).items():
            self._put(kind, shared)
            self.shared_hits += len(shared)

    def _shared_many(
        self, wanted: dict[str, list[int]], info: bool = False
    ) -> dict[str, dict[int, Entry]]:
        """Shared documents of these nodes (pks by kind) that this process can trust: from
        the host's document file (graph/docfile.py), the rest from ``graph_nodedoc``; with
        ``info``, only those that carry the node's summary, read into an object."""
        out: dict[str, dict[int, Entry]] = {}
        mapped = self._document_file()
        if mapped is not None:
            rest: dict[str, list[int]] = {}
            for kind, pks in wanted.items():
                documents = mapped.lookup(kind, pks, self.horizon, self.changed, info)
                if documents:
                    out[kind] = {pk: _entry(kind, *doc) for pk, doc in documents.items()}
                    self.file_hits += len(documents)
                rest[kind] = [pk for pk in pks if pk not in documents]
            wanted = rest
            if not any(wanted.values()):
                return out
        summary_column = "info" if info else "''"
        with bound_cursor() as cursor:
            cursor.execute(
                f"SELECT kind, obj_id, revision, namespace, name, data, {summary_column} "
                "FROM graph_nodedoc WHERE revision >= %s AND code = %s AND "
                "((kind = %s AND obj_id = ANY(%s)) OR (kind = %s AND obj_id = ANY(%s)))",
                [
                    self.horizon,
                    rev.code_digest(),
                    DATASET,
                    wanted.get(DATASET, []),
                    JOB,
                    wanted.get(JOB, []),
                ],
            )
            rows = cursor.fetchall()
        changed = self.changed
        for kind, pk, revision, namespace, name, data, summary in rows:
            if changed.get((kind, pk), 0) > revision or (info and not summary):
                continue
            out.setdefault(kind, {})[pk] = _entry(kind, namespace, name, data, summary)
        return out

    def _document_file(self) -> docfile.DocFile | None:
        """The host's document file, when this cache shares documents and the file's pass
        is on the current timeline (checked once per file and epoch)."""
        if not self._sharing():
            return None
        found = docfile.get()
        if found is None:
            return None
        key = (id(found), self.epoch)
        if self._file_checked[:2] != key:
            self._file_checked = (*key, rev.on_timeline(found.pass_revision))
        return found if self._file_checked[2] else None

    def stats(self) -> dict[str, int]:
        return {
            "entries": len(self._entries),
            "fields": len(self._fields),
            "hits": self.hits,
            "misses": self.misses,
            "shared_hits": self.shared_hits,
            "file_hits": self.file_hits,
        }


def _entry(kind: str, namespace: str, name: str, data: str, summary: str) -> Entry:
    read = None
    if summary:
        read = dataset_info_from_json(summary) if kind == DATASET else job_info_from_json(summary)
    return Entry(namespace, name, data, read)


def node_changes(
    after: rev.Revision, upto: rev.Revision, limit: int
) -> dict[tuple[str, int], int] | None:
    """The datasets and jobs changed after ``after`` up to ``upto``, each with the revision
    of its last change; None when the change log cannot tell (``after`` is not on its
    timeline, more than ``limit`` changed, or something changed every node's data)."""
    if after.value > upto.value or not rev.on_timeline(after):
        return None
    since = rev.last_changes(
        after.value, upto.value, (rev.Kind.DATASET, rev.Kind.JOB, rev.Kind.ALL_DATA), limit
    )
    if since is None or any(obj is None for _, obj in since):
        return None
    return {(kind, obj): at for (kind, obj), at in since.items() if obj is not None}


class Publisher:
    """Writes rendered documents to ``graph_nodedoc`` from one background thread, so that no
    request waits on sharing what it rendered (a hub answer is megabytes of text).

    The thread opens a connection for each batch and closes it after: nothing stays open
    between batches. A document is only ever a cache, so a failed or dropped write costs a
    render elsewhere, nothing else.
    """

    MAX_PENDING = 20_000

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.pending: dict[tuple[str, int], tuple[int, Entry]] = {}
        self.thread: threading.Thread | None = None
        self.busy = False

    def submit(self, kind: str, revision: int, rendered: dict[int, Entry]) -> None:
        with self.lock:
            for pk, entry in rendered.items():
                if len(self.pending) >= self.MAX_PENDING:
                    break
                self.pending[(kind, pk)] = (revision, entry)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="nodedoc", daemon=True)
                self.thread.start()
            self.wake.notify()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything submitted so far is written (tests, shutdown); False when
        ``timeout`` seconds passed first."""
        with self.lock:
            return self.wake.wait_for(lambda: not self.pending and not self.busy, timeout)

    def _run(self) -> None:
        while True:
            with self.lock:
                self.wake.wait_for(lambda: bool(self.pending))
                batch, self.pending = self.pending, {}
                self.busy = True
            try:
                write_documents(batch)
            except Exception:  # a cache write: never let it kill the thread
                log.exception("could not share %d rendered nodes", len(batch))
            finally:
                connection.close()
                with self.lock:
                    self.busy = False
                    self.wake.notify_all()


def write_documents(batch: dict[tuple[str, int], tuple[int, Entry]]) -> None:
    """Upsert documents in one lock order per kind; a newer document is never replaced by an
    older one."""
    by_kind: dict[str, list[tuple[int, int, Entry]]] = {}
    for (kind, pk), (revision, entry) in sorted(batch.items()):
        by_kind.setdefault(kind, []).append((pk, revision, entry))
    for kind, rows in by_kind.items():
        with bound_cursor() as cursor:
            cursor.execute(
                "INSERT INTO graph_nodedoc (kind, obj_id, revision, namespace, name, data, info, "
                "code) SELECT %s, t.obj_id, t.revision, t.namespace, t.name, t.data, t.info, %s "
                "FROM "
                # Binary parameters: as text, the driver escapes every quote of the JSON.
                "unnest(%b::bigint[], %b::bigint[], %b::text[], %b::text[], %b::text[], "
                "%b::text[]) AS t(obj_id, revision, namespace, name, data, info) "
                "ON CONFLICT (kind, obj_id) DO UPDATE SET revision = EXCLUDED.revision, "
                "namespace = EXCLUDED.namespace, name = EXCLUDED.name, data = EXCLUDED.data, "
                "info = EXCLUDED.info, code = EXCLUDED.code "
                "WHERE graph_nodedoc.revision < EXCLUDED.revision "
                # Another release's document, whatever its revision.
                "OR graph_nodedoc.code <> EXCLUDED.code "
                # The same revision with the summary it lacked.
                "OR (graph_nodedoc.revision = EXCLUDED.revision AND graph_nodedoc.info = '' "
                "AND EXCLUDED.info <> '')",
                [
                    kind,
                    rev.code_digest(),
                    [pk for pk, _, _ in rows],
                    [revision for _, revision, _ in rows],
                    [entry.namespace for _, _, entry in rows],
                    [entry.name for _, _, entry in rows],
                    [entry.data for _, _, entry in rows],
                    ["" if entry.info is None else info_json(entry.info) for _, _, entry in rows],
                ],
            )


publisher = Publisher()
cache = NodeCache(int(getattr(settings, "GRAPH_NODE_CACHE_SIZE", 50_000)))
