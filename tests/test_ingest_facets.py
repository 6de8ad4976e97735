"""One policy for invalid facets: the event is stored and applied, the facet is left out and
named, in the API's answer, on the ingestion page and by ``ingest_events``."""

from __future__ import annotations

import copy
import io
import json

import pytest
from django.core.management import call_command

from catalog.models import Dataset
from graph.models import Job, TableEdge
from ingest.events import EventError, parse_event, parse_job
from ingest.models import RawEvent
from tests.ingest_builders import PG, all_fixture_events, at, dataset, run_event, run_id, schema

pytestmark = pytest.mark.django_db

OWNERS = {"owners": [{"name": "team:sales", "type": "MAINTAINER"}]}
NAMELESS_OWNERS = {"owners": [{"no-name": "someone"}]}


@pytest.fixture
def post(api, producer, django_capture_on_commit_callbacks):
    client = api(producer)

    def send(body, path="/api/v1/lineage"):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(path, body, format="json")

    return send


def event(**changes):
    """A valid COMPLETE event reading shop.orders and writing dw.orders, changed in place."""
    body = run_event(
        "COMPLETE",
        run_id(1),
        at(1),
        inputs=[dataset("shop.orders", schema=schema("id"))],
        outputs=[dataset("dw.orders", schema=schema("id"))],
    )
    for path, value in changes.items():
        target = body
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[int(key)] if key.isdigit() else target.setdefault(key, {})
        target[keys[-1]] = value
    return body


# Modelled on the kinds of invalid events OpenLineage's fluentd proxy tests use: each was
# 4xx or silently applied before; each is now stored with the facet named.
INVALID = [
    ("job facet beside facets", event(job__ownership=NAMELESS_OWNERS), "job.ownership"),
    (
        "run facet beside facets",
        event(run__parent={"run": {"noRunId": "x"}, "job": {"namespace": "a", "name": "b"}}),
        "run.parent",
    ),
    (
        "dataset facet beside facets",
        event(outputs__0__ownership=NAMELESS_OWNERS),
        "outputs[0].ownership",
    ),
    (
        "input facet without its required field",
        event(inputs__0__inputFacets={"dataQualityMetrics": {"noRowCount": 1000, "bytes": 1}}),
        "inputs[0].inputFacets.dataQualityMetrics.columnMetrics",
    ),
    (
        "job ownership owner without a name",
        event(job__facets={"ownership": NAMELESS_OWNERS}),
        "job.facets.ownership.owners[0].name",
    ),
    (
        "dataset ownership owner without a name",
        event(outputs__0__facets__ownership=NAMELESS_OWNERS),
        "outputs[0].facets.ownership.owners[0].name",
    ),
    (
        "parent run id not a UUID",
        event(
            run__facets={
                "parent": {"run": {"runId": "nope"}, "job": {"namespace": "a", "name": "b"}}
            }
        ),
        "run.facets.parent.run.runId",
    ),
    (
        "output statistics row count not a number",
        event(outputs__0__outputFacets={"outputStatistics": {"rowCount": "many"}}),
        "outputs[0].outputFacets.outputStatistics.rowCount",
    ),
    (
        "lifecycle change not in the spec's list",
        event(outputs__0__facets__lifecycleStateChange={"lifecycleStateChange": "drop"}),
        "outputs[0].facets.lifecycleStateChange.lifecycleStateChange",
    ),
    (
        "symlink without a type",
        event(outputs__0__facets__symlinks={"identifiers": [{"namespace": PG, "name": "x"}]}),
        "outputs[0].facets.symlinks.identifiers[0].type",
    ),
    (
        "lifecycle change a list",
        event(outputs__0__facets__lifecycleStateChange={"lifecycleStateChange": ["DROP"]}),
        "outputs[0].facets.lifecycleStateChange.lifecycleStateChange",
    ),
    (
        "nominal time past the end of the calendar",
        event(run__facets={"nominalTime": {"nominalStartTime": "9999-12-31T24:00:00"}}),
        "run.facets.nominalTime.nominalStartTime",
    ),
    ("sql facet beside the job's facets", event(job__sql={"query": "x"}), "job.sql"),
    (
        "an output facet beside the output's facets",
        event(outputs__0__outputStatistics={"rowCount": 1}),
        "outputs[0].outputStatistics",
    ),
    (
        "sql query a number",
        event(job__facets={"sql": {"query": 42}}),
        "job.facets.sql.query",
    ),
]


