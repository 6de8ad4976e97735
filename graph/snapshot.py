"""Adjacency snapshots of the lineage edges, with their validity intervals.

Every lineage read walks one of two snapshots in each process's memory (on
PostgreSQL, their bases mapped from one file per host, shared by its processes):

- the table snapshot: dataset → job (``in`` edges) and job → dataset (``out``);
- the column snapshot: field → field through a job, with the transformation.

Each is a set of parallel numpy columns (one row per edge row, so closed and
reopened intervals are all kept) grouped into CSR adjacencies, and every
traversal filters edges by validity at the instant asked for. Breadth-first
search runs one level at a time over whole frontiers (vectorised), so a hub
read by thousands of jobs costs one gather, not thousands of Python steps.

Freshness: each request reads the lineage revision (one indexed row, see
graph/revision.py). When it moved, the edges changed since are re-read by id
and laid over the base as a small overlay (the base rows they replace are
masked out); when the overlay grows past a threshold, or the change log no
longer covers the gap, the snapshot is rebuilt from scratch. So every
process — web workers, Celery workers — answers from the committed graph.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from django.conf import settings
from django.db import DatabaseError, connections
from django.utils.dateparse import parse_datetime

from graph import docfile
from graph import revision as rev
from graph.models import TransformationSubtype, TransformationType

logger = logging.getLogger(__name__)

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

OPEN = np.iinfo(np.int64).max
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PG_EPOCH_OFFSET_US = 946_684_800_000_000  # 2000-01-01 - 1970-01-01 in microseconds
EMPTY = np.zeros(0, dtype=np.int64)

# Transformation subtypes as small codes, and how strongly each ties a target
# value to its source: a DIRECT IDENTITY/TRANSFORMATION copy keeps the row
# (personal data stays personal), AGGREGATION and INDIRECT do not.
SUBTYPES: tuple[str, ...] = ("", *TransformationSubtype.values)
SUBTYPE_CODE = {name: code for code, name in enumerate(SUBTYPES)}
STRENGTH_INDIRECT, STRENGTH_AGGREGATION, STRENGTH_TRANSFORMATION, STRENGTH_IDENTITY = 0, 1, 2, 3


def to_us(moment: datetime) -> int:
    """Microseconds since the Unix epoch (exact, no float rounding)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - EPOCH) // timedelta(microseconds=1)


def from_us(value: int) -> datetime | None:
    if value >= OPEN:
        return None
    return EPOCH + timedelta(microseconds=int(value))


@dataclass(frozen=True, slots=True)
class TimeFilter:
    """Which edge intervals count.

    ``current``: only edges still open. Otherwise an edge counts when its
    interval [valid_from, valid_to) meets [lo, hi]: ``lo == hi`` is one instant
    (as-of), ``hi=None`` means "at any time since lo".
    """

    current: bool = True
    lo: int = 0
    hi: int | None = None

    @classmethod
    def at(cls, as_of: datetime | None) -> TimeFilter:
        if as_of is None:
            return cls()
        t = to_us(as_of)
        return cls(current=False, lo=t, hi=t)

    @classmethod
    def window(cls, start: datetime, end: datetime | None = None) -> TimeFilter:
        return cls(current=False, lo=to_us(start), hi=None if end is None else to_us(end))

    def mask(self, vf: IntArray, vt: IntArray) -> BoolArray:
        if self.current:
            is_open: BoolArray = vt == OPEN
            return is_open
        keep: BoolArray = vt > self.lo
        if self.hi is not None:
            keep &= vf <= self.hi
        return keep


