"""Privacy API: roles, bad input, audit, runs (with a stand-in for Spark), and no value leaks."""

from __future__ import annotations

import csv
import hashlib
import hmac
import json
import logging
import sys
import time
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.utils import timezone
from django.views.debug import ExceptionReporter

from privacy import actions
from privacy.models import AuditEntry, AuditValueHash, ErasurePlan, PrivacyRun
from privacy.sealing import seal
from tests.privacy_builders import CLEAN, CUSTOMERS, NOW, ORDERS, SEGMENTS, build_shop

SEARCH = "/api/v1/privacy/subject-search"
SCANS = "/api/v1/privacy/scans"
PLANS = "/api/v1/privacy/erasure-plans"
AUDIT = "/api/v1/privacy/audit"
KINDS = "/api/v1/privacy/subject-kinds"
SECRET = "8675309-zq"
SECRET_EMAIL = "Zq.Unique@Example.org"


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def shop(db):
    with time_machine.travel(NOW, tick=False):
        yield build_shop()


@pytest.fixture
def officer(api, compliance):
    return api(compliance)


@pytest.fixture
def fake_spark(monkeypatch, settings):
    """Run queued jobs inline, with a stand-in for the Spark job that checks its plan file."""
    settings.PRIVACY_RUNS_INLINE = True
    seen: dict[str, object] = {}

    def execute(run, plan_path, result_path, values, progress, api_key):
        text = plan_path.read_text()
        seen["plan"] = json.loads(text)
        seen["plan_text"] = text
        seen["values"] = list(values)
        results = []
        for done, target in enumerate(seen["plan"]["datasets"], start=1):
            result = {"key": target["key"], "status": "scanned", "rowsFound": 2}
            if seen["plan"]["kind"] == "erasure":
                result = {"key": target["key"], "status": "counted", "rowsMatched": 2}
                result["rowsBefore"] = 10
            results.append(result)
            progress(done, len(seen["plan"]["datasets"]), result)
        result_path.write_text(json.dumps({"datasets": results}))

    monkeypatch.setattr(actions, "_execute", execute)
    return seen


def body(**extra):
    return {"subjectKind": "customer", **extra}


# -- who may ask -------------------------------------------------------------------------------


@pytest.mark.parametrize("persona", ["viewer", "engineer", "steward", "producer", "outsider"])
def test_it_refuses_every_role_but_compliance_and_admin(shop, api, request, persona):
    client = api(request.getfixturevalue(persona))
    plan = ErasurePlan.objects.create(created_by_name="x", subject_kind="customer")
    attempts = [
        client.post(SEARCH, body(value=SECRET), format="json"),
        client.post(SCANS, body(value=SECRET), format="json"),
        client.post(PLANS, body(value=SECRET), format="json"),
        client.get(f"{PLANS}/{plan.id}"),
        client.get(f"{PLANS}/{plan.id}/export.csv"),
        client.post(f"{PLANS}/{plan.id}/dry-run", body(value=SECRET), format="json"),
        client.get(AUDIT),
    ]
    if persona != "steward":  # stewards define subject kinds, so they read them too
        attempts.append(client.get(KINDS))
    assert [r.status_code for r in attempts] == [403] * len(attempts)
    assert attempts[0].json()["error"] == "Subject search needs the compliance role"
    denied = AuditEntry.objects.filter(outcome="denied")
    assert denied.count() == len(attempts)
    # Each refusal is filed under what was asked for, not as a lookup nobody made.
    assert list(denied.order_by("id").values_list("action", flat=True)) == [
        "search",
        "scan",
        "erasure_plan",
        "erasure_plan",
        "export",
        "erasure_dry_run",
        "audit_read",
        *(["subject_kinds"] if persona != "steward" else []),
    ]
    assert set(denied.values_list("actor_name", flat=True)) == {
        request.getfixturevalue(persona).username
    }
    assert not AuditValueHash.objects.exists()  # a refused body is not even read


def test_it_asks_anonymous_callers_to_sign_in(shop, api):
    response = api(None).post(SEARCH, body(value=SECRET), format="json")
    assert response.status_code == 401
    assert response.json()["field"] == "Authorization"


def test_it_lets_an_admin_search(shop, api, admin_user):
    response = api(admin_user).post(SEARCH, body(value=SECRET), format="json")
    assert response.status_code == 200
    assert response.json()["counts"]["direct"] == 2


