"""Breadth-first traversals over a lineage snapshot, one whole frontier per step.

Distances are counted in jobs, as Marquez counts depth: from a dataset, the
jobs reading it and the datasets those jobs write are at distance 1; from a
job, the job and the datasets it reads or writes are at distance 0. At column
level every field-to-field edge goes through one job, so distance counts edges.

Everything here works on node primary keys (numpy arrays) and knows nothing
about names; graph/queries.py turns results into dataclasses.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from graph.snapshot import EMPTY, EMPTY_BATCH, EdgeBatch, IntArray, Snapshot, TimeFilter

Way = Literal["down", "up"]
UNSEEN = -1


# numpy 2's np.unique hashes integers before sorting them: on the arrays of a few to a few
# thousand node ids that every traversal step handles, sorting alone is 3-4x faster.


def _first_of_runs(ordered: npt.NDArray[np.integer]) -> npt.NDArray[np.bool_]:
    first = np.empty(ordered.size, dtype=bool)
    if ordered.size:
        first[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return first


def distinct(values: npt.NDArray[np.integer]) -> IntArray:
    """The sorted distinct values (``np.unique(values)``)."""
    ordered = np.sort(values)
    found: IntArray = ordered[_first_of_runs(ordered)]
    return found


def distinct_counts(values: npt.NDArray[np.integer]) -> tuple[IntArray, IntArray]:
    """The sorted distinct values and how often each occurs."""
    ordered = np.sort(values)
    starts = np.flatnonzero(_first_of_runs(ordered))
    counts: IntArray = np.diff(np.append(starts, ordered.size))
    found: IntArray = ordered[starts]
    return found, counts


def distinct_first(values: npt.NDArray[np.integer]) -> tuple[IntArray, IntArray]:
    """The sorted distinct values and the index of each one's first occurrence."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    first = _first_of_runs(ordered)
    found: IntArray = ordered[first].astype(np.int64, copy=False)
    return found, order[first]


@dataclass(frozen=True)
class TableReach:
    """Datasets and jobs reached one way, with their distance in jobs (roots at 0)."""

    ds: IntArray
    ds_dist: IntArray
    job: IntArray
    job_dist: IntArray

    @property
    def size(self) -> int:
        return int(self.ds.size + self.job.size)


class _Scratch(threading.local):
    """Distance arrays, one per node space, that a thread lends to its traversals.

    A distance array spans the whole node space (a million fields): filling one
    for every request costs more than walking a handful of nodes. A borrowed
    array is all UNSEEN; its borrower writes UNSEEN back over the entries it set
    and returns it. An array that is not returned (the traversal raised) is
    simply dropped, and the next borrower gets a fresh one.
    """

    def __init__(self) -> None:
        self.free: dict[str, npt.NDArray[np.int32]] = {}

    def borrow(self, space: str, size: int) -> npt.NDArray[np.int32]:
        array = self.free.pop(space, None)
        if array is None or array.size != size:
            array = np.full(size, UNSEEN, dtype=np.int32)
        return array

    def give_back(self, space: str, array: npt.NDArray[np.int32], touched: IntArray) -> None:
        array[touched] = UNSEEN
        self.free[space] = array


_scratch = _Scratch()


def _new(values: IntArray, dist: npt.NDArray[np.int32]) -> IntArray:
    unique = distinct(values)
    fresh: IntArray = unique[dist[unique] == UNSEEN]
    return fresh


