"""Node documents in one file per host, mapped into memory by every server process.

A lineage answer splices each node's pre-rendered ``data`` into its body
(graph/nodedata.py). A process has only the nodes it has shown recently in
its node cache; the rest come from ``graph_nodedoc`` in one query, and at
100,000 datasets most answers name nodes the answering process has not seen:
a 500-node answer waits 5-7 ms on that query, as long as building the whole
body. Keeping every document in every process instead costs over 500 MB each.

So the server processes of a host share one read-only copy: after a full
rendering pass (graph/documents.py) the first process to start writes every
document of ``graph_nodedoc`` to a file under ``DATA_DIR/nodedocs``, and each
process maps it. The operating system keeps one copy of its pages for all of
them, and a document is a slice of the map, decoded on use.

A document in the file is trusted by the node cache's rule, as if it came from
the table (graph/nodecache.py): at least as new as the process's horizon, and
no change to its node seen after its revision; anything else is taken from the
table as before. A file is written for one pass of one database's timeline
and used only while that pass is on the current timeline: when a later pass
is recorded, the next process (or the process whose cache starts a new epoch)
writes a new file, under a lock so that one process writes and the others
wait for it.
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
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
from django.conf import settings
from django.db import DatabaseError, connection, connections

from catalog.pgsql import bound_cursor
from graph import revision as rev

log = logging.getLogger(__name__)

MAGIC = b"LXDOCS02"
KINDS = (rev.Kind.DATASET, rev.Kind.JOB)
# Besides a node's document, a lineage body splices in its id as a JSON string
# ("quoted") and, for a dataset, its {"namespace", "name"} object ("named"). The file
# holds them for plain ids (printable ASCII with no quote or backslash: the JSON string's
# contents as they are, graph.api._plain) and "" for the rest, which readers render.
COLUMNS = ("namespace", "name", "data", "info", "quoted", "named")
ID_PREFIXES = {"d": "dataset:", "j": "job:"}  # graph.nodeids
PLAIN_ID = r"^[ !#-[\]-~]*$"
CHUNK_IDS = 20_000
# Per document, packed by PostgreSQL: node pk, revision, then the UTF-8 byte length of
# each of COLUMNS.
ROW = np.dtype([("id", ">i8"), ("revision", ">i8"), *((c, ">i4") for c in COLUMNS)])

IntArray = npt.NDArray[np.int64]
# madvise(2)'s "populate (prefault) page tables readable": Linux 5.14 on; Python 3.11 does
# not name it.
MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
# (namespace, name, data, summary text or "") of a document.
Document = tuple[str, str, str, str]


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
    """One kind's documents: pks ascending, their revisions, and for each column the
    offsets (count + 1) of each document's text in that column's bytes, which start at
    ``starts[column]`` in the map."""

    pks: IntArray
    revisions: IntArray
    offsets: dict[str, IntArray]
    starts: dict[str, int]


class DocFile:
    """A document file, mapped read-only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 16:
                raise CorruptFile(f"{path}: {size} bytes, too short for a document file")
            self.map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        # The arrays are views of the map: it is unmapped with the last of them.
        self.header, self.parts = _read_layout(self.map, size, path)
        value, token = self.header["pass"]
        self.pass_revision = rev.Revision(int(value), str(token))
        self.documents = sum(part.pks.size for part in self.parts.values())

    def prefault(self) -> None:
        """Map every page of the file into this process now (they are in the page cache,
        shared by the host), so a first view of a node takes no page faults: about 40 ms
        for 260 MB, done before the process serves. Resident size then counts the whole
        file in each process; the proportional set splits it between them."""
        prefault(self.map)

    def _trusted(
        self,
        kind: str,
        pks: list[int],
        horizon: int,
        changed: dict[tuple[str, int], int],
        info: bool = False,
    ) -> tuple[_Part, list[int], IntArray] | None:
        """(the kind's part, the pks of the trusted documents of these nodes, where they
        are in the part): at least as new as ``horizon``, with no change to the node after
        the document's revision (``changed``); with ``info``, only those with a summary."""
        part = self.parts.get(kind)
        if part is None or part.pks.size == 0 or not pks:
            return None
        wanted = np.asarray(pks, dtype=np.int64)
        at = np.minimum(np.searchsorted(part.pks, wanted), part.pks.size - 1)
        usable = (part.pks[at] == wanted) & (part.revisions[at] >= horizon)
        if info:
            summaries = part.offsets["info"]
            usable &= summaries[at + 1] > summaries[at]
        found = wanted[usable].tolist()
        at = at[usable]
        if changed:
            revisions = part.revisions[at].tolist()
            kept = [i for i, pk in enumerate(found) if changed.get((kind, pk), 0) <= revisions[i]]
            if len(kept) < len(found):
                found = [found[i] for i in kept]
                at = at[kept]
        return part, found, at

    def _slices(self, part: _Part, at: IntArray, column: str) -> list[bytes]:
        """The ``column`` text (UTF-8) of the documents at ``at``, copied out of the map."""
        offsets, start = part.offsets[column], part.starts[column]
        view = self.map
        return [
            view[lo:hi]
            for lo, hi in zip(
                (offsets[at] + start).tolist(), (offsets[at + 1] + start).tolist(), strict=True
            )
        ]

    def _texts(self, part: _Part, at: IntArray, column: str) -> list[str]:
        return [text.decode() for text in self._slices(part, at, column)]

    def lookup(
        self,
        kind: str,
        pks: list[int],
        horizon: int,
        changed: dict[tuple[str, int], int],
        info: bool = False,
    ) -> dict[int, Document]:
        """The trusted documents of these nodes by pk: at least as new as ``horizon``, with
        no change to the node after the document's revision (``changed``). With ``info``,
        only those that carry a summary; without, the summary is left out ("")."""
        trusted = self._trusted(kind, pks, horizon, changed, info)
        if trusted is None:
            return {}
        part, found, at = trusted
        columns = [self._texts(part, at, column) for column in COLUMNS[:3]]
        columns.append(self._texts(part, at, "info") if info else [""] * len(found))
        return dict(zip(found, zip(*columns, strict=True), strict=True))

    def spliced(
        self,
        kind: str,
        pks: list[int],
        horizon: int,
        changed: dict[tuple[str, int], int],
        columns: tuple[str, ...],
    ) -> dict[str, dict[int, bytes]]:
        """Each of ``columns`` of the trusted documents of these nodes (as :meth:`lookup`),
        by pk, as UTF-8 copied out of the map: what a lineage answer splices in."""
        trusted = self._trusted(kind, pks, horizon, changed)
        if trusted is None:
            return {column: {} for column in columns}
        part, found, at = trusted
        return {
            column: dict(zip(found, self._slices(part, at, column), strict=True))
            for column in columns
        }


