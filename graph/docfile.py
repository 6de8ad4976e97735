"""The node store's base: every dataset's and job's lineage data in one file per host,
mapped read-only by every server process.

A lineage answer splices each node's rendered ``data`` into its body (graph/nodedata.py).
Rendering costs queries and milliseconds, paid by whichever request shows a node first,
and keeping every node rendered in every process would cost over 500 MB each at 100,000
datasets. So ``render_node_documents`` renders every dataset and job into one file under
``DATA_DIR/nodedocs`` at deploy, and the scheduled task writes it again once many nodes
changed, taking the unchanged ones from the file before (graph/documents.py). Every server
process of the host maps it: the operating system keeps one copy of its pages for all of
them, and a document is a slice of the map, decoded on use.

A file is stamped with the revision of the change log it reflects (read before any node
in it was rendered) and carries the digest of the rendering code, which also names it
(graph.revision.code_digest): a release that changes what a node shows never reads an
older release's file. A process trusts a document by one rule (graph/nodecache.py): the
file is on the change log's current timeline, no older than the revision from which the
process follows the log, and the log shows no change to the node after the file's
revision. Nodes changed since are rendered on demand by the process that shows them and
kept in its node cache, the small overlay on the file.

A node's rendered data and summary are kept compressed, each document on its own, with a
zstd dictionary per kind and column trained on the documents of the pass that wrote the
file first (later passes keep it, and copy the unchanged documents as they are): node
documents repeat the same keys and shapes, so at 100,000 generated datasets the two
columns take 34 MB instead of 249, and reading one back costs about three microseconds.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import mmap
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import zstandard
from django.conf import settings
from django.db import connection

from graph import revision as rev

log = logging.getLogger(__name__)

MAGIC = b"LXDOCS07"
# A node's document (node data) and its summary (graph.details' info), each kept
# compressed, document by document.
COLUMNS = ("data", "info")
# Where a column's dictionary is among the file's arrays.
DICTIONARY = "zdict.{kind}.{column}"
# A dictionary's size, and the fewest documents one is trained on (fewer: none).
DICTIONARY_SIZE = 65_536
DICTIONARY_SAMPLES_MIN = 64

# Seconds between two looks at the path for a newer file (a look costs about 25 µs, and a
# lineage answer looks five times: random depth 5 P50 1.05-1.08x without it).
LOOK_EVERY = 1.0

IntArray = npt.NDArray[np.int64]
# madvise(2)'s "populate (prefault) page tables readable": Linux 5.14 on; Python 3.11 does
# not name it.
MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)


def prefault(view: mmap.mmap) -> None:
    """Map every page of ``view`` into this process now (from the host's page cache)."""
    try:
        view.madvise(MADV_POPULATE_READ)
    except (OSError, ValueError):
        # Kernels before 5.14: read ahead at least, and take the faults on use.
        view.madvise(mmap.MADV_WILLNEED)


class CorruptFile(ValueError):
    """A document file that cannot be read as one (truncated, or not ours)."""


@dataclass(frozen=True, eq=False)
class _Part:
    """One kind's documents (sections ``{kind}.pks``, ``{kind}.{column}.at`` and
    ``{kind}.{column}``): pks ascending, and for each column the offsets (count + 1) of
    each document's text in that column's bytes, which start at ``starts[column]`` of the
    file."""

    kind: str
    pks: IntArray
    offsets: dict[str, IntArray]
    starts: dict[str, int]


class DocFile:
    """A document file, mapped read-only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with open(path, "rb") as handle:
            status = os.fstat(handle.fileno())
            if status.st_size < 16:
                raise CorruptFile(f"{path}: {status.st_size} bytes, too short for a document file")
            self.map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        self.header = _read_header(self.map, status.st_size, path)
        if self.header.get("code") != rev.code_digest():
            raise CorruptFile(f"{path}: written by another release")
        value, token = self.header["revision"]
        self.revision = rev.Revision(int(value), str(token))
        self.meta: dict[str, Any] = self.header.get("meta", {})
        # Every section as a view of the map (unmapped with the last of them): the kinds'
        # documents, their dictionaries, and whatever else the writer put in
        # (graph/directory.py's arrays).
        layout = self.header.get("arrays", {})
        self.arrays = _read_arrays(self.map, layout, status.st_size, path)
        self.parts: dict[str, _Part] = {}
        # Each column's dictionary (empty: compressed without one).
        self.dictionaries: dict[tuple[str, str], bytes] = {}
        for kind in self.meta.get("kinds", ()):
            pks = self._section(f"{kind}.pks")
            offsets, starts = {}, {}
            for column in COLUMNS:
                offsets[column] = self._section(f"{kind}.{column}.at")
                text = self._section(f"{kind}.{column}")
                if offsets[column].size != pks.size + 1 or offsets[column][-1] > text.size:
                    raise CorruptFile(f"{path}: the {column} offsets run past its text")
                starts[column] = int(layout[f"{kind}.{column}"][0])
                name = DICTIONARY.format(kind=kind, column=column)
                if name not in self.arrays:
                    raise CorruptFile(f"{path}: the {column} column has no dictionary")
                self.dictionaries[(kind, column)] = self.arrays.pop(name).tobytes()
            self.parts[kind] = _Part(kind, pks, offsets, starts)
        # Decompressors, per thread (one may not be used by two threads at once).
        self._local = threading.local()
        self.documents = sum(part.pks.size for part in self.parts.values())

    def _section(self, name: str) -> npt.NDArray[Any]:
        if name not in self.arrays:
            raise CorruptFile(f"{self.path}: no section {name}")
        return self.arrays.pop(name)

    def prefault(self) -> None:
        """Map every page of the file into this process now (they are in the page cache,
        shared by the host), so a first view of a node takes no page faults: about 40 ms
        for 260 MB. Resident size then counts the whole file in each process; the
        proportional set splits it between them."""
        prefault(self.map)

    def held(self, kind: str, pks: list[int]) -> tuple[_Part, list[int], IntArray] | None:
        """(the kind's part, the pks of the documents it holds of these nodes, where they
        are in the part); whether to trust them is the node cache's rule."""
        part = self.parts.get(kind)
        if part is None or part.pks.size == 0 or not pks:
            return None
        wanted = np.asarray(pks, dtype=np.int64)
        at = np.minimum(np.searchsorted(part.pks, wanted), part.pks.size - 1)
        usable = part.pks[at] == wanted
        return part, wanted[usable].tolist(), at[usable]

    def slices(self, part: _Part, at: IntArray, column: str, packed: bool = False) -> list[bytes]:
        """The ``column`` text (UTF-8) of the documents at ``at``, copied out of the map;
        with ``packed``, as stored (compressed)."""
        offsets, start = part.offsets[column], part.starts[column]
        view = self.map
        texts = [
            view[lo:hi]
            for lo, hi in zip(
                (offsets[at] + start).tolist(), (offsets[at + 1] + start).tolist(), strict=True
            )
        ]
        if packed:
            return texts
        unpack = self._decompressor(part.kind, column).decompress
        try:
            return [unpack(text) if text else text for text in texts]
        except zstandard.ZstdError as exc:
            # Each document carries its checksum: damaged bytes never reach an answer.
            kind = "dataset" if part.kind == rev.Kind.DATASET else "job"
            raise CorruptFile(f"{self.path}: a {kind}'s {column} is damaged ({exc})") from exc

    def _decompressor(self, kind: str, column: str) -> zstandard.ZstdDecompressor:
        held: dict[tuple[str, str], zstandard.ZstdDecompressor] | None
        held = getattr(self._local, "held", None)
        if held is None:
            held = self._local.held = {}
        found = held.get((kind, column))
        if found is None:
            found = held[(kind, column)] = decompressor(self.dictionaries[(kind, column)])
        return found

    def spliced(self, kind: str, pks: list[int], column: str) -> dict[int, bytes]:
        """The ``column`` of the documents it holds of these nodes, by pk, as UTF-8 copied
        out of the map; whether to trust them is the caller's (NodeCache.file_column)."""
        held = self.held(kind, pks)
        if held is None:
            return {}
        part, found, at = held
        try:
            return dict(zip(found, self.slices(part, at, column), strict=True))
        except CorruptFile as exc:
            refuse(self, exc)
            return {}


def _stamp(path: Path, status: os.stat_result) -> tuple[str, int, int, int]:
    """What tells one file at a path from the one that replaced it."""
    return (str(path), status.st_ino, status.st_mtime_ns, status.st_size)


def _read_arrays(
    view: mmap.mmap, layout: dict[str, Any], size: int, path: Path
) -> dict[str, npt.NDArray[Any]]:
    arrays = {}
    try:
        for name, (offset, dtype, count) in layout.items():
            kind = np.dtype(dtype)
            if offset < 0 or offset + kind.itemsize * count > size:
                raise CorruptFile(f"{path}: the array {name} runs past the end of the file")
            arrays[name] = np.frombuffer(view, dtype=kind, count=count, offset=offset)
    except (TypeError, ValueError) as exc:
        raise CorruptFile(f"{path}: unreadable array layout ({exc})") from exc
    return arrays


def _read_header(view: mmap.mmap, size: int, path: Path) -> dict[str, Any]:
    if view[:8] != MAGIC:
        older = view[:6] == MAGIC[:6]
        raise CorruptFile(
            f"{path}: " + ("an older layout" if older else "not a node document file")
        )
    length = int.from_bytes(view[8:16], "little")
    if 16 + length > size:
        raise CorruptFile(f"{path}: header runs past the end of the file")
    try:
        header: dict[str, Any] = json.loads(view[16 : 16 + length])
        header["revision"] = [int(header["revision"][0]), str(header["revision"][1])]
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CorruptFile(f"{path}: unreadable header ({exc})") from exc
    return header


# --- writing -------------------------------------------------------------------------------


def host_path(folder: str, suffix: str) -> Path:
    """A file of this host's for this database and release, under ``DATA_DIR/folder``:
    named after the database's address and the code's digest."""
    db = connection.settings_dict
    address = f"{db.get('HOST') or ''}:{db.get('PORT') or ''}/{db.get('NAME')}"
    digest = hashlib.sha256(f"{address}|{rev.code_digest()}".encode()).hexdigest()[:12]
    return Path(settings.DATA_DIR) / folder / f"{db.get('NAME')}-{digest}{suffix}"


def file_path() -> Path:
    """This database's document file: one per database and release."""
    return host_path("nodedocs", ".docs")


def sweep(path: Path, suffix: str) -> None:
    """Remove the files ``path`` replaces: this database's of other releases (``path`` from
    host_path) with their lock files, and what a writer that died left half-written over
    an hour ago. A process of an older release that still maps a file keeps its pages."""
    name = path.name.removesuffix(suffix)[:-13]  # the database's name, before "-<digest>"
    lock = suffix.rsplit(".", 1)[0] + ".lock"  # as :func:`locked` names it
    mine = re.compile(rf"{re.escape(name)}-[0-9a-f]{{12}}({re.escape(suffix)}|{re.escape(lock)})")
    abandoned = time.time() - 3600
    for other in path.parent.iterdir():
        if other not in (path, path.with_suffix(".lock")) and mine.fullmatch(other.name):
            other.unlink(missing_ok=True)
        elif other.name.startswith(".writing-") and other.stat().st_mtime < abandoned:
            if other.is_dir():
                shutil.rmtree(other, ignore_errors=True)
            else:
                other.unlink(missing_ok=True)


def assemble(
    out: IO[bytes],
    revision: rev.Revision,
    sections: dict[str, npt.NDArray[Any] | Path],
    meta: dict[str, Any],
) -> None:
    """Write a file: the header (the revision, the code's digest, ``meta`` and where each
    section lies), then each section from an 8-byte boundary: an array (native order),
    or a file's bytes (a ``Path``, streamed; read back as bytes)."""

    def size(value: npt.NDArray[Any] | Path) -> int:
        return value.stat().st_size if isinstance(value, Path) else int(value.nbytes)

    layout = {
        name: [10**19, "|u1", size(v)] if isinstance(v, Path) else [10**19, v.dtype.str, v.size]
        for name, v in sections.items()
    }
    header = {
        "revision": [revision.value, revision.token],
        "code": rev.code_digest(),
        "written": time.time(),
        "arrays": layout,
        "meta": meta,
    }

    def encoded() -> bytes:
        return json.dumps(header, separators=(",", ":")).encode()

    # Offsets depend on the header's length, which depends on the offsets: settle it by
    # reserving room for numbers up to 20 digits.
    position = body = _align(16 + len(encoded()) + 64)
    for name, value in sections.items():
        layout[name][0] = position
        position = _align(position + size(value))
    head = encoded()
    out.write(MAGIC + len(head).to_bytes(8, "little") + head)
    out.write(b"\0" * (body - 16 - len(head)))
    for value in sections.values():
        if isinstance(value, Path):
            with open(value, "rb") as text:
                shutil.copyfileobj(text, out, 1 << 20)
        else:
            out.write(np.ascontiguousarray(value).tobytes())
        out.write(b"\0" * (_align(size(value)) - size(value)))


def compressor(dictionary: bytes) -> zstandard.ZstdCompressor:
    """What packs a column's documents, with its dictionary (``b""``: none)."""
    if not dictionary:
        return zstandard.ZstdCompressor(write_checksum=True)
    return zstandard.ZstdCompressor(
        dict_data=zstandard.ZstdCompressionDict(dictionary),
        write_dict_id=False,
        write_checksum=True,
    )


def decompressor(dictionary: bytes) -> zstandard.ZstdDecompressor:
    if not dictionary:
        return zstandard.ZstdDecompressor()
    return zstandard.ZstdDecompressor(dict_data=zstandard.ZstdCompressionDict(dictionary))


def train(samples: list[bytes]) -> bytes:
    """A dictionary for documents like ``samples`` (``b""`` when too few to train one)."""
    kept: list[bytes | bytearray | memoryview] = [sample for sample in samples if sample]
    if len(kept) < DICTIONARY_SAMPLES_MIN:
        return b""
    try:
        return zstandard.train_dictionary(DICTIONARY_SIZE, kept).as_bytes()
    except zstandard.ZstdError:
        return b""


def _align(n: int) -> int:
    return (n + 7) // 8 * 8


@contextmanager
def locked(path: Path, wait: bool = True) -> Iterator[bool]:
    """One process of the host at a time writes (or checks) a database's file; without
    ``wait``, the context says whether this one holds the lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            held = True
        except BlockingIOError:
            held = False
        try:
            yield held
        finally:
            if held:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# --- the process's file ----------------------------------------------------------------------


def enabled() -> bool:
    return connection.vendor == "postgresql" and bool(settings.GRAPH_SHARED_NODE_DATA)


def readable(path: Path) -> DocFile | None:
    """The file at ``path``, or None when there is none or it cannot be read (logged)."""
    try:
        return DocFile(path)
    except FileNotFoundError:
        return None
    except (OSError, CorruptFile) as exc:
        log.warning("node document file not used: %s", exc)
        return None


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.file: DocFile | None = None
        # The stamp of the file at the path when last looked (None: no file); "unseen"
        # before the first look.
        self.stamp: tuple[str, int, int, int] | str | None = "unseen"
        self.looked = 0.0


_state = _State()


def current() -> DocFile | None:
    """The host's file, mapped anew when another replaced the one this process maps (one
    stat of the path); None when there is none."""
    if not enabled():
        return None
    path = file_path()
    _state.looked = time.monotonic()
    try:
        stamp: tuple[str, int, int, int] | None = _stamp(path, path.stat())
    except OSError:  # none, or DATA_DIR unusable
        stamp = None
    if stamp == _state.stamp:
        return _state.file
    with _state.lock:
        if stamp != _state.stamp:
            # A replaced map is left to the collector: a request may still be slicing it.
            found = None if stamp is None else readable(path)
            _state.file, _state.stamp = found, stamp
        return _state.file


def get() -> DocFile | None:
    """The file this process maps, looked for again once a second (:func:`current`)."""
    if not enabled():
        return None
    if _state.stamp == "unseen" or time.monotonic() - _state.looked > LOOK_EVERY:
        return current()
    return _state.file


def warm() -> bool:
    """Map the file before the process serves (lineage_site/wsgi.py), with its pages in."""
    found = get()
    if found is None:
        return False
    found.prefault()
    return True


def refuse(found: DocFile, exc: CorruptFile) -> None:
    """Stop using ``found``, whose bytes turned out damaged, and move it aside (to
    ``.damaged``, for a look) when it is still the host's: every process renders its nodes
    itself until the next scheduled pass, finding no file, writes one in full."""
    log.error("node document file no longer used: %s", exc)
    with _state.lock:
        if _state.file is not found:
            return
        _state.file = None
        try:
            if _stamp(found.path, found.path.stat()) == _state.stamp:
                os.replace(found.path, found.path.with_suffix(".damaged"))
        except OSError:  # gone or replaced already
            pass


def reset() -> None:
    """Forget the process's file (tests)."""
    with _state.lock:
        _state.file = None
        _state.stamp = "unseen"
