"""A cache of large lineage responses, kept valid precisely, per process.

Hub answers (thousands of nodes, megabytes of JSON) are asked for again and
again, and rebuilding one costs tens of milliseconds of Python. A cached
body stays valid until a change touches it: when the revision has moved,
the change log since the body was built is read (graph/revision.py) and the
body is dropped if any changed edge has an endpoint among the nodes its
traversal reached, or any shown dataset or job changed — or if the log
cannot say. Otherwise the body is served as is.

Each process keeps the bodies it served last in memory (``MAX_ENTRIES``),
zstd-compressed: a hub's body of 2.2 MB of JSON takes 171 KB, and is
decompressed in about 1.3 ms, far less than the tens of milliseconds of building it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import zstandard

from graph import revision as rev
from graph import snapshot

log = logging.getLogger(__name__)

# Answers that took less CPU than this to build are rebuilt rather than kept: checking a
# kept one against the change log costs about 0.6 ms, and at 100,000 datasets an ordinary
# depth-5 answer takes 2-3 ms to build, a hub's 20-200 ms. Judged by build cost, not size,
# so that many mid-sized answers cannot push the hubs out of the cache.
MIN_BUILD_SECONDS = 0.008
# Compressed, a hub's body takes about 200 KB: 256 of them fit where 64 uncompressed did
# not, and many answers as of random instants (each costing more than 8 ms) no longer push
# the hubs out between two of their requests.
MAX_ENTRIES = 256
CHANGE_LIMIT = 5000

IntArray = npt.NDArray[np.int64]
Reached = tuple[IntArray, IntArray]  # (datasets, jobs)


@dataclass
class Cached:
    body: bytes  # compressed
    revision: rev.Revision
    datasets: IntArray  # sorted pks reached (and shown)
    jobs: IntArray


def _touches(values: set[int], members: IntArray) -> bool:
    if not values or members.size == 0:
        return False
    probe = np.fromiter(values, dtype=np.int64)
    return bool(np.isin(probe, members).any())


def _edge_endpoints(edge_ids: list[int]) -> tuple[set[int], set[int]] | None:
    """(jobs, datasets) at either end of these table edges, from the current snapshot —
    including rows since deleted or closed; None when an edge is unknown."""
    snap = snapshot.table()
    jobs: set[int] = set()
    datasets: set[int] = set()
    wanted = np.asarray(sorted(set(edge_ids)), dtype=np.int64)
    found = np.zeros(wanted.size, dtype=bool)
    for store in (snap.base, snap.overlay):
        ids = store.cols["id"]
        if ids.size == 0 or wanted.size == 0:
            continue
        at, hit = snapshot.rows_of(ids, wanted)
        jobs.update(store.cols["job"][at[hit]].tolist())
        datasets.update(store.cols["ds"][at[hit]].tolist())
        found |= hit
    if not found.all():
        return None
    return jobs, datasets


class ResponseCache:
    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self.lock = threading.Lock()
        self.entries: OrderedDict[Hashable, Cached] = OrderedDict()

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()

    def get(self, key: Hashable) -> bytes | None:
        with self.lock:
            entry = self.entries.get(key)
        if entry is None:
            return None
        current = rev.current()
        if entry.revision != current:
            if not self._still_valid(entry, current):
                with self.lock:
                    self.entries.pop(key, None)
                return None
            entry.revision = current
        with self.lock:
            if key in self.entries:
                self.entries.move_to_end(key)
        return zstandard.ZstdDecompressor().decompress(entry.body)

    def through(self, key: Hashable, build: Callable[[], tuple[bytes, Reached | None]]) -> bytes:
        """The body kept for ``key``, or the one ``build`` gives with the datasets and jobs
        its traversal reached (None: never kept), kept when it cost enough CPU (this
        thread's clock, unmoved while it waits for a core; MIN_BUILD_SECONDS)."""
        if (kept := self.get(key)) is not None:
            return kept
        started = time.thread_time()
        body, reached = build()
        if reached is not None and time.thread_time() - started >= MIN_BUILD_SECONDS:
            # A copy: the compressor's own result keeps the room of an incompressible body.
            packed = bytes(memoryview(zstandard.ZstdCompressor(level=1).compress(body)))
            entry = Cached(packed, rev.current(), *reached)
            with self.lock:
                self.entries[key] = entry
                self.entries.move_to_end(key)
                while len(self.entries) > self.max_entries:
                    self.entries.popitem(last=False)
        return body

    def _still_valid(self, entry: Cached, current: rev.Revision) -> bool:
        known = entry.revision
        changes = rev.changes_since(
            known,
            current,
            (rev.Kind.TABLE, rev.Kind.DATASET, rev.Kind.JOB, rev.Kind.ALL_DATA),
            CHANGE_LIMIT,
        )
        if changes is None:
            return False
        by_kind: dict[str, set[int]] = {}
        for kind, obj in changes:
            by_kind.setdefault(kind, set()).add(obj)
        if _touches(by_kind.get(rev.Kind.DATASET, set()), entry.datasets):
            return False
        if _touches(by_kind.get(rev.Kind.JOB, set()), entry.jobs):
            return False
        edges = by_kind.get(rev.Kind.TABLE, set())
        if edges:
            ends = _edge_endpoints(list(edges))
            if ends is None:
                return False
            jobs, datasets = ends
            if _touches(jobs, entry.jobs) or _touches(datasets, entry.datasets):
                return False
        return True


cache = ResponseCache()
