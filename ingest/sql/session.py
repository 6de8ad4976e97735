"""Following lineage through temporary and scratch tables.

A statement that only writes temporary or scratch tables produces no edges:
what it did is remembered here, and a later statement reading such a table
gets the table's own sources instead (with transformations composed), so
the graph shows ``orders → daily_revenue`` rather than a detour through
``tmp_orders``. Temporary tables live in one script or database session;
scratch tables (recognised by name) outlive sessions, so a log keeps one
shared registry for them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from ingest.sql.model import (
    IDENTITY,
    DatasetRef,
    FieldRef,
    InputField,
    Lifecycle,
    StatementKind,
    StatementLineage,
    TargetLineage,
    Transformation,
)


@dataclass(frozen=True, slots=True)
class _Hidden:
    inputs: tuple[DatasetRef, ...]
    columns: Mapping[str, tuple[InputField, ...]]
    dataset_inputs: tuple[InputField, ...]
    columns_known: bool


class LineageSession:
    """Hidden tables seen so far in one script or database session (bounded)."""

    def __init__(self, max_tables: int = 2000) -> None:
        self._tables: OrderedDict[DatasetRef, _Hidden] = OrderedDict()
        self._max = max_tables

    def __len__(self) -> int:
        return len(self._tables)

    def __contains__(self, dataset: object) -> bool:
        return dataset in self._tables

    def get(self, dataset: DatasetRef) -> _Hidden | None:
        return self._tables.get(dataset)

    def put(self, dataset: DatasetRef, hidden: _Hidden) -> None:
        previous = self._tables.pop(dataset, None)
        if previous is not None:
            hidden = _merge(previous, hidden)
        self._tables[dataset] = hidden
        while len(self._tables) > self._max:
            self._tables.popitem(last=False)

    def drop(self, dataset: DatasetRef) -> None:
        self._tables.pop(dataset, None)


def compose(
    statement: StatementLineage,
    local: LineageSession,
    shared: LineageSession | None = None,
    is_scratch: Callable[[DatasetRef], bool] | None = None,
) -> StatementLineage:
    """Return ``statement`` with hidden tables followed through (and remembered)."""
    if not statement.hidden_datasets and not _reads_known(statement, local, shared):
        return statement
    sessions = [s for s in (local, shared) if s is not None]

    def lookup(dataset: DatasetRef) -> _Hidden | None:
        for session in sessions:
            found = session.get(dataset)
            if found is not None:
                return found
        return None

    hidden_refs = set(statement.hidden_datasets)
    passed: list[DatasetRef] = []
    inputs: list[DatasetRef] = []
    for dataset in statement.inputs:
        entry = lookup(dataset)
        if entry is None:
            inputs.append(dataset)
            continue
        passed.append(dataset)
        hidden_refs.discard(dataset)
        inputs.extend(entry.inputs)
    extra_indirect: list[InputField] = []
    for dataset in passed:
        entry = lookup(dataset)
        if entry is not None:
            extra_indirect.extend(entry.dataset_inputs)

    targets: list[TargetLineage] = []
    for target in statement.targets:
        fields = {column: _substitute(sources, lookup) for column, sources in target.fields.items()}
        indirect = _substitute(target.dataset_inputs, lookup) + tuple(extra_indirect)
        targets.append(
            TargetLineage(
                target.dataset,
                {c: f for c, f in fields.items() if f},
                _dedupe(indirect),
                target.schema,
            )
        )

    if statement.kind is StatementKind.DDL:
        for output in statement.outputs:
            if output in hidden_refs or lookup(output) is not None:
                if statement.lifecycle is Lifecycle.DROP:
                    for session in sessions:
                        session.drop(output)
                hidden_refs.add(output)
        visible = tuple(o for o in statement.outputs if o not in hidden_refs)
        return replace(
            statement,
            outputs=visible,
            inputs=tuple(_unique(inputs)),
            targets=tuple(t for t in targets if t.dataset in visible),
            hidden=not visible,
            hidden_datasets=frozenset(hidden_refs),
            passed_through=tuple(passed),
        )

    visible_targets: list[TargetLineage] = []
    for target in targets:
        if target.dataset not in hidden_refs:
            visible_targets.append(target)
            continue
        entry = _Hidden(
            inputs=tuple(_unique(inputs)),
            columns=target.fields,
            dataset_inputs=target.dataset_inputs,
            columns_known=bool(target.fields) or bool(target.schema),
        )
        # Temporary tables belong to the session, scratch tables to the whole log.
        scratch = is_scratch is not None and is_scratch(target.dataset)
        home = shared if scratch and shared is not None else local
        home.put(target.dataset, entry)
    outputs = tuple(o for o in statement.outputs if o not in hidden_refs)
    writes = statement.kind not in {StatementKind.SELECT, StatementKind.OTHER}
    return replace(
        statement,
        inputs=tuple(_unique(inputs)),
        outputs=outputs,
        targets=tuple(visible_targets),
        hidden=writes and not outputs and bool(statement.outputs),
        hidden_datasets=frozenset(d for d in hidden_refs if d in inputs or d in outputs),
        passed_through=tuple(passed),
    )


def _reads_known(
    statement: StatementLineage, local: LineageSession, shared: LineageSession | None
) -> bool:
    if not len(local) and (shared is None or not len(shared)):
        return False
    return any(
        d in local or (shared is not None and d in shared)
        for d in (*statement.inputs, *statement.outputs)
    )


def _substitute(
    fields: Iterable[InputField], lookup: Callable[[DatasetRef], _Hidden | None]
) -> tuple[InputField, ...]:
    out: dict[FieldRef, set[Transformation]] = {}
    for field in fields:
        entry = lookup(field.source.dataset)
        if entry is None:
            out.setdefault(field.source, set()).update(field.transformations)
            continue
        inner = entry.columns.get(field.source.field)
        if inner is None:
            if entry.columns_known or len(entry.inputs) != 1:
                continue
            # Columns of the hidden table are unknown: assume a pass-through of its one input.
            inner = (
                InputField(FieldRef(entry.inputs[0], field.source.field), frozenset({IDENTITY})),
            )
        for source in inner:
            composed = {
                inner_t.then(outer_t)
                for inner_t in source.transformations
                for outer_t in field.transformations
            }
            out.setdefault(source.source, set()).update(composed)
    return tuple(
        InputField(ref, frozenset(ts)) for ref, ts in sorted(out.items(), key=lambda kv: kv[0])
    )


def _dedupe(fields: Iterable[InputField]) -> tuple[InputField, ...]:
    out: dict[FieldRef, set[Transformation]] = {}
    for field in fields:
        out.setdefault(field.source, set()).update(field.transformations)
    return tuple(
        InputField(ref, frozenset(ts)) for ref, ts in sorted(out.items(), key=lambda kv: kv[0])
    )


def _merge(old: _Hidden, new: _Hidden) -> _Hidden:
    columns = {c: tuple(f) for c, f in old.columns.items()}
    for column, fields in new.columns.items():
        columns[column] = _dedupe((*columns.get(column, ()), *fields))
    return _Hidden(
        inputs=tuple(_unique((*old.inputs, *new.inputs))),
        columns=columns,
        dataset_inputs=_dedupe((*old.dataset_inputs, *new.dataset_inputs)),
        columns_known=old.columns_known or new.columns_known,
    )


def _unique(items: Iterable[DatasetRef]) -> Iterable[DatasetRef]:
    seen: set[DatasetRef] = set()
    for item in items:
        if item not in seen:
            seen.add(item)
            yield item