def test_it_only_accepts_post_for_a_search(shop, officer):
    assert officer.get(SEARCH).status_code == 405


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"value": SECRET}, "subjectKind"),
        (body(), "value"),
        ({"subjectKind": "martian", "value": SECRET}, "subjectKind"),
        (body(value=""), "value"),
        (body(value="   "), "value"),
        (body(value=SECRET * 100), "value"),
        (body(value={"nested": SECRET}), "value"),
        (body(value=SECRET, identifiers=[{"value": SECRET}]), "value"),
        (body(identifiers=[]), "identifiers"),
        (body(identifiers="x"), "identifiers"),
        (body(identifiers=[{"value": SECRET}] * 21), "identifiers"),
        (body(identifiers=[{"value": SECRET}, {"kind": "email"}]), "identifiers[1].value"),
        (body(identifiers=[{"value": SECRET, "kind": "shoe size"}]), "identifiers[0].kind"),
        (body(identifiers=[{"value": SECRET, "colour": "red"}]), "identifiers[0].colour"),
        (body(value=SECRET, asOf="last tuesday"), "asOf"),
        (body(value=SECRET, extra=1), "extra"),
    ],
)
def test_it_names_the_field_at_fault(shop, officer, payload, field):
    response = officer.post(SEARCH, payload, format="json")
    assert response.status_code == 400
    answer = response.json()
    assert answer["field"] == field
    assert SECRET not in response.content.decode()


def test_it_rejects_a_body_that_is_not_an_object(shop, officer):
    response = officer.post(SEARCH, [SECRET], format="json")
    assert response.status_code == 400
    assert response.json()["field"] == "body"
    assert SECRET not in response.content.decode()


def test_it_rejects_malformed_json_without_a_500(shop, officer):
    response = officer.generic("POST", SEARCH, '{"value": "' + SECRET, "application/json")
    assert response.status_code == 400


# -- audit -------------------------------------------------------------------------------------


def test_it_audits_a_search_with_a_keyed_hash(shop, officer, compliance, settings):
    settings.PRIVACY_HASH_KEY = "test-key"
    response = officer.post(
        SEARCH,
        body(identifiers=[{"value": f" {SECRET} "}, {"kind": "email", "value": SECRET_EMAIL}]),
        format="json",
    )
    entry = AuditEntry.objects.get(action="search")
    assert response.json()["auditId"] == entry.pk
    assert entry.actor == compliance
    assert entry.outcome == "ok"
    assert entry.subject_kind == "customer"
    expected = [
        hmac.new(b"test-key", f"customer\x1f{v}".encode(), hashlib.sha256).hexdigest()
        for v in (SECRET, SECRET_EMAIL.lower())
    ]
    assert [h["hash"] for h in entry.value_hashes] == expected
    assert [h["kind"] for h in entry.value_hashes] == [None, "email"]
    assert entry.result_count == 5
    assert set(entry.hashes.values_list("digest", flat=True)) == set(expected)

    listed = officer.get(AUDIT).json()
    assert listed["totalCount"] == 1
    assert listed["entries"][0]["valueHashes"] == expected
    assert officer.get(AUDIT, {"action": "nope"}).json()["field"] == "action"


def test_it_lists_subject_kinds_with_their_fields(shop, officer):
    kinds = officer.get(KINDS).json()
    assert kinds["subjectKinds"][0] == {
        "name": "customer",
        "description": "A shop customer",
        "fields": 4,
    }
    assert "email" in kinds["identifierKinds"]


# -- runs --------------------------------------------------------------------------------------


