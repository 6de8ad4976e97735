"""Hostile and careless input met at the door: each case the security review found, by hand.

The generated fuzzing tier (``test_fuzz_*``) sends the same kinds of values to
every endpoint and page; these tests pin the behaviour each one must show.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import logging

import pytest
from django.db import transaction

from catalog.exports import FORMULA_STARTS, csv_text
from graph.render import mermaid, mermaid_label
from ingest.models import RawEvent
from tests.ingest_builders import PG, at, dataset, run_event, run_id, schema

pytestmark = pytest.mark.django_db


@pytest.fixture
def post(api, producer, django_capture_on_commit_callbacks):
    client = api(producer)

    def send(body, path="/api/v1/lineage", raw=False, **extra):
        data = body if raw else json.dumps(body)
        with django_capture_on_commit_callbacks(execute=True):
            return client.generic("POST", path, data, content_type="application/json", **extra)

    return send


def event(n=1, job="etl.orders", inputs=None, day=1):
    return run_event(
        "COMPLETE",
        run_id(n),
        at(day),
        job=job,
        inputs=inputs if inputs is not None else [dataset("shop.orders")],
        outputs=[dataset("dw.orders", schema=schema("id"))],
    )


# -- instants at the ends of the calendar ---------------------------------------------------

EDGE_INSTANTS = [
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "0001-01-01",
    "9999-12-31T23:59:59.999999Z",
]


@pytest.mark.parametrize("instant", EDGE_INSTANTS)
@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/lineage?nodeId=dataset:{ns}:shop.orders&asOf={t}",
        "/api/v1/column-lineage?nodeId=datasetField:{ns}:shop.orders:id&asOf={t}",
        "/api/v1/lineage/impact?nodeId=dataset:{ns}:shop.orders&asOf={t}",
        "/api/v1/lineage/root-cause?nodeId=dataset:{ns}:dw.orders&asOf={t}",
        "/api/v1/lineage/diff?nodeId=dataset:{ns}:shop.orders&t1={t}&t2={t}",
        "/api/v1/namespaces/{ns}/datasets/shop.orders?asOf={t}",
        "/api/v1/events/lineage?after={t}",
        "/api/v1/events/lineage?before={t}",
        "/graph/?node=dataset:{ns}:shop.orders&asOf={t}&compare={t}",
        "/impact/?node=dataset:{ns}:shop.orders&asOf={t}",
        "/root-cause/?node=dataset:{ns}:dw.orders&asOf={t}",
        "/datasets/show?namespace={ns}&name=shop.orders&asOf={t}",
    ],
)
def test_it_answers_instants_at_the_ends_of_the_calendar(
    post, api, admin_user, client, path, instant
):
    from urllib.parse import quote

    post(event())
    url = path.format(ns=quote(PG, safe=""), t=quote(instant, safe=""))
    client.force_login(admin_user)
    response = (api(admin_user) if url.startswith("/api/") else client).get(url)
    assert response.status_code < 500, response.content[:500]


@pytest.mark.parametrize(
    ("when", "says"),
    [
        ("9999-12-31T23:59:59.999999Z", "more than a day ahead of this server's clock"),
        ("2099-01-01T00:00:00Z", "more than a day ahead of this server's clock"),
        ("0001-01-01T00:00:00Z", "before 1970"),
    ],
)
def test_an_event_from_a_clock_far_off_is_refused_naming_eventTime(post, when, says):
    """Taken, one far ahead would put lineage where "now" cannot see it; at either end of the
    calendar, the producer's next events failed to normalise (an instant past the calendar)."""
    ahead = run_event("COMPLETE", run_id(1), when, outputs=[dataset("dw.orders")])
    response = post(ahead)
    assert response.status_code == 422
    assert response.json()["field"] == "eventTime"
    assert says in response.json()["error"]
    batch = post([event(2), ahead], path="/api/v1/lineage/batch").json()
    assert batch["stored"] == 1
    assert [(s["status"], s.get("field")) for s in batch["events"]] == [
        ("stored", None),
        ("rejected", "[1].eventTime"),
    ]
    assert post(event(3)).status_code == 201
    assert set(RawEvent.objects.values_list("state", flat=True)) == {"done"}


