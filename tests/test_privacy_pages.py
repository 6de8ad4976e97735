"""Compliance pages: search form and results, scan and plan pages, audit; values stay in bodies."""

from __future__ import annotations

import json

import pytest
import time_machine
from django.urls import reverse

from privacy import actions
from privacy.models import AuditEntry, ErasurePlan, PrivacyRun
from tests.privacy_builders import CLEAN, CUSTOMERS, NOW, REVENUE, SEGMENTS, build_shop

SECRET = "8675309-zq"


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def shop(db):
    with time_machine.travel(NOW, tick=False):
        yield build_shop()


@pytest.fixture
def page(client, compliance):
    client.force_login(compliance)
    return client


def form(**extra):
    data = {"subjectKind": "customer", "value-0": SECRET, "kind-0": "", "field-0": ""}
    data.update(extra)
    return data


@pytest.mark.parametrize("persona", ["viewer", "engineer", "steward"])
def test_it_refuses_the_pages_to_other_roles(shop, client, request, persona):
    client.force_login(request.getfixturevalue(persona))
    assert client.get("/privacy/").status_code == 403
    assert client.post("/privacy/", form()).status_code == 403
    assert client.get("/privacy/audit").status_code == 403
    assert (
        client.post("/privacy/audit", {"subjectKind": "customer", "value": "x"}).status_code == 403
    )
    denied = AuditEntry.objects.filter(outcome="denied").order_by("id")
    # Each refusal is filed under what was asked for: a read of the log is not a lookup.
    assert list(denied.values_list("action", flat=True)) == [
        "search",
        "search",
        "audit_read",
        "lookup",
    ]