class Adjacency:
    """Edge positions of one edge store grouped by one endpoint (CSR).

    With ``size`` the groups are addressed by an index pointer (O(1) per node,
    for the large base); without, by binary search (for the small overlay).
    """

    __slots__ = ("indptr", "order", "size", "sorted_keys")

    def __init__(self, keys: IntArray, size: int | None) -> None:
        selected = np.flatnonzero(keys >= 0)
        order = selected[np.argsort(keys[selected], kind="stable")]
        # Positions fit in int32 for any realistic graph: half the memory of int64.
        small = keys.size < 2**31 - 1
        self.order: IntArray = order.astype(np.int32 if small else np.int64)
        self.size = size
        if size is not None:
            counts = np.bincount(keys[selected], minlength=size)[:size]
            self.indptr: IntArray = np.zeros(size + 1, dtype=np.int32 if small else np.int64)
            np.cumsum(counts, out=self.indptr[1:])
            self.sorted_keys: IntArray = EMPTY
        else:
            self.indptr = EMPTY
            self.sorted_keys = keys[order]

    def positions(self, nodes: IntArray) -> IntArray:
        """Edge positions of every node in ``nodes``, concatenated."""
        if nodes.size == 0 or self.order.size == 0:
            return EMPTY
        if self.size is not None:
            nodes = nodes[(nodes >= 0) & (nodes < self.size)]
            starts = self.indptr[nodes].astype(np.int64)
            ends = self.indptr[nodes + 1].astype(np.int64)
        else:
            starts = np.searchsorted(self.sorted_keys, nodes, side="left")
            ends = np.searchsorted(self.sorted_keys, nodes, side="right")
        lengths = ends - starts
        total = int(lengths.sum())
        if total == 0:
            return EMPTY
        offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
        offsets += np.arange(total, dtype=np.int64)
        found: IntArray = self.order[offsets]
        return found

    @classmethod
    def of(cls, arrays: dict[str, IntArray], size: int | None) -> Adjacency:
        """An adjacency over arrays already grouped (read from a shared file)."""
        adj = cls.__new__(cls)
        adj.order, adj.indptr, adj.sorted_keys = (arrays[n] for n in ADJACENCY_ARRAYS)
        adj.size = size
        return adj


ADJACENCY_ARRAYS = ("order", "indptr", "sorted_keys")


@dataclass(frozen=True)
class EdgeStore:
    """Parallel edge columns (``ids`` first) and adjacencies built over them."""

    cols: dict[str, npt.NDArray[Any]]
    adj: dict[str, Adjacency]

    @property
    def size(self) -> int:
        return int(self.cols["id"].size)


@dataclass(frozen=True)
class AdjacencySpec:
    """How one adjacency is grouped: by column ``group``, reaching column ``other``,
    over rows where ``where`` holds."""

    group: str
    other: str
    where: Callable[[dict[str, npt.NDArray[Any]]], BoolArray] | None = None


@dataclass(frozen=True)
class EdgeBatch:
    """Edges reached in one expansion step: where they start, where they lead, and which
    store row (``layer`` 0 = base, 1 = overlay; ``pos``) they are."""

    src: IntArray
    dst: IntArray
    layer: npt.NDArray[np.int8]
    pos: IntArray

    @property
    def size(self) -> int:
        return int(self.src.size)

    def take(self, index: npt.NDArray[np.integer] | npt.NDArray[np.bool_]) -> EdgeBatch:
        """The edges at ``index`` (positions or a mask), in its order."""
        return EdgeBatch(self.src[index], self.dst[index], self.layer[index], self.pos[index])

    @staticmethod
    def joined(batches: list[EdgeBatch]) -> EdgeBatch:
        if not batches:
            return EMPTY_BATCH
        if len(batches) == 1:
            return batches[0]
        return EdgeBatch(
            np.concatenate([b.src for b in batches]),
            np.concatenate([b.dst for b in batches]),
            np.concatenate([b.layer for b in batches]),
            np.concatenate([b.pos for b in batches]),
        )


EMPTY_BATCH = EdgeBatch(EMPTY, EMPTY, np.zeros(0, dtype=np.int8), EMPTY)


