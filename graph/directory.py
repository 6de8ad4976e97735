"""The node directory: every dataset, job and field by name and primary key, field types
and subject kinds, when each dataset's shown data last changed, and when each job's runs
began and its last run settled.

Without it, a lineage request pays a query to resolve its node id, another to name the
fields of a column answer, one more to tell which datasets looked different at a past
instant and another for the jobs' runs as of then — most of what a first view of a node
costs. The directory answers them from numpy columns: the names of the 150,000 datasets
and jobs at 100,000 datasets with a hash index, the million fields (names and types as
one byte string each, sliced on use) and the jobs' run bounds, about 100 MB.

It is part of the node store's base: the host's document file holds it (graph/documents.py
writes both, on PostgreSQL), and every server process maps it, one copy for all. Without
a file it trusts (elsewhere, before the first pass, or with too much changed since the
file), there is none, and callers ask the database.

Trust is the node cache's one rule (graph/nodecache.py): the directory is read at
revision R, and answers for a dataset or job only while the process follows the change
log from R or earlier and has seen no change to that node after R. Callers take
everything else — nodes created after R, changed since, or not found — from the
database, so a stale directory costs a query, never a wrong answer.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from django.db import connections

from catalog.queries import DATASET_ATTRIBUTES, FIELD_ATTRIBUTES
from graph import docfile
from graph import revision as rev
from graph.details import LIFECYCLE_CHANGED, SOURCES_REDECLARED, FieldRow
from graph.nodecache import DATASET, JOB, cache
from graph.snapshot import OPEN, PG_EPOCH_OFFSET_US, _time_us, packed_rows, rows_of, to_us

IntArray = npt.NDArray[np.int64]
# Per field: id, dataset, subject kind (or -1), first seen, removed (or +infinity) as int8,
# then the byte lengths of its name and type as int4.
FIELD_HEADER = np.dtype(
    [
        ("id", ">i8"),
        ("ds", ">i8"),
        ("sk", ">i8"),
        ("first", ">i8"),
        ("removed", ">i8"),
        ("name_len", ">i4"),
        ("type_len", ">i4"),
    ]
)


def narrow(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``values`` as int32 when they all fit, as ids and positions do: half the room."""
    small = values.size == 0 or (values.min() >= -(2**31) and values.max() < 2**31)
    return values.astype(np.int32 if small else np.int64)


def name_hash(namespace: int, name: str) -> int:
    """A hash of (namespace pk, name), the same in every process (an index key)."""
    digest = hashlib.blake2b(b"%d\0%s" % (namespace, name.encode()), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


@dataclass(frozen=True, eq=False)
class Names:
    """The names of every dataset (or job): pks ascending, each one's namespace pk and name
    (UTF-8, ``text[at[i]:at[i + 1]]``), and an index from (namespace, name) to its row:
    ``hashes`` ascending (graph.directory.name_hash) and the row of each."""

    pks: IntArray
    ns: IntArray
    at: IntArray
    text: memoryview
    hashes: IntArray
    rows: IntArray

    @classmethod
    def of(cls, rows: list[tuple[int, int, str]]) -> Names:
        """From (pk, namespace pk, name) rows."""
        rows = sorted(rows)
        encoded = [name.encode() for _, _, name in rows]
        at = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(text) for text in encoded], out=at[1:])
        hashes = np.asarray([name_hash(ns, name) for _, ns, name in rows], dtype=np.int64)
        order = np.argsort(hashes, kind="stable")
        return cls(
            narrow(np.asarray([pk for pk, _, _ in rows], dtype=np.int64)),
            narrow(np.asarray([ns for _, ns, _ in rows], dtype=np.int64)),
            narrow(at),
            memoryview(b"".join(encoded)),
            hashes[order],
            narrow(order),
        )

    def pk(self, namespace: int, name: str) -> int | None:
        wanted = name_hash(namespace, name)
        encoded = name.encode()
        i = int(np.searchsorted(self.hashes, wanted))
        while i < self.hashes.size and int(self.hashes[i]) == wanted:
            row = int(self.rows[i])
            name_at = self.text[int(self.at[row]) : int(self.at[row + 1])]
            if int(self.ns[row]) == namespace and name_at == encoded:
                return int(self.pks[row])
            i += 1
        return None

    def found(self, pks: list[int]) -> tuple[list[int], list[int]]:
        """(the pks it holds, their rows)."""
        if not pks or self.pks.size == 0:
            return [], []
        wanted = np.asarray(pks, dtype=np.int64)
        at, hit = rows_of(self.pks, wanted)
        return wanted[hit].tolist(), at[hit].tolist()

    def keys(self, pks: list[int]) -> dict[int, tuple[int, str]]:
        """(namespace pk, name) of the pks it holds."""
        found, rows = self.found(pks)
        at, text = np.asarray(rows, dtype=np.int64), self.text
        return {
            pk: (ns, str(text[lo:hi], "utf-8"))
            for pk, ns, lo, hi in zip(
                found,
                self.ns[at].tolist(),
                self.at[at].tolist(),
                self.at[at + 1].tolist(),
                strict=True,
            )
        }