def test_it_sends_anonymous_visitors_to_sign_in(shop, client):
    response = client.get("/privacy/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_it_shows_the_search_form(shop, page):
    response = page.get("/privacy/")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'method="post"' in html
    assert "customer (4 fields)" in html
    assert "no-store" in response["Cache-Control"] or "no-cache" in response["Cache-Control"]


def test_it_groups_results_by_relation_with_evidence(shop, page):
    response = page.post("/privacy/", form())
    assert response.status_code == 200
    html = response.content.decode()
    assert "5 datasets may hold this customer" in html
    assert "From lineage only" in html
    direct = html.index("Direct: a field is declared")
    derived = html.index("Derived: rows still tied")
    aggregates = html.index("Aggregates: the subject contributed")
    assert direct < html.index(CUSTOMERS) < derived < html.index(CLEAN) < aggregates
    assert html.index(SEGMENTS) < aggregates < html.index(REVENUE)
    # Evidence paths: short names linked to their pages, the full node id on hover.
    assert (
        '<a class="mono" href="/jobs/show?namespace=spark%3A%2F%2Fetl&amp;name=build_segments"'
        ' title="job:spark://etl:build_segments">build_segments</a>'
    ) in html
    assert ">datasetField:" not in html and ">job:" not in html
    assert "team-crm" in html and "crm-7y" in html  # owners, retention
    assert "max-age=0" in response["Cache-Control"]
    assert AuditEntry.objects.filter(action="search").count() == 1


def test_it_answers_as_of_from_the_form(shop, page):
    html = page.post("/privacy/", form(asOf="2024-04-01T00:00")).content.decode()
    assert "marts/customer_ltv" in html
    assert "as of 2024-04-01 00:00:00 UTC" in html


def test_it_shows_bad_input_on_the_form(shop, page):
    response = page.post("/privacy/", form(**{"value-0": "  "}))
    assert response.status_code == 400
    assert "Enter at least one identifier value" in response.content.decode()
    response = page.post("/privacy/", form(subjectKind="martian"))
    assert response.status_code == 400
    assert "Unknown subject kind" in response.content.decode()


def test_it_starts_a_scan_and_redirects_without_the_value(
    shop, page, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.PRIVACY_RUNS_INLINE = True
    monkeypatch.setattr(actions, "_execute", lambda *a: None)
    with django_capture_on_commit_callbacks(execute=True):
        response = page.post("/privacy/scan", form())
    run = PrivacyRun.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/privacy/runs/{run.id}"
    assert SECRET not in response["Location"]
    html = page.get(response["Location"]).content.decode()
    assert f"/api/v1/privacy/runs/{run.id}" in html
    assert "not scannable" in html
    assert page.get("/privacy/scan").status_code == 405


def test_it_plans_erasure_and_prints_it(shop, page):
    response = page.post("/privacy/erasure", form())
    plan = ErasurePlan.objects.get()
    assert response["Location"] == f"/privacy/erasure/{plan.id}"
    html = page.get(response["Location"]).content.decode()
    assert "Owners to notify" in html
    assert f"/api/v1/privacy/erasure-plans/{plan.id}/export.csv" in html
    assert "@media print" not in html  # print styles live in the page's stylesheet
    assert html.index(CUSTOMERS) < html.index(CLEAN) < html.index(REVENUE)
    assert SECRET not in html  # the plan page asks for the values again instead
    # Steps name datasets and jobs by short names linked to their pages, never raw ids.
    steps = html.split('class="plan-steps"')[1].split("</table>")[0]
    assert ">dataset:" not in steps and ">job:" not in steps
    assert 'title="job:spark://etl:' in steps and 'href="/datasets/show?namespace=' in steps


def test_it_runs_a_plan_only_with_matching_identifiers(
    shop, page, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.PRIVACY_RUNS_INLINE = True
    monkeypatch.setattr(actions, "_execute", lambda *a: None)
    page.post("/privacy/erasure", form())
    plan = ErasurePlan.objects.get()
    url = f"/privacy/erasure/{plan.id}/run"
    wrong = page.post(
        url, {"value-0": "someone else", "kind-0": "", "field-0": "", "mode": "dry_run"}
    )
    assert wrong.status_code == 400
    assert "do not match" in wrong.content.decode()
    unconfirmed = page.post(url, {"value-0": SECRET, "kind-0": "", "field-0": "", "mode": "apply"})
    assert (
        "Run a dry run" in unconfirmed.content.decode() or "confirm" in unconfirmed.content.decode()
    )
    with django_capture_on_commit_callbacks(execute=True):
        ok = page.post(url, {"value-0": SECRET, "kind-0": "", "field-0": "", "mode": "dry_run"})
    run = PrivacyRun.objects.get(kind="dry_run")
    assert ok["Location"] == f"/privacy/runs/{run.id}"


def test_it_lists_and_looks_up_audit_entries(shop, page, api, compliance):
    officer = api(compliance)
    officer.post(
        "/api/v1/privacy/subject-search",
        {"subjectKind": "customer", "value": SECRET},
        format="json",
    )
    officer.post(
        "/api/v1/privacy/subject-search",
        {"subjectKind": "customer", "value": "other"},
        format="json",
    )
    html = page.get("/privacy/audit").content.decode()
    assert html.count("Subject search</td>") == 2
    assert html.count(" datasets</td>") + html.count(" dataset</td>") == 2  # results with a unit
    assert SECRET not in html
    found = page.post("/privacy/audit", {"subjectKind": "customer", "value": f" {SECRET} "})
    text = found.content.decode()
    assert text.count("Subject search</td>") == 1
    assert "Audit lookup by value" in text
    assert SECRET not in text
    assert AuditEntry.objects.filter(action="lookup").count() == 1


def test_it_never_puts_the_value_in_a_page_url(shop, page):
    html = page.post("/privacy/", form()).content.decode()
    # The value is only in form fields (to re-post it), never in a link.
    for chunk in html.split('href="')[1:]:
        assert SECRET not in chunk.split('"', 1)[0]
    assert json.dumps(SECRET)[1:-1] in html  # hidden inputs carry it to the next POST


def test_it_links_the_privacy_pages_only_for_compliance(shop, client, compliance, viewer):
    client.force_login(viewer)
    assert 'href="/privacy/"' not in client.get(reverse("dataset-list")).content.decode()
    client.force_login(compliance)
    assert 'href="/privacy/"' in client.get("/privacy/").content.decode()


@pytest.mark.parametrize(
    ("action", "outcome", "count", "text"),
    [
        ("search", "ok", 1, "1 dataset"),
        ("erasure_plan", "ok", 12, "12 steps"),
        ("scan", "requested", 3, "3 datasets to read"),
        ("scan", "ok", 1400, "1,400 rows found"),
        ("erasure_dry_run", "ok", 0, "0 rows found"),
        ("erasure_apply", "ok", 1, "1 row matched for erasure"),
        ("lookup", "ok", 2, "2 entries"),
        ("search", "denied", None, "—"),
    ],
)
def test_the_audit_says_what_each_result_counts(action, outcome, count, text):
    assert AuditEntry(action=action, outcome=outcome, result_count=count).result_text == text
