"""Fingerprints of SQL text: literals and layout ignored, anything that changes lineage kept."""

from __future__ import annotations

import pytest

from ingest.sql import DateSuffixFolder, resolve_dialect
from ingest.sql.fingerprint import fingerprint, normalize

POSTGRES = resolve_dialect("postgres")
MYSQL = resolve_dialect("mysql")
BIGQUERY = resolve_dialect("bigquery")


def same(a: str, b: str, spec=POSTGRES) -> bool:
    return fingerprint(a, spec) == fingerprint(b, spec)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("SELECT a FROM t WHERE d = '2026-01-01'", "SELECT a FROM t WHERE d = '2026-02-28'"),
        ("SELECT a FROM t WHERE id = 1", "SELECT a FROM t WHERE id = 123456"),
        ("SELECT a FROM t WHERE x > 1.5e3", "SELECT a FROM t WHERE x > .25"),
        ("SELECT a FROM t WHERE id IN (1, 2, 3)", "SELECT a FROM t WHERE id IN (7)"),
        ("SELECT a FROM t WHERE s IN ('a','b')", "select a from t where s in ('z')"),
        ("INSERT INTO t VALUES (1, 'a'), (2, 'b')", "INSERT INTO t VALUES (9, 'z')"),
        ("SELECT a\n  FROM t -- nightly run\n", "SELECT a FROM t"),
        ("SELECT /* hint */ a FROM t;", "SELECT a FROM t"),
        ("SELECT a FROM t WHERE s = 'it''s'", "SELECT a FROM t WHERE s = 'x'"),
        ("SELECT $$body; with ; semicolons$$", "SELECT $$other$$"),
    ],
)
def test_it_gives_statements_that_differ_in_literals_or_layout_one_fingerprint(a, b):
    assert same(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("INSERT INTO t1 SELECT a FROM s", "INSERT INTO t2 SELECT a FROM s"),
        ("SELECT a FROM t", "SELECT b FROM t"),
        ("SELECT a, 'x' FROM t", "SELECT a FROM t"),  # projection count matters
        ("SELECT 1, 2 FROM t", "SELECT 1 FROM t"),
        ('SELECT "Col" FROM t', 'SELECT "col" FROM t'),  # quoted identifiers keep case
        ("SELECT a FROM events_20260101", "SELECT a FROM events_20260102"),
        ("SELECT a AS 'x' FROM t", "SELECT a AS 'y' FROM t"),  # string aliases are names
        ("SELECT a FROM t WHERE s = 'x'; DROP TABLE u", "SELECT a FROM t WHERE s = 'x'"),
    ],
)
def test_it_keeps_everything_that_changes_lineage(a, b):
    assert not same(a, b)


def test_it_folds_case_only_where_identifiers_are_case_insensitive():
    assert same("SELECT A FROM T", "select a from t", POSTGRES)
    assert not same("SELECT A FROM T", "select a from t", MYSQL)
    assert not same("SELECT a FROM `p.d.T`", "SELECT a FROM `p.d.t`", BIGQUERY)


def test_it_treats_double_quotes_per_dialect():
    assert same('SELECT a FROM t WHERE s = "x"', 'SELECT a FROM t WHERE s = "y"', MYSQL)
    assert not same('SELECT "x" FROM t', 'SELECT "y" FROM t', POSTGRES)


def test_it_does_not_swallow_sql_after_a_backslash_in_a_postgres_string():
    # Standard strings: the backslash is a character, the quote ends the string.
    a = "INSERT INTO t1 SELECT 'C:\\' , a FROM s1"
    b = "INSERT INTO t2 SELECT 'C:\\' , a FROM s2"
    assert not same(a, b)
    assert normalize(a, POSTGRES) == "insert into t1 select ? , a from s1"


def test_it_folds_date_suffixes_in_text_for_job_names():
    folder = DateSuffixFolder()
    assert folder.fold_text(
        "insert into mart.events_20260101 select a from raw.log_2026_01_01"
    ) == ("insert into mart.events_* select a from raw.log_*")
    assert folder.fold("db.s.events_202601") == "db.s.events_*"
    assert folder.fold("db.s.events_2026") == "db.s.events_2026"
    assert folder.fold("db.s_20260101.t") == "db.s_20260101.t"


def test_a_statement_shown_for_a_job_keeps_no_literal_and_no_comment():
    from ingest.sql.fingerprint import redact

    sql = (
        "INSERT INTO dw.vip /* by alice */ SELECT * FROM shop.customers "
        "WHERE email = 'alice@example.com' AND id IN (4242, 0x1F2E) AND \"Name\" = 'x' -- ok"
    )
    shown = redact(sql, resolve_dialect("postgres"))
    assert shown == (
        "INSERT INTO dw.vip   SELECT * FROM shop.customers WHERE email = ? AND id IN (?, ?) "
        'AND "Name" = ?'
    )
