"""Streaming query-log readers: CSV, JSON Lines, PostgreSQL csvlog, and their bad lines."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ingest.sql.readers import LineError, LogFormatError, QueryRecord, read_log

LOGS = Path(__file__).parent / "fixtures" / "sql_logs"


def read(data: bytes, fmt: str, **kw) -> list[Any]:
    return list(read_log(io.BytesIO(data), fmt, **kw))


def test_it_reads_a_csv_log_with_multiline_queries():
    with (LOGS / "warehouse.csv").open("rb") as f:
        items = list(read_log(f, "csv"))
    assert all(isinstance(i, QueryRecord) for i in items)
    assert [i.query_id for i in items] == [f"q-00{n}" for n in range(1, 8)]
    third = items[2]
    assert third.line == 4
    assert third.query.startswith("SELECT c.email") and "\n" in third.query
    assert items[3].line == 7  # line numbers count the query's own newlines
    assert items[3].failed
    assert items[0].start_time == datetime(2026, 1, 5, 2, tzinfo=UTC)
    assert items[6].start_time == datetime(2026, 1, 6, 4, tzinfo=UTC)  # +01:00 to UTC
    assert (items[0].database, items[0].schema, items[0].dialect, items[0].user) == (
        "shop",
        "public",
        "postgres",
        "etl",
    )


def test_it_reports_bad_lines_by_number_and_goes_on():
    with (LOGS / "bad.csv").open("rb") as f:
        items = list(read_log(f, "csv"))
    errors = {i.line: i for i in items if isinstance(i, LineError)}
    records = [i for i in items if isinstance(i, QueryRecord)]
    assert [r.query_id for r in records] == ["q-1", "q-6", "q-7", "q-8"]
    assert errors[3].message == "binary data (NUL bytes) in line"
    assert errors[4].message.startswith("not UTF-8 text (byte 0xe9")
    assert (errors[5].message, errors[5].field) == ("no query", "query")
    assert errors[6].field == "start_time"
    assert "yesterday" in errors[6].message
    assert [r.failed for r in records] == [False, True, False, False]


def test_it_rejects_a_csv_without_a_query_column():
    with pytest.raises(LogFormatError, match="no 'query' column"):
        read(b"id,start_time\n1,2026-01-01\n", "csv")


def test_it_accepts_common_column_names_and_a_byte_order_mark():
    data = "\ufeffQuery_Text,StartTime,User_Name\nSELECT 1,2026-01-01 10:00:00,bob\n".encode()
    (record,) = read(data, "csv")
    assert (record.query, record.user) == ("SELECT 1", "bob")
    assert record.start_time == datetime(2026, 1, 1, 10, tzinfo=UTC)  # naive taken as UTC


def test_it_reports_rows_with_too_many_fields():
    (error,) = read(b"query,user\nSELECT 1,bob,extra\n", "csv")
    assert error == LineError(2, "3 fields but the header has 2")


def test_it_skips_overlong_lines_without_buffering_them():
    data = b"query\n" + b"x" * 5000 + b"\nSELECT 1\n"
    items = read(data, "csv", max_line_bytes=1000)
    assert items[0] == LineError(2, "line longer than 1,000 bytes")
    assert items[1].query == "SELECT 1"


def test_it_reads_json_lines():
    with (LOGS / "warehouse.jsonl").open("rb") as f:
        items = list(read_log(f, "jsonl"))
    assert [i.dialect for i in items] == ["snowflake", "snowflake", "bigquery", "spark", "spark"]
    assert items[0].query_tag == "dbt.customer_ltv"
    assert items[4].failed
    assert not items[3].failed


def test_it_reports_bad_json_lines():
    data = b'{"query": "SELECT 1"}\nnot json\n[1, 2]\n{"query": 7}\n{"query": "SELECT 2", "start_time": 5}\n\n{"nope": 1}\n'
    items = read(data, "jsonl")
    assert isinstance(items[0], QueryRecord)
    assert [(i.line, i.message[:9]) for i in items[1:]] == [
        (2, "not JSON:"),
        (3, "a line mu"),
        (4, "query mus"),
        (5, "start_tim"),
        (7, "no query"),
    ]


def test_it_derives_end_time_from_duration():
    (record,) = read(
        b'{"query": "SELECT 1", "start_time": "2026-01-01T00:00:00Z", "duration_ms": 1500}\n',
        "jsonl",
    )
    assert record.end_time - record.start_time == timedelta(milliseconds=1500)


def test_times_far_ahead_and_durations_out_of_range_are_bad_lines_naming_them():
    ahead = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    items = read(
        b'{"query": "SELECT 1", "start_time": "9999-12-31T23:59:59Z", "duration_ms": 5000}\n'
        b'{"query": "SELECT 2", "start_time": "2026-01-01T00:00:00Z", "duration_ms": 1e18}\n'
        + f'{{"query": "SELECT 3", "start_time": "{ahead}"}}\n'.encode()
        + b'{"query": "SELECT 4", "start_time": "2026-01-01T00:00:00Z", "duration_ms": "NaN"}\n'
        b'{"query": "SELECT 5", "start_time": "2026-01-01T00:00:00Z"}\n',
        "jsonl",
    )
    errors = [(i.line, i.field, i.message) for i in items if isinstance(i, LineError)]
    assert [(line, field) for line, field, _ in errors] == [
        (1, "start_time"),
        (2, "duration_ms"),
        (3, "start_time"),
        (4, "duration_ms"),
    ]
    assert "start_time 9999-12-31T23:59:59Z is more than a day ahead" in errors[0][2]
    assert errors[1][2] == "duration_ms 1e+18 ms is out of the calendar's range"
    assert [i.query for i in items if isinstance(i, QueryRecord)] == ["SELECT 5"]
    # A start in range whose duration ends far ahead, an end far ahead, a start before 1970.
    items = read(
        b'{"query": "SELECT 7", "start_time": "2026-01-01T00:00:00Z", "duration_ms": 1e12}\n'
        b'{"query": "SELECT 8", "start_time": "2026-01-01T00:00:00Z", "end_time": "2999-01-01"}\n'
        b'{"query": "SELECT 9", "start_time": "0001-01-01T00:00:00Z"}\n',
        "jsonl",
    )
    assert [(i.field, i.message.split(" is ")[0]) for i in items] == [
        ("duration_ms", "duration_ms the end (start_time plus duration_ms) 2057-09-09T01:46:40Z"),
        ("end_time", "end_time 2999-01-01T00:00:00Z"),
        ("start_time", "start_time 0001-01-01T00:00:00Z"),
    ]
    assert "before 1970" in items[2].message
    # An hour ahead is a clock a little off: taken.
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    (record,) = read(f'{{"query": "SELECT 6", "start_time": "{soon}"}}\n'.encode(), "jsonl")
    assert isinstance(record, QueryRecord)


def test_a_csvlog_line_far_ahead_or_with_a_duration_out_of_range_is_a_bad_line():
    statement = (
        "{t} UTC,etl,shop,4242,10.0.0.5:51234,{s},1,idle,2026-01-05 01:59:58 UTC,3/12,0,LOG,"
        '00000,"statement: INSERT INTO a SELECT x FROM b",,,,,,,,,psql,client backend,,0\n'
    )
    duration = (
        "2026-01-05 02:00:01.350 UTC,etl,shop,4242,10.0.0.5:51234,{s},2,INSERT,"
        "2026-01-05 01:59:58 UTC,3/12,0,LOG,00000,duration: 1{zeros}.000 ms,,,,,,,,,psql,"
        "client backend,,0\n"
    )
    first = (
        "2026-01-05 02:00:05.000 UTC,etl,shop,4242,10.0.0.5:51234,{s},1,INSERT,"
        '2026-01-05 01:59:58 UTC,3/12,0,LOG,00000,"duration: {d} ms  statement: INSERT INTO a '
        'SELECT x FROM b",,,,,,,,,psql,client backend,,0\n'
    )
    log = (
        statement.format(t="9999-12-31 23:59:59.000", s="a.1")
        + statement.format(t="2026-01-05 02:00:00.100", s="b.1")
        + duration.format(s="b.1", zeros="0" * 400)
        + statement.format(t="2026-01-05 02:00:02.000", s="c.1")
        + statement.format(t="2026-01-05 02:00:03.000", s="d.1")
        + duration.format(s="d.1", zeros="0" * 12)  # ends in 2057
        + first.format(s="e.1", d="1.2.3")
        + first.format(s="f.1", d="9" * 13)  # started before 1970
    )
    items = read(log.encode(), "pgcsvlog")
    errors = [(i.line, i.field) for i in items if isinstance(i, LineError)]
    assert errors == [
        (1, "log_time"),
        (3, "message"),
        (6, "message"),
        (7, "message"),
        (8, "message"),
    ]
    # A duration line out of range leaves its statement standing, without its end.
    records = {i.line: i.end_time for i in items if isinstance(i, QueryRecord)}
    assert records == {2: None, 4: None, 5: None}
    messages = [i.message for i in items if isinstance(i, LineError)]
    assert "is not a number of milliseconds: '1.2.3'" in messages[3]
    assert "before 1970" in messages[4]


def test_it_reads_statements_from_a_postgres_csvlog():
    with (LOGS / "postgresql.csv").open("rb") as f:
        items = list(read_log(f, "pgcsvlog"))
    assert all(isinstance(i, QueryRecord) for i in items)
    by_query = {i.query.split()[0] + " " + i.query.split()[2]: i for i in items}
    first = items[0]
    assert first.query.startswith("INSERT INTO mart.daily_revenue")
    assert first.start_time == datetime(2026, 1, 5, 2, 0, 0, 100000, tzinfo=UTC)
    assert first.end_time - first.start_time == timedelta(milliseconds=1250)
    assert (first.user, first.database, first.session_id) == ("etl", "shop", "6590a1b2.1092")
    assert first.query_id == "6590a1b2.1092:1"
    failed = [i for i in items if i.failed]
    assert [f.query for f in failed] == ["INSERT INTO mart.missing SELECT * FROM nowhere"]
    select = by_query["SELECT email"]
    assert select.end_time == datetime(2026, 1, 5, 2, 0, 3, tzinfo=UTC)
    assert select.end_time - select.start_time == timedelta(milliseconds=12.5)
    assert by_query["UPDATE SET"].query == "UPDATE orders SET status = $1 WHERE id = $2"
    assert len(items) == 6  # the connection message is not a statement


def test_it_converts_csvlog_time_zones():
    from ingest.sql.readers import parse_pg_time

    assert parse_pg_time("2026-01-05 03:00:00 +01") == datetime(2026, 1, 5, 2, tzinfo=UTC)
    assert parse_pg_time("2026-07-05 04:00:00 CEST") == datetime(2026, 7, 5, 2, tzinfo=UTC)
    with pytest.raises(ValueError, match="unknown time zone"):
        parse_pg_time("2026-01-05 03:00:00 XYZT")


def test_it_rejects_an_unknown_format():
    with pytest.raises(LogFormatError, match="unknown log format 'xml'"):
        read(b"", "xml")