def table_reach(
    snap: Snapshot,
    way: Way,
    depth: int,
    tf: TimeFilter,
    roots_ds: IntArray = EMPTY,
    roots_job: IntArray = EMPTY,
) -> TableReach:
    """Everything reachable from the roots following edges ``way``, up to ``depth`` jobs."""
    ds_adj, job_adj = ("ds_down", "job_down") if way == "down" else ("ds_up", "job_up")
    ds_dist = _scratch.borrow("ds", snap.size_of("ds", roots_ds))
    job_dist = _scratch.borrow("job", snap.size_of("job", roots_job))
    seen_ds: list[IntArray] = []
    seen_job: list[IntArray] = []

    frontier = distinct(roots_ds.astype(np.int64))
    ds_dist[frontier] = 0
    seen_ds.append(frontier)
    if roots_job.size:
        jobs = distinct(roots_job.astype(np.int64))
        job_dist[jobs] = 0
        seen_job.append(jobs)
        # A job's own inputs (upstream) or outputs (downstream) sit at its distance.
        more = _new(snap.expand(job_adj, jobs, tf).dst.astype(np.int64), ds_dist)
        ds_dist[more] = 0
        seen_ds.append(more)
        frontier = np.concatenate([frontier, more])

    level = 0
    while frontier.size and level < depth:
        level += 1
        jobs = _new(snap.expand(ds_adj, frontier, tf).dst.astype(np.int64), job_dist)
        if jobs.size == 0:
            break
        job_dist[jobs] = level
        seen_job.append(jobs)
        frontier = _new(snap.expand(job_adj, jobs, tf).dst.astype(np.int64), ds_dist)
        ds_dist[frontier] = level
        seen_ds.append(frontier)

    ds = np.concatenate(seen_ds) if seen_ds else EMPTY
    job = np.concatenate(seen_job) if seen_job else EMPTY
    reach = TableReach(ds, ds_dist[ds].astype(np.int64), job, job_dist[job].astype(np.int64))
    _scratch.give_back("ds", ds_dist, ds)
    _scratch.give_back("job", job_dist, job)
    return reach


@dataclass(frozen=True)
class FieldReachArrays:
    """Fields reached one way with their distance (edges from the nearest root)."""

    field: IntArray
    dist: IntArray


def field_reach(
    snap: Snapshot, way: Way, depth: int, tf: TimeFilter, roots: IntArray
) -> FieldReachArrays:
    adj = "down" if way == "down" else "up"
    dist = _scratch.borrow("field", snap.size_of("field", roots))
    frontier = distinct(roots.astype(np.int64))
    dist[frontier] = 0
    seen = [frontier]
    level = 0
    while frontier.size and level < depth:
        level += 1
        frontier = _new(snap.expand(adj, frontier, tf).dst.astype(np.int64), dist)
        dist[frontier] = level
        seen.append(frontier)
    fields = np.concatenate(seen)
    reach = FieldReachArrays(fields, dist[fields].astype(np.int64))
    _scratch.give_back("field", dist, fields)
    return reach


def nearest(kinds: IntArray, pks: IntArray, dists: IntArray, limit: int) -> tuple[IntArray, bool]:
    """Indexes of the ``limit`` nearest candidates (by distance, then kind, then pk)."""
    order = np.lexsort((pks, kinds, dists))
    if order.size <= limit:
        return order, False
    return order[:limit], True


def _inside(values: IntArray, members: IntArray) -> npt.NDArray[np.bool_]:
    """Whether each value is among ``members`` (sorted, distinct): a search, where a mask
    over the node space would allocate a megabyte for every column answer."""
    if members.size == 0:
        return np.zeros(values.size, dtype=bool)
    at = np.minimum(np.searchsorted(members, values), members.size - 1)
    found: npt.NDArray[np.bool_] = members[at] == values
    return found


def _hidden_counts(batch: EdgeBatch, included: IntArray, dedupe: bool) -> dict[int, int]:
    """For each source node, how many distinct neighbours in ``batch`` are not included
    (``dedupe`` False: the batch holds each pair once)."""
    dst = batch.dst.astype(np.int64)
    outside = ~_inside(dst, included)
    if not outside.any():
        return {}
    sources = unique_pairs(batch.src[outside], dst[outside])[0] if dedupe else batch.src[outside]
    nodes, counts = distinct_counts(sources)
    return dict(zip(nodes.tolist(), counts.tolist(), strict=True))


@dataclass(frozen=True)
class TableEdges:
    """Edges between included nodes: dataset→job (``in``) and job→dataset (``out``),
    plus, per node, how many valid neighbours each way were left out."""

    read_ds: IntArray  # dataset --in--> job
    read_job: IntArray
    write_job: IntArray  # job --out--> dataset
    write_ds: IntArray
    hidden_up_ds: dict[int, int]
    hidden_down_ds: dict[int, int]
    hidden_up_job: dict[int, int]
    hidden_down_job: dict[int, int]


