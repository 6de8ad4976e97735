"""Personal-data flags as of any instant: what people declared (the catalog's history), what
propagation derived (``PropagatedFlag`` rows, written by graph.propagation, whose docstring
gives the rules), and what a field shows.

The catalog's history records declarations and blocks only: a record of a flag edit says
what was declared before it, never a propagated value. So the declared flag of a field at
any instant is a replay of its records, and the flag it shows then is that declaration, or
else (unless blocked then) the union of the sources whose rows were valid then, each with
the category its source declared then.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from django.db import connection

from catalog.lookups import where_in
from catalog.models import (
    ChangeSource,
    DatasetField,
    FlagSource,
    PiiCategory,
)
from catalog.pgsql import fetch_prepared

FLAG_ATTRIBUTES = ("pii_category", "subject_kind", "propagation_blocked")
# Ids per query (one array parameter on PostgreSQL, an IN list on SQLite).
CHUNK = 5000

# Which category a field reached from several sources shows: the most identifying first.
PRIORITY: list[str] = [
    PiiCategory.IDENTIFIER,
    PiiCategory.NATIONAL_ID,
    PiiCategory.EMAIL,
    PiiCategory.PHONE,
    PiiCategory.NAME,
    PiiCategory.ADDRESS,
    PiiCategory.DATE_OF_BIRTH,
    PiiCategory.DEVICE_ID,
    PiiCategory.IP,
    PiiCategory.FINANCIAL,
    PiiCategory.HEALTH,
    PiiCategory.LOCATION,
    PiiCategory.FREE_TEXT,
    PiiCategory.OTHER,
]

Steps = list[tuple[datetime | None, Any]]  # (from, value): the value holds from then on


def _steps(records: Sequence[tuple[datetime, Any, Any]], current: Any) -> Steps:
    """An attribute's values over time from its change records (at, old, new), in order."""
    if not records:
        return [(None, current)]
    steps: Steps = [(None, records[0][1])]
    steps.extend((at, new) for at, _, new in records)
    return steps


def _value_at(steps: Steps, at: datetime) -> Any:
    value = steps[0][1]
    for start, new in steps[1:]:
        if start is not None and start > at:
            break
        value = new
    return value


@dataclass
class FieldTimeline:
    """A field's declared category and subject kind, and its block, over time."""

    pii: Steps
    kind: Steps
    blocked: Steps

    def declared_at(self, at: datetime) -> bool:
        return bool(_value_at(self.pii, at)) or bool(_value_at(self.kind, at))

    def values_at(self, at: datetime) -> tuple[str, Any]:
        """The category ("" for none) and subject kind declared at ``at``."""
        return _value_at(self.pii, at) or "", _value_at(self.kind, at)

    def blocked_at(self, at: datetime) -> bool:
        return bool(_value_at(self.blocked, at))

    def instants(self) -> Iterator[datetime]:
        for steps in (self.pii, self.kind, self.blocked):
            for start, _ in steps:
                if start is not None:
                    yield start