def _read_layout(view: mmap.mmap, size: int, path: Path) -> tuple[dict[str, Any], dict[str, _Part]]:
    if view[:8] != MAGIC:
        older = view[:6] == MAGIC[:6]
        raise CorruptFile(
            f"{path}: " + ("an older layout" if older else "not a node document file")
        )
    length = int.from_bytes(view[8:16], "little")
    if 16 + length > size:
        raise CorruptFile(f"{path}: header runs past the end of the file")
    try:
        header = json.loads(view[16 : 16 + length])
        parts = {}
        for kind, layout in header["kinds"].items():
            count = int(layout["count"])

            def array(offset: int, n: int) -> IntArray:
                if offset < 0 or offset + 8 * n > size:
                    raise CorruptFile(f"{path}: an array runs past the end of the file")
                return np.frombuffer(view, dtype=np.int64, count=n, offset=offset)

            offsets = {c: array(int(layout[c][0]), count + 1) for c in COLUMNS}
            starts = {c: int(layout[c][1]) for c in COLUMNS}
            for column in COLUMNS:
                if count and starts[column] + int(offsets[column][-1]) > size:
                    raise CorruptFile(f"{path}: the {column} text runs past the end of the file")
            parts[kind] = _Part(
                array(int(layout["pks"]), count),
                array(int(layout["revisions"]), count),
                offsets,
                starts,
            )
        header["pass"] = [int(header["pass"][0]), str(header["pass"][1])]
    except CorruptFile:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CorruptFile(f"{path}: unreadable header ({exc})") from exc
    return header, parts


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
    host_path), and what a writer that died left half-written over an hour ago. A process
    of an older release that still maps a file keeps its pages."""
    name = path.name.removesuffix(suffix)[:-13]  # the database's name, before "-<digest>"
    mine = re.compile(rf"{re.escape(name)}-[0-9a-f]{{12}}{re.escape(suffix)}")
    abandoned = time.time() - 3600
    for other in path.parent.iterdir():
        if other != path and mine.fullmatch(other.name):
            other.unlink(missing_ok=True)
        elif other.name.startswith(".writing-") and other.stat().st_mtime < abandoned:
            if other.is_dir():
                shutil.rmtree(other, ignore_errors=True)
            else:
                other.unlink(missing_ok=True)


def last_pass() -> rev.Revision | None:
    """The revision of the last full rendering pass (graph_nodedoc_pass) of this release's
    code, if any."""
    with bound_cursor() as cursor:
        cursor.execute(
            "SELECT revision, token FROM graph_nodedoc_pass WHERE id = 1 AND code = %s",
            [rev.code_digest()],
        )
        row = cursor.fetchone()
    return None if row is None else rev.Revision(int(row[0]), str(row[1]))


def write(path: Path, pass_revision: rev.Revision) -> int:
    """Write every document of ``graph_nodedoc`` to ``path`` (replaced at once, never seen
    half-written); gives the number of documents."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".writing-", dir=path.parent))
    try:
        rows: dict[str, npt.NDArray[Any]] = {}
        blobs: dict[tuple[str, str], Path] = {}
        for kind in KINDS:
            rows[kind] = _read_kind(kind, scratch, blobs)
        target = scratch / "file"
        with open(target, "wb") as out:
            _assemble(out, pass_revision, rows, blobs)
            out.flush()
            os.fsync(out.fileno())
        os.replace(target, path)
        sweep(path, ".docs")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return sum(table.size for table in rows.values())