@dataclass(frozen=True)
class Snapshot:
    """One consistent view of one edge table: base store, alive mask, overlay store."""

    kind: str
    revision: rev.Revision
    base: EdgeStore
    alive: BoolArray
    overlay: EdgeStore
    sizes: dict[str, int]
    specs: dict[str, AdjacencySpec] = field(repr=False)
    # Derived once per snapshot (replace() starts a new one): which jobs are retired now.
    _memo: dict[str, BoolArray] = field(default_factory=dict, init=False, repr=False, compare=False)

    def expand(self, name: str, nodes: IntArray, tf: TimeFilter) -> EdgeBatch:
        """Edges of adjacency ``name`` leaving ``nodes`` that are valid under ``tf``.

        The reads of a retired job are left out: a job that had written datasets by then but
        writes none then (its outputs dropped, or its last run wrote nothing) is not part of
        that graph. Over a window (a taint's "since"), a job is retired when it wrote
        nothing at any time in it."""
        batch = self._valid_edges(name, nodes, tf)
        if name not in READS or batch.size == 0:
            return batch
        jobs = batch.dst if name == "ds_down" else batch.src
        if tf.current:
            mask = self.retired_mask(tf)
            gone = np.zeros(batch.size, dtype=np.bool_)
            known = jobs < mask.size
            gone[known] = mask[jobs[known]]
            return batch.take(~gone) if gone.any() else batch
        retired = self.retired_jobs(np.unique(jobs), tf)
        return batch.take(~np.isin(jobs, retired)) if retired.size else batch

    def retired_mask(self, tf: TimeFilter) -> BoolArray:
        """``retired_jobs`` of every job, as a mask over job ids (the one for now is kept
        with the snapshot)."""
        found = self._memo.get("now") if tf.current else None
        if found is None:
            retired = self.retired_jobs(np.arange(self.size_of("job"), dtype=np.int64), tf)
            found = np.zeros(self.size_of("job", retired), dtype=np.bool_)
            found[retired] = True
            if tf.current:
                self._memo["now"] = found
        return found

    def retired_jobs(self, jobs: IntArray, tf: TimeFilter) -> IntArray:
        """The ``jobs`` that had written a dataset by ``tf``'s instant (ever, for a window
        open at its end) and write none under ``tf``: one pass over their outputs."""
        wrote, writing = [], []
        for layer, store in ((0, self.base), (1, self.overlay)):
            if store.size == 0:
                continue
            pos = store.adj["job_down"].positions(jobs)
            if layer == 0 and pos.size:
                pos = pos[self.alive[pos]]
            if pos.size == 0:
                continue
            vf, vt = store.cols["vf"][pos], store.cols["vt"][pos]
            by_then = vf <= tf.hi if tf.hi is not None else np.ones(pos.size, dtype=np.bool_)
            owners = store.cols["job"][pos]
            wrote.append(owners[by_then])
            writing.append(owners[tf.mask(vf, vt)])
        if not wrote:
            return EMPTY
        return np.setdiff1d(np.concatenate(wrote), np.concatenate(writing or [EMPTY]))

    def _valid_edges(self, name: str, nodes: IntArray, tf: TimeFilter) -> EdgeBatch:
        spec = self.specs[name]
        parts: list[EdgeBatch] = []
        for layer, store in ((0, self.base), (1, self.overlay)):
            if store.size == 0:
                continue
            pos = store.adj[name].positions(nodes)
            if pos.size == 0:
                continue
            keep = tf.mask(store.cols["vf"][pos], store.cols["vt"][pos])
            if layer == 0:
                keep &= self.alive[pos]
            pos = pos[keep]
            if pos.size == 0:
                continue
            parts.append(
                EdgeBatch(
                    store.cols[spec.group][pos],
                    store.cols[spec.other][pos],
                    np.full(pos.size, layer, dtype=np.int8),
                    pos,
                )
            )
        return EdgeBatch.joined(parts)

    def column(self, name: str, batch: EdgeBatch) -> npt.NDArray[Any]:
        """The values of edge column ``name`` for every edge of ``batch``."""
        base = self.base.cols[name]
        if batch.size == 0:
            return base[:0]
        if not (batch.layer == 1).any():
            return base[batch.pos]
        out = np.empty(batch.size, dtype=np.result_type(base, self.overlay.cols[name]))
        on_base = batch.layer == 0
        out[on_base] = base[batch.pos[on_base]]
        out[~on_base] = self.overlay.cols[name][batch.pos[~on_base]]
        return out

    def size_of(self, space: str, *extra: IntArray | int) -> int:
        """How large a per-node array over node space ``space`` must be."""
        size = self.sizes.get(space, 0)
        for item in extra:
            if isinstance(item, int):
                size = max(size, item + 1)
            elif item.size:
                size = max(size, int(item.max()) + 1)
        return size

    def all_valid(self, tf: TimeFilter) -> list[tuple[int, IntArray]]:
        """(layer, positions) of every edge valid under ``tf`` (without a retired job's
        reads, as ``expand``)."""
        layers = self._layers(tf)
        # At any time ever, every job that wrote did write: none is retired (the slider's
        # instants ask this on every answer).
        ever = not tf.current and tf.hi is None and tf.lo <= np.iinfo(np.int64).min
        if READS[0] in self.specs and layers and not ever:
            mask = self.retired_mask(tf)
            for index, (layer, store, keep) in enumerate(layers):
                jobs = store.cols["job"]
                known = jobs < mask.size
                reads = store.cols["out"] == 0
                reads[known] &= mask[jobs[known]]
                reads[~known] = False
                layers[index] = (layer, store, keep & ~reads)
        return [(layer, np.flatnonzero(keep)) for layer, _, keep in layers]

    def _layers(self, tf: TimeFilter) -> list[tuple[int, EdgeStore, BoolArray]]:
        """Each store holding edges, with the mask of its edges valid under ``tf``."""
        layers = []
        for layer, store in ((0, self.base), (1, self.overlay)):
            if store.size == 0:
                continue
            keep = tf.mask(store.cols["vf"], store.cols["vt"])
            if layer == 0:
                keep &= self.alive
            layers.append((layer, store, keep))
        return layers

    def store(self, layer: int) -> EdgeStore:
        return self.base if layer == 0 else self.overlay

    @property
    def edge_count(self) -> int:
        return int(self.alive.sum()) + self.overlay.size