def timelines(field_ids: Iterable[int]) -> dict[int, FieldTimeline]:
    """Each field's declarations and blocks over time, from the catalog's history (the
    propagation's own writes are not history: they are derived)."""
    ids = sorted(set(field_ids))
    rows: dict[tuple[int, str], int] = {}
    current: dict[int, tuple[str, str | None, bool]] = {}
    # Read as plain rows: thousands of fields a search, each a few tuples, not model rows.
    for chunk in chunks(ids):
        where, params = where_in("f.id", list(chunk))
        for pk, dataset_id, name, pii_value, kind, source, blocked in fetch_prepared(
            "SELECT f.id, f.dataset_id, f.name, f.pii_category, k.name, f.flag_source, "
            "f.propagation_blocked FROM catalog_datasetfield f "
            f"LEFT JOIN catalog_subjectkind k ON k.id = f.subject_kind_id WHERE {where}",
            params,
        ):
            rows[(dataset_id, name)] = pk
            declared = source == FlagSource.DECLARED
            current[pk] = (
                pii_value if declared else "",
                kind if declared else None,
                bool(blocked),
            )
    history: dict[tuple[int, str], list[tuple[datetime, Any, Any]]] = defaultdict(list)
    marks = ", ".join(["%s"] * len(FLAG_ATTRIBUTES))
    for chunk in chunks(sorted({dataset_id for dataset_id, _ in rows})):
        where, params = where_in("dataset_id", list(chunk))
        # As plain rows too: compiling the queryset cost more than running the query
        # (lineage as of an instant reads these for every dataset whose flags moved).
        for dataset_id, name, attribute, at, old, new in fetch_prepared(
            "SELECT dataset_id, field_name, attribute, at, old, new "
            f"FROM catalog_changerecord WHERE {where} AND attribute IN ({marks}) "
            "AND source <> %s ORDER BY at, id",
            [*params, *FLAG_ATTRIBUTES, ChangeSource.PROPAGATION],
        ):
            field_id = rows.get((dataset_id, name))
            if field_id is not None:
                history[(field_id, attribute)].append((_aware(at), _json(old), _json(new)))
    # Most fields have no history: they share one timeline per current value.
    plain: dict[tuple[str, str | None, bool], FieldTimeline] = {}
    found = {}
    with_history = {pk for pk, _ in history}
    for pk, values in current.items():
        if pk in with_history:
            found[pk] = FieldTimeline(
                pii=_steps(history.get((pk, "pii_category"), []), values[0]),
                kind=_steps(history.get((pk, "subject_kind"), []), values[1]),
                blocked=_steps(history.get((pk, "propagation_blocked"), []), values[2]),
            )
        else:
            line = plain.get(values)
            if line is None:
                line = plain[values] = FieldTimeline(
                    [(None, values[0])], [(None, values[1])], [(None, values[2])]
                )
            found[pk] = line
    return found


def _aware(value: datetime) -> datetime:
    """A timestamp read by a plain query, aware (SQLite's come naive, in UTC: the
    project's databases set no TIME_ZONE of their own)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _json(value: Any) -> Any:
    """A JSON column read by a plain query (its text, on both databases)."""
    return None if value is None else json.loads(value)


def chunks(ids: Sequence[int], size: int = CHUNK) -> Iterator[Sequence[int]]:
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def rank(category: str) -> int:
    return PRIORITY.index(category) if category in PRIORITY else len(PRIORITY)


FieldName = tuple[str, str, str]  # namespace, dataset, field


@dataclass(frozen=True)
class FieldFlag:
    """The personal-data flag a field shows: declared, or propagated from declared sources
    (``sources``), masked when every path that brought it masks."""

    pii: str
    subject_kind: str | None
    source: str
    masked: bool
    sources: tuple[FieldName, ...]
    blocked: bool

    @property
    def personal(self) -> bool:
        return bool(self.pii or self.subject_kind)

    @property
    def propagated_from(self) -> tuple[str, ...]:
        """The sources' node ids (``datasetField:{namespace}:{dataset}:{field}``)."""
        return tuple(f"datasetField:{ns}:{ds}:{name}" for ns, ds, name in self.sources)


NO_FLAG = FieldFlag("", None, FlagSource.DECLARED, False, (), False)


def _names(field_ids: Iterable[int]) -> dict[int, FieldName]:
    ids = sorted(set(field_ids))
    found = {}
    for chunk in chunks(ids):
        for pk, namespace, dataset, name in DatasetField.objects.filter(
            pk__any_of=list(chunk)
        ).values_list("pk", "dataset__namespace__name", "dataset__name", "name"):
            found[pk] = (namespace, dataset, name)
    return found


def field_flags(
    fields: Sequence[DatasetField], as_of: datetime | None = None
) -> dict[int, FieldFlag]:
    """The flag each field shows now (from its columns) or as of an instant (from history)."""
    if as_of is not None:
        return flags_as_of([f.pk for f in fields], as_of)
    sources = propagated_sources([f.pk for f in fields], None)
    names = _names({s for found in sources.values() for s, _ in found})
    return {f.pk: _current(f, sources.get(f.pk, []), names) for f in fields}