@pytest.mark.parametrize(("body", "field"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_an_invalid_facet_is_left_out_and_named_and_the_event_is_kept(post, body, field):
    response = post(body)
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "stored"
    warnings = response.json()["warnings"]
    assert [w["field"] for w in warnings] == [field]
    assert warnings[0]["error"].startswith(field)
    assert "left out" in warnings[0]["error"]
    raw = RawEvent.objects.get()
    assert raw.state == "done", raw.error
    assert json.loads(raw.body) == body  # stored verbatim
    assert TableEdge.objects.count() == 2  # the rest applied


def test_a_misplaced_facet_is_pointed_to_where_it_belongs(post):
    body = event(outputs__0__outputStatistics={"rowCount": 1}, inputs__0__inputStatistics={})
    errors = [w["error"] for w in post(body).json()["warnings"]]
    assert any("it belongs in outputs[0].outputFacets" in e for e in errors)
    assert any("it belongs in inputs[0].inputFacets" in e for e in errors)


def test_a_left_out_ownership_facet_is_not_applied(post):
    post(event(outputs__0__facets__ownership=NAMELESS_OWNERS))
    assert not Dataset.objects.get(name="dw.orders").ownerships.exists()
    body = event(outputs__0__facets__ownership=OWNERS)
    body["eventTime"] = at(2)
    assert post(body).json()["warnings"] == []
    owners = Dataset.objects.get(name="dw.orders").ownerships.values_list("owner__name", flat=True)
    assert list(owners) == ["team:sales"]


def test_a_left_out_job_facet_is_not_kept_on_the_job(post):
    post(event(job__facets={"ownership": NAMELESS_OWNERS, "sql": {"query": "SELECT 1"}}))
    facets = Job.objects.get(name="etl.orders").facets
    assert "ownership" not in facets
    assert facets["sql"]["query"] == "SELECT 1"


def test_a_left_out_schema_facet_leaves_the_fields_unchanged(post):
    post(event())
    assert Dataset.objects.get(name="dw.orders").fields.count() == 1
    body = event(outputs__0__facets__schema={"fields": [{"name": "id"}, {"type": "int"}]})
    body["eventTime"] = at(2)
    response = post(body)
    assert response.json()["warnings"][0]["field"] == "outputs[0].facets.schema.fields[1].name"
    assert list(Dataset.objects.get(name="dw.orders").fields.values_list("name", flat=True)) == [
        "id"
    ]


def test_every_fixture_event_is_stored_and_applied_without_warnings(post):
    events = all_fixture_events()
    response = post(events, path="/api/v1/lineage/batch")
    assert response.status_code == 201, response.content
    assert all(item["warnings"] == [] for item in response.json()["events"])
    assert RawEvent.objects.filter(state="done").count() == len(events)
    assert not RawEvent.objects.exclude(warnings="").exists()


def test_a_fully_faceted_valid_event_has_no_warnings(post):
    body = event(
        job__facets={
            "sql": {"query": "INSERT INTO dw.orders SELECT id FROM shop.orders"},
            "jobType": {"processingType": "BATCH", "integration": "SPARK", "jobType": "JOB"},
            "ownership": OWNERS,
            "documentation": {"description": "Orders into the warehouse"},
            "sourceCodeLocation": {"type": "git", "url": "https://example.com/etl.git"},
        },
        run__facets={
            "nominalTime": {"nominalStartTime": at(1)},
            "parent": {"run": {"runId": run_id(9)}, "job": {"namespace": "air", "name": "dag"}},
            "processing_engine": {"version": "3.5.1", "name": "spark"},
        },
        outputs__0__outputFacets={"outputStatistics": {"rowCount": 10, "size": 100}},
        inputs__0__inputFacets={
            "dataQualityMetrics": {"rowCount": 10, "columnMetrics": {"id": {"nullCount": 0}}}
        },
    )
    body["outputs"][0]["facets"].update(
        ownership=OWNERS,
        symlinks={"identifiers": [{"namespace": "hive", "name": "dw.orders", "type": "TABLE"}]},
        dataSource={"name": "pg", "uri": "postgres://db:5432"},
        lifecycleStateChange={"lifecycleStateChange": "OVERWRITE"},
        custom_thing={"anything": [1, "two"]},
    )
    response = post(body)
    assert response.status_code == 201, response.content
    assert response.json()["warnings"] == []


def test_the_core_of_an_event_stays_a_4xx(post):
    for body, field in (
        (event(run={"facets": {}}), "run.runId"),
        (event(eventTime="yesterday"), "eventTime"),
        (event(job={"name": "x"}), "job.namespace"),
    ):
        response = post(body)
        assert response.status_code == 422, response.content
        assert response.json()["field"] == field
    assert not RawEvent.objects.exists()


def test_a_batch_names_the_facets_left_out_per_event(post):
    good = event()
    bad = copy.deepcopy(event(job__facets={"ownership": NAMELESS_OWNERS}))
    bad["run"]["runId"] = run_id(2)
    response = post([good, bad], path="/api/v1/lineage/batch")
    assert response.status_code == 201, response.content
    items = response.json()["events"]
    assert items[0]["warnings"] == []
    assert [w["field"] for w in items[1]["warnings"]] == ["job.facets.ownership.owners[0].name"]


def test_the_status_api_and_page_list_events_with_facets_left_out(post, api, client, viewer):
    post(event(job__facets={"ownership": NAMELESS_OWNERS}))
    status = api(viewer).get("/api/v1/ingestion/status").json()
    assert status["eventsWithFacetsLeftOut"] == 1
    (listed,) = status["facetsLeftOut"]
    assert listed["job"].endswith(":etl.orders")
    assert listed["warnings"][0]["field"] == "job.facets.ownership.owners[0].name"
    client.force_login(viewer)
    html = client.get("/ingestion/").content.decode()
    assert "Events with facets left out" in html
    assert "job.facets.ownership.owners[0].name is required" in html


def test_ingest_events_says_where_facets_were_left_out(tmp_path):
    path = tmp_path / "events.ndjson"
    lines = [json.dumps(event()), json.dumps(event(job__facets={"ownership": NAMELESS_OWNERS}))]
    path.write_text("\n".join(lines), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    call_command("ingest_events", str(path), "--no-progress", stdout=out, stderr=err)
    assert "1 with facets left out" in out.getvalue()
    assert f"facets left out at {path}:2: job.facets.ownership.owners[0].name" in err.getvalue()


def test_events_this_app_builds_itself_must_have_valid_facets():
    with pytest.raises(EventError) as raised:
        parse_job({"namespace": "a", "name": "b", "facets": {"sql": {"query": 1}}})
    assert raised.value.field == "job.facets.sql.query"
    with pytest.raises(EventError) as raised:
        parse_event(event(outputs__0__facets__schema={"fields": [{"type": "int"}]}), strict=True)
    assert raised.value.field == "outputs[0].facets.schema.fields[0].name"
    assert parse_event(event()).warnings == []