def test_it_scans_candidates_and_reports_progress(
    shop, officer, fake_spark, django_capture_on_commit_callbacks
):
    shop.datasets[CUSTOMERS].location = "/lake/customers"
    shop.datasets[CUSTOMERS].save()
    with django_capture_on_commit_callbacks(execute=True):
        response = officer.post(SCANS, body(value=SECRET), format="json")
    assert response.status_code == 202
    run_id = response.json()["id"]
    assert response.json()["statusUrl"] == f"/api/v1/privacy/runs/{run_id}"
    run = officer.get(f"/api/v1/privacy/runs/{run_id}").json()
    assert run["state"] == "done"
    by_name = {d["name"]: d for d in run["datasets"]}
    assert by_name[CUSTOMERS]["runnable"] is True
    assert by_name[CUSTOMERS]["result"]["rowsFound"] == 2
    assert by_name[ORDERS]["runnable"] is False
    assert by_name[ORDERS]["result"] == {
        "status": "not_scannable",
        "reason": "no physical location known",
    }
    assert by_name[CLEAN]["columns"] == ["cust_key", "email_sha"]
    assert run["progress"] == {"done": 4, "total": 4}
    # The plan file names datasets and columns; the value reaches the job in memory only.
    assert fake_spark["values"] == [SECRET]
    assert SECRET not in fake_spark["plan_text"]
    assert PrivacyRun.objects.get(pk=run_id).sealed == ""
    outcomes = list(
        AuditEntry.objects.filter(action="scan").order_by("id").values_list("outcome", flat=True)
    )
    assert outcomes == ["requested", "ok"]


def test_a_search_says_may_hold_before_a_scan_and_what_the_scan_found_after(
    shop, officer, fake_spark, django_capture_on_commit_callbacks
):
    shop.datasets[CUSTOMERS].location = "/lake/customers"
    shop.datasets[CUSTOMERS].save()
    before = officer.post(SEARCH, body(value=SECRET), format="json").json()
    assert before["scannedAt"] is None
    assert {d["scan"] is None for d in before["datasets"]} == {True}
    with django_capture_on_commit_callbacks(execute=True):
        officer.post(SCANS, body(value=SECRET), format="json")
    after = officer.post(SEARCH, body(value=SECRET), format="json").json()
    assert after["scannedAt"] is not None
    by_name = {d["name"]: d for d in after["datasets"]}
    assert by_name[CUSTOMERS]["scan"]["rows"] == 2
    assert by_name[ORDERS]["scan"] is None  # not scannable: nothing was looked at
    # Another identifier has no scan of its own.
    other = officer.post(SEARCH, body(value="somebody-else@example.com"), format="json").json()
    assert other["scannedAt"] is None


def test_a_dataset_the_scan_could_not_compare_is_not_reported_as_holding_no_rows(
    shop, officer, compliance, fake_spark, monkeypatch, django_capture_on_commit_callbacks
):
    """No column of the files matched the identifiers: the search says so, not "0 rows"."""
    shop.datasets[CUSTOMERS].location = "/lake/customers"
    shop.datasets[CUSTOMERS].save()
    execute = actions._execute

    def unmatched(run, plan_path, result_path, values, progress, api_key):
        execute(run, plan_path, result_path, values, progress, api_key)
        found = json.loads(result_path.read_text())
        for result in found["datasets"]:
            result.update(status="unmatchable", rowsFound=0)
        result_path.write_text(json.dumps(found))

    monkeypatch.setattr(actions, "_execute", unmatched)
    with django_capture_on_commit_callbacks(execute=True):
        officer.post(SCANS, body(value=SECRET), format="json")
    after = officer.post(SEARCH, body(value=SECRET), format="json").json()
    (customers,) = [d for d in after["datasets"] if d["name"] == CUSTOMERS]
    assert (customers["scan"], customers["scanProblem"]) == (None, "unmatchable")
    client = Client()
    client.force_login(compliance)
    form = {"subjectKind": "customer", "value-0": SECRET, "kind-0": "", "field-0": ""}
    page = client.post("/privacy/", form)
    html = page.content.decode()
    assert "not compared: no column matched the identifiers" in html
    assert "no rows found" not in html


def test_it_fails_a_run_whose_seal_cannot_be_opened(shop, compliance, settings):
    settings.PRIVACY_RUNS_INLINE = True
    run = PrivacyRun.objects.create(
        kind="scan",
        subject_kind="customer",
        created_by=compliance,
        created_by_name="carl",
        sealed=seal([SECRET])[:-4] + "AAAA",
        targets=[],
    )
    actions.run_privacy_job(str(run.id))
    run.refresh_from_db()
    assert run.state == "failed"
    assert "cannot be opened" in run.error
    assert run.sealed == ""


def test_it_does_not_run_a_claimed_run_twice(shop, compliance, fake_spark):
    run = PrivacyRun.objects.create(
        kind="scan", subject_kind="customer", created_by_name="carl", state="running"
    )
    actions.run_privacy_job(str(run.id))
    assert "plan" not in fake_spark


