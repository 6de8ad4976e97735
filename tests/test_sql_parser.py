"""Behaviour of the SQL lineage parser beyond the corpus: bounds, scripts, sessions, fallbacks."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ingest.sql import (
    DatasetRef,
    LineageSession,
    SqlLineageParser,
    StatementKind,
    Subtype,
    UnknownDialectError,
)
from ingest.sql.model import Lifecycle, ParsedRecord

CATALOG = {
    "shop.public.orders": ["id", "customer_id", "amount", "status", "created_at"],
    "shop.public.customers": ["id", "email", "country"],
    "shop.mart.summary": ["customer_id", "total", "n"],
}


@pytest.fixture
def parser() -> SqlLineageParser:
    return SqlLineageParser("postgres", schema_provider=CATALOG.get)


def parse(parser: SqlLineageParser, sql: str, **kw) -> ParsedRecord:
    return parser.parse(sql, database="shop", schema="public", **kw)


def columns(record: ParsedRecord, index: int = -1) -> dict[str, set[str]]:
    statement = record.lineage[index]
    return {
        column: {f"{f.source.dataset}.{f.source.field}" for f in fields}
        for target in statement.targets
        for column, fields in target.fields.items()
    }


def subtypes(record: ParsedRecord, column: str) -> dict[str, set[str]]:
    (target,) = record.lineage[-1].targets
    return {
        f.source.field: {t.subtype.value for t in f.transformations} for f in target.fields[column]
    }


def test_it_rejects_an_unknown_dialect_clearly():
    with pytest.raises(UnknownDialectError, match="unknown SQL dialect 'oracle'; supported:"):
        SqlLineageParser("oracle")
    parser = SqlLineageParser("postgres")
    with pytest.raises(UnknownDialectError):
        parser.parse("SELECT 1", dialect="cobol")


@pytest.mark.parametrize("alias", ["PostgreSQL", "databricks", "presto", "hive", "SPARK"])
def test_it_accepts_dialect_aliases(alias):
    SqlLineageParser(alias).parse("SELECT a FROM t")


def test_it_fills_names_from_the_records_defaults(parser):
    record = parse(parser, "INSERT INTO summary (customer_id) SELECT id FROM customers")
    (statement,) = record.lineage
    assert statement.outputs == (DatasetRef("shop.public.summary"),)
    assert statement.inputs == (DatasetRef("shop.public.customers"),)
    other = parser.parse("INSERT INTO x SELECT id FROM y", database="dw", schema="raw")
    assert other.lineage[0].outputs == (DatasetRef("dw.raw.x"),)


def test_it_expands_select_star_from_the_catalog(parser):
    record = parse(parser, "CREATE TABLE mart.copy AS SELECT * FROM customers")
    assert columns(record) == {
        "id": {"shop.public.customers.id"},
        "email": {"shop.public.customers.email"},
        "country": {"shop.public.customers.country"},
    }
    assert record.lineage[0].targets[0].schema == (("id", ""), ("email", ""), ("country", ""))


def test_it_resolves_unqualified_columns_over_a_join_with_the_catalog(parser):
    record = parse(
        parser,
        "INSERT INTO mart.x (e, a) SELECT email, amount FROM orders o JOIN customers c "
        "ON c.id = o.customer_id",
    )
    assert columns(record) == {
        "e": {"shop.public.customers.email"},
        "a": {"shop.public.orders.amount"},
    }


def test_it_maps_insert_without_column_list_by_position_when_the_target_is_known(parser):
    record = parse(
        parser,
        "INSERT INTO mart.summary SELECT customer_id, SUM(amount) AS s, COUNT(id) "
        "FROM orders GROUP BY customer_id",
    )
    assert columns(record) == {
        "customer_id": {"shop.public.orders.customer_id"},
        "total": {"shop.public.orders.amount"},
        "n": {"shop.public.orders.id"},
    }


def test_it_classifies_transformations(parser):
    record = parse(
        parser,
        "CREATE TABLE mart.t AS SELECT id, amount * 2 AS doubled, SUM(amount) OVER "
        "(PARTITION BY customer_id ORDER BY created_at) AS running, "
        "CASE WHEN status = 'x' THEN amount END AS conditional, md5(status) AS hashed, "
        "COUNT(DISTINCT customer_id) AS buyers FROM orders GROUP BY 1, 2, 3, 4, 5",
    )
    assert subtypes(record, "id") == {"id": {"IDENTITY"}}
    assert subtypes(record, "doubled") == {"amount": {"TRANSFORMATION"}}
    assert subtypes(record, "running") == {
        "amount": {"AGGREGATION"},
        "customer_id": {"WINDOW"},
        "created_at": {"WINDOW"},
    }
    assert subtypes(record, "conditional") == {
        "status": {"CONDITIONAL"},
        "amount": {"TRANSFORMATION"},
    }
    (target,) = record.lineage[0].targets
    masked = {
        f.source.field: {t.masking for t in f.transformations} for f in target.fields["hashed"]
    }
    assert masked == {"status": {True}}
    buyers = {t for f in target.fields["buyers"] for t in f.transformations}
    assert {(t.subtype, t.masking) for t in buyers} == {(Subtype.AGGREGATION, True)}


def test_it_reports_dataset_level_dependencies(parser):
    record = parse(
        parser,
        "INSERT INTO mart.x (e) SELECT c.email FROM customers c JOIN orders o ON o.customer_id = c.id "
        "WHERE o.status = 'paid' GROUP BY c.email HAVING SUM(o.amount) > 10 ORDER BY c.email",
    )
    (target,) = record.lineage[0].targets
    found = {
        (f.source.field, t.subtype.value) for f in target.dataset_inputs for t in f.transformations
    }
    assert found == {
        ("customer_id", "JOIN"),
        ("id", "JOIN"),
        ("status", "FILTER"),
        ("email", "GROUP_BY"),
        ("amount", "FILTER"),
        ("email", "SORT"),
    }


def test_it_records_plain_selects_as_reads_without_lineage(parser):
    record = parse(parser, "SELECT email FROM customers WHERE id = 3")
    assert record.lineage == ()
    (read,) = record.reads
    assert read.kind is StatementKind.SELECT
    assert read.inputs == (DatasetRef("shop.public.customers"),)


def test_it_follows_temp_tables_through_a_script_and_hides_them(parser):
    record = parse(
        parser,
        "CREATE TEMP TABLE t AS SELECT customer_id, amount * 2 AS a2 FROM orders WHERE status = 'x';"
        "INSERT INTO mart.summary (customer_id, total) SELECT customer_id, SUM(a2) FROM t GROUP BY 1;"
        "DROP TABLE t;",
    )
    assert [s.hidden for s in record.statements] == [True, False, True]
    (statement,) = record.lineage
    assert statement.inputs == (DatasetRef("shop.public.orders"),)
    assert statement.passed_through == (DatasetRef("shop.public.t"),)
    assert subtypes(record, "total") == {"amount": {"AGGREGATION"}}
    assert record.ddl == ()  # dropping the temp table is no lifecycle event
    indirect = {
        (f.source.field, t.subtype.value)
        for f in statement.targets[0].dataset_inputs
        for t in f.transformations
    }
    assert ("status", "FILTER") in indirect


def test_it_follows_temp_tables_across_records_of_one_session(parser):
    session = LineageSession()
    first = parse(
        parser, "CREATE TEMP TABLE recent AS SELECT id, amount FROM orders", session=session
    )
    assert first.lineage == ()
    second = parse(
        parser, "INSERT INTO mart.summary (total) SELECT SUM(amount) FROM recent", session=session
    )
    assert second.lineage[0].inputs == (DatasetRef("shop.public.orders"),)
    assert columns(second) == {"total": {"shop.public.orders.amount"}}
    # Without the session the temp table cannot be followed and stays a (hidden) input.
    alone = parse(parser, "INSERT INTO mart.summary (total) SELECT SUM(amount) FROM recent")
    assert alone.lineage[0].inputs == (DatasetRef("shop.public.recent"),)


def test_it_follows_scratch_tables_across_records(parser):
    parse(parser, "CREATE TABLE scratch.orders_copy AS SELECT id, amount FROM orders")
    record = parse(
        parser, "INSERT INTO mart.summary (total) SELECT SUM(amount) FROM scratch.orders_copy"
    )
    assert record.lineage[0].inputs == (DatasetRef("shop.public.orders"),)
    assert record.lineage[0].passed_through == (DatasetRef("shop.scratch.orders_copy"),)


def test_it_marks_a_temp_table_it_cannot_follow_as_hidden(parser):
    record = parse(parser, "INSERT INTO mart.x SELECT a FROM tmp_unknown")
    (statement,) = record.lineage
    assert DatasetRef("shop.public.tmp_unknown") in statement.hidden_datasets


def test_it_folds_date_suffixed_tables(parser):
    record = parse(parser, "INSERT INTO mart.events_20260101 SELECT id FROM orders_2026_01_01")
    (statement,) = record.lineage
    assert statement.outputs == (DatasetRef("shop.mart.events_*"),)
    assert statement.inputs == (DatasetRef("shop.public.orders_*"),)
    a = parse(parser, "INSERT INTO mart.events_20260101 SELECT id FROM orders")
    b = parse(parser, "INSERT INTO mart.events_20260102 SELECT id FROM orders")
    assert a.fingerprint != b.fingerprint  # the cache stays exact …
    assert a.lineage[0].job_key == b.lineage[0].job_key  # … the job is the same


def test_it_folds_with_configured_patterns_only():
    parser = SqlLineageParser("postgres", fold_patterns=[r"_v(\d+)$"])
    record = parser.parse("INSERT INTO t_v3 SELECT a FROM s_20260101", database="d", schema="s")
    assert record.lineage[0].outputs == (DatasetRef("d.s.t_v*"),)
    assert record.lineage[0].inputs == (DatasetRef("d.s.s_20260101"),)
    unfolded = SqlLineageParser("postgres", fold_patterns=[])
    record = unfolded.parse("INSERT INTO t_20260101 SELECT a FROM s", database="d", schema="s")
    assert record.lineage[0].outputs == (DatasetRef("d.s.t_20260101"),)


def test_it_serves_literal_variants_from_the_cache(parser):
    a = parse(
        parser,
        "INSERT INTO mart.x SELECT id FROM orders WHERE created_at > '2026-01-01' AND id IN (1, 2)",
    )
    b = parse(
        parser,
        "insert   into mart.x select id from orders -- nightly\n where created_at > '2026-02-01' and id in (7)",
    )
    assert not a.cached and b.cached
    assert a.fingerprint == b.fingerprint
    assert parser.hits == 1 and parser.misses == 1


def test_it_keeps_defaults_in_the_cache_key(parser):
    a = parser.parse("INSERT INTO x SELECT a FROM y", database="one", schema="s")
    b = parser.parse("INSERT INTO x SELECT a FROM y", database="two", schema="s")
    assert a.lineage[0].outputs != b.lineage[0].outputs


def test_it_rejects_an_overlong_statement_with_a_reason():
    parser = SqlLineageParser("postgres", max_statement_chars=1000)
    record = parser.parse("SELECT " + "a, " * 1000 + "b FROM t")
    (error,) = record.errors
    assert "characters long; the limit is 1,000" in error.reason
    assert record.statements == ()


def test_it_handles_a_one_megabyte_statement_without_crashing():
    parser = SqlLineageParser("postgres")
    selects = " UNION ALL ".join(f"SELECT c{i} FROM t{i % 50}" for i in range(40_000))
    sql = "INSERT INTO big " + selects
    assert len(sql) > 1_000_000
    started = time.perf_counter()
    record = parser.parse(sql[:999_000].rsplit(" UNION ALL ", 1)[0], database="d", schema="s")
    assert time.perf_counter() - started < 30
    (statement,) = record.statements
    assert statement.parser == "text-scan"
    assert statement.warnings == ("table lineage only (statement longer than 100,000 characters)",)
    assert statement.outputs == (DatasetRef("d.s.big"),)
    assert set(statement.inputs) == {DatasetRef(f"d.s.t{i}") for i in range(50)}


def test_it_keeps_many_union_branches_to_table_lineage():
    parser = SqlLineageParser("postgres")
    sql = "INSERT INTO u " + " UNION ALL ".join(f"SELECT a FROM t{i}" for i in range(300))
    (statement,) = parser.parse(sql, database="d", schema="s").statements
    assert statement.parser == "text-scan"
    assert "299 set operations" in statement.warnings[0]
    assert len(statement.inputs) == 300


def test_it_rejects_absurd_nesting_with_a_reason():
    parser = SqlLineageParser("postgres")
    record = parser.parse("SELECT " + "(" * 5000 + "1" + ")" * 5000)
    (error,) = record.errors
    assert "nests 5000 levels deep; the limit is 256" in error.reason


def test_it_parses_deep_but_allowed_nesting_on_a_big_stack_without_touching_limits():
    parser = SqlLineageParser("postgres")
    limit, stack = sys.getrecursionlimit(), threading.stack_size()
    sql = "INSERT INTO t " + "SELECT a FROM (" * 200 + "SELECT a FROM s" + ") x" * 200
    record = parser.parse(sql, database="d", schema="p")
    assert record.errors == ()
    assert record.lineage[0].inputs == (DatasetRef("d.p.s"),)
    assert columns(record) == {"a": {"d.p.s.a"}}
    assert (sys.getrecursionlimit(), threading.stack_size()) == (limit, stack)


def test_it_reports_unparseable_sql_and_keeps_going(parser):
    record = parse(
        parser, "INSERT INTO mart.a SELECT id FROM orders; SELEC garbage (((; UPDATE x SET a = 1"
    )
    assert [s.kind for s in record.statements] == [StatementKind.INSERT, StatementKind.UPDATE]
    (error,) = record.errors
    assert error.index == 1
    assert "sqlglot" in error.reason


def test_it_falls_back_to_openlineage_sql_when_sqlglot_cannot_parse(parser):
    # sqlglot 30 cannot parse Postgres' inet containment operator; openlineage-sql can.
    sql = "INSERT INTO mart.x SELECT id FROM orders WHERE ip <<= '10.0.0.0/8'::inet"
    (statement,) = parse(parser, sql).statements
    assert statement.parser == "openlineage-sql"
    assert statement.warnings[0].startswith("parsed with openlineage-sql (sqlglot:")
    assert statement.inputs == (DatasetRef("shop.public.orders"),)
    assert statement.outputs == (DatasetRef("shop.mart.x"),)


def test_it_turns_ddl_into_lifecycle_changes(parser):
    record = parse(
        parser,
        "CREATE TABLE mart.a (id int, name text); ALTER TABLE mart.a RENAME TO b; "
        "TRUNCATE mart.b; DROP TABLE mart.b",
    )
    changes = [(s.lifecycle, [str(o) for o in s.outputs]) for s in record.ddl]
    assert changes == [
        (Lifecycle.CREATE, ["shop.mart.a"]),
        (Lifecycle.RENAME, ["shop.mart.b"]),
        (Lifecycle.TRUNCATE, ["shop.mart.b"]),
        (Lifecycle.DROP, ["shop.mart.b"]),
    ]
    assert record.ddl[0].targets[0].schema == (("id", "INT"), ("name", "TEXT"))
    assert record.ddl[1].previous_name == DatasetRef("shop.mart.a")


def test_it_follows_use_and_search_path_in_scripts():
    snowflake = SqlLineageParser("snowflake")
    record = snowflake.parse(
        "use database other; INSERT INTO x SELECT a FROM y", database="ANALYTICS", schema="RAW"
    )
    assert record.lineage[0].outputs == (DatasetRef("OTHER.PUBLIC.X"),)
    postgres = SqlLineageParser("postgres")
    record = postgres.parse(
        "SET search_path TO staging, public; INSERT INTO x SELECT a FROM y", database="db"
    )
    assert record.lineage[0].outputs == (DatasetRef("db.staging.x"),)


def test_it_names_locations_of_copy_and_unload():
    parser = SqlLineageParser("redshift")
    record = parser.parse(
        "COPY sales FROM 's3://bucket/path/2026/' IAM_ROLE 'r'", database="dw", schema="p"
    )
    (statement,) = record.lineage
    assert statement.inputs == (DatasetRef("path/2026/", "s3://bucket"),)
    record = parser.parse(
        "UNLOAD ('SELECT id FROM sales WHERE note = ''x''') TO 's3://out/x_' IAM_ROLE 'r'",
        database="dw",
        schema="p",
    )
    (statement,) = record.lineage
    assert statement.kind is StatementKind.UNLOAD
    assert statement.outputs == (DatasetRef("x_", "s3://out"),)
    assert statement.inputs == (DatasetRef("dw.p.sales"),)


def test_it_never_raises_on_junk(parser):
    for junk in [
        "",
        ";;;",
        "\x00\x01",
        "'unterminated",
        "SELECT (",
        "💥" * 100,
        "/* only a comment */",
    ]:
        record = parse(parser, junk)
        assert isinstance(record, ParsedRecord)
        assert record.lineage == ()


def test_it_turns_a_parser_bug_into_an_error_for_that_record(parser, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(SqlLineageParser, "_parse_script", broken)
    record = parse(parser, "INSERT INTO a SELECT b FROM c")
    (error,) = record.errors
    assert error.reason == "internal parser error: 'boom'"


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO t SELECT " + "(" * 256 + "a" + ")" * 256 + " FROM s",
        "INSERT INTO t " + "SELECT a FROM (" * 250 + "SELECT a FROM s" + ") x" * 250,
        "SELECT a FROM s WHERE " + "NOT " * 24_000 + "a",
        "INSERT INTO t SELECT " + "- " * 49_000 + "a FROM s",
        "INSERT INTO t SELECT " + "CASE WHEN a THEN " * 2_000 + "1" + " END" * 2_000 + " FROM s",
        "SELECT " + "(" * 100_000,
    ],
    ids=["parens", "subqueries", "not-chain", "minus-chain", "case", "unclosed"],
)
def test_it_never_crashes_the_process_on_absurd_nesting(sql, tmp_path):
    """Run in a child process: a C-stack overflow would kill it, not just fail."""
    script = tmp_path / "probe.py"
    script.write_text(
        "import sys\n"
        "from ingest.sql import SqlLineageParser\n"
        "sql = open(sys.argv[1]).read()\n"
        "record = SqlLineageParser('postgres').parse(sql, database='d', schema='p')\n"
        "print(len(record.statements), len(record.errors))\n"
    )
    query = tmp_path / "query.sql"
    query.write_text(sql)
    root = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run(
        [sys.executable, str(script), str(query)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    statements, errors = map(int, done.stdout.split())
    assert statements + errors >= 1


def test_a_hive_multi_insert_gives_each_target_its_lineage(parser):
    record = parser.parse(
        "FROM raw.events e "
        "INSERT OVERWRITE TABLE a.clicks SELECT e.user_id, e.url WHERE e.kind = 'click' "
        "INSERT OVERWRITE TABLE a.views SELECT e.user_id, e.page WHERE e.kind = 'view'",
        dialect="hive",
    )
    assert not record.errors
    (statement,) = record.lineage
    assert {str(t.dataset) for t in statement.targets} == {"a.clicks", "a.views"}
    by_target = {
        str(t.dataset): {c: {f.source.field for f in fs} for c, fs in t.fields.items()}
        for t in statement.targets
    }
    assert by_target == {
        "a.clicks": {"user_id": {"user_id"}, "url": {"url"}},
        "a.views": {"user_id": {"user_id"}, "page": {"page"}},
    }
