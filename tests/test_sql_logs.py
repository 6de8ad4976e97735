"""SQL query logs into the graph: the command, the API, the pages and the task."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from catalog.models import Dataset, DatasetField, Namespace
from graph.models import ColumnEdge, Job, Run, RunState, TableEdge
from ingest import sql_actions
from ingest.events import fingerprint_of_text
from ingest.models import DatasetRead, RawEvent, SqlLogProblem, SqlLogState, SqlLogUpload
from ingest.tasks import process_sql_log

LOGS = Path(__file__).parent / "fixtures" / "sql_logs"
NS = "postgres://warehouse:5432"

pytestmark = pytest.mark.django_db


def ingest(
    name: str, fmt: str = "csv", dialect: str = "postgres", namespace: str = NS, **options
) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "ingest_sql_log",
        str(LOGS / name),
        namespace=namespace,
        dialect=dialect,
        fmt=fmt,
        no_progress=True,
        stdout=out,
        stderr=err,
        **options,
    )
    return out.getvalue() + err.getvalue()


def edges(job_prefix: str) -> set[tuple[str, str]]:
    return {
        (e.direction, e.dataset.name)
        for e in TableEdge.objects.filter(job__name__startswith=job_prefix, valid_to__isnull=True)
    }


def test_it_turns_a_csv_log_into_lineage_at_the_queries_own_times():
    output = ingest("warehouse.csv")
    assert "7 records: 9 events, 1 reads, 1 failed queries skipped, 0 problems" in output
    (job,) = Job.objects.filter(name__startswith="insert.shop.mart.daily_revenue.")
    # Without its literals, which may be personal data (the log itself is the engineers').
    assert job.sql == (
        "INSERT INTO mart.daily_revenue (day, revenue, orders) SELECT date_trunc(?, "
        "created_at), SUM(amount), COUNT(id) FROM orders WHERE created_at >= ? GROUP BY ?"
    )
    assert not RawEvent.objects.filter(body__icontains="2026-01-04").exists()
    assert (job.processing_type, job.integration, job.job_type) == ("BATCH", "SQL", "QUERY")
    runs = Run.objects.filter(job=job).order_by("started_at")
    assert [r.started_at for r in runs] == [
        datetime(2026, 1, 5, 2, tzinfo=UTC),
        datetime(2026, 1, 6, 2, tzinfo=UTC),
    ]
    assert {r.state for r in runs} == {RunState.COMPLETED}
    assert edges("insert.shop.mart.daily_revenue.") == {
        ("in", "shop.public.orders"),
        ("out", "shop.mart.daily_revenue"),
    }
    edge = TableEdge.objects.get(job=job, direction="out")
    assert edge.valid_from == datetime(2026, 1, 5, 2, tzinfo=UTC)  # time travel works for SQL
    revenue = ColumnEdge.objects.get(job=job, target_field__name="revenue")
    assert (
        revenue.source_field.name,
        revenue.transformation_type,
        revenue.transformation_subtype,
    ) == (
        "amount",
        "DIRECT",
        "AGGREGATION",
    )
    assert ColumnEdge.objects.filter(
        job=job,
        target_field__isnull=True,
        source_field__name="created_at",
        transformation_subtype="FILTER",
    ).exists()


def test_it_follows_temp_tables_and_folds_date_suffixes_and_drops():
    ingest("warehouse.csv")
    assert edges("insert.shop.mart.customer_summary.") == {
        ("in", "shop.public.orders"),
        ("out", "shop.mart.customer_summary"),
    }
    assert not Dataset.objects.filter(name__contains="tmp_paid").exists()
    assert Dataset.objects.filter(name="shop.mart.events_*").exists()
    assert Dataset.objects.get(name="shop.mart.old_report").lifecycle_state == "DROPPED"


def test_it_records_selects_as_reads_not_edges():
    ingest("warehouse.csv")
    reads = {(r.name, r.reader, r.count) for r in DatasetRead.objects.all()}
    assert reads == {("shop.public.customers", "analyst", 1), ("shop.public.orders", "analyst", 1)}
    assert not TableEdge.objects.filter(dataset__name="shop.public.customers").exists()


def test_the_dataset_page_shows_who_read_it(client, viewer):
    ingest("warehouse.csv")
    client.force_login(viewer)
    read = DatasetRead.objects.get(name="shop.public.customers")
    customers = Dataset.objects.create(
        namespace=Namespace.objects.get_or_create(name=read.namespace)[0],
        name=read.name,
        first_seen=datetime(2000, 1, 1, tzinfo=UTC),
    )
    page = client.get(
        "/datasets/show", {"namespace": customers.namespace.name, "name": customers.name}
    ).content.decode()
    section = page[page.index('id="readers-h"') : page.index('id="history-h"')]
    cells = [c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", section, re.S)]
    assert cells[:3] == ["analyst", "1", "1"]
    assert cells[4] == f"{read.last_at:%Y-%m-%d %H:%M}"
    # As of an instant before the read: nobody yet.
    before = read.first_at.replace(year=read.first_at.year - 1).isoformat()
    earlier = client.get(
        "/datasets/show",
        {"namespace": customers.namespace.name, "name": customers.name, "asOf": before},
    ).content.decode()
    assert "No one read it in the SQL query logs before then." in earlier


def test_it_is_harmless_to_ingest_a_log_twice():
    ingest("warehouse.csv")
    counts = (
        Job.objects.count(),
        Run.objects.count(),
        TableEdge.objects.count(),
        ColumnEdge.objects.count(),
    )
    events = RawEvent.objects.count()
    ingest("warehouse.csv")
    assert (
        Job.objects.count(),
        Run.objects.count(),
        TableEdge.objects.count(),
        ColumnEdge.objects.count(),
    ) == counts
    # Only the CTAS run's COMPLETE differs: the catalog now knows the table's columns, so
    # it no longer carries a schema facet (which would override a typed schema).
    assert RawEvent.objects.count() == events + 1


def test_it_lists_bad_lines_and_unparseable_statements_and_goes_on():
    output = ingest("bad.csv")
    assert "bad.csv:3: binary data (NUL bytes) in line" in output
    assert "bad.csv:4: not UTF-8 text" in output
    assert "bad.csv:8 (statement 1): sqlglot: Expecting )" in output
    upload = SqlLogUpload.objects.get()
    assert upload.state == SqlLogState.DONE
    assert (upload.line_errors, upload.parse_errors, upload.skipped_failed) == (4, 1, 1)
    assert sorted(SqlLogProblem.objects.values_list("line", flat=True)) == [3, 4, 5, 6, 8]
    assert edges("insert.shop.mart.a.") == {("in", "shop.public.orders"), ("out", "shop.mart.a")}


def test_it_reads_postgres_csvlogs_and_follows_session_temp_tables():
    output = ingest("postgresql.csv", fmt="pgcsvlog", schema="public")
    assert "1 failed queries skipped" in output
    (job,) = Job.objects.filter(name__startswith="insert.shop.mart.recent_totals.")
    assert edges(job.name) == {("in", "shop.public.orders"), ("out", "shop.mart.recent_totals")}
    run = Run.objects.get(job__name__startswith="insert.shop.mart.daily_revenue.")
    assert run.duration_ms == 1250
    assert not Dataset.objects.filter(name="shop.mart.missing").exists()


def test_it_reads_json_lines_in_several_dialects():
    # A namespace naming no platform: names stay as each line's dialect folds them.
    ingest("warehouse.jsonl", fmt="jsonl", dialect="snowflake", namespace="warehouse")
    assert Job.objects.filter(name="dbt.customer_ltv").exists()  # the query tag names the job
    assert edges("dbt.customer_ltv") == {
        ("in", "ANALYTICS.PUBLIC.ORDERS"),
        ("out", "ANALYTICS.MART.CUSTOMER_LTV"),
    }
    assert edges("create_table_as.acme-data.analytics.daily_kpis.") == {
        ("in", "acme-data.sales.orders"),
        ("out", "acme-data.analytics.daily_kpis"),
    }
    assert Dataset.objects.filter(name="mart.daily_events").exists()


def test_it_expands_select_star_from_the_catalog():
    namespace = Namespace.objects.create(name=NS)
    orders = Dataset.objects.create(namespace=namespace, name="shop.public.orders")
    for ordinal, name in enumerate(["id", "amount"]):
        DatasetField.objects.create(dataset=orders, name=name, ordinal=ordinal)
    log = LOGS.parent / "sql_logs_star.jsonl"
    log.write_text(
        '{"query": "CREATE TABLE mart.copy AS SELECT * FROM orders", "start_time": "2026-01-01T00:00:00Z"}\n'
    )
    try:
        call_command(
            "ingest_sql_log", str(log), namespace=NS, dialect="postgres", fmt="jsonl",
            database="shop", schema="public", no_progress=True, stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip
    finally:
        log.unlink()
    targets = {
        (e.source_field.name, e.target_field.name)
        for e in ColumnEdge.objects.filter(target_field__isnull=False)
    }
    assert targets == {("id", "id"), ("amount", "amount")}


def test_it_fails_a_log_without_a_query_column_and_applies_nothing(tmp_path):
    log = tmp_path / "no_query.csv"
    log.write_text("id,start_time\n1,2026-01-01\n")
    with pytest.raises(CommandError, match="no 'query' column"):
        call_command(
            "ingest_sql_log", str(log), namespace=NS, dialect="postgres", fmt="csv",
            no_progress=True, stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip
    assert SqlLogUpload.objects.get().state == SqlLogState.FAILED
    assert RawEvent.objects.count() == 0


def test_it_refuses_an_unknown_dialect_or_a_missing_file():
    with pytest.raises(CommandError, match="--dialect: unknown SQL dialect 'oracle'"):
        ingest("warehouse.csv", dialect="oracle")
    with pytest.raises(CommandError, match="no such file"):
        call_command(
            "ingest_sql_log",
            "/nope.csv",
            namespace=NS,
            dialect="postgres",
            fmt="csv",
            no_progress=True,
        )
    assert SqlLogUpload.objects.count() == 0


# -- API --------------------------------------------------------------------------------


def post_log(client, body: bytes, **params):
    return client.post(f"/api/v1/sql-logs?{urlencode(params)}", data=body, content_type="text/csv")


def test_it_accepts_a_raw_body_log_from_an_engineer(
    api, engineer, django_capture_on_commit_callbacks
):
    body = (LOGS / "warehouse.csv").read_bytes()
    with django_capture_on_commit_callbacks(execute=True):
        response = post_log(api(engineer), body, namespace=NS, dialect="postgres", format="csv")
    assert response.status_code == 202, response.content
    assert response["Location"] == response.json()["statusUrl"]
    status = api(engineer).get(response.json()["statusUrl"]).json()
    assert status["state"] == "done"
    assert status["counts"]["events"] == 9
    assert status["progress"] == 1.0
    assert Job.objects.filter(name__startswith="insert.shop.mart.daily_revenue.").exists()


def test_it_accepts_a_multipart_upload_from_an_engineer(
    api, engineer, django_capture_on_commit_callbacks
):
    log = io.BytesIO((LOGS / "bad.csv").read_bytes())
    log.name = "bad.csv"
    data = {"file": log, "namespace": NS, "dialect": "postgres", "format": "csv"}
    with django_capture_on_commit_callbacks(execute=True):
        response = api(engineer).post("/api/v1/sql-logs", data=data, format="multipart")
    assert response.status_code == 202, response.content
    status = api(engineer).get(response.json()["statusUrl"]).json()
    assert status["name"] == "bad.csv"
    assert [p["line"] for p in status["problems"]] == [3, 4, 5, 6, 8]
    assert status["problems"][4]["statement"] == 0


@pytest.mark.parametrize(
    ("params", "field", "status"),
    [
        ({"dialect": "postgres", "format": "csv"}, "namespace", 400),
        ({"namespace": NS, "dialect": "oracle", "format": "csv"}, "dialect", 400),
        ({"namespace": NS, "dialect": "postgres", "format": "xml"}, "format", 400),
    ],
)
def test_it_names_the_option_at_fault(api, admin_user, params, field, status):
    response = post_log(api(admin_user), b"query\nSELECT 1\n", **params)
    assert response.status_code == status
    assert response.json()["field"] == field
    assert SqlLogUpload.objects.count() == 0


def test_it_refuses_empty_and_oversized_logs(api, engineer, settings):
    response = post_log(api(engineer), b"", namespace=NS, dialect="postgres", format="csv")
    assert (response.status_code, response.json()["field"]) == (400, "file")
    settings.SQL_LOG_MAX_UPLOAD_BYTES = 100
    response = post_log(
        api(engineer),
        b"query\n" + b"SELECT 1\n" * 50,
        namespace=NS,
        dialect="postgres",
        format="csv",
    )
    assert response.status_code == 413
    assert response.json()["field"] == "file"
    assert SqlLogUpload.objects.count() == 0
    assert not list((Path(settings.DATA_DIR) / "sql_logs").glob("*"))


def test_it_requires_an_engineer_or_admin(api, viewer, producer, compliance, steward):
    body = b"query\nSELECT 1\n"
    assert (
        post_log(api(None), body, namespace=NS, dialect="postgres", format="csv").status_code == 401
    )
    for user in (viewer, producer, compliance, steward):
        response = post_log(api(user), body, namespace=NS, dialect="postgres", format="csv")
        assert response.status_code == 403
        assert "needs the engineer role" in response.json()["error"]
        assert api(user).get("/api/v1/sql-logs").status_code == 403


def test_it_answers_404_for_an_unknown_log(api, engineer):
    response = api(engineer).get("/api/v1/sql-logs/999")
    assert response.status_code == 404
    assert response.json()["field"] == "id"


# -- pages ------------------------------------------------------------------------------


def test_it_uploads_a_log_from_the_page_and_shows_its_progress(
    client, engineer, django_capture_on_commit_callbacks
):
    client.force_login(engineer)
    assert client.get(reverse("sql-logs")).status_code == 200
    with django_capture_on_commit_callbacks(execute=True), (LOGS / "bad.csv").open("rb") as f:
        response = client.post(
            reverse("sql-logs"),
            {"file": f, "namespace": NS, "dialect": "postgres", "format": "csv"},
        )
    upload = SqlLogUpload.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("sql-log-detail", args=[upload.pk])
    page = client.get(response["Location"]).content.decode()
    assert "binary data (NUL bytes) in line" in page
    assert 'data-progress-url="' + reverse("sql-log-progress", args=[upload.pk]) in page
    progress = json.loads(client.get(reverse("sql-log-progress", args=[upload.pk])).content)
    assert progress["state"] == "done"
    status_page = client.get(reverse("ingestion-status")).content.decode()
    assert "Expecting )" in status_page  # unparseable statements are listed on the status page


def test_the_ingestion_page_shows_logs_to_all_and_their_statements_to_engineers(
    client, engineer, viewer
):
    ingest("bad.csv")
    client.force_login(engineer)
    html = client.get(reverse("ingestion-status")).content.decode()
    assert reverse("sql-logs") in html and "could not be parsed" in html
    client.force_login(viewer)
    html = client.get(reverse("ingestion-status")).content.decode()
    assert "bad.csv" in html
    assert "/ingestion/sql-logs" not in html and "could not be parsed" not in html


def test_it_shows_form_errors_and_keeps_viewers_out(client, engineer, viewer):
    client.force_login(engineer)
    response = client.post(
        reverse("sql-logs"), {"namespace": "", "dialect": "postgres", "format": "csv"}
    )
    assert response.status_code == 400
    assert SqlLogUpload.objects.count() == 0
    client.force_login(viewer)
    assert client.get(reverse("sql-logs")).status_code == 403


# -- the task ---------------------------------------------------------------------------


def test_the_task_takes_json_ids_and_does_nothing_twice(tmp_path):
    log = tmp_path / "q.csv"
    log.write_text("query,start_time\nINSERT INTO a SELECT x FROM b,2026-01-01T00:00:00Z\n")
    upload = sql_actions.create_upload(
        namespace=NS, dialect="postgres", fmt="csv", path=log, enqueue=False
    )
    (arg,) = json.loads(json.dumps([upload.pk]))
    assert process_sql_log.apply(args=[arg]).get() == {"state": "done"}
    runs = Run.objects.count()
    assert process_sql_log.apply(args=[arg]).get() == {"state": "done"}  # already done: no work
    assert Run.objects.count() == runs == 1


def test_it_takes_parser_knobs_from_settings(settings, tmp_path):
    settings.SQL_LOG_FOLD_PATTERNS = [r"_v(\d+)$"]
    settings.SQL_LOG_MAX_STATEMENT_CHARS = 60
    log = tmp_path / "q.jsonl"
    log.write_text(
        '{"query": "INSERT INTO t_v2 SELECT a FROM s", "start_time": "2026-01-01T00:00:00Z"}\n'
        '{"query": "INSERT INTO u SELECT a, b, c, d, e, f, g, h FROM s WHERE x = 1", '
        '"start_time": "2026-01-01T00:00:00Z"}\n'
    )
    upload = sql_actions.create_upload(
        namespace=NS,
        dialect="postgres",
        fmt="jsonl",
        path=log,
        database="d",
        schema="p",
        enqueue=False,
    )
    done = sql_actions.process_upload(upload.pk)
    assert Dataset.objects.filter(name="d.p.t_v*").exists()
    (problem,) = SqlLogProblem.objects.filter(upload=done)
    assert (problem.line, problem.field) == (2, "query")
    assert "the limit is 60" in problem.message


def test_a_log_loaded_by_the_command_is_listed_like_an_upload(engineer):
    from django.test import Client

    ingest("warehouse.csv")
    client = Client()
    client.force_login(engineer)
    html = client.get("/ingestion/sql-logs/").content.decode()
    assert "No SQL logs yet" not in html
    assert "warehouse.csv" in html and "by manage.py ingest_sql_log" in html


@pytest.mark.parametrize("spelling", [NS, "postgresql://Warehouse:5432"])
def test_a_scratch_named_table_holding_personal_data_stays_in_compliance_answers(
    tmp_path, spelling
):
    """A log that reads a catalogued table with a scratch-like name hides the tables lineage
    cannot follow through, but not one that holds personal data; and a copy of it by
    ``SELECT *`` gets its columns from the catalog however the upload spells the
    namespace."""
    from catalog import actions as catalog_actions
    from catalog.models import DatasetField, PiiCategory, SubjectKind
    from ingest.events import parse_event
    from ingest.normalizer import normalize
    from privacy.queries import Identifier, search_subject
    from tests.ingest_builders import dataset, run_event, run_id, schema

    made = [dataset("shop.scratch.cust_emails", ns=NS, schema=schema("id", "email"))]
    normalize([parse_event(run_event("COMPLETE", run_id(1), "2026-01-01T02:00:00Z", outputs=made))])
    kind = SubjectKind.objects.create(name="customer")
    catalog_actions.update_field(
        DatasetField.objects.get(dataset__name="shop.scratch.cust_emails", name="email"),
        {"pii_category": PiiCategory.EMAIL, "subject_kind": kind},
        catalog_actions.Actor(name="stella"),
    )
    log = tmp_path / "q.csv"
    log.write_text(
        "query_id,start_time,user,database,schema,dialect,status,query\n"
        "q-1,2026-01-05T02:00:00Z,etl,shop,public,postgres,success,"
        '"INSERT INTO mart.report (n) SELECT count(*) FROM scratch.cust_emails"\n'
        "q-2,2026-01-05T03:00:00Z,etl,shop,public,postgres,success,"
        '"CREATE TABLE mart.mailing AS SELECT * FROM scratch.cust_emails"\n'
    )
    call_command(
        "ingest_sql_log",
        str(log),
        namespace=spelling,
        dialect="postgres",
        fmt="csv",
        no_progress=True,
    )
    found = search_subject(kind, [Identifier(0)])
    assert {h.name: h.relation for h in found.all_hits} == {
        "shop.scratch.cust_emails": "direct",
        "shop.mart.mailing": "derived",
    }


def _migrate_stored_sql_logs() -> None:
    import importlib

    from django.apps import apps as django_apps

    migration = importlib.import_module("ingest.migrations.0013_redact_sql_log_literals")
    migration.redact_sql_logs(django_apps, None)


def _stored() -> tuple[set[tuple[str, str]], set[str]]:
    events = set(RawEvent.objects.filter(source="sql-log").values_list("fingerprint", "body"))
    return events, set(Job.objects.values_list("sql", flat=True))


class _Undone(Exception):
    pass


@pytest.mark.parametrize("imported_again", [False, True])
def test_the_migration_redacts_what_sql_logs_stored_before_statements_were_redacted(
    monkeypatch, imported_again
):
    with pytest.raises(_Undone), transaction.atomic():
        ingest("warehouse.csv")
        redacted = _stored()  # what the redacting code stores
        raise _Undone
    with monkeypatch.context() as before:  # the code before: statements kept as logged
        before.setattr("ingest.sql.events.redact", lambda sql, spec: sql)
        ingest("warehouse.csv")
    assert RawEvent.objects.filter(body__icontains="2026-01-04").exists()
    assert Job.objects.filter(sql__contains="'").exists()
    old = set(RawEvent.objects.values_list("fingerprint", flat=True))
    if imported_again:  # a redacted copy of an event was stored already, as by an import
        copy = next((f, b) for f, b in redacted[0] if f not in old)
        RawEvent.objects.create(
            fingerprint=copy[0],
            body=copy[1],
            kind="run",
            source="sql-log",
            event_time=timezone.now(),
        )

    _migrate_stored_sql_logs()

    # Byte for byte as the redacting code stores them, so the fingerprints are its own.
    assert _stored() == redacted
    _migrate_stored_sql_logs()  # a run again changes nothing
    assert _stored() == redacted


@pytest.mark.parametrize("chunk", [1, 2000])
def test_the_redacting_migration_collapses_copies_and_leaves_other_text_alone(monkeypatch, chunk):
    import importlib

    migration = importlib.import_module("ingest.migrations.0013_redact_sql_log_literals")
    monkeypatch.setattr(migration, "CHUNK", chunk)  # copies in one chunk, or across chunks

    def stored(query: str, spaced: bool = False) -> RawEvent:
        event = {
            "eventType": "COMPLETE",
            "job": {"facets": {"sql": {"dialect": "postgres", "query": query}}, "name": "j"},
        }
        body = json.dumps(event) if spaced else json.dumps(event, separators=(",", ":"))
        return RawEvent.objects.create(
            fingerprint=fingerprint_of_text(body),
            body=body,
            kind="run",
            source="sql-log",
            event_time=timezone.now(),
        )

    first, second = stored("SELECT 1 WHERE a = 'x'"), stored("SELECT 1 WHERE a = 'y'")
    spaced = stored("SELECT 1 WHERE a = 'z'", spaced=True)  # not as the SQL-log reader writes

    _migrate_stored_sql_logs()

    # Both old rows read the same once redacted: one event, under the redacted text's print.
    (kept,) = RawEvent.objects.filter(pk__in=[first.pk, second.pk])
    assert json.loads(kept.body)["job"]["facets"]["sql"]["query"] == "SELECT ? WHERE a = ?"
    assert kept.fingerprint == fingerprint_of_text(kept.body)
    assert RawEvent.objects.get(pk=spaced.pk).body == spaced.body


def _shop_log(tmp_path: Path, *lines: str) -> SqlLogUpload:
    """A JSON Lines log of ``lines`` in the shop database, read in place by the command."""
    log = tmp_path / "star.jsonl"
    log.write_text("".join(line + "\n" for line in lines))
    call_command(
        "ingest_sql_log", str(log), namespace=NS, dialect="postgres", fmt="jsonl",
        database="shop", schema="public", no_progress=True, stdout=io.StringIO(), stderr=io.StringIO(),
    )  # fmt: skip
    return SqlLogUpload.objects.get()


def _star_log(tmp_path: Path) -> SqlLogUpload:
    """A log copying orders with ``SELECT *``, loaded before the catalog knows orders."""
    return _shop_log(
        tmp_path,
        '{"query": "CREATE TABLE mart.copy AS SELECT * FROM orders", "start_time": "2026-01-01T00:00:00Z"}',
    )


def _tell(told: list[tuple[str, str, dict]]) -> None:
    """Producers tell the catalog each (time, table, schema), one run each."""
    from ingest import actions
    from tests.ingest_builders import dataset, run_event, run_id

    actions.ingest_event_dicts(
        [
            run_event("COMPLETE", run_id(i), when, outputs=[dataset(name, NS, schema=s)])
            for i, (when, name, s) in enumerate(told, start=1)
        ],
        inline=True,
    )


def _column_edges() -> set[tuple[str, str, str]]:
    return {
        (e.source_field.dataset.name, e.source_field.name, e.target_field.name)
        for e in ColumnEdge.objects.filter(target_field__isnull=False)
    }


def test_a_log_read_before_the_catalog_knew_a_tables_columns_is_taken_again_once_it_does(
    tmp_path, client, engineer, django_capture_on_commit_callbacks
):
    from ingest import actions
    from tests.ingest_builders import at, dataset, run_event, run_id, schema

    upload = _star_log(tmp_path)
    assert _column_edges() == set()
    unknown = [{"namespace": NS, "name": "shop.public.orders"}]
    client.force_login(engineer)
    shown = json.loads(client.get(reverse("sql-log-progress", args=[upload.pk])).content)
    assert shown["columnsUnknown"] == unknown
    page = client.get(reverse("sql-log-detail", args=[upload.pk])).content.decode()
    assert "Waiting for columns" in page and f"{NS}:shop.public.orders</a>" in page
    assert "name=shop.public.orders" in page  # a link to the table's page
    assert sql_actions.retake_logs() == []  # nothing known yet: nothing to take again
    # A producer tells the catalog the table's columns.
    orders = dataset("shop.public.orders", NS, schema=schema("id", "amount"))
    actions.ingest_event_dicts(
        [run_event("COMPLETE", run_id(1), at(2), outputs=[orders])], inline=True
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert sql_actions.retake_logs() == [upload.pk]
    assert _column_edges() == {
        ("shop.public.orders", "id", "id"),
        ("shop.public.orders", "amount", "amount"),
    }
    upload.refresh_from_db()
    assert upload.state == SqlLogState.DONE
    shown = json.loads(client.get(reverse("sql-log-progress", args=[upload.pk])).content)
    assert shown["columnsUnknown"] == []
    assert (
        "Waiting for columns"
        not in client.get(reverse("sql-log-detail", args=[upload.pk])).content.decode()
    )
    assert sql_actions.retake_logs() == []


@pytest.mark.parametrize(
    "then", ["DROP TABLE orders", "ALTER TABLE orders RENAME TO orders_old"], ids=["drop", "rename"]
)
def test_a_log_that_read_a_table_with_a_star_and_then_dropped_it_is_taken_again(
    tmp_path, then, django_capture_on_commit_callbacks
):
    """The producer's schema arrives late and is older than the log's DROP (or RENAME), so
    the table has no columns now: the ``*`` is expanded to those it had last, at the drop."""
    from ingest import actions
    from tests.ingest_builders import dataset, run_event, run_id, schema

    upload = _shop_log(
        tmp_path,
        '{"query": "CREATE TABLE mart.copy AS SELECT * FROM orders", "start_time": "2026-01-01T00:00:00Z"}',
        f'{{"query": "{then}", "start_time": "2026-01-01T00:01:00Z"}}',
    )
    assert list(upload.columns_unknown.values_list("name", flat=True)) == ["shop.public.orders"]
    orders = dataset("shop.public.orders", NS, schema=schema("id", "amount"))
    actions.ingest_event_dicts(
        [run_event("COMPLETE", run_id(1), "2025-12-31T00:00:00Z", outputs=[orders])], inline=True
    )
    assert not DatasetField.objects.filter(
        dataset__name="shop.public.orders", removed_at__isnull=True
    ).exists()  # the columns left orders with the log's statement
    with django_capture_on_commit_callbacks(execute=True):
        assert sql_actions.retake_logs() == [upload.pk]
    assert _column_edges() == {
        ("shop.public.orders", "id", "id"),
        ("shop.public.orders", "amount", "amount"),
    }
    assert not upload.columns_unknown.exists()
    assert sql_actions.retake_logs() == []


def test_a_log_taken_again_later_reads_the_columns_tables_had_when_it_was_uploaded(
    tmp_path, django_capture_on_commit_callbacks
):
    """A column added to orders after the log was uploaded is not one its ``*`` read."""
    from tests.ingest_builders import schema

    upload = _star_log(tmp_path)
    SqlLogUpload.objects.filter(pk=upload.pk).update(created_at=datetime(2026, 1, 2, tzinfo=UTC))
    told = [
        ("2026-01-01T00:00:00Z", schema("id", "amount")),
        ("2026-02-01T00:00:00Z", schema("id", "amount", "ssn")),
    ]
    _tell([(when, "shop.public.orders", s) for when, s in told])
    with django_capture_on_commit_callbacks(execute=True):
        assert sql_actions.retake_logs() == [upload.pk]
    assert _column_edges() == {
        ("shop.public.orders", "id", "id"),
        ("shop.public.orders", "amount", "amount"),
    }


def test_a_log_does_not_read_the_columns_of_a_table_dropped_before_its_records(
    tmp_path, django_capture_on_commit_callbacks
):
    """orders lost its columns a year before the log's records: whatever the log read under
    that name, it was not them. The log waits, and is not taken again and again."""
    from ingest import actions
    from tests.ingest_builders import dataset, drop, run_event, run_id, schema

    orders = dataset("shop.public.orders", NS, schema=schema("id", "amount"))
    actions.ingest_event_dicts(
        [
            run_event("COMPLETE", run_id(1), "2025-01-01T00:00:00Z", outputs=[orders]),
            drop("shop.public.orders", "2025-02-01T00:00:00Z", NS),
        ],
        inline=True,
    )
    upload = _star_log(tmp_path)  # its record is of 2026-01-01
    assert list(upload.columns_unknown.values_list("name", flat=True)) == ["shop.public.orders"]
    assert upload.first_record_at == datetime(2026, 1, 1, tzinfo=UTC)
    with django_capture_on_commit_callbacks(execute=True):
        assert sql_actions.retake_logs() == []
    assert _column_edges() == set()


def test_a_line_whose_duration_ends_far_ahead_is_a_problem_and_the_rest_is_taken(tmp_path):
    """Its COMPLETE event would have been dated 2057: lineage "now" cannot see, and (near the
    calendar's end) a job whose next run failed to normalise."""
    upload = _shop_log(
        tmp_path,
        '{"query": "INSERT INTO mart.a SELECT id FROM orders", "start_time": "2026-01-01T00:00:00Z", "duration_ms": 1e12}',
        '{"query": "INSERT INTO mart.b SELECT id FROM orders", "start_time": "2026-01-01T00:01:00Z", "duration_ms": 10}',
    )
    assert upload.state == SqlLogState.DONE
    (problem,) = SqlLogProblem.objects.filter(upload=upload)
    assert (problem.line, problem.field) == (1, "duration_ms")
    assert "more than a day ahead" in problem.message
    assert set(Dataset.objects.values_list("name", flat=True)) == {
        "shop.public.orders",
        "shop.mart.b",
    }


def test_a_log_taken_again_later_checks_its_times_against_its_upload(tmp_path):
    """A line more than a day ahead of the log's upload stays a problem when the log is
    taken again after that day has passed: a log reads the same lines whenever it is read."""
    now = datetime.now(UTC).replace(microsecond=0)
    log = tmp_path / "late.jsonl"
    log.write_text(
        '{"query": "INSERT INTO mart.a SELECT id FROM orders", "start_time": "2026-01-01T00:00:00Z"}\n'
        f'{{"query": "INSERT INTO mart.b SELECT id FROM orders", "start_time": "{now - timedelta(days=1):%Y-%m-%dT%H:%M:%SZ}"}}\n'
    )  # fmt: skip
    upload = sql_actions.create_upload(
        namespace=NS, dialect="postgres", fmt="jsonl", path=log, database="shop", schema="public",
        enqueue=False,
    )  # fmt: skip
    # Uploaded three days ago, when its second line was two days ahead; read now.
    SqlLogUpload.objects.filter(pk=upload.pk).update(created_at=now - timedelta(days=3))
    done = sql_actions.process_upload(upload.pk)
    assert done is not None and done.state == SqlLogState.DONE
    (problem,) = SqlLogProblem.objects.filter(upload=upload)
    assert (problem.line, problem.field) == (2, "start_time")
    assert "more than a day ahead of when this server received it" in problem.message
    assert set(Dataset.objects.values_list("name", flat=True)) == {
        "shop.public.orders",
        "shop.mart.a",
    }


def test_a_log_does_not_wait_for_the_columns_of_a_scratch_table(tmp_path, client, engineer):
    """A scratch table sends no events, so the catalog never learns its columns: reading it
    with ``*`` leaves that column lineage out (the statement says so), and the log does not
    promise to take it again."""
    upload = _shop_log(
        tmp_path,
        '{"query": "CREATE TABLE tmp.stage1 AS SELECT id, amount FROM orders", "start_time": "2026-01-01T00:00:00Z"}',
        '{"query": "INSERT INTO mart.x SELECT * FROM tmp.stage1", "start_time": "2026-01-01T00:01:00Z"}',
    )
    assert not upload.columns_unknown.exists()
    assert sql_actions.retake_logs() == []
    client.force_login(engineer)
    page = client.get(reverse("sql-log-detail", args=[upload.pk])).content.decode()
    assert "Waiting for columns" not in page
    # The table lineage goes through the scratch table.
    assert set(Dataset.objects.values_list("name", flat=True)) == {
        "shop.public.orders",
        "shop.mart.x",
    }


def test_a_log_whose_file_is_gone_says_its_columns_cannot_be_taken_again(tmp_path):
    upload = _star_log(tmp_path)
    (tmp_path / "star.jsonl").unlink()
    orders = Dataset.objects.get(namespace__name=NS, name="shop.public.orders")
    DatasetField.objects.create(dataset=orders, name="id", ordinal=0)
    assert sql_actions.retake_logs() == []
    upload.refresh_from_db()
    assert upload.state == SqlLogState.DONE
    assert not upload.columns_unknown.exists()
    (problem,) = SqlLogProblem.objects.filter(upload=upload)
    assert "the log is gone" in problem.message
    assert sql_actions.retake_logs() == []


def test_a_log_changed_since_it_was_read_is_not_read_again(tmp_path):
    """A log read in place, then rotated and written anew: what it said is not what it says
    now, so it is not processed again (its reads and lineage would be another log's)."""
    upload = _star_log(tmp_path)
    (tmp_path / "star.jsonl").write_text(
        '{"query": "SELECT * FROM mart.day2_only", "start_time": "2026-01-02T00:00:00Z"}\n'
    )
    orders = Dataset.objects.get(namespace__name=NS, name="shop.public.orders")
    DatasetField.objects.create(dataset=orders, name="id", ordinal=0)
    assert sql_actions.retake_logs() == []
    assert not upload.columns_unknown.exists()
    (problem,) = SqlLogProblem.objects.filter(upload=upload)
    assert "the log changed since it was read" in problem.message


def test_a_log_taken_again_later_reads_columns_in_the_order_they_had_then(
    tmp_path, django_capture_on_commit_callbacks
):
    """orders' columns were reordered after the upload: a positional ``INSERT … SELECT *``
    maps them as they stood then, so ssn still lands in the target's second column."""
    from tests.ingest_builders import schema

    upload = _shop_log(
        tmp_path,
        '{"query": "INSERT INTO mart.target SELECT * FROM orders", "start_time": "2026-01-01T12:00:00Z"}',
    )
    SqlLogUpload.objects.filter(pk=upload.pk).update(created_at=datetime(2026, 1, 2, tzinfo=UTC))
    told = [
        ("2025-12-31T00:00:00Z", "shop.mart.target", schema("c1", "c2", "c3")),
        ("2026-01-01T00:00:00Z", "shop.public.orders", schema("id", "ssn", "amount")),
        ("2026-02-01T00:00:00Z", "shop.public.orders", schema("id", "amount", "ssn")),
    ]
    _tell(told)
    with django_capture_on_commit_callbacks(execute=True):
        assert sql_actions.retake_logs() == [upload.pk]
    assert _column_edges() == {
        ("shop.public.orders", "id", "c1"),
        ("shop.public.orders", "ssn", "c2"),
        ("shop.public.orders", "amount", "c3"),
    }


def test_a_log_read_before_passes_noted_its_first_record_is_taken_again_until_it_reads(
    tmp_path, django_capture_on_commit_callbacks
):
    """Uploaded before migration 0016, a log has no first record's time: a table it read and
    that was dropped between that record and the upload would wait for ever. It is taken
    once to note the time, then again to read the columns; then never again."""
    from ingest import actions
    from tests.ingest_builders import dataset, drop, run_event, run_id, schema

    upload = _star_log(tmp_path)  # its record is of 2026-01-01
    orders = dataset("shop.public.orders", NS, schema=schema("id", "amount"))
    actions.ingest_event_dicts(
        [
            run_event("COMPLETE", run_id(1), "2025-12-31T00:00:00Z", outputs=[orders]),
            drop("shop.public.orders", "2026-01-02T00:00:00Z", NS),
        ],
        inline=True,
    )
    SqlLogUpload.objects.filter(pk=upload.pk).update(
        created_at=datetime(2026, 1, 3, tzinfo=UTC), first_record_at=None
    )
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            assert sql_actions.retake_logs() == [upload.pk]
    upload.refresh_from_db()
    assert upload.first_record_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert _column_edges() == {
        ("shop.public.orders", "id", "id"),
        ("shop.public.orders", "amount", "amount"),
    }
    assert sql_actions.retake_logs() == []


def test_a_logs_ddl_is_checked_against_its_upload_not_the_workers_clock(tmp_path, monkeypatch):
    """A CREATE TABLE 20 hours ahead of the upload is taken by a worker whose clock is 10
    hours behind the web server's: the line was checked against the upload's time."""
    from django.utils import timezone

    now = datetime.now(UTC).replace(microsecond=0)
    log = tmp_path / "ddl.jsonl"
    soon = now + timedelta(hours=20)
    log.write_text(
        f'{{"query": "CREATE TABLE mart.fresh (id INT)", "start_time": "{soon:%Y-%m-%dT%H:%M:%SZ}"}}\n'
    )
    upload = sql_actions.create_upload(
        namespace=NS, dialect="postgres", fmt="jsonl", path=log, database="shop", schema="public",
        enqueue=False,
    )  # fmt: skip
    monkeypatch.setattr(timezone, "now", lambda: now - timedelta(hours=10))
    done = sql_actions.process_upload(upload.pk)
    assert done is not None and done.state == SqlLogState.DONE
    assert not SqlLogProblem.objects.filter(upload=upload).exists()
    assert Dataset.objects.filter(name="shop.mart.fresh").exists()