# --- the two kinds of snapshot ------------------------------------------------------------

# The table adjacencies that are a job's reads (dataset → job, job ← dataset).
READS = ("ds_down", "job_up")
TABLE_SPECS = {
    # downstream: dataset --in--> job, job --out--> dataset
    "ds_down": AdjacencySpec("ds", "job", lambda c: c["out"] == 0),
    "job_down": AdjacencySpec("job", "ds", lambda c: c["out"] == 1),
    # upstream: dataset <--out-- job, job <--in-- dataset
    "ds_up": AdjacencySpec("ds", "job", lambda c: c["out"] == 1),
    "job_up": AdjacencySpec("job", "ds", lambda c: c["out"] == 0),
}
COLUMN_SPECS = {
    "down": AdjacencySpec("src", "tgt", lambda c: c["tgt"] >= 0),
    "up": AdjacencySpec("tgt", "src", lambda c: c["tgt"] >= 0),
    # Dataset-level dependencies (no target field): the source affects the whole target.
    "down_ds": AdjacencySpec("src", "tds", lambda c: c["tgt"] < 0),
}
_SUBTYPE_CASE = (
    "CASE transformation_subtype "
    + " ".join(f"WHEN '{name}' THEN {code}" for name, code in SUBTYPE_CODE.items() if name)
    + " ELSE 0 END"
)


@dataclass(frozen=True)
class Kind:
    """One edge table: its columns as SQL expressions (the last two are valid_from and
    valid_to), its adjacencies and the node space each column indexes."""

    name: str
    table: str
    exprs: tuple[tuple[str, str], ...]
    specs: dict[str, AdjacencySpec]
    spaces: dict[str, str]
    change_kind: str
    # Flag columns kept as int8; edge and node ids are narrowed to int32 while they fit.
    small: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return (*(name for name, _ in self.exprs), "vf", "vt")


TABLE = Kind(
    name="table",
    table="graph_tableedge",
    exprs=(
        ("id", "id"),
        ("job", "job_id"),
        ("ds", "dataset_id"),
        ("out", "CASE WHEN direction = 'out' THEN 1 ELSE 0 END"),
    ),
    specs=TABLE_SPECS,
    spaces={"ds": "ds", "job": "job"},
    change_kind=rev.Kind.TABLE,
    small=("out",),
)
COLUMN = Kind(
    name="column",
    table="graph_columnedge",
    exprs=(
        ("id", "id"),
        ("job", "COALESCE(job_id, -1)"),
        ("src", "source_field_id"),
        ("tds", "target_dataset_id"),
        ("tgt", "COALESCE(target_field_id, -1)"),
        (
            "ttype",
            f"CASE WHEN transformation_type = '{TransformationType.INDIRECT}' THEN 1 ELSE 0 END",
        ),
        ("sub", _SUBTYPE_CASE),
        ("mask", "CASE WHEN masking THEN 1 ELSE 0 END"),
        # Most edges have no description: answers look up only those that do.
        ("described", "CASE WHEN description <> '' THEN 1 ELSE 0 END"),
    ),
    specs=COLUMN_SPECS,
    spaces={"src": "field", "tgt": "field", "tds": "ds", "job": "job"},
    change_kind=rev.Kind.COLUMN,
    small=("ttype", "sub", "mask", "described"),
)


