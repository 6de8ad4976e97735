"""A per-process cache of what lineage answers show about nodes: names and rendered data.

Hub answers hold up to 2,000 nodes; rendering their data (20,000 fields)
costs far more than walking the graph, and hubs are asked for again and
again. Entries are keyed by (kind, pk) and evicted precisely: the revision
triggers log every change to a dataset, its fields, owners and tags, or a
job (graph/revision.py), and :meth:`NodeCache.sync` drops the changed
entries — or everything, when the change log cannot say. Bounded LRU.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from graph import revision as rev

DATASET = "d"
JOB = "j"
SYNC_LIMIT = 20_000


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
        self.hits = 0
        self.misses = 0

    def clear(self) -> None:
        with self.lock:
            self._entries.clear()
            self.revision = None

    def sync(self) -> None:
        """Drop entries changed since the cache's revision (one query when nothing moved)."""
        current = rev.current()
        if current == self.revision:
            return
        with self.lock:
            known = self.revision
            if known == current:
                return
            changes = None
            if known is not None and current.value > known.value and rev.on_timeline(known):
                changes = rev.changes_between(
                    known.value,
                    current.value,
                    (rev.KIND_DATASET, rev.KIND_JOB, rev.KIND_ALL_DATA),
                    SYNC_LIMIT,
                )
            if changes is None or any(
                kind in (rev.KIND_RESET, rev.KIND_ALL_DATA) for kind, _ in changes
            ):
                self._entries.clear()
            else:
                for kind, obj in changes:
                    if obj is not None:
                        self._entries.pop((kind, obj), None)
            self.revision = current

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

    def entries(self, kind: str, pks: Iterable[int], render: Render) -> dict[int, Entry]:
        """Entries by pk; misses are rendered by ``render`` in one call and kept."""
        self.sync()
        found, missing = self._get(kind, pks)
        if missing:
            rendered = render(missing)
            found.update(rendered)
            self._put(kind, rendered)
        return found

    def stats(self) -> dict[str, int]:
        return {"entries": len(self._entries), "hits": self.hits, "misses": self.misses}


cache = NodeCache(int(getattr(settings, "GRAPH_NODE_CACHE_SIZE", 50_000)))