def flags_as_of(
    field_ids: Sequence[int], as_of: datetime, named: bool = True
) -> dict[int, FieldFlag]:
    """The flag each of these fields showed at ``as_of``, naming the sources of propagated
    ones (without ``named``, their ``sources`` are left empty).

    A field propagation reached then was neither declared nor blocked then (``reach`` stops
    at both), so only the other fields' own history is read, and the sources'."""
    ids = sorted(set(field_ids))
    sources = propagated_sources(ids, as_of)
    all_sources = {s for found in sources.values() for s, _ in found}
    names = _names(all_sources) if named else {}
    lines = timelines([*(pk for pk in ids if pk not in sources), *all_sources])
    declared = {
        s: (_value_at(lines[s].pii, as_of) or "", _value_at(lines[s].kind, as_of))
        for s in all_sources
        if s in lines
    }
    found = {}
    # Copies of one source, or of the same few, show one flag: worked out once.
    union: dict[tuple[tuple[int, bool], ...], FieldFlag] = {}
    for pk in ids:
        rows = sources.get(pk)
        if rows:
            key = tuple(rows)
            flag = union.get(key)
            if flag is None:
                flag = union[key] = union_flag(rows, declared, names, False)
            found[pk] = flag
            continue
        line = lines.get(pk)
        if line is None:  # no such field
            continue
        pii, kind = _value_at(line.pii, as_of) or "", _value_at(line.kind, as_of)
        blocked = bool(_value_at(line.blocked, as_of))
        found[pk] = FieldFlag(pii, kind, FlagSource.DECLARED, False, (), blocked)
    return found


def copied_flags_as_of(
    field_ids: Sequence[int], as_of: datetime
) -> dict[int, tuple[str, str | None]]:
    """The category ("" for none) and subject kind these fields showed at ``as_of``, for
    fields of datasets none of whose declarations changed since (only propagated flags
    did): of the fields propagation reached then, and of those it reaches now but not then
    (they declared nothing then, as they declare nothing now). The others are left out:
    they show their own declaration, the same then as now.

    One query, and the sources' history when propagation reached any of these fields then;
    ``flags_as_of`` would read every field's own history too."""
    moment = connection.ops.adapt_datetimefield_value(as_of)
    then: dict[int, list[tuple[int, bool]]] = defaultdict(list)
    now: set[int] = set()
    for chunk in chunks(sorted(set(field_ids))):
        where, params = where_in("field_id", list(chunk))
        for field_id, source_id, masked, valid_then, valid_now in fetch_prepared(
            "SELECT field_id, source_id, masked, "
            "CASE WHEN valid_from <= %s THEN 1 ELSE 0 END, "
            "CASE WHEN valid_to IS NULL THEN 1 ELSE 0 END FROM catalog_propagatedflag "
            f"WHERE {where} AND (valid_to IS NULL OR valid_to > %s) ORDER BY source_id",
            [moment, *params, moment],
        ):
            if valid_then:
                then[field_id].append((source_id, bool(masked)))
            if valid_now:
                now.add(field_id)
    sources = {s for rows in then.values() for s, _ in rows}
    lines = timelines(sources) if sources else {}
    declared = {s: lines[s].values_at(as_of) for s in sources if s in lines}
    found: dict[int, tuple[str, str | None]] = dict.fromkeys(now - then.keys(), ("", None))
    for pk, rows in then.items():
        flag = union_flag(rows, declared, {}, False)
        found[pk] = (flag.pii, flag.subject_kind)
    return found


def propagated_sources(
    ids: Sequence[int], as_of: datetime | None
) -> dict[int, list[tuple[int, bool]]]:
    """(source, masked) of each field's propagated rows, current or valid at ``as_of``."""
    window, params = "valid_to IS NULL", []
    if as_of is not None:
        moment = connection.ops.adapt_datetimefield_value(as_of)
        window = "valid_from <= %s AND (valid_to IS NULL OR valid_to > %s)"
        params = [moment, moment]
    sources: dict[int, list[tuple[int, bool]]] = defaultdict(list)
    for chunk in chunks(ids):
        where, ids_param = where_in("field_id", list(chunk))
        for field_id, source_id, masked in fetch_prepared(
            "SELECT field_id, source_id, masked FROM catalog_propagatedflag "
            f"WHERE {where} AND {window} ORDER BY source_id",
            [*ids_param, *params],
        ):
            sources[field_id].append((source_id, bool(masked)))
    return sources


def _current(
    f: DatasetField, reached: list[tuple[int, bool]], names: dict[int, FieldName]
) -> FieldFlag:
    kind = f.subject_kind.name if f.subject_kind else None
    if f.flag_source != FlagSource.PROPAGATED:
        return FieldFlag(
            f.pii_category, kind, FlagSource.DECLARED, False, (), f.propagation_blocked
        )
    return FieldFlag(
        f.pii_category,
        kind,
        FlagSource.PROPAGATED,
        f.flag_masked,
        tuple(names[s] for s, _ in reached if s in names),
        False,
    )