def rows_of(
    sorted_values: npt.NDArray[Any], wanted: IntArray
) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """Where each wanted value is in ``sorted_values``, and whether it is there. The wanted
    values are cast to the array's type (numpy would otherwise copy a narrowed array whole
    to int64 for every search: 8 MB for a million ids)."""
    if sorted_values.size == 0:
        return np.zeros(wanted.size, dtype=np.int64), np.zeros(wanted.size, dtype=bool)
    limits = np.iinfo(sorted_values.dtype)
    needles = np.clip(wanted, limits.min, limits.max).astype(sorted_values.dtype)
    at = np.minimum(np.searchsorted(sorted_values, needles), sorted_values.size - 1)
    return at, sorted_values[at] == wanted


def _strength(ttype: npt.NDArray[Any], sub: npt.NDArray[Any]) -> npt.NDArray[np.int8]:
    out = np.full(ttype.size, STRENGTH_TRANSFORMATION, dtype=np.int8)
    out[sub == SUBTYPE_CODE[TransformationSubtype.IDENTITY]] = STRENGTH_IDENTITY
    out[sub == SUBTYPE_CODE[TransformationSubtype.AGGREGATION]] = STRENGTH_AGGREGATION
    out[ttype == 1] = STRENGTH_INDIRECT
    return out


def _columns(kind: Kind, table: npt.NDArray[np.int64], narrow: bool) -> dict[str, Any]:
    cols: dict[str, npt.NDArray[Any]] = {}
    for i, name in enumerate(kind.columns):
        values = table[:, i]
        if name in kind.small:
            cols[name] = values.astype(np.int8)
        elif name in ("vf", "vt") or not narrow:
            cols[name] = np.ascontiguousarray(values)
        else:
            fits = values.size == 0 or int(values.max()) < 2**31 - 1
            cols[name] = values.astype(np.int32 if fits else np.int64)
    if kind is COLUMN:
        cols["strength"] = _strength(cols["ttype"], cols["sub"])
    return cols


def _build_store(
    kind: Kind, cols: dict[str, npt.NDArray[Any]], sizes: dict[str, int] | None
) -> EdgeStore:
    adj = {}
    for name, spec in kind.specs.items():
        keys = cols[spec.group].astype(np.int64)
        if spec.where is not None:
            keys = np.where(spec.where(cols), keys, -1)
        size = None if sizes is None else sizes[kind.spaces[spec.group]]
        adj[name] = Adjacency(keys, size)
    return EdgeStore(cols, adj)