def stale_run(compliance, minutes: int) -> PrivacyRun:
    """A scan left running by a worker last heard from ``minutes`` ago."""
    heard = timezone.now() - timedelta(minutes=minutes)
    return PrivacyRun.objects.create(
        kind="scan",
        subject_kind="customer",
        created_by=compliance,
        created_by_name="carl",
        state="running",
        started_at=heard - timedelta(minutes=1),
        heartbeat_at=heard,
        sealed=seal([SECRET]),
        results={"k": {"status": "scanned", "rowsFound": 1}},
    )


def test_a_run_whose_worker_stopped_is_failed_and_its_seal_emptied(shop, compliance, officer):
    from privacy.tasks import sweep_runs

    dead, alive = stale_run(compliance, 10), stale_run(compliance, 1)
    assert sweep_runs() == 1
    dead.refresh_from_db()
    alive.refresh_from_db()
    assert (dead.state, dead.sealed, alive.state) == ("failed", "", "running")
    assert dead.error.startswith("Its worker stopped: nothing heard from it since ")
    assert dead.error.endswith("Start the scan again.")
    assert dead.results == {"k": {"status": "scanned", "rowsFound": 1}}
    assert alive.sealed != ""
    entry = AuditEntry.objects.filter(reference=str(dead.pk)).get()
    assert (entry.outcome, entry.detail["by"]) == ("failed", "sweep")
    # A worker that was only slow, coming back, records its real outcome over the sweep's.
    assert actions._finish(dead, "done", {"k": {"status": "scanned", "rowsFound": 2}}, "")
    dead.refresh_from_db()
    assert (dead.state, dead.error, dead.results["k"]["rowsFound"]) == ("done", "", 2)
    outcomes = AuditEntry.objects.filter(reference=str(dead.pk)).order_by("pk")
    assert [(e.outcome, e.detail["by"]) for e in outcomes] == [
        ("failed", "sweep"),
        ("ok", "worker"),
    ]
    # Nothing else ends a run twice.
    assert not actions._finish(dead, "failed", {}, "again")
    assert sweep_runs() == 0


def test_a_run_page_read_after_its_worker_stopped_says_so(shop, compliance, officer):
    """No beat scheduler runs in the embedded set-up: reading the run fails it."""
    run = stale_run(compliance, 10)
    body = officer.get(f"/api/v1/privacy/runs/{run.pk}").json()
    assert body["state"] == "failed" and "Its worker stopped" in body["error"]
    run.refresh_from_db()
    assert run.sealed == ""


@pytest.mark.django_db(transaction=True)
def test_a_working_run_renews_its_heartbeat(compliance, fake_spark, settings):
    """The heartbeat thread writes through its own connection, so the test commits."""
    settings.PRIVACY_RUN_HEARTBEAT_SECONDS = 0.01
    beats = []

    def slow(run, plan_path, result_path, values, progress, api_key):
        for _ in range(50):
            time.sleep(0.01)
            beats.append(PrivacyRun.objects.get(pk=run.pk).heartbeat_at)
        result_path.write_text(json.dumps({"datasets": []}))

    run = PrivacyRun.objects.create(
        kind="scan",
        subject_kind="customer",
        created_by=compliance,
        created_by_name="carl",
        sealed=seal([SECRET]),
        targets=[{"key": "k", "runnable": True, "location": "/x", "format": "csv", "columns": []}],
    )
    with mock.patch.object(actions, "_execute", slow):
        actions.run_privacy_job(str(run.id))
    run.refresh_from_db()
    assert run.state == "done"
    assert len(set(beats)) > 1