@dataclass
class UnionKinds:
    """``union_kinds``' answer: per field (sorted ids), the index of its category in
    ``categories`` and of its subject kind in ``kinds`` (-1: none)."""

    field: npt.NDArray[np.int64]
    category: npt.NDArray[np.int64]
    kind: npt.NDArray[np.int64]
    categories: list[str]
    kinds: list[str]

    def with_kind(self, kind: str) -> tuple[list[int], list[str]]:
        """The fields showing ``kind``, and the category each shows ("" for none)."""
        if kind not in self.kinds:
            return [], []
        mask = self.kind == self.kinds.index(kind)
        names = [*self.categories, ""]  # index -1: none
        return self.field[mask].tolist(), [names[c] for c in self.category[mask].tolist()]


def union_kinds(
    fields: npt.NDArray[np.int64],
    sources: npt.NDArray[np.int64],
    declared: dict[int, tuple[str, Any]],
) -> UnionKinds:
    """``union_flag``'s category and subject kind for many fields at once, from the
    (field, source) pairs of their propagated rows and what each source declared (category,
    subject kind): per field, the first category and the first kind in PRIORITY order, then
    source order. Fields no source of which declared anything are left out."""
    known = np.fromiter(sorted(declared), dtype=np.int64, count=len(declared))
    categories = sorted({pii for pii, _ in declared.values() if pii}, key=rank)
    kinds = sorted({kind for _, kind in declared.values() if kind})
    listed = known.tolist()
    ranks = np.asarray([rank(declared[s][0]) for s in listed], dtype=np.int64)
    category_of = np.asarray(
        [categories.index(declared[s][0]) if declared[s][0] else -1 for s in listed],
        dtype=np.int64,
    )
    kind_of = np.asarray(
        [kinds.index(declared[s][1]) if declared[s][1] else -1 for s in listed], dtype=np.int64
    )
    if known.size:
        at = np.minimum(np.searchsorted(known, sources), known.size - 1)
        mine = (known[at] == sources) & ((category_of[at] >= 0) | (kind_of[at] >= 0))
    else:
        at = np.zeros(fields.size, dtype=np.int64)
        mine = np.zeros(fields.size, dtype=bool)
    fields, sources, at = fields[mine], sources[mine], at[mine]
    order = np.lexsort((sources, ranks[at], fields))  # per field: by rank, then source
    heads = np.unique(fields)
    chosen: list[npt.NDArray[np.int64]] = []
    for codes in (category_of, kind_of):
        picked = order[codes[at[order]] >= 0]
        firsts, first = np.unique(fields[picked], return_index=True)
        code = np.full(heads.size, -1, dtype=np.int64)
        code[np.searchsorted(heads, firsts)] = codes[at[picked[first]]]
        chosen.append(code)
    return UnionKinds(heads, chosen[0], chosen[1], categories, kinds)


def union_flag(
    reached: list[tuple[int, bool]],
    declared: dict[int, tuple[str, Any]],
    names: dict[int, FieldName],
    blocked: bool,
) -> FieldFlag:
    """A field's flag from the (source, masked) pairs that reached it, given what each
    source declared (category, subject kind): the first in PRIORITY order gives the
    category and the subject kind; masked when every source's path masks."""
    if len(reached) == 1:  # most fields: one source
        source, masked = reached[0]
        pii, kind = declared[source]
        if not (pii or kind):
            return FieldFlag("", None, FlagSource.DECLARED, False, (), blocked)
        named = (names[source],) if source in names else ()
        return FieldFlag(pii, kind, FlagSource.PROPAGATED, masked, named, False)
    reached = [(s, m) for s, m in reached if declared[s][0] or declared[s][1]]
    if not reached:
        return FieldFlag("", None, FlagSource.DECLARED, False, (), blocked)
    ordered = sorted(reached, key=lambda item: (rank(declared[item[0]][0]), item[0]))
    pii = next((declared[s][0] for s, _ in ordered if declared[s][0]), "")
    kind = next((declared[s][1] for s, _ in ordered if declared[s][1]), None)
    return FieldFlag(
        pii,
        kind,
        FlagSource.PROPAGATED,
        all(m for _, m in reached),
        tuple(names[s] for s, _ in reached if s in names),
        False,
    )