def _space_sizes(kind: Kind, cols: dict[str, npt.NDArray[Any]]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for column, space in kind.spaces.items():
        values = cols[column]
        top = int(values.max()) + 1 if values.size else 0
        sizes[space] = max(sizes.get(space, 0), top)
    return sizes


# --- loading rows -------------------------------------------------------------------------


PG_CHUNK_IDS = 250_000


def packed_rows(
    table: str, exprs: Sequence[str], where: str = "", params: Sequence[Any] = (), order: str = ""
) -> list[bytes]:
    """Each of ``exprs`` (a bytea per row) over the rows of ``table`` (those ``where``
    selects, else all, one id range at a time), concatenated by the database (in ``order``,
    when given): a whole table crosses as a few byte strings, no per-row Python work."""
    connection = connections["default"]
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None
    aggregates = ", ".join(f"string_agg({expr}, ''::bytea {order})" for expr in exprs)
    parts: list[list[bytes]] = [[] for _ in exprs]
    with psycopg.Cursor(raw) as cursor:
        if where:
            ranges: list[tuple[str, list[Any]]] = [(where, list(params))]
        else:
            cursor.execute(f"SELECT min(id), max(id) FROM {table}")
            row = cursor.fetchone()
            low, high = (row[0], row[1]) if row and row[0] is not None else (0, -1)
            ranges = [
                ("WHERE id >= %s AND id < %s", [start, start + PG_CHUNK_IDS])
                for start in range(int(low), int(high) + 1, PG_CHUNK_IDS)
            ]
        for clause, values in ranges:
            cursor.execute(f"SELECT {aggregates} FROM {table} {clause}", values, binary=True)
            found = cursor.fetchone() or ()
            for part, value in zip(parts, found, strict=False):
                if value:
                    part.append(bytes(value))
    return [b"".join(part) for part in parts]


def _load_postgres(kind: Kind, where: str, params: Sequence[Any]) -> npt.NDArray[np.int64]:
    """Rows packed by the database: each column as a big-endian int8 (timestamps as int8
    microseconds since 2000-01-01, an open valid_to as +infinity, int8 max), so they parse
    with a single ``frombuffer``."""
    packed = " || ".join(
        [f"int8send(({expr})::int8)" for _, expr in kind.exprs]
        + ["timestamptz_send(valid_from)", "timestamptz_send(COALESCE(valid_to, 'infinity'))"]
    )
    (rows,) = packed_rows(kind.table, [packed], where, params)
    ncols = len(kind.columns)
    table = np.frombuffer(rows, dtype=">i8").reshape(-1, ncols).astype(np.int64)
    for column in (ncols - 2, ncols - 1):
        stamps = table[:, column]
        stamps[stamps != OPEN] += PG_EPOCH_OFFSET_US
    return table


def _load_generic(kind: Kind, where: str, params: Sequence[Any]) -> npt.NDArray[np.int64]:
    exprs = [expr for _, expr in kind.exprs] + ["valid_from", "valid_to"]
    with connections["default"].cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(exprs)} FROM {kind.table} {where}", list(params))
        rows = cursor.fetchall()
    ncols = len(exprs)
    table = np.empty((len(rows), ncols), dtype=np.int64)
    for r, row in enumerate(rows):
        table[r, : ncols - 2] = row[: ncols - 2]
        table[r, ncols - 2] = _time_us(row[ncols - 2])
        table[r, ncols - 1] = _time_us(row[ncols - 1])
    return table


def _time_us(value: Any) -> int:
    if value is None:
        return int(OPEN)
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            raise ValueError(f"not a datetime: {value!r}")
        value = parsed
    return to_us(value)


def load_table(kind: Kind, where: str = "", params: Sequence[Any] = ()) -> npt.NDArray[np.int64]:
    """Edge rows of ``kind`` as one int64 matrix ordered by id."""
    if connections["default"].vendor == "postgresql":
        table = _load_postgres(kind, where, params)
    else:
        table = _load_generic(kind, where, params)
    ids = table[:, 0]
    if ids.size > 1 and not bool((ids[1:] >= ids[:-1]).all()):
        table = table[np.argsort(ids, kind="stable")]
    return table


def _rows_by_ids(kind: Kind, ids: Sequence[int]) -> npt.NDArray[np.int64]:
    if not ids:
        return np.zeros((0, len(kind.columns)), dtype=np.int64)
    if connections["default"].vendor == "postgresql":
        return load_table(kind, "WHERE id = ANY(%s)", [list(ids)])
    parts = []
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        parts.append(load_table(kind, f"WHERE id IN ({', '.join(['%s'] * len(chunk))})", chunk))
    return np.concatenate(parts)


# --- building and refreshing --------------------------------------------------------------

OVERLAY_LIMIT_MIN = 20_000
OVERLAY_LIMIT_FRACTION = 0.05


def build(kind: Kind, revision: rev.Revision) -> Snapshot:
    """A snapshot of every edge row of ``kind``, read in one pass."""
    cols = _columns(kind, load_table(kind), narrow=True)
    sizes = _space_sizes(kind, cols)
    empty = np.zeros((0, len(kind.columns)), dtype=np.int64)
    return Snapshot(
        kind=kind.name,
        revision=revision,
        base=_build_store(kind, cols, sizes),
        alive=np.ones(cols["id"].size, dtype=bool),
        overlay=_build_store(kind, _columns(kind, empty, narrow=False), None),
        sizes=sizes,
        specs=kind.specs,
    )