def test_an_event_a_little_ahead_of_the_clock_is_taken(post):
    from datetime import UTC, datetime, timedelta

    soon = (datetime.now(UTC) + timedelta(hours=3)).isoformat()
    response = post(run_event("COMPLETE", run_id(1), soon, outputs=[dataset("dw.orders")]))
    assert response.status_code == 201, response.content


def test_a_stored_event_is_checked_against_when_it_was_received(monkeypatch):
    """The worker's check gives the door's answer: an event taken 20 hours ahead is
    normalised by a worker whose clock is 10 hours behind the web server's, and a row
    stored 4 days ahead (before the door checked) fails naming eventTime."""
    from datetime import UTC, datetime, timedelta

    from django.utils import timezone

    from ingest.actions import process_until_settled, store_events
    from ingest.events import parse_event

    now = datetime.now(UTC)
    soon = run_event(
        "COMPLETE",
        run_id(1),
        (now + timedelta(hours=20)).isoformat(),
        outputs=[dataset("dw.orders")],
    )
    stored = store_events([parse_event(soon)], "api", enqueue=False).stored
    behind = now - timedelta(hours=10)
    monkeypatch.setattr(timezone, "now", lambda: behind)
    process_until_settled(stored.values())
    assert RawEvent.objects.get(pk=next(iter(stored.values()))).state == "done"
    monkeypatch.undo()

    late = run_event(
        "COMPLETE", run_id(2), (now - timedelta(days=3)).isoformat(), outputs=[dataset("dw.orders")]
    )
    ids = store_events([parse_event(late)], "api", enqueue=False).stored.values()
    RawEvent.objects.filter(pk__in=ids).update(received_at=now - timedelta(days=7))
    process_until_settled(ids)
    row = RawEvent.objects.get(pk__in=ids)
    assert row.state == "failed"
    assert "eventTime" in row.error
    assert "more than a day ahead of when this server received it" in row.error


def test_it_refuses_an_instant_outside_the_calendar_naming_it(post, api, viewer):
    post(event())
    response = api(viewer).get(
        f"/api/v1/lineage?nodeId=dataset:{PG}:shop.orders&asOf=0001-01-01T00:00:00%2B01:00"
    )
    assert response.status_code == 400
    assert response.json()["field"] == "asOf"


def test_subject_search_refuses_an_instant_outside_the_calendar(api, compliance):
    response = api(compliance).post(
        "/api/v1/privacy/subject-search",
        {"subjectKind": "customer", "value": "4242", "asOf": "9999-12-31T23:59:59-01:00"},
        format="json",
    )
    assert response.status_code in (400, 404), response.content
    assert "4242" not in response.content.decode()


# -- NUL and broken text ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/namespaces/a%00b",
        "/api/v1/namespaces/a/datasets/b%00c",
        "/api/v1/namespaces/a%00/jobs",
        "/api/v1/lineage?nodeId=dataset:a:b%00",
        "/api/v1/lineage/orphans?namespace=a%00",
        "/api/v1/namespaces/a/datasets/b/history?x%00=1",
    ],
)
def test_api_refuses_nul_in_paths_and_parameters_naming_them(api, viewer, url):
    response = api(viewer).get(url)
    assert response.status_code == 400, response.content
    assert "NUL" in response.json()["error"]
    assert response.json()["field"]


@pytest.mark.parametrize(
    "url",
    ["/search/?q=a%00", "/datasets/show?namespace=a%00&name=b", "/graph/?node=dataset:a%00:b"],
)
def test_pages_refuse_nul_with_a_page(client, viewer, url):
    client.force_login(viewer)
    response = client.get(url)
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    assert "NUL character" in response.content.decode()


def test_api_bodies_refuse_nul_surrogates_and_infinite_numbers(api, steward):
    from tests.factories import dataset as make_dataset

    make_dataset(namespace="n", name="d")
    client = api(steward)
    for body, field in [
        (b'{"description": "a\\u0000b"}', "description"),
        (b'{"description": "a\\ud800"}', "description"),
        (b'{"tags": [1e999]}', "tags[0]"),
        (b'{"description": NaN}', "body"),
    ]:
        response = client.generic(
            "PATCH", "/api/v1/namespaces/n/datasets/d", body, content_type="application/json"
        )
        assert response.status_code == 400, (body, response.content)
        assert response.json()["field"] == field