def test_it_makes_an_ordered_erasure_plan_and_exports_it(shop, officer):
    response = officer.post(PLANS, body(value=SECRET), format="json")
    assert response.status_code == 201
    plan = response.json()
    order = [(s["name"], s["operation"], s["execution"]) for s in plan["steps"]]
    assert order == [
        (CUSTOMERS, "delete", "manual"),
        (ORDERS, "anonymise", "manual"),
        ("legacy/crm_dump", "delete", "spark_dry_run"),
        (CLEAN, "delete", "spark_dry_run"),
        (SEGMENTS, "delete", "spark_dry_run"),
        ("marts/revenue_by_country", "recompute", "manual"),
        ("ml/features", "recompute", "manual"),
    ]
    steps = {s["name"]: s for s in plan["steps"]}
    assert steps[ORDERS]["anonymiseColumns"] == ["customer_id"]
    assert steps["marts/revenue_by_country"]["recomputeJobs"] == ["job:spark://etl:revenue_report"]
    assert steps["marts/revenue_by_country"]["after"] == [
        "dataset:postgres://shop-db:5432:shop.public.orders",
        "dataset:s3://acme-lake:staging/customers_clean",
    ]
    assert plan["ownersToNotify"] == [
        {"name": "ada-finance", "steps": [2]},
        {"name": "team-crm", "steps": [1]},
        {"name": "team-data", "steps": [4]},
        {"name": "team-sales", "steps": [2]},
    ]
    csv_response = officer.get(f"{PLANS}/{plan['id']}/export.csv")
    assert csv_response.status_code == 200
    assert csv_response["Content-Type"].startswith("text/csv")
    assert "attachment" in csv_response["Content-Disposition"]
    lines = csv_response.content.decode().splitlines()
    assert lines[0].startswith("order,namespace,name,relation,operation")
    rows = list(csv.reader(lines))
    assert rows[1][:5] == [
        "1",
        "postgres://shop-db:5432",
        "shop.public.customers",
        "direct",
        "delete",
    ]
    exported = json.loads(officer.get(f"{PLANS}/{plan['id']}/export.json").content)
    assert exported["steps"] == plan["steps"]
    assert AuditEntry.objects.filter(action="export").count() == 2
    assert SECRET not in csv_response.content.decode()