def table_edges(snap: Snapshot, ds: IntArray, jobs: IntArray, tf: TimeFilter) -> TableEdges:
    ds_set, job_set = distinct(ds.astype(np.int64)), distinct(jobs.astype(np.int64))
    reads = snap.expand("ds_down", ds, tf)  # src dataset, dst job
    writes = snap.expand("ds_up", ds, tf)  # src dataset, dst job (job wrote it)
    keep_r = _inside(reads.dst.astype(np.int64), job_set)
    keep_w = _inside(writes.dst.astype(np.int64), job_set)
    # One open edge per (job, dataset, direction) (a unique constraint): only intervals
    # from the past can repeat a pair.
    dedupe = not tf.current
    read_pairs = unique_pairs(reads.src[keep_r], reads.dst[keep_r])
    write_pairs = unique_pairs(writes.dst[keep_w], writes.src[keep_w])
    return TableEdges(
        read_ds=read_pairs[0],
        read_job=read_pairs[1],
        write_job=write_pairs[0],
        write_ds=write_pairs[1],
        hidden_up_ds=_hidden_counts(writes, job_set, dedupe),
        hidden_down_ds=_hidden_counts(reads, job_set, dedupe),
        hidden_up_job=_hidden_counts(snap.expand("job_up", jobs, tf), ds_set, dedupe),
        hidden_down_job=_hidden_counts(snap.expand("job_down", jobs, tf), ds_set, dedupe),
    )