# The fields held as memoryviews (UTF-8 byte strings sliced on use).
BYTE_STRINGS = ("text", "names", "types")
# What of the directory the document file's header holds rather than its arrays.
IN_HEADER = ("revision", "namespaces", "namespace_ids", "datasets", "jobs", "subject_kinds")


def _arrays(held: Any, prefix: str, skip: tuple[str, ...] = ()) -> dict[str, npt.NDArray[Any]]:
    """A dataclass's arrays and byte strings (memoryviews) by name, under ``prefix``."""
    out = {}
    for name in (f.name for f in fields(held) if f.name not in skip):
        value = getattr(held, name)
        out[f"{prefix}{name}"] = (
            np.frombuffer(value, dtype=np.uint8) if isinstance(value, memoryview) else value
        )
    return out


def _fields(
    cls: Any, prefix: str, arrays: dict[str, Any], skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The inverse of :func:`_arrays`: each field of ``cls`` from the arrays, its byte
    strings as memoryviews."""
    out = {}
    for field in fields(cls):
        if field.name not in skip:
            value = arrays[f"{prefix}{field.name}"]
            out[field.name] = memoryview(value) if field.name in BYTE_STRINGS else value
    return out


@dataclass(frozen=True, eq=False)
class Directory:
    # The change log's revision it was read at: trusted by the node cache's rule (the
    # file that holds it is on the change log's timeline).
    revision: int
    namespaces: dict[int, str]
    namespace_ids: dict[str, int]
    datasets: Names
    jobs: Names
    subject_kinds: dict[int, str]
    # Fields ordered by (dataset, id); ``by_id`` orders them by id (``ids`` = f_id[by_id]).
    # Ids and positions are int32 while they fit (graph.directory.narrow).
    f_id: IntArray
    f_ds: IntArray
    f_sk: IntArray
    f_first: IntArray
    f_removed: IntArray
    # Where each field's name and type lie in ``names`` / ``types`` (read in id order).
    name_lo: npt.NDArray[Any]
    name_hi: npt.NDArray[Any]
    type_lo: npt.NDArray[Any]
    type_hi: npt.NDArray[Any]
    names: memoryview
    types: memoryview
    ids: IntArray
    by_id: IntArray
    # Datasets that have fields, sorted, and where their fields start (len + 1).
    ds_pks: IntArray
    ds_start: IntArray
    # Datasets by pk with the last instant (µs) their shown data changed (a field added or
    # removed, a steward-edited attribute changed, a propagated flag began or ended or its
    # source was declared anew while it held), and the last such change that was not a
    # propagated flag's (0 when none).
    changed_pks: IntArray
    changed_at: IntArray
    edited_at: IntArray
    # Datasets with a field that left their schema and came back (catalog.FieldGap), by pk,
    # and when the last gap ended (µs).
    gap_pks: IntArray
    gap_until: IntArray
    # The fields (their rows, ascending) that propagation ever flagged.
    flagged_rows: IntArray
    # Jobs with runs, by pk: when the first and the last run were created, and from when
    # the last one looks as it does now (its end and its state's time), in µs; whether the
    # last created is the job's latest run (the one its node data shows).
    run_jobs: IntArray
    run_first: IntArray
    run_last: IntArray
    run_settled: IntArray
    run_shown: npt.NDArray[np.bool_]

    # --- trust ------------------------------------------------------------------------

    def trusted(self) -> bool:
        """Whether the process's change log reaches back to the directory's revision (else
        it cannot tell which nodes changed since, and trusts none)."""
        return self.revision >= cache.horizon

    def trusts(self, kind: str, pk: int) -> bool:
        """Whether the process has seen no change to the node since the directory was
        read: the rule the node cache applies to the host's document file."""
        return bool(cache.unchanged(kind, [pk], self.revision))

    def _names(self, kind: str) -> Names:
        return self.datasets if kind == DATASET else self.jobs

    # --- names ------------------------------------------------------------------------

    def dataset_pk(self, namespace: str, name: str) -> int | None:
        ns = self.namespace_ids.get(namespace)
        pk = None if ns is None else self.datasets.pk(ns, name)
        return pk if pk is not None and self.trusts(DATASET, pk) else None

    def job_pk(self, namespace: str, name: str) -> int | None:
        ns = self.namespace_ids.get(namespace)
        pk = None if ns is None else self.jobs.pk(ns, name)
        return pk if pk is not None and self.trusts(JOB, pk) else None

    def node_names(self, kind: str, pks: list[int]) -> dict[int, tuple[str, str]]:
        """(namespace, name) of the trusted datasets (``kind`` DATASET) or jobs found."""
        keys = self._names(kind).keys(cache.unchanged(kind, pks, self.revision))
        return {pk: (self.namespaces[ns], name) for pk, (ns, name) in keys.items()}

    # --- fields -----------------------------------------------------------------------

    def _span(self, dataset_pk: int) -> tuple[int, int]:
        at, hit = rows_of(self.ds_pks, np.asarray([dataset_pk], dtype=np.int64))
        if not hit[0]:
            return 0, 0
        return int(self.ds_start[at[0]]), int(self.ds_start[at[0] + 1])

    def _name(self, row: int) -> str:
        return str(self.names[int(self.name_lo[row]) : int(self.name_hi[row])], "utf-8")

    def field_pk(self, dataset_pk: int, field: str) -> int | None:
        """The field named ``field`` of a trusted dataset, or None."""
        if not self.trusts(DATASET, dataset_pk):
            return None
        start, end = self._span(dataset_pk)
        wanted = field.encode()
        names = self.names
        lo = self.name_lo[start:end].tolist()
        hi = self.name_hi[start:end].tolist()
        for offset, (a, b) in enumerate(zip(lo, hi, strict=True)):
            if names[a:b] == wanted:
                return int(self.f_id[start + offset])
        return None

    def field_pks(self, dataset_pk: int, as_of: datetime | None) -> IntArray | None:
        """Fields of a trusted dataset alive at ``as_of`` (now when None), or None (as well
        when a gap of one of its fields may hold the instant: the database tells)."""
        if not self.trusts(DATASET, dataset_pk):
            return None
        start, end = self._span(dataset_pk)
        removed = self.f_removed[start:end]
        if as_of is None:
            alive = removed == OPEN
        else:
            moment = to_us(as_of)
            at, gapped = rows_of(self.gap_pks, np.asarray([dataset_pk], dtype=np.int64))
            if gapped[0] and self.gap_until[at[0]] > moment:
                return None
            alive = (self.f_first[start:end] <= moment) & (removed > moment)
        return np.sort(self.f_id[start:end][alive]).astype(np.int64)

    def field_rows(self, pks: list[int]) -> dict[int, FieldRow]:
        """(dataset pk, namespace, dataset, field, type, subject kind) of the fields found
        whose dataset is trusted."""
        if not pks or self.ids.size == 0:
            return {}
        wanted = np.asarray(pks, dtype=np.int64)
        at, hit = rows_of(self.ids, wanted)
        rows = self.by_id[at[hit]].tolist()
        found = wanted[hit].tolist()
        datasets = self.f_ds[rows].tolist()
        keys = self.datasets.keys(cache.unchanged(DATASET, sorted(set(datasets)), self.revision))
        out: dict[int, FieldRow] = {}
        for pk, row, ds in zip(found, rows, datasets, strict=True):
            key = keys.get(ds)
            if key is None:
                continue
            sk = int(self.f_sk[row])
            out[pk] = (
                ds,
                self.namespaces[key[0]],
                key[1],
                self._name(row),
                str(self.types[int(self.type_lo[row]) : int(self.type_hi[row])], "utf-8"),
                self.subject_kinds.get(sk) if sk >= 0 else None,
            )
        return out

    def _split_trusted(self, kind: str, pks: list[int]) -> tuple[IntArray, list[int]]:
        """(the pks it knows and trusts, the others)."""
        found, _ = self._names(kind).found(cache.unchanged(kind, pks, self.revision))
        unknown: list[int] = []
        if len(found) < len(pks):
            kept = set(found)
            unknown = [pk for pk in pks if pk not in kept]
        return np.asarray(found, dtype=np.int64), unknown

    def changed_since(
        self, pks: list[int], as_of: datetime
    ) -> tuple[set[int], set[int], list[int]]:
        """(datasets whose shown data changed after ``as_of``, those of them whose only
        changes since are propagated flags (begun, ended, or their source declared anew),
        datasets it cannot tell)."""
        known, unknown = self._split_trusted(DATASET, pks)
        at, found = rows_of(self.changed_pks, known)
        if not found.any():
            return set(), set(), unknown
        moment = to_us(as_of)
        changed = found & (self.changed_at[at] > moment)
        reflagged = changed & (self.edited_at[at] <= moment)
        return set(known[changed].tolist()), set(known[reflagged].tolist()), unknown

    def flagged_fields(self, pks: list[int]) -> dict[int, list[tuple[int, str]]]:
        """The current fields (pk, name) that propagation ever flagged, by dataset, of
        those of these datasets it trusts that have any."""
        known, _ = self._split_trusted(DATASET, pks)
        at, hit = rows_of(self.ds_pks, known)
        at = at[hit]
        lo = np.searchsorted(self.flagged_rows, self.ds_start[at])
        counts = np.searchsorted(self.flagged_rows, self.ds_start[at + 1]) - lo
        total = int(counts.sum())
        if total == 0:
            return {}
        # The rows of every span, one after another.
        starts = np.cumsum(counts) - counts
        rows = self.flagged_rows[np.repeat(lo - starts, counts) + np.arange(total)]
        out: dict[int, list[tuple[int, str]]] = {}
        for row in rows[self.f_removed[rows] == OPEN].tolist():
            out.setdefault(int(self.f_ds[row]), []).append((int(self.f_id[row]), self._name(row)))
        return out

    def runs_at(self, pks: list[int], as_of: datetime) -> tuple[list[int], list[int], list[int]]:
        """Jobs split by their run as of ``as_of`` (details._latest_run_join, seen from
        then): (no run yet, the latest run exactly as shown now — the last created, settled
        by then — and jobs it cannot tell: untrusted, or another run)."""
        moment = to_us(as_of)
        known, unknown = self._split_trusted(JOB, pks)
        at, ran = rows_of(self.run_jobs, known)
        if ran.any():
            none = ~ran | (moment < self.run_first[at])
            shown = (
                ~none
                & self.run_shown[at]
                & (moment >= self.run_last[at])
                & (moment >= self.run_settled[at])
            )
        else:
            none, shown = ~ran, ran
        earlier = known[~none & ~shown].tolist()
        return known[none].tolist(), known[shown].tolist(), sorted(unknown + earlier)

    # --- the host's document file holds it ----------------------------------------------

    def arrays(self) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
        """The directory as named arrays, and what is not an array (the header's)."""
        arrays = _arrays(self, "", IN_HEADER)
        arrays.update(_arrays(self.datasets, "datasets."))
        arrays.update(_arrays(self.jobs, "jobs."))
        meta = {
            "revision": self.revision,
            "namespaces": {str(pk): name for pk, name in self.namespaces.items()},
            "subject_kinds": {str(pk): name for pk, name in self.subject_kinds.items()},
        }
        return arrays, meta

    @classmethod
    def from_arrays(cls, arrays: dict[str, Any], meta: dict[str, Any]) -> Directory:
        namespaces = {int(pk): str(name) for pk, name in meta["namespaces"].items()}
        return cls(
            revision=int(meta["revision"]),
            namespaces=namespaces,
            namespace_ids={name: pk for pk, name in namespaces.items()},
            datasets=Names(**_fields(Names, "datasets.", arrays)),
            jobs=Names(**_fields(Names, "jobs.", arrays)),
            subject_kinds={int(pk): str(name) for pk, name in meta["subject_kinds"].items()},
            **_fields(cls, "", arrays, IN_HEADER),
        )


# --- reading --------------------------------------------------------------------------


def _named_rows(table: str) -> list[tuple[int, int, str]]:
    with connections["default"].cursor() as cursor:
        cursor.execute(f"SELECT id, namespace_id, name FROM {table}")
        return [(int(pk), int(ns), str(name)) for pk, ns, name in cursor.fetchall()]


def _fields_postgres() -> tuple[npt.NDArray[Any], bytes, bytes]:
    """Field headers (FIELD_HEADER) and the names and types as UTF-8, in id order, packed
    by the database per id range: no per-row Python work."""
    header = (
        "int8send(id) || int8send(dataset_id) || int8send(COALESCE(subject_kind_id, -1)) || "
        "timestamptz_send(first_seen) || timestamptz_send(COALESCE(removed_at, 'infinity')) || "
        "int4send(octet_length(name)) || int4send(octet_length(type))"
    )
    heads, names, types = packed_rows(
        "catalog_datasetfield",
        [header, "convert_to(name, 'UTF8')", "convert_to(type, 'UTF8')"],
        order="ORDER BY id",
    )
    return np.frombuffer(heads, dtype=FIELD_HEADER), names, types


def _offsets(lengths: IntArray) -> IntArray:
    out = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def _last_per_dataset(ds: IntArray, at: IntArray) -> tuple[IntArray, IntArray]:
    """(sorted dataset pks, the latest ``at`` of each)."""
    if ds.size == 0:
        return ds, at
    order = np.lexsort((at, ds))
    ds, at = ds[order], at[order]
    last = np.ones(ds.size, dtype=bool)
    last[:-1] = ds[1:] != ds[:-1]
    return ds[last], at[last]


def _last_changes(
    ds: IntArray, first: IntArray, removed: IntArray, gaps: list[tuple[int, datetime]]
) -> tuple[IntArray, IntArray, IntArray]:
    """Per dataset (sorted pks): the last field addition, removal (``gaps``: each dataset's
    last return of a field), steward edit, lifecycle change (details.LIFECYCLE_CHANGED),
    start or end of a propagated flag or new declaration of its source while it held, and
    the last of these other than a flag's (0 when none), in µs."""
    stamps = np.maximum(first, np.where(removed == OPEN, first, removed))
    with connections["default"].cursor() as cursor:
        attributes = list(DATASET_ATTRIBUTES + FIELD_ATTRIBUTES)
        cursor.execute(
            "SELECT dataset_id, max(at) FROM catalog_changerecord "
            f"WHERE attribute IN ({', '.join(['%s'] * len(attributes))}) GROUP BY dataset_id",
            attributes,
        )
        edits = cursor.fetchall()
        cursor.execute(
            f"SELECT id, {LIFECYCLE_CHANGED} FROM catalog_dataset WHERE dropped_at IS NOT NULL"
        )
        edits += cursor.fetchall() + gaps
        cursor.execute(
            "SELECT f.dataset_id, max(p.valid_from), max(p.valid_to) "
            "FROM catalog_propagatedflag p JOIN catalog_datasetfield f ON f.id = p.field_id "
            "GROUP BY f.dataset_id"
        )
        flags = cursor.fetchall()
        cursor.execute(
            f"SELECT f.dataset_id, max(c.at), NULL {SOURCES_REDECLARED} GROUP BY f.dataset_id"
        )
        flags += cursor.fetchall()
    edit_ds = np.asarray([int(pk) for pk, _ in edits], dtype=np.int64)
    edit_at = np.asarray([_time_us(at) for _, at in edits], dtype=np.int64)
    edited_pks, edited = _last_per_dataset(
        np.concatenate([ds, edit_ds]), np.concatenate([stamps, edit_at])
    )
    flag_ds = np.asarray([int(pk) for pk, *_ in flags], dtype=np.int64)
    flag_at = np.asarray(
        [max(_time_us(t) for t in (began, ended) if t is not None) for _, began, ended in flags],
        dtype=np.int64,
    )
    changed_pks, changed_at = _last_per_dataset(
        np.concatenate([edited_pks, flag_ds]), np.concatenate([edited, flag_at])
    )
    if edited_pks.size == 0:
        return changed_pks, changed_at, np.zeros_like(changed_at)
    at, hit = rows_of(edited_pks, changed_pks)
    return changed_pks, changed_at, np.where(hit, edited[at], 0)


def _run_bounds() -> tuple[IntArray, IntArray, IntArray, IntArray, npt.NDArray[np.bool_]]:
    """Per job with runs (sorted pks): its first and last run's creation, when the last
    settled (µs), and whether the last is the job's latest run. Two index probes a job."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT j.id, f.created_at, l.created_at, l.ended_at, l.state_event_time, "
            "l.id = j.latest_run_id FROM graph_job j "
            "JOIN graph_run f ON f.id = (SELECT r.id FROM graph_run r WHERE r.job_id = j.id "
            "ORDER BY r.created_at, r.id LIMIT 1) "
            "JOIN graph_run l ON l.id = (SELECT r.id FROM graph_run r WHERE r.job_id = j.id "
            "ORDER BY r.created_at DESC, r.id DESC LIMIT 1) ORDER BY j.id"
        )
        rows = cursor.fetchall()
    first: list[int] = []
    last: list[int] = []
    settled: list[int] = []
    for _, first_at, last_at, ended, state_at, _ in rows:
        created = _time_us(last_at)
        first.append(_time_us(first_at))
        last.append(created)
        settled.append(
            max((_time_us(t) for t in (ended, state_at) if t is not None), default=created)
        )
    return (
        np.asarray([row[0] for row in rows], dtype=np.int64),
        np.asarray(first, dtype=np.int64),
        np.asarray(last, dtype=np.int64),
        np.asarray(settled, dtype=np.int64),
        np.asarray([bool(row[5]) for row in rows], dtype=bool),
    )


def build() -> Directory:
    """Read the directory now, at the committed revision (rows read after it), from
    PostgreSQL (graph/documents.py writes it into the host's document file)."""
    cache.sync()
    read_at = rev.read()
    connection = connections["default"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, name FROM catalog_namespace")
        namespaces = {int(pk): str(name) for pk, name in cursor.fetchall()}
        cursor.execute("SELECT id, name FROM catalog_subjectkind")
        subject_kinds = {int(pk): str(name) for pk, name in cursor.fetchall()}
    datasets = Names.of(_named_rows("catalog_dataset"))
    jobs = Names.of(_named_rows("graph_job"))
    table, names, types = _fields_postgres()
    f_id = table["id"].astype(np.int64)
    name_at = _offsets(table["name_len"].astype(np.int64))
    type_at = _offsets(table["type_len"].astype(np.int64))
    f_ds = table["ds"].astype(np.int64)
    order = np.lexsort((f_id, f_ds))
    # Names and types stay in id order in their byte strings: only the offsets move.
    name_lo, name_hi = narrow(name_at[:-1][order]), narrow(name_at[1:][order])
    type_lo, type_hi = narrow(type_at[:-1][order]), narrow(type_at[1:][order])
    f_id, f_ds = f_id[order], f_ds[order]
    first = table["first"].astype(np.int64)[order] + PG_EPOCH_OFFSET_US
    removed = table["removed"].astype(np.int64)[order]
    removed[removed != OPEN] += PG_EPOCH_OFFSET_US
    by_id = np.argsort(f_id, kind="stable")
    ds_pks, starts = np.unique(f_ds, return_index=True)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT f.dataset_id, max(g.returned_at) FROM catalog_fieldgap g "
            "JOIN catalog_datasetfield f ON f.id = g.field_id GROUP BY f.dataset_id"
        )
        gaps = cursor.fetchall()
        cursor.execute("SELECT DISTINCT field_id FROM catalog_propagatedflag")
        ever = np.asarray([pk for (pk,) in cursor.fetchall()], dtype=np.int64)
    changed_pks, changed_at, edited_at = _last_changes(f_ds, first, removed, gaps)
    gap_pks, gap_until = _last_per_dataset(
        np.asarray([int(pk) for pk, _ in gaps], dtype=np.int64),
        np.asarray([_time_us(at) for _, at in gaps], dtype=np.int64),
    )
    at, hit = rows_of(f_id[by_id], ever)
    run_jobs, run_first, run_last, run_settled, run_shown = _run_bounds()
    return Directory(
        revision=read_at.value,
        namespaces=namespaces,
        namespace_ids={name: pk for pk, name in namespaces.items()},
        datasets=datasets,
        jobs=jobs,
        subject_kinds=subject_kinds,
        f_id=narrow(f_id),
        f_ds=narrow(f_ds),
        f_sk=narrow(table["sk"][order]),
        f_first=first,
        f_removed=removed,
        name_lo=name_lo,
        name_hi=name_hi,
        type_lo=type_lo,
        type_hi=type_hi,
        names=memoryview(names),
        types=memoryview(types),
        ids=narrow(f_id[by_id]),
        by_id=narrow(by_id),
        ds_pks=narrow(ds_pks),
        ds_start=narrow(np.append(starts, f_id.size)),
        changed_pks=changed_pks,
        changed_at=changed_at,
        edited_at=edited_at,
        gap_pks=gap_pks,
        gap_until=gap_until,
        flagged_rows=narrow(np.sort(by_id[at[hit]])),
        run_jobs=run_jobs,
        run_first=run_first,
        run_last=run_last,
        run_settled=run_settled,
        run_shown=run_shown,
    )


class _State:
    # The directory mapped from the host's document file, with the file it came from.
    mapped: tuple[docfile.DocFile, Directory] | None = None


_state = _State()


def get() -> Directory | None:
    """The directory of the host's document file, when the process trusts it; None
    otherwise (callers then ask the database)."""
    if not docfile.enabled():
        return None
    cache.sync()
    found = cache.document_file()
    if found is None or found.meta.get("directory") is None:
        return None
    held = _state.mapped
    if held is None or held[0] is not found:
        held = _state.mapped = (found, Directory.from_arrays(found.arrays, found.meta["directory"]))
    return held[1] if held[1].trusted() else None


def reset() -> None:
    """Forget the directory (tests; after a bulk load)."""
    _state.mapped = None
