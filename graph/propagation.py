"""Personal data follows the data: PII flags propagated along column lineage.

The rules, as plain functions below:

- A field's flag is *declared* when a person (or a catalog import) gave it a PII category or
  a subject kind. Declared fields are the sources.
- A source's flag reaches every field its values flow into, through column edges that carry
  values: DIRECT IDENTITY and DIRECT TRANSFORMATION (and DIRECT with no subtype: a value
  made by a transformation nobody named is taken to carry its input). A masking
  TRANSFORMATION marks the flag ``masked``: a hash or a pseudonym is still personal data.
  A field is masked when every path reaching it masks.
- DIRECT AGGREGATION and every INDIRECT edge (JOIN, FILTER, GROUP_BY, SORT, WINDOW,
  CONDITIONAL, and dataset-level dependencies) carry none.
- A field reached from several sources keeps each (a union). The category and subject kind
  it shows are those of its first source in ``PRIORITY`` order.
- Declared flags win: propagation does not enter a declared field, which is a source itself.
- A steward's block on a field stops propagation there and below; the field shows no flag.
- All of it holds as of any instant. Edges, declarations and blocks each have a validity
  over time, and so do the propagated flags: ``catalog.PropagatedFlag`` rows, one per
  (field, source) and interval, and the current flag kept on each ``DatasetField``.

Maintenance: a change names the sources whose reach it may alter (``sources_touching``):
a declaration or block on a field, or an edge opened or closed by ingestion from a field.
Each such source's rows are recomputed over its closure and replaced where they differ
(``refresh``). ``recompute_all`` recomputes every source from scratch; the property tests
hold the two equal, now and as of any instant. ``RULES_VERSION`` is kept with the rows: a
release that changes these rules recomputes everything when it migrates.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple, cast

from django.db import transaction
from django.db.models import Q
from django.dispatch import receiver

from catalog import bulk
from catalog.flags import FieldTimeline, chunks, timelines, union_flag
from catalog.models import (
    PERSONAL_DATA,
    ChangeRecord,
    ChangeSource,
    DatasetField,
    DerivedVersion,
    FlagSource,
    PropagatedFlag,
)
from catalog.signals import flags_changed
from graph.models import ColumnEdge

RULES_VERSION = 1
CARRYING = {("DIRECT", "IDENTITY"), ("DIRECT", "TRANSFORMATION"), ("DIRECT", "")}


def carries(transformation_type: str, subtype: str) -> bool:
    """Whether a column edge of this kind carries a personal-data flag to its target."""
    return (transformation_type, subtype) in CARRYING


class Edge(NamedTuple):
    source: int
    target: int
    masking: bool
    valid_from: datetime
    valid_to: datetime | None

    def valid_at(self, at: datetime) -> bool:
        return self.valid_from <= at and (self.valid_to is None or at < self.valid_to)


def reach(
    source: int,
    edges_from: dict[int, list[Edge]],
    at: datetime,
    declared: set[int],
    blocked: set[int],
) -> dict[int, bool]:
    """The fields ``source``'s flag reaches at ``at`` and whether each is masked, over the
    edges valid then; ``declared`` and ``blocked`` are the fields declared and blocked then.
    A source not declared at ``at`` reaches nothing."""
    if source not in declared:
        return {}
    found: dict[int, bool] = {}
    # Unmasked paths first: a field reached by one is not masked, whatever else reaches it.
    for masked in (False, True):
        frontier = [source] if not masked else [source, *[f for f, m in found.items() if not m]]
        seen = set(frontier)
        while frontier:
            following = []
            for field in frontier:
                for edge in edges_from.get(field, ()):
                    target = edge.target
                    if target in seen or not edge.valid_at(at) or (edge.masking and not masked):
                        continue
                    seen.add(target)
                    if target in declared or target in blocked:
                        continue
                    if target not in found:
                        found[target] = masked
                    following.append(target)
            frontier = following
    found.pop(source, None)
    return found


# -- one source's reach over time -------------------------------------------------------------


Row = tuple[int, bool, datetime, datetime | None]  # field, masked, valid_from, valid_to


def closure_edges(sources: Iterable[int], since: datetime | None = None) -> dict[int, list[Edge]]:
    """Every carrying edge out of the fields these sources could reach: of any time, or
    still valid at or after ``since``."""
    edges_from: dict[int, list[Edge]] = defaultdict(list)
    seen = set(sources)
    frontier = sorted(seen)
    window = Q() if since is None else Q(valid_to__isnull=True) | Q(valid_to__gt=since)
    while frontier:
        following: set[int] = set()
        for chunk in chunks(frontier):
            for source, target, kind, subtype, masking, start, end in ColumnEdge.objects.filter(
                window, source_field_id__any_of=list(chunk), target_field__isnull=False
            ).values_list(
                "source_field_id",
                "target_field_id",
                "transformation_type",
                "transformation_subtype",
                "masking",
                "valid_from",
                "valid_to",
            ):
                if not carries(kind, subtype):
                    continue
                edges_from[source].append(Edge(source, target, masking, start, end))
                if target not in seen:
                    seen.add(target)
                    following.add(target)
        frontier = sorted(following)
    return edges_from


def source_rows(
    source: int,
    edges_from: dict[int, list[Edge]],
    lines: dict[int, FieldTimeline],
    since: datetime | None = None,
) -> set[Row]:
    """The PropagatedFlag rows ``source`` should have: its reach at each instant anything in
    its closure changes, merged into intervals. With ``since``, only from then on: rows
    start no earlier than ``since`` (``_replace_rows`` joins them to the stored ones)."""
    closure = {source}
    frontier = [source]
    while frontier:
        following = []
        for field in frontier:
            for edge in edges_from.get(field, ()):
                if edge.target not in closure:
                    closure.add(edge.target)
                    following.append(edge.target)
        frontier = following
    instants: set[datetime] = set() if since is None else {since}
    for field in closure:
        for edge in edges_from.get(field, ()):
            instants.add(edge.valid_from)
            if edge.valid_to is not None:
                instants.add(edge.valid_to)
        line = lines.get(field)
        if line is not None:
            instants.update(line.instants())
    if since is not None:
        instants = {at for at in instants if at >= since}
    rows: set[Row] = set()
    open_: dict[int, tuple[bool, datetime]] = {}
    for at in sorted(instants):
        declared = {f for f in closure if f in lines and lines[f].declared_at(at)}
        blocked = {f for f in closure if f in lines and lines[f].blocked_at(at)}
        now = reach(source, edges_from, at, declared, blocked)
        for field, (masked, start) in list(open_.items()):
            if now.get(field) != masked:
                rows.add((field, masked, start, at))
                del open_[field]
        for field, masked in now.items():
            if field not in open_:
                open_[field] = (masked, at)
    rows.update((field, masked, start, None) for field, (masked, start) in open_.items())
    return rows


# -- keeping the rows and the fields current ---------------------------------------------------


def sources_through(field_ids: Iterable[int]) -> set[int]:
    """The declared sources whose flag leaves through these fields: each field ever declared,
    and every source whose flag ever reached one of them."""
    ids = sorted(set(field_ids))
    found: set[int] = set()
    for chunk in chunks(ids):
        found.update(
            PropagatedFlag.objects.filter(field_id__any_of=list(chunk)).values_list(
                "source_id", flat=True
            )
        )
    found.update(pk for pk, line in timelines(ids).items() if _ever_declared(line))
    return found


def sources_touching(field_ids: Iterable[int]) -> set[int]:
    """The sources whose reach a new declaration or block at these fields may alter: those
    flowing into the fields (a declaration or a block stops them there) and the fields'
    own."""
    ids = sorted(set(field_ids))
    parents: set[int] = set()
    for chunk in chunks(ids):
        for source, kind, subtype in ColumnEdge.objects.filter(
            target_field_id__any_of=list(chunk)
        ).values_list("source_field_id", "transformation_type", "transformation_subtype"):
            if carries(kind, subtype):
                parents.add(source)
    return sources_through(parents) | {
        pk for pk, line in timelines(ids).items() if _ever_declared(line)
    }


def _ever_declared(line: FieldTimeline) -> bool:
    return any(value for _, value in line.pii) or any(value for _, value in line.kind)


def refresh(
    sources: Iterable[int], since: datetime | None = None, reclassified: bool = False
) -> set[int]:
    """Recompute these sources' rows (from ``since`` on, when the change that calls for it
    took effect then: rows that ended before are left as they are), write what differs, and
    bring the flags shown on the fields whose rows changed up to date — and, when a source
    may have been ``reclassified`` (its category or subject kind changed, its reach not),
    on every field it reaches; returns the fields whose rows changed."""
    wanted = sorted(set(sources))
    if not wanted:
        return set()
    with transaction.atomic():
        edges_from = closure_edges(wanted, since)
        fields = set(wanted) | {e.target for edges in edges_from.values() for e in edges}
        lines = timelines(fields)
        changed: set[int] = set()
        reached: set[int] = set()
        for source in wanted:
            rows = source_rows(source, edges_from, lines, since)
            if reclassified:
                reached.update(field for field, _, _, end in rows if end is None)
            changed |= _replace_rows(source, rows, since)
        sync_fields(changed | reached | set(wanted))
    return changed


def _replace_rows(source: int, rows: set[Row], since: datetime | None = None) -> set[int]:
    """Store ``rows`` as the source's (from ``since`` on: a stored row running across
    ``since`` is cut there, or joined to the new row that carries it on)."""
    # Rows that ended before ``since`` stay as they are: they are not even read.
    window = Q() if since is None else Q(valid_to__isnull=True) | Q(valid_to__gte=since)
    stored: dict[Row, int] = {
        (field, masked, start, end): pk
        for pk, field, masked, start, end in PropagatedFlag.objects.filter(
            window, source_id=source
        ).values_list("pk", "field_id", "masked", "valid_from", "valid_to")
    }
    if since is not None:
        wanted: set[Row] = set()
        carried = {(row[0], row[1]): row for row in rows if row[2] == since}
        for field, masked, start, end in stored:
            if start < since and (end is None or end >= since):
                follow = carried.pop((field, masked), None)
                if follow is not None:
                    rows.discard(follow)
                    wanted.add((field, masked, start, follow[3]))
                else:
                    wanted.add((field, masked, start, since))
        rows = wanted | rows
    gone = [pk for row, pk in stored.items() if row not in rows]
    new = [row for row in rows if row not in stored]
    for chunk in chunks(gone):
        PropagatedFlag.objects.filter(pk__any_of=list(chunk)).delete()
    bulk.insert_values(
        PropagatedFlag,
        ("field_id", "source_id", "masked", "valid_from", "valid_to"),
        [(field, source, masked, start, end) for field, masked, start, end in new],
    )
    return {row[0] for row in stored if row not in rows} | {row[0] for row in new}


def sync_fields(field_ids: Iterable[int]) -> None:
    """Set each field's shown flag from its declaration or, failing one, its current
    propagated rows (``catalog.flags.union_flag``)."""
    ids = sorted(set(field_ids))
    for chunk in chunks(ids):
        sources: dict[int, list[tuple[int, bool]]] = defaultdict(list)
        for field_id, source_id, masked_by in PropagatedFlag.objects.filter(
            field_id__any_of=list(chunk), valid_to__isnull=True
        ).values_list("field_id", "source_id", "masked"):
            sources[field_id].append((source_id, masked_by))
        flags = {
            pk: (pii, kind)
            for pk, pii, kind in DatasetField.objects.filter(
                pk__in={s for found in sources.values() for s, _ in found}
            ).values_list("pk", "pii_category", "subject_kind_id")
        }
        # One UPDATE per distinct flag: a source reaching ten thousand fields shows the same
        # flag on all of them. Rows are locked in id order, as every writer of fields does.
        updates: dict[tuple[str, int | None, str, bool], list[int]] = defaultdict(list)
        rows = (
            DatasetField.objects.filter(pk__any_of=list(chunk))
            .order_by("pk")
            .select_for_update()
            .values_list(
                "pk",
                "pii_category",
                "subject_kind_id",
                "flag_source",
                "flag_masked",
                "propagation_blocked",
            )
        )
        for pk, pii, kind, source, masked, blocked in rows:
            if source == FlagSource.DECLARED and (pii or kind):
                continue
            flag = union_flag([] if blocked else sources.get(pk, []), flags, {}, False)
            # union_flag passes the sources' subject kinds through: here, their ids.
            kind_id = cast(int | None, flag.subject_kind)
            wanted = (flag.pii, kind_id, flag.source, flag.masked)
            if (pii, kind, source, masked) != wanted:
                updates[wanted].append(pk)
        for (new_pii, new_kind, new_source, new_masked), pks in updates.items():
            DatasetField.objects.filter(pk__any_of=pks).update(
                pii_category=new_pii,
                subject_kind_id=new_kind,
                flag_source=new_source,
                flag_masked=new_masked,
            )


def recompute_all() -> int:
    """Every source's rows from scratch (rows of fields never declared removed); returns how
    many sources there are."""
    with transaction.atomic():
        ever = set(
            DatasetField.objects.filter(PERSONAL_DATA, flag_source=FlagSource.DECLARED).values_list(
                "pk", flat=True
            )
        )
        named = set(
            ChangeRecord.objects.filter(attribute__in=("pii_category", "subject_kind"))
            .exclude(source=ChangeSource.PROPAGATION)
            .values_list("dataset_id", "field_name")
        )
        by_dataset: dict[int, set[str]] = defaultdict(set)
        for dataset_id, name in named:
            by_dataset[dataset_id].add(name)
        for dataset_id, names in by_dataset.items():
            ever.update(
                DatasetField.objects.filter(dataset_id=dataset_id, name__in=names).values_list(
                    "pk", flat=True
                )
            )
        stale = PropagatedFlag.objects.exclude(source_id__in=ever)
        affected = set(stale.values_list("field_id", flat=True))
        stale.delete()
        sync_fields(affected)
        refresh(ever)
    return len(ever)


def rebuild_if_rules_changed(**kwargs: Any) -> None:
    """post_migrate: recompute every flag when the stored rows were made by other rules."""
    stored = DerivedVersion.objects.filter(name="propagated_flags").first()
    if stored is not None and stored.version == RULES_VERSION:
        return
    recompute_all()
    DerivedVersion.objects.update_or_create(
        name="propagated_flags", defaults={"version": RULES_VERSION}
    )


# -- what changes them ---------------------------------------------------------------------------


def edges_changed(source_fields: Iterable[int], since: datetime | None = None) -> None:
    """Ingestion opened, closed or moved carrying edges out of these fields, none of them
    before ``since``."""
    refresh(sources_through(source_fields), since)


@receiver(flags_changed)
def _on_flags_changed(
    sender: Any, field_ids: Sequence[int], at: datetime | None = None, **kwargs: Any
) -> None:
    """A steward, an import or the API changed declarations or blocks of these fields, with
    effect from ``at``."""
    refresh(sources_touching(field_ids), at, reclassified=True)