# -- events: refused at the door, or processed -----------------------------------------------


def test_it_refuses_a_number_beyond_a_double_naming_its_path(post):
    body = json.dumps(event()).replace('"facets": {}', '"facets": {"stats": {"rows": 1e999}}', 1)
    response = post(body.encode(), raw=True)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == "run.facets.stats.rows"
    assert not RawEvent.objects.exists()


def test_a_batch_refuses_only_the_events_with_unstorable_values(post):
    good, nul = json.dumps(event(1)), json.dumps(event(2, job="a\u0000b"))
    huge = json.dumps(event(3)).replace('"facets": {}', '"facets": {"x": 1e999}', 1)
    text = f"[{good}, {nul}, {huge}]"
    response = post(text.encode(), path="/api/v1/lineage/batch", raw=True)
    assert response.status_code == 207, response.content
    statuses = {s["index"]: s for s in response.json()["events"]}
    assert statuses[0]["status"] == "stored"
    assert (statuses[1]["status"], statuses[1]["field"]) == ("rejected", "[1].job.name")
    assert (statuses[2]["status"], statuses[2]["field"]) == ("rejected", "[2].run.facets.x")
    assert RawEvent.objects.get().state == "done"


def test_a_batch_counts_the_same_event_twice_once(post):
    response = post([event(), event()], path="/api/v1/lineage/batch")
    assert response.status_code == 201
    body = response.json()
    assert (body["stored"], body["duplicates"]) == (1, 1)
    assert [s["status"] for s in body["events"]] == ["stored", "duplicate"]
    assert RawEvent.objects.count() == 1


def test_it_refuses_a_run_id_that_belongs_to_another_job(post):
    assert post(event(1, job="etl.orders")).status_code == 201
    response = post(event(1, job="etl.other"))
    assert response.status_code == 409, response.content
    assert response.json()["field"] == "run.runId"
    assert "etl.orders" in response.json()["error"]
    assert RawEvent.objects.count() == 1


def test_a_run_id_is_checked_against_its_jobs_namespace_too(post):
    start = run_event("START", run_id(1), at(1), job="etl.orders", job_ns="spark")
    assert post(start).status_code == 201
    assert post(start).json()["status"] == "duplicate"
    complete = run_event("COMPLETE", run_id(1), at(2), job="etl.orders", job_ns="spark")
    assert post(complete).json()["status"] == "stored"
    response = post(run_event("COMPLETE", run_id(1), at(2), job="etl.orders", job_ns="airflow"))
    assert response.status_code == 409, response.content
    assert response.json()["error"] == (
        f"run.runId {run_id(1)} belongs to job spark:etl.orders, not airflow:etl.orders"
    )
    assert RawEvent.objects.count() == 2
    assert post(event(2, job="etl.other")).status_code == 201


def test_the_door_answers_alike_around_rolled_back_work_on_its_connection(post):
    # The single-event insert is a prepared statement of the connection (PostgreSQL): work
    # rolled back in between, where it was prepared or after, must not lose it.
    for n in range(3):
        with contextlib.suppress(RuntimeError), transaction.atomic():
            assert post(event(10 + n, job="etl.orders")).status_code == 201
            raise RuntimeError("rolled back")
        assert post(event(n, job="etl.orders")).json()["status"] == "stored"
        assert post(event(n, job="etl.other")).status_code == 409
    assert RawEvent.objects.count() == 3


def test_a_batch_refuses_a_reused_run_id_alone(post):
    response = post(
        [event(1, job="a"), event(1, job="b"), event(2, job="b")], path="/api/v1/lineage/batch"
    )
    assert response.status_code == 207
    assert [s["status"] for s in response.json()["events"]] == ["stored", "rejected", "stored"]
    assert response.json()["events"][1]["field"] == "[1].run.runId"
    assert set(RawEvent.objects.values_list("state", flat=True)) == {"done"}


def test_an_event_with_ten_thousand_inputs_is_normalised(post):
    inputs = [dataset(f"shop.t{i}", schema=schema("id")) for i in range(10_000)]
    response = post(event(inputs=inputs))
    assert response.status_code == 201, response.content
    assert RawEvent.objects.get().state == "done", RawEvent.objects.get().error[:2000]


