"""Accuracy of SQL lineage against the hand-written corpus (tests/fixtures/sql_corpus)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ingest.sql import SqlLineageParser
from ingest.sql.dialects import resolve_dialect
from tests.sql_corpus import Case, Lineage, load_catalog, load_corpus, record_lineage, score

CORPUS = Path(__file__).parent / "fixtures" / "sql_corpus"
DIALECTS = {"postgres", "redshift", "snowflake", "bigquery", "mysql", "spark", "trino", "tsql"}
KINDS = {
    "INSERT",
    "INSERT_OVERWRITE",
    "CTAS",
    "CREATE_VIEW",
    "MERGE",
    "UPDATE",
    "DELETE",
    "COPY",
    "UNLOAD",
    "DDL",
    "SELECT",
}


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return load_corpus(CORPUS)


def _adapter():
    catalog = load_catalog(CORPUS)
    parsers: dict[str, SqlLineageParser] = {}

    def actual(case: Case) -> Lineage:
        parser = parsers.get(case.dialect)
        if parser is None:
            tables = catalog.get(case.dialect, {})
            parser = parsers[case.dialect] = SqlLineageParser(
                case.dialect, schema_provider=tables.get
            )
        record = parser.parse(case.sql, database=case.database, schema=case.schema)
        return record_lineage(record)

    return actual


def test_it_has_a_corpus_of_at_least_150_statements_across_dialects_and_kinds(cases):
    assert len(cases) >= 150
    assert len({c.id for c in cases}) == len(cases)
    assert {resolve_dialect(c.dialect).name for c in cases} == DIALECTS
    kinds = Counter(c.expected.kind for c in cases if c.expected.kind)
    assert set(kinds) >= KINDS
    scripts = [c for c in cases if ";" in c.sql.strip().rstrip(";")]
    assert len(scripts) >= 10


def test_it_meets_the_accuracy_bar_on_the_corpus(cases, record_property, capsys):
    result = score(cases, _adapter())
    summary = result.as_dict()
    record_property("sql_lineage_accuracy", summary)
    with capsys.disabled():
        print(
            f"\nSQL corpus ({len(cases)} statements): "
            f"tables P={result.tables.precision:.3f} R={result.tables.recall:.3f}; "
            f"columns P={result.columns.precision:.3f} R={result.columns.recall:.3f}; "
            f"indirect P={result.indirect.precision:.3f} R={result.indirect.recall:.3f}; "
            f"subtypes {summary['subtype_accuracy']}; kinds {summary['kind_accuracy']}"
        )
    misses = "\n".join(f"{k}: {v}" for k, v in result.misses.items())
    assert result.tables.precision >= 0.95, misses
    assert result.tables.recall >= 0.95, misses
    assert result.columns.precision >= 0.90, misses
    assert result.columns.recall >= 0.90, misses
    assert summary["subtype_accuracy"] >= 0.90, misses
    assert summary["kind_accuracy"] >= 0.95, misses


def test_it_scores_a_wrong_parser_low(cases):
    """The scorer itself must notice wrong answers (guards against a lenient metric)."""

    def nothing(case: Case) -> Lineage:
        return Lineage(inputs=frozenset({"x.y.z"}))

    result = score(cases, nothing)
    assert result.tables.precision < 0.1
    assert result.columns.recall == 0.0
