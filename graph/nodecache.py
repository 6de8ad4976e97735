"""The node store's per-process overlay: what lineage answers show about nodes (names and
rendered data) that the host's document file cannot give.

The host's document file (graph/docfile.py) holds every dataset and job as of the
revision it was written at; this cache keeps what the process rendered itself (nodes
changed since the file, or every node where there is no file), keyed by (kind, pk),
bounded LRU. It follows the change log (graph/revision.py):
the revision triggers log every change to a dataset, its fields, owners and tags, or a
job, and :meth:`NodeCache.sync` drops the changed entries and remembers the revision of
each node's last change, or starts over (a new epoch) when the log cannot say.

One rule decides whether a document of the file is trusted: the file is on the change
log's timeline and no older than the revision from which this process has followed the
log (``horizon``), and the process saw no change to the node after the file's revision.
A process that starts after the file was written reads the change log from the file's
revision, so its horizon is the file's, not its own start.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from graph import docfile
from graph import revision as rev

# The kinds of node a document is of, as the change log names them.
DATASET, JOB = rev.Kind.DATASET, rev.Kind.JOB
SYNC_LIMIT = 20_000
# Nodes whose last change this process remembers (for judging the file's documents); past
# this, it forgets them all and starts over.
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


class NodeCache:
    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.lock = threading.Lock()
        self.revision: rev.Revision | None = None
        self._entries: OrderedDict[tuple[str, int], Entry] = OrderedDict()
        # Revision from which this process has seen every change, and the revision at which
        # it saw each changed node last.
        self.horizon = 0
        self.changed: dict[tuple[str, int], int] = {}
        # Counts the times this process lost track of changes and started over (clear,
        # a reset, a change log too long to read): what was read in an earlier epoch
        # (graph/directory.py) cannot be judged by ``changed``.
        self.epoch = 0
        # (file, epoch, whether it is on the timeline) last judged.
        self._file_checked: tuple[int, int, bool] = (0, -1, False)

    def clear(self) -> None:
        with self.lock:
            self._entries.clear()
            self.revision = None
            self.changed.clear()
            self.horizon = 0
            self.epoch += 1

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
            if known is not None and current.value > known.value:
                changes = node_changes(known, current, SYNC_LIMIT)
            if changes is None:
                self._entries.clear()
                self._start_epoch(current)
            else:
                for key in changes:
                    self._entries.pop(key, None)
                    self.changed[key] = current.value
                if len(self.changed) > CHANGED_LIMIT:
                    self._start_epoch(current)
            self.revision = current
        return current

    def _start_epoch(self, current: rev.Revision) -> None:
        """Start following the change log afresh at ``current``: no earlier document is
        trusted, unless the host's document file is on the change log's timeline and few
        enough nodes changed since it to remember them all. Readers take no lock: the
        horizon rises before the changes are replaced and falls after, so one that reads
        in between trusts nothing rather than too much."""
        self.horizon = current.value
        self.epoch += 1
        changed: dict[tuple[str, int], int] = {}
        mapped = docfile.current()
        since = None if mapped is None else node_changes(mapped.revision, current, SYNC_LIMIT)
        if since is not None:
            changed = since
        self.changed = changed
        if mapped is not None and since is not None:
            self.horizon = mapped.revision.value

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
        return found, missing

    def _put(self, kind: str, items: dict[int, Entry]) -> None:
        with self.lock:
            for pk, entry in items.items():
                self._entries[(kind, pk)] = entry
                self._entries.move_to_end((kind, pk))
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def unchanged(self, kind: str, pks: list[int], revision: int) -> list[int]:
        """The one trust rule of what was read at ``revision`` (the host's document file,
        the node directory): those of ``pks`` seen unchanged since, when the process follows
        the change log from ``revision`` or earlier; none otherwise."""
        if revision < self.horizon:
            return []
        changed = self.changed
        if not changed:
            return pks
        return [pk for pk in pks if changed.get((kind, pk), 0) <= revision]

    def entries(self, kind: str, pks: Iterable[int], render: Render) -> dict[int, Entry]:
        """Entries by pk: kept ones, and the rest rendered by ``render`` in one call and
        kept. Callers look in the host's document file first (:meth:`file_column`)."""
        self.sync()
        found, missing = self._get(kind, pks)
        if missing:
            rendered = render(missing)
            found.update(rendered)
            self._put(kind, rendered)
        return found

    def file_column(self, kind: str, pks: list[int], column: str) -> dict[int, bytes]:
        """The ``column`` (graph.docfile.COLUMNS, UTF-8) of those of these nodes whose
        document in the host's document file this process trusts, read straight from the
        file. Nothing is kept: the file holds every document for all the host's processes,
        reading a few thousand from it costs no more than finding them here, and a process
        that kept the summaries it read grew by tens of megabytes after a few impact
        answers."""
        self.sync()
        mapped = self.document_file()
        if mapped is None:
            return {}
        return mapped.spliced(kind, self.unchanged(kind, pks, mapped.revision.value), column)

    def document_file(self) -> docfile.DocFile | None:
        """The host's document file, when there is one on the current timeline (checked
        once per file and epoch)."""
        found = docfile.get()
        if found is None:
            return None
        key = (id(found), self.epoch)
        if self._file_checked[:2] != key:
            self._file_checked = (*key, rev.on_timeline(found.revision))
        return found if self._file_checked[2] else None


def node_changes(
    after: rev.Revision, upto: rev.Revision, limit: int
) -> dict[tuple[str, int], int] | None:
    """The datasets and jobs changed after ``after`` up to ``upto``, each with the revision
    of its last change (revision.changes_since)."""
    return rev.changes_since(
        after, upto, (rev.Kind.DATASET, rev.Kind.JOB, rev.Kind.ALL_DATA), limit
    )


cache = NodeCache(settings.GRAPH_NODE_CACHE_SIZE)