def test_every_accepted_event_ends_done_or_failed_when_tasks_run_in_process(post, monkeypatch):
    from ingest import actions

    def broken(events):
        raise RuntimeError("the normaliser broke")

    monkeypatch.setattr(actions, "normalize", broken)
    response = post(event())
    assert response.status_code == 201
    raw = RawEvent.objects.get()
    assert raw.state == "failed"
    assert "the normaliser broke" in raw.error


def test_it_reads_a_chunked_body_that_the_server_decoded(api, producer):
    body = json.dumps(event()).encode()
    response = api(producer).generic(
        "POST",
        "/api/v1/lineage",
        body,
        content_type="application/json",
        CONTENT_LENGTH="",
        HTTP_TRANSFER_ENCODING="chunked",
        **{"wsgi.input_terminated": True, "wsgi.input": io.BytesIO(body)},
    )
    assert response.status_code == 201, response.content
    assert RawEvent.objects.count() == 1


def test_it_asks_for_a_length_when_no_server_decoded_the_chunks(api, producer):
    response = api(producer).generic(
        "POST",
        "/api/v1/lineage",
        json.dumps(event()).encode(),
        content_type="application/json",
        CONTENT_LENGTH="",
        HTTP_TRANSFER_ENCODING="chunked",
    )
    assert response.status_code == 411
    assert response.json()["field"] == "Content-Length"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/taints", {"nodeId": "dataset:a:b", "reason": "x" * 20_000}),
        ("/api/v1/ingestion/replay", {"ids": list(range(1, 5_000))}),
    ],
)
def test_a_body_over_the_limit_is_refused_naming_it(api, engineer, settings, path, body):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = api(engineer).post(path, body, format="json")
    assert response.status_code == 413
    assert response.json() == {
        "error": "Body is larger than the 10,000-byte limit",
        "field": "body",
    }