def _read_kind(kind: str, scratch: Path, blobs: dict[tuple[str, str], Path]) -> npt.NDArray[Any]:
    """One kind's rows (ROW), in pk order; each column's text goes to a file in
    ``scratch``, packed by the database per pk range: no per-row Python work."""
    sources = _sources(kind)
    code = rev.code_digest()
    packed = "int8send(obj_id) || int8send(revision) || " + " || ".join(
        f"int4send(octet_length(convert_to({sources[c]}, 'UTF8')))" for c in COLUMNS
    )
    texts = ", ".join(
        f"string_agg(convert_to({sources[c]}, 'UTF8'), ''::bytea ORDER BY obj_id)" for c in COLUMNS
    )
    heads: list[bytes] = []
    handles = {c: open(scratch / f"{kind}.{c}", "wb") for c in COLUMNS}  # noqa: SIM115
    try:
        with bound_cursor() as cursor:
            cursor.execute(
                "SELECT min(obj_id), max(obj_id) FROM graph_nodedoc WHERE kind = %s AND code = %s",
                [kind, code],
            )
            row = cursor.fetchone()
            low, high = (int(row[0]), int(row[1])) if row and row[0] is not None else (0, -1)
            for start in range(low, high + 1, CHUNK_IDS):
                cursor.execute(
                    f"SELECT string_agg({packed}, ''::bytea ORDER BY obj_id), {texts} "
                    "FROM graph_nodedoc WHERE kind = %s AND code = %s AND obj_id >= %s "
                    "AND obj_id < %s",
                    [kind, code, start, start + CHUNK_IDS],
                    binary=True,
                )
                found = cursor.fetchone()
                if found and found[0]:
                    heads.append(bytes(found[0]))
                    for column, text in zip(COLUMNS, found[1:], strict=True):
                        handles[column].write(bytes(text or b""))
    finally:
        for handle in handles.values():
            handle.close()
    for column in COLUMNS:
        blobs[(kind, column)] = scratch / f"{kind}.{column}"
    return np.frombuffer(b"".join(heads), dtype=ROW)


def _sources(kind: str) -> dict[str, str]:
    """Each column's text for ``kind``, as SQL over graph_nodedoc."""
    node_id = f"('{ID_PREFIXES[kind]}' || namespace || ':' || name)"
    plain = f"{node_id} ~ '{PLAIN_ID}'"
    named = (
        f"""CASE WHEN {plain} THEN '{{"namespace":"' || namespace || '","name":"' || name """
        """|| '"}' ELSE '' END"""
    )
    return {
        "namespace": "namespace",
        "name": "name",
        "data": "data",
        "info": "info",
        "quoted": f"""CASE WHEN {plain} THEN '"' || {node_id} || '"' ELSE '' END""",
        "named": named if kind == "d" else "''",
    }


def _assemble(
    out: BinaryIO,
    pass_revision: rev.Revision,
    rows: dict[str, npt.NDArray[Any]],
    blobs: dict[tuple[str, str], Path],
) -> None:
    """Header, then per kind the pks, revisions and each column's offsets (int64, native
    order), then each column's text; every section starts on 8 bytes."""
    arrays: list[IntArray] = []
    layout: dict[str, dict[str, Any]] = {}
    texts: list[tuple[str, str]] = []
    for kind, table in rows.items():
        arrays += [table["id"].astype(np.int64), table["revision"].astype(np.int64)]
        for column in COLUMNS:
            offsets = np.zeros(table.size + 1, dtype=np.int64)
            np.cumsum(table[column].astype(np.int64), out=offsets[1:])
            arrays.append(offsets)
            texts.append((kind, column))
        layout[kind] = {"count": int(table.size)}
    header = {
        "pass": [pass_revision.value, pass_revision.token],
        "written": time.time(),
        "kinds": layout,
    }

    def encoded() -> bytes:
        return json.dumps(header, separators=(",", ":")).encode()

    # Offsets depend on the header's length, which depends on the offsets: settle it by
    # reserving room for numbers up to 20 digits.
    for kind in rows:
        layout[kind].update(
            {"pks": 10**19, "revisions": 10**19, **{c: [10**19, 10**19] for c in COLUMNS}}
        )
    body = _align(16 + len(encoded()) + 64)
    position = body
    index = 0
    for kind in rows:
        for name in ("pks", "revisions"):
            layout[kind][name] = position
            position = _align(position + arrays[index].nbytes)
            index += 1
        for column in COLUMNS:
            layout[kind][column] = [position, 0]
            position = _align(position + arrays[index].nbytes)
            index += 1
    for kind, column in texts:
        layout[kind][column][1] = position
        position = _align(position + blobs[(kind, column)].stat().st_size)
    head = encoded()
    out.write(MAGIC + len(head).to_bytes(8, "little") + head)
    out.write(b"\0" * (body - 16 - len(head)))
    for array in arrays:
        out.write(array.tobytes())
        out.write(b"\0" * (_align(array.nbytes) - array.nbytes))
    for kind, column in texts:
        with open(blobs[(kind, column)], "rb") as text:
            shutil.copyfileobj(text, out, 1 << 20)
        size = blobs[(kind, column)].stat().st_size
        out.write(b"\0" * (_align(size) - size))