def apply_changes(
    snapshot: Snapshot, kind: Kind, changed: Iterable[int], revision: rev.Revision
) -> Snapshot:
    """A new snapshot with the edges ``changed`` re-read: their base rows masked out and
    their current rows (if they still exist) laid over in the overlay."""
    ids = np.unique(np.fromiter(changed, dtype=np.int64))
    fresh = _columns(kind, _rows_by_ids(kind, ids.tolist()), narrow=False)
    alive = snapshot.alive
    base_ids = snapshot.base.cols["id"]
    if ids.size and base_ids.size:
        where, hit = rows_of(base_ids, ids)
        if hit.any():
            alive = alive.copy()
            alive[where[hit]] = False
    old = snapshot.overlay.cols
    keep = ~np.isin(old["id"], ids)
    merged = {
        name: np.concatenate([old[name][keep].astype(fresh[name].dtype), fresh[name]])
        for name in fresh
    }
    order = np.argsort(merged["id"], kind="stable")
    cols = {name: values[order] for name, values in merged.items()}
    sizes = dict(snapshot.sizes)
    for column, space in kind.spaces.items():
        if cols[column].size:
            sizes[space] = max(sizes.get(space, 0), int(cols[column].max()) + 1)
    return replace(
        snapshot,
        revision=revision,
        alive=alive,
        overlay=_build_store(kind, cols, None),
        sizes=sizes,
    )


class _Cache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.snapshots: dict[str, Snapshot] = {}
        self.rebuilding: set[str] = set()


_cache = _Cache()


def get(kind: Kind) -> Snapshot:
    """The snapshot of ``kind`` as of the committed revision (one query when current)."""
    current = rev.current()
    snapshot = _cache.snapshots.get(kind.name)
    if snapshot is not None and snapshot.revision == current:
        return snapshot
    with _cache.lock:
        snapshot = _cache.snapshots.get(kind.name)
        if snapshot is not None and snapshot.revision == current:
            return snapshot
        snapshot = _refresh(kind, snapshot, current)
        _cache.snapshots[kind.name] = snapshot
        return snapshot


def overlay_limit(snapshot: Snapshot) -> int:
    return max(OVERLAY_LIMIT_MIN, int(snapshot.base.size * OVERLAY_LIMIT_FRACTION))


def _refresh(kind: Kind, snapshot: Snapshot | None, current: rev.Revision) -> Snapshot:
    fresh = None if snapshot is None else _caught_up(kind, snapshot, current)
    if fresh is None:
        return _base(kind, current)
    if fresh.overlay.size > overlay_limit(fresh):
        _rebuild_in_background(kind)
    return fresh


def _caught_up(kind: Kind, snapshot: Snapshot, current: rev.Revision) -> Snapshot | None:
    """``snapshot`` brought to ``current`` by the changes since (None when the change log
    cannot tell them, or they are too many for an overlay)."""
    if snapshot.revision == current:
        return snapshot
    changes = rev.changes_since(
        snapshot.revision, current, (kind.change_kind,), overlay_limit(snapshot)
    )
    if changes is None:
        return None
    return apply_changes(snapshot, kind, [obj for _, obj in changes], current)


def _base(kind: Kind, current: rev.Revision) -> Snapshot:
    """A snapshot with a new base: on PostgreSQL with shared node data, the base this host's
    processes share (caught up to ``current``), written first when it has none usable."""
    path = docfile.host_path("snapshots", f"-{kind.name}.snap") if docfile.enabled() else None
    try:
        if path is not None:
            with docfile.locked(path):
                return _shared_base(path, kind, current)
    except OSError as exc:
        _log_once(f"lineage snapshots not shared between processes ({path}): {exc}")
    return build(kind, current)


def _shared_base(path: Path, kind: Kind, current: rev.Revision) -> Snapshot:
    shared = _open_shared(path, kind)
    if shared is not None and shared.revision.value > current.value:
        # Written since this request read the revision: not overwritten with an older one.
        return build(kind, current)
    fresh = None if shared is None else _caught_up(kind, shared, current)
    if fresh is not None and fresh.overlay.size <= overlay_limit(fresh):
        return fresh
    built = build(kind, current)
    _write_shared(path, built)
    return _open_shared(path, kind) or built


_logged: set[str] = set()