def test_a_second_gzip_member_is_read_not_ignored(post):
    first, second = json.dumps(event(1)).encode(), json.dumps(event(2)).encode()
    body = gzip.compress(first) + gzip.compress(second)
    response = post(body, raw=True, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 400
    assert "not valid JSON" in response.json()["error"]
    assert not RawEvent.objects.exists()
    split = gzip.compress(first[:50]) + gzip.compress(first[50:])
    assert post(split, raw=True, HTTP_CONTENT_ENCODING="gzip").status_code == 201


# -- names with line breaks: accepted and reachable -----------------------------------------


def test_names_with_line_breaks_are_reachable_through_the_api(post, api, viewer):
    name = "dw.line\nbreak\r\tname"
    body = event()
    body["outputs"] = [dataset(name, schema=schema("id"))]
    assert post(body).status_code == 201
    from urllib.parse import quote

    client = api(viewer)
    url = f"/api/v1/namespaces/{quote(PG, safe='')}/datasets/{quote(name, safe='')}"
    assert client.get(url).json()["name"] == name
    assert client.get(url + "/history").status_code == 200
    assert client.get(url + "/versions").status_code == 200
    jobs = client.get("/api/v1/namespaces/spark/jobs/etl.orders")
    assert jobs.status_code == 200


@pytest.mark.parametrize("name", ["raw/history", "raw/versions", "raw/fields/id"])
def test_a_dataset_named_like_a_sub_resource_of_another_is_itself(post, api, viewer, steward, name):
    """%2F decodes to a slash before routing: ``…/datasets/raw%2Fhistory`` reaches the route
    of raw's history too. When the whole names a dataset, it is that dataset's."""
    from urllib.parse import quote

    from catalog.models import Dataset

    outputs = [dataset(name, schema=schema("id"))]
    assert post(run_event("COMPLETE", run_id(1), at(1), outputs=outputs)).status_code == 201
    url = f"/api/v1/namespaces/{quote(PG, safe='')}/datasets/{quote(name, safe='')}"
    assert api(viewer).get(url).json()["name"] == name
    assert api(viewer).head(url).status_code == 200
    edited = api(steward).patch(url, {"description": "its own"}, format="json")
    assert edited.status_code == 200 and edited.json()["name"] == name
    # Only a steward edits it, whichever route the path takes.
    assert api(viewer).patch(url, {"description": "no"}, format="json").status_code == 403
    assert Dataset.objects.get(name=name).description == "its own"


@pytest.mark.parametrize(
    ("tail", "status"), [("history", 200), ("versions", 200), ("fields/id", 409)]
)
def test_an_edit_two_datasets_could_mean_is_refused_naming_both(post, api, steward, tail, status):
    """raw has a field id, and a producer named a dataset raw/fields/id: a PATCH of
    …/datasets/raw%2Ffields%2Fid could mean either, and edits neither. A history or a
    list of versions is not edited: such a PATCH can only mean raw/history."""
    from urllib.parse import quote

    from catalog.models import Dataset

    name = f"raw/{tail}"
    outputs = [dataset("raw", schema=schema("id")), dataset(name, schema=schema("id"))]
    assert post(run_event("COMPLETE", run_id(1), at(1), outputs=outputs)).status_code == 201
    url = f"/api/v1/namespaces/{quote(PG, safe='')}/datasets/{quote(name, safe='')}"
    answer = api(steward).patch(url, {"description": "which?"}, format="json")
    assert answer.status_code == status
    edited = set(Dataset.objects.filter(description="which?").values_list("name", flat=True))
    if status == 409:
        assert answer.json()["field"] == "name" and name in answer.json()["error"]
        assert not edited
    else:
        assert edited == {name}


# -- exports ---------------------------------------------------------------------------------


def test_csv_cells_never_start_a_formula_even_after_a_carriage_return():
    hostile = ["quarterly_report\r=cmd|' /C calc'!A0", "=1+1", "\t=1", "@SUM(A1)", "-2", "+3"]
    text = csv_text(["name"], [[value] for value in hostile])
    rows = list(csv.reader(io.StringIO(text)))
    assert [row[0] for row in rows[1:]] == [
        "quarterly_report\r=cmd|' /C calc'!A0",
        "'=1+1",
        "'\t=1",
        "'@SUM(A1)",
        "'-2",
        "'+3",
    ]
    for line in text.split("\n"):
        assert not line.lstrip('"').startswith(("=", "+", "-", "@")), line


@pytest.mark.parametrize("separator", [";", "\t"])
def test_csv_cells_never_start_a_formula_where_a_spreadsheet_splits_on_another_separator(
    separator,
):
    hostile = f"orders{separator}=cmd|' /C calc'!A0"
    text = csv_text(["name", "owner"], [[hostile, "team"], ["plain", "team"]])
    assert list(csv.reader(io.StringIO(text)))[1:] == [[hostile, "team"], ["plain", "team"]]
    lines = text.split("\r\n")
    assert lines[2] == "plain,team"
    for line in lines:
        for cells in csv.reader(io.StringIO(line), delimiter=separator):
            assert not any(cell.startswith(FORMULA_STARTS) for cell in cells), cells


def test_mermaid_labels_cannot_break_out_of_their_node():
    name = "x\n%%{init: {'theme':'forest'}}%%\"]\nA-->B"
    text = mermaid([("dataset:a:b", "DATASET", name)], [])
    lines = text.splitlines()
    assert len(lines) == 2
    assert "%%" not in text and "init" in lines[1]
    assert mermaid_label('a"b#c;<d>') == "a#34;b#35;c#59;#60;d#62;"


# -- errors that leak ------------------------------------------------------------------------


def test_a_failing_subject_search_shows_no_identifier_even_with_debug_on(
    api, compliance, settings, monkeypatch, caplog
):
    from catalog.models import SubjectKind
    from privacy import actions

    SubjectKind.objects.create(name="customer")
    settings.DEBUG = True
    # Built at run time: the debug page shows this file's source lines, never its values.
    secret = f"subject-{2 * 2121}-secret@example.com"

    def boom(*args, **kwargs):
        value = secret  # noqa: F841 - a local holding the identifier, as a real bug would
        raise ValueError(f"cannot search for {secret}")

    monkeypatch.setattr(actions, "do_subject_search", boom)
    client = api(compliance)
    client.raise_request_exception = False
    with caplog.at_level(logging.ERROR):
        response = client.post(
            "/api/v1/privacy/subject-search",
            {"subjectKind": "customer", "value": secret},
            format="json",
        )
    assert response.status_code == 500
    assert "4242" not in response.content.decode()
    for handler in logging.getLogger().handlers:
        for flt in handler.filters:
            for record in caplog.records:
                flt.filter(record)
    formatted = "\n".join(logging.Formatter().format(r) for r in caplog.records)
    assert "ValueError" in formatted
    assert "4242" not in formatted


# -- smaller ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["post", "patch", "delete", "put"])
def test_unknown_api_paths_answer_json_404_for_every_method(client, method):
    response = getattr(client, method)("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"].startswith("No API endpoint")


def test_unknown_pages_answer_the_apps_404_page(client, viewer):
    client.force_login(viewer)
    response = client.get("/no/such/page")
    assert response.status_code == 404
    assert "Not found" in response.content.decode()
    assert "Lineage Explorer" in response.content.decode()


def test_pages_run_only_the_projects_own_scripts_and_styles(client, viewer):
    client.force_login(viewer)
    for path in ("/accounts/login/", "/datasets/", "/graph/", "/api/docs/"):
        policy = client.get(path)["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy, path
        assert "script-src" not in policy and "unsafe-eval" not in policy, path
        assert "unsafe-inline" not in policy or path == "/api/docs/", path  # Swagger's styles
    # Redoc's page has an inline script: that page alone allows one.
    assert (
        "script-src 'self' 'unsafe-inline'" in client.get("/api/redoc/")["Content-Security-Policy"]
    )


def test_the_api_reference_pages_load_nothing_from_other_sites(client, viewer):
    client.force_login(viewer)
    for path in ("/api/docs/", "/api/redoc/"):
        response = client.get(path)
        assert response.status_code == 200, path
        page = response.content.decode()
        assert "https://" not in page and "//fonts." not in page, path
        policy = response["Content-Security-Policy"]
        assert "https:" not in policy and "http:" not in policy, (path, policy)


def test_the_icon_is_found_where_browsers_look_for_it(client):
    from django.contrib.staticfiles import finders

    page = client.get("/accounts/login/").content.decode()
    assert 'rel="icon"' in page and "img/favicon" in page
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and "img/favicon" in response["Location"]
    assert finders.find("img/favicon.svg")


def test_the_sign_in_page_says_what_the_product_is_and_where_the_demo_login_is(client, settings):
    from pathlib import Path

    page = client.get("/accounts/login/").content.decode()
    assert "Lineage Explorer: where your data comes from" in page
    assert "Demo: sign in" not in page
    (Path(settings.DATA_DIR) / "demo-login.txt").write_text("pw\n")
    page = client.get("/accounts/login/").content.decode()
    assert "Demo: sign in as <code>admin</code>" in page
    assert "demo-login.txt" in page


def test_api_errors_for_csv_and_mermaid_requests_are_json(api, viewer):
    for fmt in ("csv", "mermaid"):
        response = api(viewer).get(f"/api/v1/lineage?nodeId=dataset:a:b&format={fmt}")
        assert response.status_code == 404
        assert response["Content-Type"] == "application/json"
        assert response.json()["field"] == "nodeId"


def test_gunicorn_hands_a_chunked_event_to_the_app_whole(tmp_path):
    """Through the server the README deploys: a body sent in chunks, no Content-Length."""
    import os
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")},
        "LINEAGE_DATA_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "GRAPH_WARM_ON_START": "false",
    }
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "-v", "0"], cwd=root, env=env, check=True)
    issued = subprocess.run(
        [*manage, "issue_token", "--user", "spark", "--role", "producer"],
        cwd=root,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    token = issued.stdout.strip().splitlines()[-1]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gunicorn = Path(sys.executable).parent / "gunicorn"
    server = subprocess.Popen(
        [str(gunicorn), "lineage_site.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
        cwd=root,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "no server"
                time.sleep(0.2)
        body = json.dumps(event()).encode()
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:100], body[100:]))
        request = (
            b"POST /api/v1/lineage HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            b"Authorization: Bearer " + token.encode() + b"\r\n\r\n" + chunks + b"0\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", port), 30) as client:
            client.sendall(request)
            answer = b""
            while part := client.recv(65536):
                answer += part
        assert answer.startswith(b"HTTP/1.1 201"), answer[:500]
        assert b'"status":"stored"' in answer
    finally:
        server.terminate()
        server.wait(10)