def _align(n: int) -> int:
    return (n + 7) // 8 * 8


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """One process at a time writes (or checks) a database's file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


# --- the process's file ----------------------------------------------------------------------


def enabled() -> bool:
    return (
        connection.vendor == "postgresql"
        and bool(settings.GRAPH_SHARED_NODE_DATA)
        and bool(getattr(settings, "GRAPH_NODE_DOCUMENT_FILE", True))
    )


def open_current(pass_revision: rev.Revision | None = None) -> DocFile | None:
    """The file of the last full pass, written first if this host has none for it (or one
    that cannot be read); None before any pass."""
    found = last_pass() if pass_revision is None else pass_revision
    if found is None:
        return None
    path = file_path()
    with locked(path):
        if path.exists():
            try:
                existing = DocFile(path)
            except CorruptFile as exc:
                log.warning("node document file rewritten: %s", exc)
            else:
                if existing.pass_revision == found:
                    return existing
        started = time.perf_counter()
        count = write(path, found)
        log.info(
            "node document file: %d documents in %.1f s (%s)",
            count,
            time.perf_counter() - started,
            path,
        )
        return DocFile(path)


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.file: DocFile | None = None
        self.tried = False
        self.refreshing = False
        self.opened = 0


_state = _State()


def get() -> DocFile | None:
    """The process's file, opened (or written) the first time it is asked for."""
    if not enabled():
        return None
    if not _state.tried:
        with _state.lock:
            if not _state.tried:
                _install(_open_logged())
                _state.tried = True
    return _state.file


def refresh(pass_revision: rev.Revision) -> None:
    """Move to the file of ``pass_revision`` when the process has another: in a background
    thread when GRAPH_BACKGROUND_REBUILD is on (the old file serves meanwhile, trusted
    document by document), else now."""
    current = _state.file
    if not enabled() or not _state.tried:
        return  # the first file is opened by get()
    if current is not None and current.pass_revision == pass_revision:
        return
    if not settings.GRAPH_BACKGROUND_REBUILD:
        with _state.lock:
            _install(_open_logged(pass_revision))
            _state.tried = True
        return
    with _state.lock:
        if _state.refreshing:
            return
        _state.refreshing = True

    def work() -> None:
        try:
            fresh = _open_logged(pass_revision)
            if fresh is not None:
                fresh.prefault()
            with _state.lock:
                _install(fresh)
                _state.tried = True
        finally:
            _state.refreshing = False
            connections.close_all()

    threading.Thread(target=work, name="node-document-file", daemon=True).start()


def _open_logged(pass_revision: rev.Revision | None = None) -> DocFile | None:
    try:
        return open_current(pass_revision)
    except (DatabaseError, OSError, CorruptFile) as exc:
        log.warning("node document file not used: %s", exc)
        return None


def _install(found: DocFile | None) -> None:
    # A replaced map is left to the collector: a request may still be slicing it.
    if found is not None:
        _state.opened += 1
    _state.file = found


def warm() -> bool:
    """Open (or write) the file before the process serves (lineage_site/wsgi.py), with
    its pages mapped in."""
    found = get()
    if found is None:
        return False
    found.prefault()
    return True


def reset() -> None:
    """Forget the process's file (tests)."""
    with _state.lock:
        _state.file = None
        _state.tried = False


def stats() -> dict[str, Any]:
    found = _state.file
    if found is None:
        return {"opened": _state.opened, "file": None}
    return {
        "opened": _state.opened,
        "file": {
            "path": str(found.path),
            "pass": found.pass_revision.value,
            "documents": found.documents,
            "bytes": len(found.map),
        },
    }
