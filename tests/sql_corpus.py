"""The hand-written lineage corpus: loading it and scoring a parser against it.

Used by the accuracy test and by benchmarks/bench_sql.py, which scores
other parsers (openlineage-sql, sqllineage) with the same rules. See
tests/fixtures/sql_corpus/README.md for the file format and conventions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ingest.sql.dialects import resolve_dialect
from ingest.sql.model import DIRECT_SUBTYPES, ParsedRecord

Pair = tuple[str, str]


@dataclass(frozen=True)
class Lineage:
    """Lineage reduced to comparable strings."""

    inputs: frozenset[str] = frozenset()
    outputs: frozenset[str] = frozenset()
    # (target dataset.column, source dataset.column)
    columns: frozenset[Pair] = frozenset()
    # (target, source) -> subtypes seen
    transforms: Mapping[Pair, frozenset[str]] = field(default_factory=dict)
    # (source dataset.column, subtype) at dataset level
    indirect: frozenset[Pair] = frozenset()
    kind: str | None = None


@dataclass(frozen=True)
class Case:
    id: str
    dialect: str
    database: str
    schema: str
    sql: str
    expected: Lineage
    checks_transforms: bool
    checks_indirect: bool


@dataclass
class Tally:
    true_positive: int = 0
    false_positive: int = 0
    false_negative: int = 0

    def add(self, expected: Iterable[Any], actual: Iterable[Any]) -> None:
        e, a = set(expected), set(actual)
        self.true_positive += len(e & a)
        self.false_positive += len(a - e)
        self.false_negative += len(e - a)

    @property
    def precision(self) -> float:
        found = self.true_positive + self.false_positive
        return self.true_positive / found if found else 1.0

    @property
    def recall(self) -> float:
        wanted = self.true_positive + self.false_negative
        return self.true_positive / wanted if wanted else 1.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "true_positive": self.true_positive,
            "false_positive": self.false_positive,
            "false_negative": self.false_negative,
        }


@dataclass
class Score:
    tables: Tally = field(default_factory=Tally)
    columns: Tally = field(default_factory=Tally)
    indirect: Tally = field(default_factory=Tally)
    subtypes_right: int = 0
    subtypes_checked: int = 0
    kinds_right: int = 0
    kinds_checked: int = 0
    misses: dict[str, list[str]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "tables": self.tables.as_dict(),
            "columns": self.columns.as_dict(),
            "indirect": self.indirect.as_dict(),
            "subtype_accuracy": round(self.subtypes_right / self.subtypes_checked, 4)
            if self.subtypes_checked
            else None,
            "kind_accuracy": round(self.kinds_right / self.kinds_checked, 4)
            if self.kinds_checked
            else None,
        }


def _name_completer(dialect: str, database: str, schema: str) -> Callable[[str], str]:
    parts_wanted = resolve_dialect(dialect).name_parts

    def table(name: str) -> str:
        if "/" in name or name.startswith("@"):
            return f"file://{name}" if name.startswith("/") else name
        parts = name.split(".")
        if parts_wanted == 3:
            defaults = [database, schema]
            return ".".join([*defaults[: 3 - len(parts)], *parts]) if len(parts) < 3 else name
        return name if len(parts) >= 2 else f"{schema or database}.{name}"

    return table


def _split_column(ref: str) -> tuple[str, str]:
    table, _, column = ref.rpartition(".")
    return table, column


def load_corpus(directory: Path) -> list[Case]:
    """Return every case of every dialect file under ``directory``."""
    cases: list[Case] = []
    for path in sorted(directory.glob("*.yaml")):
        if path.name == "catalog.yaml":
            continue
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        dialect, database, schema = data["dialect"], data["database"], data["schema"]
        complete = _name_completer(dialect, database, schema)
        for raw in data["cases"]:
            cases.append(_case(raw, dialect, database, schema, complete))
    return cases


def load_catalog(directory: Path) -> dict[str, dict[str, list[str]]]:
    """Return dialect -> table name -> columns from catalog.yaml."""
    data = yaml.safe_load((directory / "catalog.yaml").read_text(encoding="utf-8"))
    return {dialect: dict(tables or {}) for dialect, tables in data.items()}


def _case(
    raw: dict[str, Any], dialect: str, database: str, schema: str, complete: Callable[[str], str]
) -> Case:
    outputs = [complete(str(n)) for n in raw.get("outputs") or []]
    inputs = [complete(str(n)) for n in raw.get("inputs") or []]

    def column(ref: str) -> str:
        table, col = _split_column(str(ref))
        return f"{complete(table)}.{col}"

    def target(key: str) -> str:
        if len(outputs) == 1:
            return f"{outputs[0]}.{key}"
        return column(key)

    columns: set[Pair] = set()
    for key, sources in (raw.get("columns") or {}).items():
        for source in sources or []:
            columns.add((target(str(key)), column(source)))
    transforms: dict[Pair, frozenset[str]] = {}
    for key, pairs in (raw.get("transforms") or {}).items():
        for source, subtype in pairs.items():
            transforms[(target(str(key)), column(source))] = frozenset({str(subtype)})
    indirect: set[Pair] = set()
    for source, subtypes in (raw.get("indirect") or {}).items():
        for subtype in subtypes:
            indirect.add((column(source), str(subtype)))
    expected = Lineage(
        frozenset(inputs),
        frozenset(outputs),
        frozenset(columns),
        transforms,
        frozenset(indirect),
        raw.get("kind"),
    )
    return Case(
        str(raw["id"]),
        dialect,
        database,
        schema,
        str(raw["sql"]),
        expected,
        "transforms" in raw,
        "indirect" in raw,
    )


def record_lineage(record: ParsedRecord) -> Lineage:
    """Reduce a parsed record to the corpus's comparable form."""
    inputs: set[str] = set()
    outputs: set[str] = set()
    columns: set[Pair] = set()
    transforms: dict[Pair, set[str]] = {}
    indirect: set[Pair] = set()
    kinds: list[str] = []
    for statement in record.statements:
        if statement.hidden:
            continue
        kinds.append(statement.kind.value)
        inputs.update(str(d) for d in statement.inputs if d not in statement.hidden_datasets)
        outputs.update(str(d) for d in statement.outputs)
        for target in statement.targets:
            for column, sources in target.fields.items():
                key = f"{target.dataset}.{column}"
                for source in sources:
                    pair = (key, f"{source.source.dataset}.{source.source.field}")
                    columns.add(pair)
                    transforms.setdefault(pair, set()).update(
                        t.subtype.value for t in source.transformations
                    )
            for source in target.dataset_inputs:
                for t in source.transformations:
                    if t.subtype not in DIRECT_SUBTYPES:
                        ref = f"{source.source.dataset}.{source.source.field}"
                        indirect.add((ref, t.subtype.value))
    return Lineage(
        frozenset(inputs),
        frozenset(outputs),
        frozenset(columns),
        {k: frozenset(v) for k, v in transforms.items()},
        frozenset(indirect),
        kinds[0] if len(kinds) == 1 else None,
    )


