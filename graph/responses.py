"""A cache of large lineage responses, kept valid precisely, shared by a host's processes.

Hub answers (thousands of nodes, megabytes of JSON) are asked for again and
again, and rebuilding one costs tens of milliseconds of Python. A cached
body stays valid until a change touches it: when the revision has moved,
the change log since the body was built is read (graph/revision.py) and the
body is dropped if any changed edge has an endpoint among the nodes its
traversal reached, or any shown dataset or job changed — or if the log
cannot say. Otherwise the body is served as is.

Each process keeps the bodies it served last in memory. A server runs
several processes, and a repeated question lands on any of them, so every
body is also written to a file under ``DATA_DIR/responses`` that the other
processes of the host read before building their own (:class:`SharedStore`).
A file carries the revision its body was built at and the nodes its
traversal reached, and is checked by the same rule as a body in memory.
Files live in a directory named after the database and the code that renders
bodies, so another database or release never reads them; the oldest files go
when the directory outgrows ``GRAPH_SHARED_RESPONSE_MB``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import struct
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from django.conf import settings
from django.db import connection

from graph import revision as rev
from graph import snapshot

log = logging.getLogger(__name__)

# Answers smaller than this rebuild faster than they validate; leave them out. At 100,000
# datasets a 150 KB answer (under 200 nodes with their fields) takes 1.8 ms to build and
# 0.6 ms to serve from memory.
MIN_NODES = 200
MIN_BYTES = 64 * 1024
MAX_ENTRIES = 64
CHANGE_LIMIT = 5000

IntArray = npt.NDArray[np.int64]


@dataclass
class Cached:
    body: bytes
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
        at = np.minimum(np.searchsorted(ids, wanted), ids.size - 1)
        hit = ids[at] == wanted
        jobs.update(store.cols["job"][at[hit]].tolist())
        datasets.update(store.cols["ds"][at[hit]].tolist())
        found |= hit
    if not found.all():
        return None
    return jobs, datasets


def worth_keeping(body: bytes, nodes: int) -> bool:
    """Whether an answer of ``nodes`` nodes is large enough to keep (see MIN_NODES)."""
    return nodes >= MIN_NODES or len(body) >= MIN_BYTES


class ResponseCache:
    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self.lock = threading.Lock()
        self.entries: OrderedDict[Hashable, Cached] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()

    def get(self, key: Hashable) -> bytes | None:
        with self.lock:
            entry = self.entries.get(key)
        if entry is None:
            entry = shared.load(key)
            if entry is None:
                self.misses += 1
                return None
            with self.lock:
                self._insert(key, entry)
        current = rev.current()
        if entry.revision != current:
            if not self._still_valid(entry, current):
                with self.lock:
                    self.entries.pop(key, None)
                self.misses += 1
                return None
            entry.revision = current
        with self.lock:
            if key in self.entries:
                self.entries.move_to_end(key)
        self.hits += 1
        return entry.body

    def put(self, key: Hashable, body: bytes, datasets: IntArray, jobs: IntArray) -> None:
        entry = Cached(body, rev.current(), datasets, jobs)
        with self.lock:
            self._insert(key, entry)
        shared.save(key, entry)

    def _insert(self, key: Hashable, entry: Cached) -> None:
        self.entries[key] = entry
        self.entries.move_to_end(key)
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)

    def _still_valid(self, entry: Cached, current: rev.Revision) -> bool:
        known = entry.revision
        if current.value < known.value or not rev.on_timeline(known):
            return False
        changes = rev.changes_between(
            known.value,
            current.value,
            (rev.KIND_TABLE, rev.KIND_DATASET, rev.KIND_JOB, rev.KIND_ALL_DATA),
            CHANGE_LIMIT,
        )
        if changes is None or any(k in (rev.KIND_RESET, rev.KIND_ALL_DATA) for k, _ in changes):
            return False
        by_kind: dict[str, set[int]] = {}
        for kind, obj in changes:
            if obj is not None:
                by_kind.setdefault(kind, set()).add(obj)
        if _touches(by_kind.get(rev.KIND_DATASET, set()), entry.datasets):
            return False
        if _touches(by_kind.get(rev.KIND_JOB, set()), entry.jobs):
            return False
        edges = by_kind.get(rev.KIND_TABLE, set())
        if edges:
            ends = _edge_endpoints(list(edges))
            if ends is None:
                return False
            jobs, datasets = ends
            if _touches(jobs, entry.jobs) or _touches(datasets, entry.datasets):
                return False
        return True

    def stats(self) -> dict[str, int]:
        return {
            "entries": len(self.entries),
            "hits": self.hits,
            "misses": self.misses,
            "shared_hits": shared.hits,
            "shared_misses": shared.misses,
        }


# --- the bodies a host's processes share ------------------------------------------------------

MAGIC = b"LXRESP01"
# How old a directory's modification time must be before a listing of it is kept.
SETTLED_NS = 100_000_000
PREFIX = struct.Struct("<8sI")  # magic, length of the JSON header that follows
# The packages whose code decides what a body says: a new release reads none of the old files.
RENDERING_PACKAGES = ("graph", "catalog")


@functools.cache
def code_digest() -> str:
    """A digest of the code that renders bodies (and of the change log's version)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(rev.VERSION.encode())
    for package in RENDERING_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=16)