def _log_once(message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        logger.warning(message)


# --- the base shared by a host's processes ------------------------------------------------
#
# A base is read-only once built, and at 100,000 datasets it is ~220 MB, the same in every
# process of a host. So the process that builds it writes it to a file under
# DATA_DIR/snapshots (one per database, release and kind), and every process maps that
# file: the host keeps one copy of its pages. A process that starts, or whose snapshot
# the change log can no longer bring up to date, maps the file if its revision is on the
# current timeline and catches up by delta; otherwise it builds and writes a new one,
# under a lock, so that the others wait and map it. Overlays stay in each process.


def _write_shared(path: Path, snapshot: Snapshot) -> None:
    """Write ``snapshot``'s base to ``path`` in the node document file's layout, with no
    documents (replaced at once, never seen half-written)."""
    arrays: dict[str, npt.NDArray[Any]] = {
        f"col/{name}": values for name, values in snapshot.base.cols.items()
    }
    for name, adj in snapshot.base.adj.items():
        arrays.update({f"adj/{name}/{a}": getattr(adj, a) for a in ADJACENCY_ARRAYS})
    meta = {
        "kind": snapshot.kind,
        "sizes": snapshot.sizes,
        "adjacency_sizes": {n: a.size for n, a in snapshot.base.adj.items()},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".writing-", delete=False) as out:
        try:
            os.fchmod(out.fileno(), 0o644)  # readable by the host's other users (workers)
            docfile.assemble(out, snapshot.revision, dict(arrays), meta)
            out.flush()
            os.fsync(out.fileno())
            os.replace(out.name, path)
            docfile.sweep(path, f"-{snapshot.kind}.snap")
        except BaseException:
            os.unlink(out.name)
            raise


def _open_shared(path: Path, kind: Kind) -> Snapshot | None:
    """The base in ``path``, mapped read-only (None when there is none, or it is not one)."""
    try:
        found = docfile.DocFile(path)
        if found.meta.get("kind") != kind.name:
            raise docfile.CorruptFile(f"{path}: not a snapshot of this kind")
        arrays = found.arrays
        cols = {n.removeprefix("col/"): a for n, a in arrays.items() if n.startswith("col/")}
        adj = {
            name: Adjacency.of({a: arrays[f"adj/{name}/{a}"] for a in ADJACENCY_ARRAYS}, size)
            for name, size in found.meta["adjacency_sizes"].items()
        }
        sizes, edges = found.meta["sizes"], cols["id"]
    except FileNotFoundError:
        return None
    except (OSError, docfile.CorruptFile, KeyError, TypeError) as exc:
        logger.warning("lineage snapshot file %s not used: %s", path, exc)
        return None
    found.prefault()
    empty = np.zeros((0, len(kind.columns)), dtype=np.int64)
    return Snapshot(
        kind=kind.name,
        revision=found.revision,
        base=EdgeStore(cols, adj),
        alive=np.ones(edges.size, dtype=bool),
        overlay=_build_store(kind, _columns(kind, empty, narrow=False), None),
        sizes=sizes,
        specs=kind.specs,
    )


def _rebuild_in_background(kind: Kind) -> None:
    """Fold a large overlay into a new base without blocking requests: they keep being
    answered from base + overlay, and catch up from the new base by delta."""
    if kind.name in _cache.rebuilding or not settings.GRAPH_BACKGROUND_REBUILD:
        return
    _cache.rebuilding.add(kind.name)

    def work() -> None:
        try:
            fresh = _base(kind, rev.current())
            with _cache.lock:
                _cache.snapshots[kind.name] = fresh
        finally:
            _cache.rebuilding.discard(kind.name)
            connections.close_all()

    threading.Thread(target=work, name=f"lineage-{kind.name}-rebuild", daemon=True).start()


def table() -> Snapshot:
    return get(TABLE)


def columns() -> Snapshot:
    return get(COLUMN)


def warm() -> bool:
    """Build this process's snapshots now; True when both were built.

    Called once per server process before it answers requests (lineage_site/wsgi.py,
    GRAPH_WARM_ON_START), so no user's first graph request waits seconds for a build.
    A database that is not reachable or not migrated yet is logged, not raised: the
    first request builds then, as without warming.
    """
    started = time.perf_counter()
    try:
        table()
        columns()
    except DatabaseError as exc:
        logger.warning("lineage snapshots not built at start: %s", exc)
        return False
    logger.info("lineage snapshots built in %.1f s", time.perf_counter() - started)
    return True


def reset() -> None:
    """Forget every snapshot of this process (tests; after a bulk load)."""
    with _cache.lock:
        _cache.snapshots.clear()


def held_revisions() -> dict[str, int]:
    """The revision each snapshot this process holds is at, by kind."""
    return {name: snap.revision.value for name, snap in _cache.snapshots.items()}
