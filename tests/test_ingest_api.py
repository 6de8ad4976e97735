"""POST /api/v1/lineage (Marquez-compatible), the batch endpoint, and the read API."""

from __future__ import annotations

import gzip
import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.models import Dataset, DatasetAlias
from graph.models import Run, TableEdge
from ingest.events import MAX_DEPTH, EventError, check_structure
from ingest.models import RawEvent
from tests.ingest_builders import (
    PG,
    at,
    columns,
    dataset,
    fixture_events,
    run_event,
    run_id,
    schema,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def post(api, producer, django_capture_on_commit_callbacks):
    """post(body, **headers): POST to /api/v1/lineage as a producer, running on-commit tasks."""
    client = api(producer)

    def send(body, path="/api/v1/lineage", raw=False, **extra):
        data = body if raw else json.dumps(body)
        with django_capture_on_commit_callbacks(execute=True):
            return client.generic("POST", path, data, content_type="application/json", **extra)

    return send


def good_event(n=1, day=1):
    return run_event(
        "COMPLETE",
        run_id(n),
        at(day),
        inputs=[dataset("shop.orders", schema=schema("id", "amount"))],
        outputs=[
            dataset(
                "dw.orders",
                schema=schema("id", "amount"),
                columnLineage=columns({"id": [("shop.orders", "id")]}),
            )
        ],
    )


def test_it_stores_and_normalises_an_event(post):
    response = post(good_event())
    assert response.status_code == 201, response.content
    assert response.json()["status"] == "stored"
    raw = RawEvent.objects.get()
    assert raw.state == "done"
    assert raw.job_name == "etl.orders"
    assert TableEdge.objects.count() == 2
    assert Run.objects.get().state == "COMPLETED"


def test_it_accepts_gzip_bodies(post):
    body = gzip.compress(json.dumps(good_event()).encode())
    response = post(body, raw=True, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 201, response.content
    assert RawEvent.objects.count() == 1


def test_it_stores_the_same_event_once(post):
    assert post(good_event()).json()["status"] == "stored"
    again = post(good_event())
    assert again.status_code == 201
    assert again.json()["status"] == "duplicate"
    assert RawEvent.objects.count() == 1


def test_it_keeps_the_event_verbatim(post):
    event = good_event()
    event["run"]["facets"]["custom"] = {"_producer": "x", "weird key ✓": [1, 2.5, None]}
    post(event)
    assert json.loads(RawEvent.objects.get().body) == event


def test_it_answers_401_without_a_token(api):
    response = api(None).post("/api/v1/lineage", good_event(), format="json")
    assert response.status_code == 401
    assert response.json()["field"] == "Authorization"


@pytest.mark.parametrize("persona", ["viewer", "engineer", "steward"])
def test_it_answers_403_to_roles_that_cannot_post(api, request, persona):
    response = api(request.getfixturevalue(persona)).post(
        "/api/v1/lineage", good_event(), format="json"
    )
    assert response.status_code == 403
    assert not RawEvent.objects.exists()


def test_it_lets_an_admin_post(api, admin_user):
    response = api(admin_user).post("/api/v1/lineage", good_event(), format="json")
    assert response.status_code == 201


def _without(event, *path):
    target = event
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return event


def _with(event, value, *path):
    target = event
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return event


BAD_INPUTS = [
    ("not json", b"{not json", 400, "body"),
    ("not utf-8", b"\xff\xfe{}", 400, "body"),
    ("an array", json.dumps([good_event()]).encode(), 422, "body"),
    ("a number", b"42", 422, "body"),
    ("no run", _without(good_event(), "run"), 422, "run"),
    ("no job", _without(good_event(), "job"), 422, "job"),
    ("no eventTime", _without(good_event(), "eventTime"), 422, "eventTime"),
    ("eventTime a number", _with(good_event(), 5, "eventTime"), 422, "eventTime"),
    ("eventTime unparseable", _with(good_event(), "yesterday", "eventTime"), 422, "eventTime"),
    ("runId not a uuid", _with(good_event(), "run-42", "run", "runId"), 422, "run.runId"),
    ("runId a number", _with(good_event(), 42, "run", "runId"), 422, "run.runId"),
    ("job name empty", _with(good_event(), "", "job", "name"), 422, "job.name"),
    ("job namespace a list", _with(good_event(), ["x"], "job", "namespace"), 422, "job.namespace"),
    ("job name too long", _with(good_event(), "x" * 2000, "job", "name"), 422, "job.name"),
    ("eventType unknown", _with(good_event(), "FINISHED", "eventType"), 422, "eventType"),
    ("inputs not a list", _with(good_event(), {"a": 1}, "inputs"), 422, "inputs"),
    (
        "input without name",
        _with(good_event(), [{"namespace": PG}], "inputs"),
        422,
        "inputs[0].name",
    ),
    ("absurd nesting", ("[" * 100_000 + "]" * 100_000).encode(), 400, "body"),
    (
        "deep nesting in a facet",
        _with(good_event(), {"x": json.loads("[" * 80 + "]" * 80)}, "run", "facets", "deep"),
        400,
        "body",
    ),
    ("NaN", b'{"eventTime": NaN}', 400, "body"),
    ("NUL in a name", _with(good_event(), "a\u0000b", "job", "name"), 400, "job.name"),
    (
        "NUL in a facet's key",
        _with(good_event(), {"a\u0000": 1}, "run", "facets", "x"),
        400,
        "run.facets.x",
    ),
    ("lone surrogate", _with(good_event(), "a\ud800", "job", "name"), 400, "job.name"),
    ("number beyond a double", b'{"eventTime": 1e999}', 400, "eventTime"),
]


# Facets that do not match the spec: the event is stored, the facet is left out and named.
FACET_PROBLEMS = [
    ("run facets a list", _with(good_event(), [], "run", "facets"), "run.facets"),
    ("a facet not an object", _with(good_event(), {"x": 1}, "run", "facets"), "run.facets.x"),
    (
        "schema fields a string",
        _with(good_event(), {"fields": "id"}, "outputs", 0, "facets", "schema"),
        "outputs[0].facets.schema.fields",
    ),
    (
        "schema field without a name",
        _with(good_event(), {"fields": [{"type": "int"}]}, "outputs", 0, "facets", "schema"),
        "outputs[0].facets.schema.fields[0].name",
    ),
    (
        "column lineage input without field",
        _with(
            good_event(),
            {"fields": {"id": {"inputFields": [{"namespace": PG, "name": "a"}]}}},
            "outputs",
            0,
            "facets",
            "columnLineage",
        ),
        "outputs[0].facets.columnLineage.fields.id.inputFields[0].field",
    ),
    (
        "transformation type unknown",
        _with(
            good_event(),
            {
                "fields": {
                    "id": {
                        "inputFields": [
                            {
                                "namespace": PG,
                                "name": "a",
                                "field": "id",
                                "transformations": [{"type": "SIDEWAYS"}],
                            }
                        ]
                    }
                }
            },
            "outputs",
            0,
            "facets",
            "columnLineage",
        ),
        "outputs[0].facets.columnLineage.fields.id.inputFields[0].transformations[0].type",
    ),
    (
        "nested schema field with a numeric name",
        _with(
            good_event(),
            {"fields": [{"name": "a", "fields": [{"name": "b"}, {"name": 5}]}]},
            "outputs",
            0,
            "facets",
            "schema",
        ),
        "outputs[0].facets.schema.fields[0].fields[1].name",
    ),
    (
        "column lineage input not an object",
        _with(
            good_event(),
            {"fields": {"id": {"inputFields": [7]}}},
            "outputs",
            0,
            "facets",
            "columnLineage",
        ),
        "outputs[0].facets.columnLineage.fields.id.inputFields[0]",
    ),
    (
        "transformations not a list",
        _with(
            good_event(),
            {
                "fields": {
                    "id": {
                        "inputFields": [
                            {"namespace": PG, "name": "a", "field": "id", "transformations": "x"}
                        ]
                    }
                }
            },
            "outputs",
            0,
            "facets",
            "columnLineage",
        ),
        "outputs[0].facets.columnLineage.fields.id.inputFields[0].transformations",
    ),
    (
        "transformation masking not a boolean",
        _with(
            good_event(),
            {
                "fields": {
                    "id": {
                        "inputFields": [
                            {
                                "namespace": PG,
                                "name": "a",
                                "field": "id",
                                "transformations": [
                                    {"type": "DIRECT", "subtype": "IDENTITY"},
                                    {"type": "DIRECT", "masking": "yes"},
                                ],
                            }
                        ]
                    }
                }
            },
            "outputs",
            0,
            "facets",
            "columnLineage",
        ),
        "outputs[0].facets.columnLineage.fields.id.inputFields[0].transformations[1].masking",
    ),
    (
        "lifecycle change unknown",
        _with(
            good_event(),
            {"lifecycleStateChange": "EXPLODE"},
            "outputs",
            0,
            "facets",
            "lifecycleStateChange",
        ),
        "outputs[0].facets.lifecycleStateChange.lifecycleStateChange",
    ),
    (
        "parent runId not a uuid",
        _with(
            good_event(),
            {"run": {"runId": "nope"}, "job": {"namespace": "a", "name": "b"}},
            "run",
            "facets",
            "parent",
        ),
        "run.facets.parent.run.runId",
    ),
    (
        "nominal time unparseable",
        _with(good_event(), {"nominalStartTime": "soon"}, "run", "facets", "nominalTime"),
        "run.facets.nominalTime.nominalStartTime",
    ),
]


@pytest.mark.parametrize(
    ("body", "field"), [case[1:] for case in FACET_PROBLEMS], ids=[c[0] for c in FACET_PROBLEMS]
)
def test_it_stores_an_event_with_a_bad_facet_and_names_the_facet(post, body, field):
    response = post(body)
    assert response.status_code == 201, response.content
    payload = response.json()
    assert payload["status"] == "stored"
    assert [w["field"] for w in payload["warnings"]] == [field]
    assert field in payload["warnings"][0]["error"]
    raw = RawEvent.objects.get()
    assert raw.state == "done", raw.error
    assert raw.warning_list == payload["warnings"]
    assert TableEdge.objects.exists()  # the rest of the event was applied


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [case[1:] for case in BAD_INPUTS],
    ids=[case[0] for case in BAD_INPUTS],
)
def test_it_rejects_bad_input_naming_the_field(post, body, status, field):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = post(raw, raw=True)
    assert response.status_code == status, response.content
    payload = response.json()
    assert payload["field"] == field
    assert payload["error"]
    assert not RawEvent.objects.exists()
    assert not Dataset.objects.exists()


def test_it_rejects_broken_gzip(post):
    response = post(b"\x1f\x8bnot really", raw=True, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 400
    assert response.json()["field"] == "Content-Encoding"


def test_it_rejects_unknown_encodings(post):
    response = post(json.dumps(good_event()), raw=True, HTTP_CONTENT_ENCODING="br")
    assert response.status_code == 415
    assert response.json()["field"] == "Content-Encoding"


def test_it_answers_413_over_the_body_limit(post, settings):
    settings.LINEAGE_MAX_BODY_BYTES = 2000
    event = good_event()
    event["run"]["facets"]["padding"] = {"x": "y" * 5000}
    response = post(event)
    assert response.status_code == 413
    assert response.json()["field"] == "body"
    assert response.json()["detail"]["limit"] == 2000
    assert not RawEvent.objects.exists()


def test_it_answers_413_for_a_gzip_bomb(post, settings):
    settings.LINEAGE_MAX_BODY_BYTES = 100_000
    bomb = gzip.compress(b'{"x": "' + b"0" * 5_000_000 + b'"}')
    assert len(bomb) < 100_000
    response = post(bomb, raw=True, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413


def test_it_allows_bodies_of_20_megabytes_by_default(settings):
    assert settings.LINEAGE_MAX_BODY_BYTES >= 20 * 1024 * 1024


def test_it_accepts_a_batch_with_a_status_per_event(post):
    bad = _without(good_event(2), "eventTime")
    response = post([good_event(1), bad, good_event(1)], path="/api/v1/lineage/batch")
    assert response.status_code == 207, response.content
    body = response.json()
    assert [e["status"] for e in body["events"]] == ["stored", "rejected", "duplicate"]
    assert body["events"][1]["field"] == "[1].eventTime"
    assert (body["stored"], body["duplicates"], body["rejected"]) == (1, 1, 1)
    assert RawEvent.objects.count() == 1


def test_it_answers_201_to_a_clean_batch_and_422_to_a_hopeless_one(post):
    ok = post([good_event(1), good_event(2, day=2)], path="/api/v1/lineage/batch")
    assert ok.status_code == 201
    assert RawEvent.objects.filter(state="done").count() == 2
    bad = post([{"eventTime": "x"}], path="/api/v1/lineage/batch")
    assert bad.status_code == 422
    assert bad.json()["field"].startswith("[0]")


def test_it_refuses_a_batch_that_is_not_a_list(post):
    response = post({"eventTime": at(1)}, path="/api/v1/lineage/batch")
    assert response.status_code == 422
    assert response.json()["field"] == "body"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
event_keys = st.sampled_from(
    ["eventTime", "run", "job", "inputs", "outputs", "eventType", "producer", "schemaURL"]
)


@st.composite
def mutated_events(draw):
    """A valid event with one part replaced by arbitrary JSON, or arbitrary JSON."""
    if draw(st.booleans()):
        return draw(json_values)
    event = good_event(draw(st.integers(1, 5)))
    path = draw(
        st.sampled_from(
            [
                (draw(event_keys),),
                ("run", "runId"),
                ("run", "facets"),
                ("job", "name"),
                ("job", "facets"),
                ("outputs", 0, "facets"),
                ("outputs", 0, "facets", "schema"),
                ("outputs", 0, "facets", "columnLineage", "fields"),
                ("inputs", 0, "name"),
            ]
        )
    )
    return _with(event, draw(json_values), *path)


@settings(max_examples=150)
@given(body=mutated_events())
def test_it_never_answers_500_to_fuzzed_events(post, body):
    before = RawEvent.objects.count()
    response = post(body)
    assert response.status_code in (201, 400, 409, 413, 422), response.content
    payload = response.json()
    if response.status_code == 201:
        assert RawEvent.objects.filter(fingerprint=payload["fingerprint"]).exists()
    else:
        assert payload["error"]
        assert RawEvent.objects.count() == before


@settings(max_examples=60)
@given(raw=st.binary(max_size=200))
def test_it_never_answers_500_to_random_bytes(post, raw):
    response = post(raw, raw=True)
    assert response.status_code in (400, 422), response.content


# -- read API ---------------------------------------------------------------------------


@pytest.fixture
def loaded(post):
    for event in fixture_events("airflow_shop_daily.json") + fixture_events(
        "spark_orders_etl.ndjson"
    ):
        assert post(event).status_code == 201
    for n in range(3, 8):
        post(good_event(n, day=n))


def ns_url(ns):
    return f"/api/v1/namespaces/{quote(ns, safe='')}"


def test_it_lists_jobs_of_a_namespace_in_marquez_shape(
    api, viewer, loaded, django_assert_max_num_queries
):
    client = api(viewer)
    with django_assert_max_num_queries(12):
        body = client.get(ns_url("airflow-prod") + "/jobs").json()
    assert body["totalCount"] == 3
    job = next(j for j in body["jobs"] if j["name"] == "shop_daily.load_dim_customers")
    assert job["id"] == {"namespace": "airflow-prod", "name": "shop_daily.load_dim_customers"}
    assert job["inputs"] == [{"namespace": PG, "name": "shop.public.customers"}]
    assert job["outputs"] == [{"namespace": PG, "name": "analytics.public.dim_customers"}]
    assert job["latestRun"]["state"] == "COMPLETED"
    assert job["parentJobName"] == "shop_daily"
    assert job["sql"].startswith("INSERT INTO analytics")
    assert {"type", "createdAt", "updatedAt", "location", "description", "facets"} <= set(job)


def test_it_pins_the_query_count_of_job_lists(api, viewer, post, django_assert_max_num_queries):
    for n in range(1, 25):
        post(good_event(n, day=1 + n % 20) | {"job": {"namespace": "spark", "name": f"job{n}"}})
    with django_assert_max_num_queries(12):
        body = api(viewer).get(ns_url("spark") + "/jobs").json()
    assert body["totalCount"] == 24


def test_it_lists_runs_of_a_job(api, viewer, loaded, django_assert_max_num_queries):
    with django_assert_max_num_queries(10):
        body = api(viewer).get(ns_url("spark") + "/jobs/etl.orders/runs?limit=3").json()
    assert body["totalCount"] == 5
    assert len(body["runs"]) == 3
    run = body["runs"][0]
    assert run["id"] == run_id(7)  # newest first, by event time
    assert run["state"] == "COMPLETED"
    assert run["outputDatasetVersions"][0]["datasetVersionId"]["name"] == "dw.orders"
    assert {"createdAt", "startedAt", "endedAt", "durationMs", "facets", "args"} <= set(run)


def test_it_shows_one_job_and_one_run(api, viewer, loaded):
    client = api(viewer)
    job = client.get(ns_url("airflow-prod") + "/jobs/shop_daily.build_country_report").json()
    assert job["latestRun"]["state"] == "FAILED"
    assert job["latestRun"]["errorMessage"].startswith("relation")
    run = client.get("/api/v1/jobs/runs/0193e2b0-0002-7000-8000-00000000a003").json()
    assert run["state"] == "FAILED"
    assert run["parentRunId"] == "0193e2b0-0000-7000-8000-00000000a001"


def test_it_answers_404_for_unknown_jobs_and_runs(api, viewer):
    client = api(viewer)
    assert client.get(ns_url("nope") + "/jobs/x").status_code == 404
    missing = client.get(f"/api/v1/jobs/runs/{run_id(99)}")
    assert missing.status_code == 404
    bad = client.get("/api/v1/jobs/runs/not-a-uuid")
    assert bad.status_code == 400
    assert bad.json()["field"] == "id"


def test_it_lists_dataset_versions(api, viewer, post, django_assert_max_num_queries):
    post(good_event(1, day=1))
    changed = good_event(2, day=2)
    changed["outputs"][0]["facets"]["schema"] = schema("id", "amount", "currency")
    post(changed)
    url = ns_url(PG) + "/datasets/" + quote("dw.orders", safe="") + "/versions"
    # One of them asks whether "dw.orders/versions" is a dataset (catalog.api.whole_name).
    with django_assert_max_num_queries(11):
        body = api(viewer).get(url).json()
    assert body["totalCount"] == 2
    newest = body["versions"][0]
    assert [f["name"] for f in newest["fields"]] == ["id", "amount", "currency"]
    assert newest["createdByRun"]["id"] == run_id(2)
    assert newest["id"]["name"] == "dw.orders"


def test_it_lists_raw_events_filtered_by_time(api, viewer, loaded):
    client = api(viewer)
    body = client.get("/api/v1/events/lineage", {"after": at(5), "sortDirection": "asc"}).json()
    assert [e["eventTime"] for e in body["events"]] == [at(6), at(7)]
    body = client.get("/api/v1/events/lineage", {"before": at(4), "limit": 2}).json()
    assert len(body["events"]) == 2
    assert body["events"][0]["eventTime"] == at(3)  # newest first
    assert body["totalCount"] == 6 + 3 + 1
    bad = client.get("/api/v1/events/lineage", {"before": "someday"})
    assert bad.status_code == 400
    assert bad.json()["field"] == "before"


def test_it_lets_no_producer_read(api, producer):
    assert api(producer).get("/api/v1/events/lineage").status_code == 403


def test_get_on_the_lineage_path_is_never_a_500(api, viewer):
    # GET belongs to the graph app's lineage query; this path only adds POST.
    response = api(viewer).get("/api/v1/lineage", {"nodeId": f"dataset:{PG}:nope"})
    assert response.status_code in (400, 403, 404, 405)
    assert response.json()["error"]


def test_it_reports_ingestion_status_and_replays(api, viewer, engineer, post):
    post(good_event())
    RawEvent.objects.update(state="failed", error="ValueError: boom")
    body = api(viewer).get("/api/v1/ingestion/status").json()
    assert body["counts"]["failed"] == 1
    assert body["failures"][0]["error"] == "ValueError: boom"
    assert api(viewer).post("/api/v1/ingestion/replay", {}, format="json").status_code == 403
    response = api(engineer).post("/api/v1/ingestion/replay", {}, format="json")
    assert response.json() == {"replayed": 1}
    # A list of ids too long for one statement is refused whole, naming ids.
    many = {"ids": list(range(1, 300_002))}
    response = api(engineer).post("/api/v1/ingestion/replay", many, format="json")
    assert response.status_code == 400 and response.json()["field"] == "ids"
    assert "at most 10,000" in response.json()["error"]
    assert RawEvent.objects.filter(state="pending").count() == 1


@pytest.mark.parametrize("with_text", [True, False], ids=["from text", "from value"])
def test_nesting_is_counted_to_the_limit_exactly(with_text):
    def nested(levels: int, leaf: Any) -> Any:
        value = leaf
        for _ in range(levels):
            value = [value]
        return value

    for value, ok in [
        (nested(MAX_DEPTH - 1, 1), True),  # the scalar sits at the limit
        (nested(MAX_DEPTH - 1, []), True),  # an empty list at the limit holds nothing deeper
        (nested(MAX_DEPTH, 1), False),
        (nested(MAX_DEPTH - 1, {"a": {}}), False),
    ]:
        text = json.dumps(value) if with_text else None
        if ok:
            check_structure(value, text=text)
        else:
            with pytest.raises(EventError, match="nested deeper"):
                check_structure(value, text=text)


_json_values = st.recursive(
    st.none() | st.integers() | st.text(alphabet='ab[]{}"\\é,:'),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text(alphabet='k[]{}"\\', max_size=3), children, max_size=3)
    ),
    max_leaves=30,
)


@settings(max_examples=300)
@given(value=_json_values, ascii_only=st.booleans())
def test_counting_brackets_over_the_text_agrees_with_walking_the_value(value, ascii_only):
    from unittest import mock

    from ingest import events

    text = json.dumps(value, ensure_ascii=ascii_only)

    def verdict(check: Any, *args: Any) -> str:
        try:
            check(*args)
        except EventError as exc:
            return exc.message
        return "ok"

    with mock.patch.object(events, "BRACKET_SCAN_MIN_CHARS", 0):
        for limit in (2, 3, 5):
            assert verdict(check_structure, value, limit, text) == verdict(
                events._check_every_node, value, limit
            )


# -- search (Marquez's GET /api/v1/search) ------------------------------------------------------


def test_search_finds_datasets_and_jobs_by_part_of_their_names(api, viewer):
    from datetime import UTC, datetime

    from catalog.models import Namespace
    from graph.models import Job
    from tests import factories

    def on(day):
        return datetime(2026, 3, day, tzinfo=UTC)

    factories.dataset("postgres://shop:5432", "shop.public.orders", updated_at=on(3))
    factories.dataset("postgres://shop:5432", "shop.public.order_items", updated_at=on(5))
    factories.dataset("postgres://shop:5432", "shop.public.ORDERS_old", is_hidden=True)
    factories.dataset("s3://lake", "raw/customers", updated_at=on(9))
    spark, _ = Namespace.objects.get_or_create(name="spark")
    Job.objects.create(namespace=spark, name="etl.load_orders", updated_at=on(7))

    def search(**params):
        response = api(viewer).get("/api/v1/search", params)
        return response.status_code, response.json()

    status, body = search(q="ORDER")
    assert status == 200
    assert body == {
        "totalCount": 3,
        "results": [
            {
                "type": "JOB",
                "name": "etl.load_orders",
                "updatedAt": "2026-03-07T00:00:00Z",
                "namespace": "spark",
                "nodeId": "job:spark:etl.load_orders",
            },
            {
                "type": "DATASET",
                "name": "shop.public.order_items",
                "updatedAt": "2026-03-05T00:00:00Z",
                "namespace": "postgres://shop:5432",
                "nodeId": "dataset:postgres://shop:5432:shop.public.order_items",
            },
            {
                "type": "DATASET",
                "name": "shop.public.orders",
                "updatedAt": "2026-03-03T00:00:00Z",
                "namespace": "postgres://shop:5432",
                "nodeId": "dataset:postgres://shop:5432:shop.public.orders",
            },
        ],
    }

    def names(**params):
        status, body = search(**params)
        assert status == 200, body
        return [r["name"] for r in body["results"]]

    assert names(q="order", sort="UPDATE_AT") == [
        "etl.load_orders",
        "shop.public.order_items",
        "shop.public.orders",
    ]
    assert names(q="order", filter="DATASET", limit=1) == ["shop.public.order_items"]
    assert names(q="order", filter="JOB") == ["etl.load_orders"]
    assert names(q="order", namespace="spark") == ["etl.load_orders"]
    assert names(q="order", after="2026-03-05", before="2026-03-07") == ["shop.public.order_items"]
    assert names(q="o", after="2026-03-08") == ["raw/customers"]
    assert names(q="nothing-like-it") == []
    # A dataset is found by its other names (a symlink's) too, under its own name.
    customers = Dataset.objects.get(name="raw/customers")
    DatasetAlias.objects.create(namespace=spark, name="lake.crm_people", dataset=customers)
    assert names(q="CRM_PEOPLE") == ["raw/customers"]


def test_search_answers_in_a_fixed_number_of_queries(api, viewer, django_assert_max_num_queries):
    from tests import factories

    for n in range(30):
        factories.dataset("postgres://shop:5432", f"shop.public.orders_{n}")
    with django_assert_max_num_queries(8):  # the caller's role, then one query per kind
        body = api(viewer).get("/api/v1/search", {"q": "orders", "limit": 50}).json()
    assert body["totalCount"] == 30


@pytest.mark.parametrize(
    "params, field",
    [
        ({}, "q"),
        ({"q": "   "}, "q"),
        ({"q": "a" * 1025}, "q"),
        ({"q": "a\x00b"}, "q"),
        ({"q": "a", "filter": "FIELD"}, "filter"),
        ({"q": "a", "sort": "SIZE"}, "sort"),
        ({"q": "a", "limit": "0"}, "limit"),
        ({"q": "a", "limit": "x"}, "limit"),
        ({"q": "a", "before": "yesterday"}, "before"),
        ({"q": "a", "namespace": "n\x00"}, "namespace"),
    ],
)
def test_search_names_what_is_wrong_with_a_bad_query(api, viewer, params, field):
    response = api(viewer).get("/api/v1/search", params)
    assert response.status_code == 400, response.content
    assert response.json()["field"] == field


def test_search_asks_for_a_reader(api, outsider):
    assert api(None).get("/api/v1/search", {"q": "a"}).status_code == 401
    assert api(outsider).get("/api/v1/search", {"q": "a"}).status_code == 403