def _directory(data_dir: object, host: object, port: object, name: object, code: str) -> Path:
    address = f"{host or ''}:{port or ''}/{name}"
    digest = hashlib.sha256(f"{address}|{code}".encode()).hexdigest()[:16]
    return Path(str(data_dir)) / "responses" / f"{Path(str(name)).name}-{digest}"


class SharedStore:
    """Response bodies in files that every server process of a host reads: one file per key,
    written whole under a temporary name and renamed, so a reader sees an old file or a new
    one, never part of one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.written = 0  # bytes written since the directory was last pruned
        self.pending: list[tuple[Path, str, Cached]] = []
        self.wake = threading.Event()
        self.idle = threading.Event()
        self.idle.set()
        self.writer: threading.Thread | None = None
        self.writer_pid = 0
        self.hits = 0
        self.misses = 0
        # (directory, its modification time, the names in it) when last listed.
        self.listing: tuple[Path, int, frozenset[str]] | None = None

    @staticmethod
    def enabled() -> bool:
        return bool(getattr(settings, "GRAPH_SHARED_RESPONSES", True))

    @staticmethod
    def root() -> Path:
        return Path(settings.DATA_DIR) / "responses"

    def directory(self) -> Path:
        """This database's and this code's directory."""
        db = connection.settings_dict
        return _directory(
            settings.DATA_DIR, db.get("HOST"), db.get("PORT"), db.get("NAME"), code_digest()
        )

    def path(self, key: Hashable) -> tuple[Path, str]:
        folder, name, text = self._where(key)
        return folder / name, text

    def _where(self, key: Hashable) -> tuple[Path, str, str]:
        """(the directory, the file's name, the key's text) of ``key``'s file."""
        text = repr(key)
        return self.directory(), hashlib.sha256(text.encode()).hexdigest()[:32] + ".resp", text

    def load(self, key: Hashable) -> Cached | None:
        """The body another process (or this one) kept for ``key``, not yet checked."""
        if not self.enabled():
            return None
        folder, name, text = self._where(key)
        if not self.may_hold(folder, name):
            self.misses += 1
            return None
        path = folder / name
        try:
            with open(path, "rb") as handle:
                magic, size = PREFIX.unpack(handle.read(PREFIX.size))
                header = json.loads(handle.read(size))
                if magic != MAGIC or header["key"] != text:
                    raise ValueError("not this key's file")
                datasets = np.frombuffer(handle.read(8 * header["datasets"]), dtype="<i8")
                jobs = np.frombuffer(handle.read(8 * header["jobs"]), dtype="<i8")
                body = handle.read(header["body"])
                if len(body) != header["body"] or handle.read(1):
                    raise ValueError("wrong length")
            revision = rev.Revision(int(header["revision"]), str(header["token"]))
        except FileNotFoundError:
            self.misses += 1
            return None
        except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
            log.warning("ignoring the shared response file %s: %s", path, exc)
            self.misses += 1
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # the oldest files are pruned first: this one was just used
        self.hits += 1
        return Cached(body, revision, datasets, jobs)

    def may_hold(self, folder: Path, name: str) -> bool:
        """Whether a file ``name`` may be in ``folder``, from its listing: most answers are
        too small ever to be kept, and a stat costs a fraction of failing to open a file.
        The directory is listed again when its modification time moves. A listing is kept
        only once that time is :data:`SETTLED_NS` old, so any later change moves it past
        what was kept (the time is taken from a clock that ticks every few ms)."""
        try:
            stamp = os.stat(folder).st_mtime_ns
        except FileNotFoundError:
            return False
        except OSError:
            return True  # opening the file will say what is wrong
        listing = self.listing
        if listing is not None and listing[0] == folder and listing[1] == stamp:
            return name in listing[2]
        if time.time_ns() - stamp < SETTLED_NS:
            return True  # changed just now: try the file itself
        try:
            names = frozenset(os.listdir(folder))
        except OSError:
            return True
        self.listing = (folder, stamp, names)
        return name in names

    def save(self, key: Hashable, entry: Cached) -> None:
        """Keep ``entry`` for the other processes. A thread of this process writes it, so
        that neither this answer nor the next request waits on the disk (the writes
        themselves run outside the interpreter lock)."""
        if not self.enabled():
            return
        job = (*self.path(key), entry)
        with self.lock:
            self.pending.append(job)
            self.idle.clear()
            if self.writer is None or not self.writer.is_alive() or self.writer_pid != os.getpid():
                self.writer = threading.Thread(
                    target=self._run, name="shared-responses", daemon=True
                )
                self.writer_pid = os.getpid()
                self.writer.start()
        self.wake.set()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every body kept so far is written; False if that took over ``timeout``."""
        return self.idle.wait(timeout)

    def _run(self) -> None:
        while True:
            self.wake.wait()
            with self.lock:
                self.wake.clear()
                jobs, self.pending = self.pending, []
            for path, text, entry in jobs:
                try:
                    self._write(path, text, entry)
                except Exception:  # the writer must outlive any one file
                    log.exception("could not keep a response for the other processes")
            with self.lock:
                if not self.pending:
                    self.idle.set()

    def _write(self, path: Path, text: str, entry: Cached) -> None:
        datasets = np.ascontiguousarray(entry.datasets, dtype="<i8")
        jobs = np.ascontiguousarray(entry.jobs, dtype="<i8")
        header = json.dumps(
            {
                "key": text,
                "revision": entry.revision.value,
                "token": entry.revision.token,
                "datasets": int(datasets.size),
                "jobs": int(jobs.size),
                "body": len(entry.body),
            }
        ).encode()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(PREFIX.pack(MAGIC, len(header)))
                    handle.write(header)
                    handle.write(datasets.tobytes())
                    handle.write(jobs.tobytes())
                    handle.write(entry.body)
                os.replace(temp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
                raise
        except OSError as exc:
            log.warning("could not keep a response for the other processes: %s", exc)
            return
        limit = settings.GRAPH_SHARED_RESPONSE_MB * 2**20
        with self.lock:
            self.written += len(entry.body)
            due = self.written > limit // 8
            if due:
                self.written = 0
        if due:
            self.prune(limit)

    def prune(self, limit: int) -> int:
        """Remove the least recently used files (of any database or release) until the
        directory holds at most three quarters of ``limit`` bytes; the number removed."""
        files = []
        for path in self.root().glob("*/*.resp"):
            with contextlib.suppress(FileNotFoundError):
                stat = path.stat()
                files.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in files)
        removed = 0
        if total <= limit:
            return removed
        for _, size, path in sorted(files):
            if total <= limit * 3 // 4:
                break
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
            total -= size
        for folder in self.root().iterdir():
            with contextlib.suppress(OSError):
                folder.rmdir()  # only an empty one goes
        return removed

    def clear(self) -> None:
        shutil.rmtree(self.root(), ignore_errors=True)


shared = SharedStore()
cache = ResponseCache()
