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

from django.conf import settings

from graph import revision as rev

DATASET = "d"
JOB = "j"
SYNC_LIMIT = 20_000


@dataclass(slots=True)
class Entry:
    namespace: str
    name: str
    data: str | None = None


class NodeCache:
    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.lock = threading.Lock()
        self.revision: rev.Revision | None = None
        self.entries: OrderedDict[tuple[str, int], Entry] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
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
                self.entries.clear()
            else:
                for kind, obj in changes:
                    if obj is not None:
                        self.entries.pop((kind, obj), None)
            self.revision = current

    def _get(self, kind: str, pks: Iterable[int]) -> tuple[dict[int, Entry], list[int]]:
        found: dict[int, Entry] = {}
        missing: list[int] = []
        with self.lock:
            for pk in pks:
                entry = self.entries.get((kind, pk))
                if entry is None:
                    missing.append(pk)
                else:
                    self.entries.move_to_end((kind, pk))
                    found[pk] = entry
        self.hits += len(found)
        self.misses += len(missing)
        return found, missing

    def _put(self, kind: str, items: dict[int, Entry]) -> None:
        with self.lock:
            for pk, entry in items.items():
                self.entries[(kind, pk)] = entry
                self.entries.move_to_end((kind, pk))
            while len(self.entries) > self.max_entries:
                self.entries.popitem(last=False)

    def names(
        self,
        kind: str,
        pks: Iterable[int],
        render: Callable[[list[int]], dict[int, tuple[str, str, str]]],
    ) -> dict[int, tuple[str, str]]:
        """(namespace, name) by pk; misses are rendered in full by ``render`` (one call), so
        the data asked for next is already cached."""
        self.sync()
        found, missing = self._get(kind, pks)
        out = {pk: (e.namespace, e.name) for pk, e in found.items()}
        if missing:
            rendered = render(missing)
            out.update({pk: (ns, name) for pk, (ns, name, _) in rendered.items()})
            self._put(
                kind, {pk: Entry(ns, name, text) for pk, (ns, name, text) in rendered.items()}
            )
        return out

    def data(
        self,
        kind: str,
        pks: Iterable[int],
        render: Callable[[list[int]], dict[int, tuple[str, str, str]]],
    ) -> dict[int, str]:
        """Rendered data text by pk; misses come from ``render`` as (namespace, name, text)."""
        self.sync()
        found, _ = self._get(kind, pks)
        out = {pk: e.data for pk, e in found.items() if e.data is not None}
        missing = [pk for pk in pks if pk not in out]
        if missing:
            rendered = render(missing)
            out.update({pk: text for pk, (_, _, text) in rendered.items()})
            self._put(
                kind, {pk: Entry(ns, name, text) for pk, (ns, name, text) in rendered.items()}
            )
        return out

    def stats(self) -> dict[str, int]:
        return {"entries": len(self.entries), "hits": self.hits, "misses": self.misses}


cache = NodeCache(int(getattr(settings, "GRAPH_NODE_CACHE_SIZE", 50_000)))