def score(cases: Iterable[Case], actual_of: Callable[[Case], Lineage]) -> Score:
    """Score ``actual_of`` (a parser adapter) against every case."""
    result = Score()
    for case in cases:
        actual = actual_of(case)
        expected = case.expected
        e_tables = {("in", n) for n in expected.inputs} | {("out", n) for n in expected.outputs}
        a_tables = {("in", n) for n in actual.inputs} | {("out", n) for n in actual.outputs}
        result.tables.add(e_tables, a_tables)
        result.columns.add(expected.columns, actual.columns)
        if case.checks_indirect:
            result.indirect.add(expected.indirect, actual.indirect)
        for pair, subtypes in expected.transforms.items():
            result.subtypes_checked += 1
            if subtypes <= actual.transforms.get(pair, frozenset()):
                result.subtypes_right += 1
            else:
                result.misses.setdefault(case.id, []).append(
                    f"subtype {pair}: want {sorted(subtypes)} got "
                    f"{sorted(actual.transforms.get(pair, ()))}"
                )
        if expected.kind:
            result.kinds_checked += 1
            if actual.kind == expected.kind:
                result.kinds_right += 1
            else:
                result.misses.setdefault(case.id, []).append(
                    f"kind: want {expected.kind} got {actual.kind}"
                )
        notes = _differences(e_tables, a_tables, "table")
        notes += _differences(set(expected.columns), set(actual.columns), "column")
        if case.checks_indirect:
            notes += _differences(set(expected.indirect), set(actual.indirect), "indirect")
        if notes:
            result.misses.setdefault(case.id, []).extend(notes)
    return result


def _differences(expected: set[Any], actual: set[Any], label: str) -> list[str]:
    notes = [f"missing {label} {x}" for x in sorted(expected - actual, key=str)]
    notes += [f"extra {label} {x}" for x in sorted(actual - expected, key=str)]
    return notes