def test_with_a_broker_the_plan_is_built_by_a_task(
    shop, officer, compliance, settings, django_capture_on_commit_callbacks
):
    from django.test import Client

    from privacy import actions

    inline = officer.post(PLANS, body(value=SECRET), format="json").json()
    settings.CELERY_TASK_ALWAYS_EAGER = False
    with (
        mock.patch("lineage_site.dispatch.send") as send,
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = officer.post(PLANS, body(value=SECRET), format="json")
    assert response.status_code == 202
    building = response.json()
    assert (building["state"], building["steps"]) == ("building", [])
    assert building["statusUrl"].endswith(building["id"])
    send.assert_called_once_with("privacy.build_plan", [building["id"]])
    export = officer.get(f"{PLANS}/{building['id']}/export.csv")
    assert export.status_code == 409 and export.json()["field"] == "state"
    browser = Client()
    browser.force_login(compliance)
    page = browser.get(f"/privacy/erasure/{building['id']}")
    assert b"Building the plan" in page.content and b'http-equiv="refresh"' in page.content
    actions.build_erasure_plan(building["id"])
    ready = officer.get(f"{PLANS}/{building['id']}").json()
    assert ready["state"] == "ready" and ready["error"] is None
    assert ready["steps"] == inline["steps"]
    assert ready["ownersToNotify"] == inline["ownersToNotify"]
    assert officer.get(f"{PLANS}/{building['id']}/export.csv").status_code == 200


def test_a_plan_whose_task_fails_says_why(
    shop, officer, settings, django_capture_on_commit_callbacks
):
    from privacy import actions

    settings.CELERY_TASK_ALWAYS_EAGER = False
    with (
        mock.patch("lineage_site.dispatch.send"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        plan_id = officer.post(PLANS, body(value=SECRET), format="json").json()["id"]
    with mock.patch("privacy.actions.search_subject", side_effect=RuntimeError("graph gone")):
        actions.build_erasure_plan(plan_id)
    failed = officer.get(f"{PLANS}/{plan_id}").json()
    assert failed["state"] == "failed" and "graph gone" in failed["error"]
    dry_run = officer.post(f"{PLANS}/{plan_id}/dry-run", body(value=SECRET), format="json")
    assert dry_run.status_code == 409
    assert "could not be built" in dry_run.json()["error"]


def test_it_guards_dry_run_and_apply(shop, officer, fake_spark, django_capture_on_commit_callbacks):
    plan = officer.post(PLANS, body(value=SECRET), format="json").json()
    url = f"{PLANS}/{plan['id']}"
    wrong = officer.post(f"{url}/dry-run", body(value="someone else"), format="json")
    assert (wrong.status_code, wrong.json()["field"]) == (422, "identifiers")
    refused = AuditEntry.objects.get(outcome="refused")
    assert (refused.action, refused.detail) == ("erasure_dry_run", {"plan": plan["id"]})
    assert "someone else" not in json.dumps(refused.value_hashes)
    early = officer.post(f"{url}/apply", body(value=SECRET, confirm=True), format="json")
    assert (early.status_code, early.json()["field"]) == (409, "apply")
    as_of = officer.post(f"{url}/dry-run", body(value=SECRET, asOf="2024-01-01"), format="json")
    assert as_of.json()["field"] == "asOf"

    with django_capture_on_commit_callbacks(execute=True):
        dry = officer.post(f"{url}/dry-run", body(value=SECRET), format="json")
    assert dry.status_code == 202
    run = officer.get(dry.json()["statusUrl"]).json()
    assert run["state"] == "done"
    assert {d["name"] for d in run["datasets"] if d["runnable"]} == {
        "legacy/crm_dump",
        CLEAN,
        SEGMENTS,
    }
    assert fake_spark["plan"]["apply"] is False

    unconfirmed = officer.post(f"{url}/apply", body(value=SECRET), format="json")
    assert unconfirmed.json()["field"] == "confirm"
    with django_capture_on_commit_callbacks(execute=True):
        apply = officer.post(f"{url}/apply", body(value=SECRET, confirm=True), format="json")
    assert apply.status_code == 202
    # Only datasets on a local file system are erased by Spark; here none is.
    assert officer.get(apply.json()["statusUrl"]).json()["progress"]["total"] == 0
    actions_logged = list(AuditEntry.objects.order_by("id").values_list("action", "outcome"))
    assert ("erasure_dry_run", "requested") in actions_logged
    assert ("erasure_apply", "ok") in actions_logged


# -- no leaks ----------------------------------------------------------------------------------


def _database_text() -> str:
    """Every row of every table, as text."""
    chunks: list[str] = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')
            chunks.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(chunks)


def test_it_never_stores_or_logs_the_value(
    shop,
    officer,
    client,
    compliance,
    fake_spark,
    caplog,
    capsys,
    django_capture_on_commit_callbacks,
):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django.db.backends")
    connection.force_debug_cursor = True  # SQL statements are logged too
    try:
        identifiers = [{"value": SECRET}, {"kind": "email", "value": SECRET_EMAIL}]
        with django_capture_on_commit_callbacks(execute=True):
            officer.post(SEARCH, body(identifiers=identifiers), format="json")
            officer.post(SEARCH, body(identifiers=identifiers, asOf="2024-05-01"), format="json")
            officer.post(SEARCH, body(value=SECRET, bogus=1), format="json")
            officer.post(SCANS, body(identifiers=identifiers), format="json")
            plan = officer.post(PLANS, body(identifiers=identifiers), format="json").json()
            officer.post(
                f"{PLANS}/{plan['id']}/dry-run", body(identifiers=identifiers), format="json"
            )
            client.force_login(compliance)
            client.post(
                "/privacy/",
                {"subjectKind": "customer", "value-0": SECRET, "kind-0": "", "field-0": ""},
            )
    finally:
        connection.force_debug_cursor = False
    assert fake_spark["values"] == [SECRET, SECRET_EMAIL.lower()]
    logged = caplog.text + capsys.readouterr().err
    stored = _database_text()
    for secret in (SECRET, SECRET_EMAIL, SECRET_EMAIL.lower()):
        assert secret not in logged
        assert secret not in stored
    assert "SELECT" in logged  # the SQL log was captured


@pytest.mark.parametrize("where", ["api", "page"])
def test_it_keeps_the_value_out_of_error_reports(
    shop, officer, client, compliance, monkeypatch, where
):
    def explode(*args, **kwargs):
        raise RuntimeError("search backend down")

    monkeypatch.setattr(actions, "search_subject", explode)
    officer.raise_request_exception = False
    client.raise_request_exception = False
    client.force_login(compliance)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    try:
        if where == "api":
            response = officer.post(SEARCH, body(value=SECRET), format="json")
        else:
            response = client.post("/privacy/", {"subjectKind": "customer", "value-0": SECRET})
    finally:
        logger.removeHandler(handler)
    assert response.status_code == 500
    record = next(r for r in records if r.exc_info)
    assert record.exc_info is not None
    exc_type, exc_value, tb = record.exc_info
    report = ExceptionReporter(record.request, exc_type, exc_value, tb)  # type: ignore[attr-defined]
    text = report.get_traceback_text() + report.get_traceback_html()
    assert "search backend down" in text
    assert SECRET not in text
    sys.stderr.flush()


def test_it_lends_the_erasure_job_a_producer_token_for_its_own_lineage(
    shop, officer, monkeypatch, settings, django_capture_on_commit_callbacks
):
    from catalog.models import ApiToken

    settings.PRIVACY_RUNS_INLINE = True
    seen: dict[str, Any] = {}

    def execute(run, plan_path, result_path, values, progress, api_key):
        token = ApiToken.objects.get(key_hash=ApiToken.hash_key(api_key))
        seen["user"] = token.user
        seen["active"] = token.is_active
        seen["lineage"] = json.loads(plan_path.read_text()).get("lineage")
        result_path.write_text(json.dumps({"datasets": []}))

    monkeypatch.setattr(actions, "_execute", execute)
    monkeypatch.setattr(actions, "_same_identifiers", lambda plan, request: True)
    plan = ErasurePlan.objects.create(created_by_name="carl", subject_kind="customer")
    PrivacyRun.objects.create(
        kind="dry_run", plan=plan, subject_kind="customer", created_by_name="carl", state="done"
    )
    plan.steps = [
        {
            "order": 1,
            "namespace": "file",
            "name": "/lake/x",
            "nodeId": "dataset:file:/lake/x",
            "relation": "direct",
            "operation": "delete",
            "execution": "spark",
            "keyColumns": [{"name": "id", "identifiers": [0]}],
            "anonymiseColumns": [],
            "location": "/lake/x",
            "format": "parquet",
            "owners": [],
            "notes": [""],
        }
    ]
    plan.save()
    with django_capture_on_commit_callbacks(execute=True):
        response = officer.post(
            f"{PLANS}/{plan.id}/apply", body(value=SECRET, confirm=True), format="json"
        )
    assert response.status_code == 202
    assert seen["user"].username == "privacy-erasure"
    assert seen["user"].groups.filter(name="producer").exists()
    assert seen["active"] is True
    # The configured address, never one taken from the request's Host header: the job posts
    # its lineage there with a producer token.
    assert seen["lineage"]["url"] == settings.LINEAGE_BASE_URL
    assert not ApiToken.objects.filter(user=seen["user"], revoked_at__isnull=True).exists()


def test_stewards_define_subject_kinds_and_compliance_reads_them(db, api, steward, compliance):
    kinds = "/api/v1/privacy/subject-kinds"
    assert api(steward).get(kinds).json()["subjectKinds"] == []
    created = api(steward).post(
        kinds, {"name": "patient", "description": "A clinic's patient"}, format="json"
    )
    assert created.status_code == 201, created.content
    assert created.json() == {"name": "patient", "description": "A clinic's patient", "fields": 0}
    again = api(steward).post(kinds, {"name": "patient"}, format="json")
    assert (again.status_code, again.json()["field"]) == (409, "name")
    for name in ("Patient Records", " visitor", "visitor\n", 7):
        bad = api(steward).post(kinds, {"name": name}, format="json")
        assert (bad.status_code, bad.json()["field"]) == (400, "name"), name
    # The schema states the rule, so clients can check a name before sending it.
    spec = api(steward).get("/api/schema/?format=json").json()
    body = spec["components"]["schemas"]["SubjectKindInputRequest"]["properties"]["name"]
    assert body["pattern"] == "^[a-z][a-z0-9_-]{0,63}$"
    unknown = api(steward).post(kinds, {"name": "x", "colour": "red"}, format="json")
    assert (unknown.status_code, unknown.json()["field"]) == (400, "colour")
    described = api(steward).patch(
        f"{kinds}/patient", {"description": "Anyone treated"}, format="json"
    )
    assert described.json()["description"] == "Anyone treated"
    unchanged = api(steward).patch(f"{kinds}/patient", {}, format="json")
    assert (unchanged.status_code, unchanged.json()["description"]) == (200, "Anyone treated")
    assert (
        api(steward).patch(f"{kinds}/nobody", {"description": ""}, format="json").status_code == 404
    )
    assert api(compliance).post(kinds, {"name": "visitor"}, format="json").status_code == 403
    names = [k["name"] for k in api(compliance).get(kinds).json()["subjectKinds"]]
    assert names == ["patient"]