def unique_pairs(a: npt.NDArray[np.integer], b: npt.NDArray[np.integer]) -> IntArray:
    """Distinct (a, b) pairs as a (2, n) array, sorted by a then b."""
    if a.size == 0:
        return np.zeros((2, 0), dtype=np.int64)
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    span = int(b64.max()) + 1
    keys = distinct(a64 * span + b64)
    pairs: IntArray = np.stack([keys // span, keys % span])
    return pairs


@dataclass(frozen=True)
class ColumnEdges:
    """Field→field edges between included fields (one per edge row), with their job,
    transformation codes and edge ids; plus hidden neighbour counts per field."""

    src: IntArray
    tgt: IntArray
    job: IntArray
    ttype: IntArray
    sub: IntArray
    mask: IntArray
    edge_id: IntArray
    described: IntArray  # 1 where the edge has a description
    hidden_up: dict[int, int]
    hidden_down: dict[int, int]


def column_edges(snap: Snapshot, fields: IntArray, tf: TimeFilter) -> ColumnEdges:
    field_set = distinct(fields.astype(np.int64))
    down = snap.expand("down", fields, tf)
    keep = _inside(down.dst.astype(np.int64), field_set)
    batch = down.take(keep)
    return ColumnEdges(
        src=batch.src.astype(np.int64),
        tgt=batch.dst.astype(np.int64),
        job=snap.column("job", batch).astype(np.int64),
        ttype=snap.column("ttype", batch).astype(np.int64),
        sub=snap.column("sub", batch).astype(np.int64),
        mask=snap.column("mask", batch).astype(np.int64),
        edge_id=snap.column("id", batch).astype(np.int64),
        described=snap.column("described", batch).astype(np.int64),
        hidden_up=_hidden_counts(snap.expand("up", fields, tf), field_set, True),
        hidden_down=_hidden_counts(down, field_set, True),
    )


# --- ranked field reach (privacy subject search) -----------------------------------------


@dataclass(frozen=True)
class RankedReach:
    """Fields reached downstream from seed fields, each with the strongest path to it.

    ``strength[i]`` is the weakest transformation on the best path to
    ``field[i]`` (3 identity … 0 indirect, see graph/snapshot.py), rounded down
    to the levels asked for; the path is rebuilt from ``parent_*`` (the edge
    that reached the field: its source field, job and store row), -1 for seeds.
    Of a field that holds rows (reached before the last level), ``masked[i]`` is 1 where
    every path to it made of edges at least ``strength[i]`` strong has a masking edge (its
    rows hold only pseudonyms, as a masked propagated flag says), and ``hashed[i]`` where one
    of them has (its rows may hold a pseudonym: a scan matches the digests too). Of the
    others, both say whether the path kept masks.
    """

    field: IntArray
    dataset: IntArray
    strength: IntArray
    dist: IntArray
    parent_field: IntArray
    parent_job: IntArray
    parent_layer: IntArray
    parent_pos: IntArray
    masked: IntArray
    hashed: IntArray
    # Datasets reached only through dataset-level (no target field) dependencies.
    ds_only: IntArray
    ds_only_parent_field: IntArray
    ds_only_parent_layer: IntArray
    ds_only_parent_pos: IntArray


ALL_LEVELS = (3, 2, 1, 0)


def ranked_field_reach(
    snap: Snapshot,
    seeds: IntArray,
    seed_datasets: IntArray,
    tf: TimeFilter,
    max_depth: int | None = None,
    *,
    levels: tuple[int, ...] = ALL_LEVELS,
    blocked: IntArray | None = None,
) -> RankedReach:
    """Fields reached from ``seeds`` with, for each, the path whose weakest edge is strongest.

    One breadth-first pass per strength level in ``levels`` (strongest first,
    the last one 0): pass s follows only edges of strength ≥ s, so a field
    first reached in pass s has a best path whose weakest edge is at least s
    and below the previous level. Each field's edges are expanded once: a pass
    sets aside the edges too weak for it, and the next pass starts from them.
    Column lineage ranks all four strengths; subject search asks only whether
    rows are still held (levels 2 and 0).

    ``blocked`` fields (a steward said they hold no personal data) are reached
    only by the last pass: what they and only they feed counts as contributed to.
    Among the edges that reach a field in one step, the one from the nearest
    source is kept. ``max_depth`` bounds each field's distance along its best
    path, not its shortest: where a stronger path to a field is longer than a
    weaker one, what lies beyond it is cut off sooner (so with a depth, two
    levels can reach more than four).
    """
    if list(levels) != sorted(set(levels), reverse=True) or levels[-1] != 0:
        raise ValueError(f"levels must fall strictly to 0, got {levels}")
    limit = max_depth if max_depth is not None else 1 << 30
    size = snap.size_of("field", seeds)
    best = np.full(size, UNSEEN, dtype=np.int8)
    dist = np.full(size, UNSEEN, dtype=np.int32)
    masked = np.zeros(size, dtype=np.int8)
    seeds, first = np.unique(seeds.astype(np.int64), return_index=True)
    best[seeds] = 3
    dist[seeds] = 0
    none = np.full(seeds.size, -1, dtype=np.int64)
    found = [
        (seeds, seed_datasets.astype(np.int64)[first], np.full(seeds.size, 3), dist[seeds])
        + (none,) * 4
    ]
    stop = np.zeros(size, dtype=bool)
    if blocked is not None and blocked.size:
        stop[blocked[blocked < size]] = True

    def take(batch: EdgeBatch, strength: int) -> IntArray:
        """Record the targets of ``batch`` not reached yet (nearest source first)."""
        src = batch.src.astype(np.int64)
        dst = batch.dst.astype(np.int64)
        index = np.flatnonzero((best[dst] == UNSEEN) & (dist[src] < limit))
        if not index.size:
            return EMPTY
        index = index[np.argsort(dist[src[index]], kind="stable")]
        targets, pick = np.unique(dst[index], return_index=True)
        chosen = batch.take(index[pick])  # aligned with the sorted targets
        parents = chosen.src.astype(np.int64)
        best[targets] = strength
        dist[targets] = dist[parents] + 1
        masked[targets] = masked[parents] | snap.column("mask", chosen).astype(np.int8)
        found.append(
            (
                targets,
                snap.column("tds", chosen).astype(np.int64),
                np.full(targets.size, strength),
                dist[targets],
                parents,
                snap.column("job", chosen).astype(np.int64),
                chosen.layer.astype(np.int64),
                chosen.pos.astype(np.int64),
            )
        )
        return targets

    def strength_of(batch: EdgeBatch) -> npt.NDArray[np.int8]:
        strength = snap.column("strength", batch).astype(np.int8)
        strength[stop[batch.dst.astype(np.int64)]] = 0
        return strength

    batch = snap.expand("down", seeds, tf)
    for level in levels:
        weaker: list[EdgeBatch] = []
        while batch.size:
            strong = strength_of(batch) >= level
            if not strong.all():
                weaker.append(batch.take(~strong))
            frontier = take(batch.take(strong), level)
            batch = snap.expand("down", frontier, tf) if frontier.size else EMPTY_BATCH
        batch = EdgeBatch.joined(weaker)

    def follow(level: int, start: IntArray, clear: bool) -> npt.NDArray[np.bool_]:
        """The reached fields that edges at least ``level`` strong (only unmasked ones, with
        ``clear``) lead to from ``start``, ``start`` included."""
        seen = np.zeros(size, dtype=bool)
        seen[start] = True
        frontier = start
        while frontier.size:
            batch = snap.expand("down", frontier, tf)
            taken = strength_of(batch) >= level
            if clear:
                taken &= snap.column("mask", batch) == 0
            dst = batch.dst.astype(np.int64)[taken]
            frontier = distinct(dst[(best[dst] != UNSEEN) & ~seen[dst]])
            seen[frontier] = True
        return seen

    # The path kept above is the nearest; another may bring the values in clear, or as a
    # pseudonym. For the fields that hold rows (every level but the last): masked when every
    # path as strong as the field's own masks (as a propagated flag is), hashed when any does.
    hashed = masked.copy()
    for level in levels[:-1]:
        here = best == level
        if (here & (masked == 1)).any():
            masked[here & follow(level, seeds, clear=True)] = 0
        batch = snap.expand("down", np.flatnonzero(best >= level), tf)
        masking = (strength_of(batch) >= level) & (snap.column("mask", batch) == 1)
        behind = batch.dst.astype(np.int64)[masking]
        behind = distinct(behind[best[behind] != UNSEEN])
        if behind.size:
            hashed[here & follow(level, behind, clear=False)] = 1
    cols = [np.concatenate([np.asarray(f[i], dtype=np.int64) for f in found]) for i in range(8)]

    # Dataset-level dependencies from any reached field: the weakest kind of reach.
    ds_batch = snap.expand("down_ds", cols[0], tf)
    if ds_batch.size and max_depth is not None:
        ds_batch = ds_batch.take(dist[ds_batch.src.astype(np.int64)] < max_depth)
    targets = ds_batch.dst.astype(np.int64)
    outside = np.flatnonzero(~np.isin(targets, distinct(cols[1])))
    targets, pick = distinct_first(targets[outside])
    picked = ds_batch.take(outside[pick])
    field, dataset, strength, dists, parent_field, parent_job, parent_layer, parent_pos = cols
    return RankedReach(
        field=field,
        dataset=dataset,
        strength=strength,
        dist=dists,
        parent_field=parent_field,
        parent_job=parent_job,
        parent_layer=parent_layer,
        parent_pos=parent_pos,
        masked=masked[cols[0]].astype(np.int64),
        hashed=hashed[cols[0]].astype(np.int64),
        ds_only=targets,
        ds_only_parent_field=picked.src.astype(np.int64),
        ds_only_parent_layer=picked.layer.astype(np.int64),
        ds_only_parent_pos=picked.pos.astype(np.int64),
    )


# Each kind of node, the adjacency that leads downstream from it and the kind it reaches.
_DOWNSTREAM = {"ds": ("ds_down", "job"), "job": ("job_down", "ds"), "field": ("down", "field")}
# The kind of node upstream of each.
_UPSTREAM_KIND = {"ds": "job", "job": "ds", "field": "field"}


def path(
    snap: Snapshot, tf: TimeFilter, source: tuple[str, int], target: tuple[str, int]
) -> list[tuple[str, int]] | None:
    """A shortest downstream path from ``source`` to ``target`` as [(kind, pk), …]: "ds"
    and "job" alternate in the table snapshot; in the column snapshot, fields ("field")
    with the job that made each from the one before between them. None when ``target``
    is not downstream of ``source``."""
    kinds = ("field",) if source[0] == "field" else ("ds", "job")
    sizes = {k: snap.size_of(k, *(pk for kind, pk in (source, target) if kind == k)) for k in kinds}
    dist = {k: np.full(n, UNSEEN, dtype=np.int32) for k, n in sizes.items()}
    parent = {k: np.full(n, -1, dtype=np.int64) for k, n in sizes.items()}
    via = np.full(sizes.get("field", 0), -1, dtype=np.int64)  # the job that made a field
    kind, pk = source
    dist[kind][pk] = 0
    frontier = np.asarray([pk], dtype=np.int64)
    step = 0
    while frontier.size and dist[target[0]][target[1]] == UNSEEN:
        step += 1
        adj, nxt = _DOWNSTREAM[kind]
        batch = snap.expand(adj, frontier, tf)
        dst = batch.dst.astype(np.int64)
        fresh = np.flatnonzero(dist[nxt][dst] == UNSEEN)
        targets, first = distinct_first(dst[fresh])
        dist[nxt][targets] = step
        parent[nxt][targets] = batch.src.astype(np.int64)[fresh[first]]
        if nxt == "field":
            via[targets] = snap.column("job", batch.take(fresh[first])).astype(np.int64)
        kind, frontier = nxt, targets
    if dist[target[0]][target[1]] == UNSEEN:
        return None
    steps = [target]
    kind, pk = target
    while (kind, pk) != source:
        if kind == "field":
            steps.append(("job", int(via[pk])))
        pk = int(parent[kind][pk])
        kind = _UPSTREAM_KIND[kind]
        steps.append((kind, pk))
    return steps[::-1]
