"""Lineage API: Marquez's shapes, as-of, caps, exports, taints, bad input and roles."""

from __future__ import annotations

from urllib.parse import urlencode

import jsonschema
import pytest

from catalog.models import DatasetOwnership, Owner, PiiCategory
from graph import queries, responses
from graph.models import Direction, RunState, Taint, TransformationSubtype
from tests.graph_builders import T1, T2, T3, LineageBuilder, node_store_written

pytestmark = pytest.mark.django_db

NS = "postgres://warehouse-db:5432"


def url(path: str, **params: object) -> str:
    return f"/api/v1/{path}?{urlencode(params)}"


@pytest.fixture
def shop():
    """raw.orders → clean → clean.orders → report → mart.daily (report failed);
    clean read /lake/raw:legacy until T2."""
    g = LineageBuilder()
    g.dataset("raw.orders", fields=("id", "email", "amount"))
    g.dataset("/lake/raw:legacy", fields=("id",))
    g.dataset("clean.orders", fields=("order_id", "email_hash", "amount"))
    g.dataset("mart.daily", fields=("day", "total"))
    g.job(
        "clean",
        reads=["raw.orders"],
        writes=["clean.orders"],
        columns={
            "clean.orders.order_id": ["raw.orders.id"],
            "clean.orders.email_hash": [("raw.orders.email", TransformationSubtype.TRANSFORMATION)],
            "clean.orders.amount": ["raw.orders.amount"],
        },
        state=RunState.COMPLETED,
    )
    g.edge("clean", "/lake/raw:legacy", Direction.INPUT, until=T2)
    g.job(
        "report",
        reads=["clean.orders"],
        writes=["mart.daily"],
        columns={"mart.daily.total": [("clean.orders.amount", TransformationSubtype.AGGREGATION)]},
        state=RunState.FAILED,
    )
    email = g.field("raw.orders.email")
    email.pii_category = PiiCategory.EMAIL
    email.save()
    owner = Owner.objects.create(name="finance")
    DatasetOwnership.objects.create(dataset=g.ds["mart.daily"], owner=owner)
    return g


def test_it_answers_lineage_in_marquez_shape(api, viewer, shop):
    response = api(viewer).get(url("lineage", nodeId=shop.id("clean.orders"), depth=5))
    assert response.status_code == 200, response.content
    body = response.json()
    nodes = {n["id"]: n for n in body["graph"]}
    assert set(nodes) == {
        shop.id("raw.orders"),
        shop.id("job:clean"),
        shop.id("clean.orders"),
        shop.id("job:report"),
        shop.id("mart.daily"),
    }
    clean = nodes[shop.id("clean.orders")]
    assert {"id", "type", "data", "inEdges", "outEdges"} <= set(clean)
    assert clean["type"] == "DATASET"
    assert clean["inEdges"] == [
        {"origin": shop.id("job:clean"), "destination": shop.id("clean.orders")}
    ]
    assert clean["outEdges"] == [
        {"origin": shop.id("clean.orders"), "destination": shop.id("job:report")}
    ]
    data = clean["data"]
    assert data["id"] == {"namespace": NS, "name": "clean.orders"}
    assert data["type"] == "DB_TABLE"
    assert [f["name"] for f in data["fields"]] == ["order_id", "email_hash", "amount"]
    assert {"name", "type", "tags", "description"} <= set(data["fields"][0])
    job = nodes[shop.id("job:report")]
    assert job["type"] == "JOB"
    assert job["data"]["inputs"] == [{"namespace": NS, "name": "clean.orders"}]
    assert job["data"]["outputs"] == [{"namespace": NS, "name": "mart.daily"}]
    assert job["data"]["latestRun"]["state"] == "FAILED"
    assert body["truncated"] is False and body["direction"] == "both"


def test_a_node_gone_between_the_walk_and_the_body_is_left_out_with_its_edges(
    api, viewer, shop, monkeypatch
):
    from graph import nodedata

    gone = shop.ds["mart.daily"].pk
    names = nodedata.dataset_names

    def without_gone(pks):
        return {pk: name for pk, name in names(pks).items() if pk != gone}

    monkeypatch.setattr(nodedata, "dataset_names", without_gone)
    response = api(viewer).get(url("lineage", nodeId=shop.id("clean.orders"), depth=5))
    assert response.status_code == 200, response.content
    nodes = {n["id"]: n for n in response.json()["graph"]}
    assert shop.id("mart.daily") not in nodes
    report = nodes[shop.id("job:report")]
    assert report["outEdges"] == [] and report["data"]["outputs"] == []
    assert report["inEdges"] == [
        {"origin": shop.id("clean.orders"), "destination": shop.id("job:report")}
    ]


def test_it_follows_direction_and_as_of(api, viewer, shop):
    client = api(viewer)
    up = client.get(url("lineage", nodeId=shop.id("clean.orders"), direction="upstream"))
    ids = {n["id"] for n in up.json()["graph"]}
    assert shop.id("mart.daily") not in ids and shop.id("/lake/raw:legacy") not in ids
    then = client.get(
        url("lineage", nodeId=shop.id("clean.orders"), direction="upstream", asOf="2025-02-01")
    )
    assert shop.id("/lake/raw:legacy") in {n["id"] for n in then.json()["graph"]}
    assert then.json()["asOf"].startswith("2025-02-01T00:00:00")


def test_it_caps_and_says_what_was_cut(api, viewer, shop):
    response = api(viewer).get(url("lineage", nodeId=shop.id("clean.orders"), depth=5, maxNodes=2))
    body = response.json()
    assert len(body["graph"]) == 2 and body["truncated"] is True
    assert body["cut"]["datasets"] + body["cut"]["jobs"] == 3
    # The text exports say so on their last line; a whole answer has no such line.
    for path in ("lineage", "lineage/impact"):
        for fmt, comment in (("csv", "#"), ("mermaid", "%%")):
            capped = api(viewer).get(
                url(path, nodeId=shop.id("clean.orders"), maxNodes=1, format=fmt)
            )
            last = capped.content.decode().splitlines()[-1]
            assert last.startswith(f"{comment} truncated: ") and "left out" in last, (path, fmt)
            whole = api(viewer).get(url(path, nodeId=shop.id("clean.orders"), format=fmt))
            assert "truncated" not in whole.content.decode(), (path, fmt)


def test_it_exports_lineage_as_csv_and_mermaid(api, viewer, shop):
    client = api(viewer)
    csv = client.get(url("lineage", nodeId=shop.id("clean.orders"), format="csv"))
    assert csv.status_code == 200 and csv["Content-Type"].startswith("text/csv")
    assert csv.content.decode().splitlines()[0] == "origin,origin_type,destination,destination_type"
    mermaid = client.get(url("lineage", nodeId=shop.id("clean.orders"), format="mermaid"))
    text = mermaid.content.decode()
    assert text.startswith("flowchart LR") and '[("clean.orders")]' in text and "-->" in text


def test_mermaid_names_the_namespace_of_two_datasets_that_share_a_name(api, viewer):
    g = LineageBuilder()
    first = g.dataset("orders")
    g.dataset("copy")
    g.job("copy_orders", reads=["orders"], writes=["copy"])
    lake = g.dataset("orders", namespace="s3://lake")
    g.job("load", reads=["copy"], writes=["orders"])
    client = api(viewer)
    for path in ("lineage", "lineage/impact"):
        text = client.get(url(path, nodeId=first.node_id, format="mermaid")).content.decode()
        assert f'[("{g.ns.name}:orders")]' in text, text
        assert '[("s3://lake:orders")]' in text, text
        assert '[("copy")]' in text, text  # a name no other node has stays as it is
    assert lake.pk != first.pk


def test_it_exports_column_lineage_as_csv_and_mermaid(api, viewer, shop):
    client = api(viewer)
    params = {"nodeId": shop.id("mart.daily.total"), "depth": 5}
    csv = client.get(url("column-lineage", format="csv", **params))
    assert csv.status_code == 200 and csv["Content-Type"].startswith("text/csv")
    assert 'filename="column-lineage.csv"' in csv["Content-Disposition"]
    lines = csv.content.decode().splitlines()
    assert lines[0] == (
        "origin,origin_type,destination,destination_type,"
        "job,transformation_type,transformation_subtype,masking,description"
    )
    assert (
        f"{shop.id('clean.orders.amount')},DATASET_FIELD,{shop.id('mart.daily.total')},"
        f"DATASET_FIELD,{shop.id('job:report')},DIRECT,AGGREGATION,false,"
    ) in lines
    assert len(lines) == 3  # raw → clean → mart
    mermaid = client.get(url("column-lineage", format="mermaid", **params))
    assert mermaid["Content-Type"].startswith("text/vnd.mermaid")
    text = mermaid.content.decode()
    assert text.startswith("flowchart LR") and '["total"]' in text
    assert f'subgraph b0 ["{NS}:' in text and text.count("  end") == 3  # a box per dataset
    assert text.count("-->") == 2
    # The JSON answer is the same graph.
    body = client.get(url("column-lineage", **params)).json()
    assert sum(len(n["inEdges"]) for n in body["graph"]) == 2
    bad = client.get(url("column-lineage", format="xml", **params))
    assert bad.status_code == 400 and bad.json()["field"] == "format"


def test_it_escapes_names_in_every_format_at_both_levels(api, viewer):
    g = LineageBuilder()
    odd = 'q"ds\\é'
    g.dataset("src", fields=("id",))
    g.dataset(odd, fields=('f"é',))
    g.job('j "1"', reads=["src"], writes=[odd], columns={f'{odd}.f"é': ["src.id"]})
    client = api(viewer)
    body = client.get(url("lineage", nodeId=g.id("src"), depth=5)).json()
    ids = {n["id"] for n in body["graph"]}
    assert ids == {g.id("src"), g.id('job:j "1"'), g.id(odd)}
    job = next(n for n in body["graph"] if n["type"] == "JOB")
    assert job["data"]["outputs"] == [{"namespace": g.ns.name, "name": odd}]
    params = {"nodeId": g.id(f'{odd}.f"é'), "depth": 5}
    column = client.get(url("column-lineage", **params)).json()
    field = next(n for n in column["graph"] if n["id"] == g.id(f'{odd}.f"é'))
    assert field["data"]["dataset"] == odd and field["data"]["field"] == 'f"é'
    assert field["inEdges"] == [{"origin": g.id("src.id"), "destination": field["id"]}]
    for path, query in (("lineage", {"nodeId": g.id("src")}), ("column-lineage", params)):
        text = client.get(url(path, format="mermaid", **query)).content.decode()
        quoted = [line for line in text.splitlines() if '"' in line]
        assert all(line.count('"') == 2 for line in quoted), text
        labels = [line.split('"')[1] for line in quoted]
        # Every quote, backslash and letter beyond ASCII written as Mermaid's #code;
        assert labels and all(label.isascii() and "\\" not in label for label in labels), text
        assert "#34;" in text and "#233;" in text


def test_it_answers_csv_to_a_client_that_accepts_only_csv(api, viewer, shop):
    for path, node in (("lineage", "clean.orders"), ("column-lineage", "mart.daily.total")):
        response = api(viewer).get(url(path, nodeId=shop.id(node)), HTTP_ACCEPT="text/csv")
        assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
        assert response.content.decode().startswith("origin,origin_type,")


def test_it_answers_column_lineage_in_marquez_shape(api, viewer, shop):
    response = api(viewer).get(
        url("column-lineage", nodeId=shop.id("clean.orders.amount"), withDownstream="true")
    )
    assert response.status_code == 200, response.content
    nodes = {n["id"]: n for n in response.json()["graph"]}
    assert set(nodes) == {
        shop.id("raw.orders.amount"),
        shop.id("clean.orders.amount"),
        shop.id("mart.daily.total"),
    }
    total = nodes[shop.id("mart.daily.total")]
    assert total["type"] == "DATASET_FIELD"
    assert total["data"]["field"] == "total" and total["data"]["dataset"] == "mart.daily"
    assert total["data"]["inputFields"] == [
        {
            "namespace": NS,
            "dataset": "clean.orders",
            "field": "amount",
            "transformationDescription": None,
            "transformationType": "DIRECT",
            "transformationSubtype": "AGGREGATION",
            "masking": False,
            "job": shop.id("job:report"),
        }
    ]
    assert total["inEdges"] == [
        {"origin": shop.id("clean.orders.amount"), "destination": shop.id("mart.daily.total")}
    ]


def test_impact_comes_as_json_csv_and_mermaid(api, viewer, shop):
    client = api(viewer)
    body = client.get(url("lineage/impact", nodeId=shop.id("raw.orders"))).json()
    assert [(d["name"], d["distance"]) for d in body["datasets"]] == [
        ("clean.orders", 1),
        ("mart.daily", 2),
    ]
    assert body["owners"] == [{"name": "finance", "type": None, "kind": "team", "email": None}]
    csv = client.get(url("lineage/impact", nodeId=shop.id("raw.orders"), format="csv"))
    lines = csv.content.decode().splitlines()
    assert lines[0].startswith("distance,node_id,namespace,name,owners")
    assert lines[2].split(",")[4] == "finance"
    mermaid = client.get(url("lineage/impact", nodeId=shop.id("raw.orders"), format="mermaid"))
    assert mermaid.content.decode().count("-->") == 4
    column = client.get(url("lineage/impact", nodeId=shop.id("raw.orders.email"))).json()
    assert column["level"] == "column"
    assert column["datasets"][0]["fields"] == ["email_hash"]


def test_root_cause_highlights_failures(api, viewer, shop):
    body = api(viewer).get(url("lineage/root-cause", nodeId=shop.id("mart.daily"))).json()
    assert body["failures"] == [shop.id("job:report")]
    assert body["jobs"][0]["latestRun"]["state"] == "FAILED"
    assert body["suspects"] == [shop.id("mart.daily")]


def test_path_and_diff(api, viewer, shop):
    client = api(viewer)
    body = client.get(
        url("lineage/path", **{"from": shop.id("raw.orders"), "to": shop.id("mart.daily")})
    ).json()
    assert body["found"] is True and body["jobs"] == 2 and body["direction"] == "downstream"
    missing = client.get(
        url("lineage/path", **{"from": shop.id("mart.daily"), "to": shop.id("/lake/raw:legacy")})
    ).json()
    assert missing["found"] is False
    diff = client.get(url("lineage/diff", t1=T1.isoformat(), t2=T3.isoformat())).json()
    assert diff["edgesRemoved"] == [
        {"origin": shop.id("/lake/raw:legacy"), "destination": shop.id("job:clean")}
    ]
    assert diff["counts"]["edgesRemoved"] == 1 and diff["edgesAdded"] == []
    changes = client.get(url("lineage/changes", nodeId=shop.id("clean.orders"))).json()
    assert changes["instants"][-1].startswith("2025-03-01")


def _plain_json_schema(schema: object) -> object:
    """OpenAPI 3.0's ``nullable`` as JSON Schema's ``null`` type, for jsonschema."""
    if isinstance(schema, list):
        return [_plain_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    plain = {key: _plain_json_schema(value) for key, value in schema.items() if key != "nullable"}
    if schema.get("nullable") and "type" in plain:
        plain["type"] = [plain["type"], "null"]
    return plain


def test_graph_answers_are_what_the_published_schema_says(api, viewer, shop):
    """Each answer of a populated graph (a path found, a diff with changes, impact, root
    cause, both levels) validates against the OpenAPI document the API serves."""
    client = api(viewer)
    document = client.get("/api/schema/?format=json").json()
    components = _plain_json_schema(document["components"])
    asks = {
        "lineage": {"nodeId": shop.id("clean.orders")},
        "column-lineage": {"nodeId": shop.id("clean.orders.email_hash")},
        "lineage/impact#column": {"nodeId": shop.id("raw.orders.email")},
        "taints": {},
        "lineage/impact": {"nodeId": shop.id("raw.orders")},
        "lineage/root-cause": {"nodeId": shop.id("mart.daily")},
        "lineage/path": {"from": shop.id("raw.orders"), "to": shop.id("mart.daily")},
        "lineage/diff": {"t1": T1.isoformat(), "t2": T3.isoformat()},
        "lineage/changes": {"nodeId": shop.id("clean.orders")},
        "lineage/orphans": {},
        "lineage/sources": {},
    }
    for ask, params in asks.items():
        path = ask.partition("#")[0]
        operation = document["paths"][f"/api/v1/{path}"]["get"]
        published = operation["responses"]["200"]["content"]["application/json"]["schema"]
        body = client.get(url(path, **params)).json()
        validator = jsonschema.Draft7Validator(
            {**_plain_json_schema(published), "components": components}  # type: ignore[dict-item]
        )
        errors = [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
            for e in validator.iter_errors(body)
            for e in (e.context or [e])
        ]
        assert not errors, (ask, errors)


def test_orphans_and_sources(api, viewer, shop):
    client = api(viewer)
    orphans = client.get(url("lineage/orphans")).json()
    assert [d["name"] for d in orphans["datasets"]] == ["/lake/raw:legacy", "mart.daily"]
    sources = client.get(url("lineage/sources")).json()
    assert [d["name"] for d in sources["datasets"]] == ["raw.orders"]
    then = client.get(url("lineage/sources", asOf="2025-02-01")).json()
    assert [d["name"] for d in then["datasets"]] == ["/lake/raw:legacy", "raw.orders"]


def test_taints_put_downstream_at_risk_until_cleared(api, engineer, viewer, shop):
    client = api(engineer)
    response = client.post(
        "/api/v1/taints",
        {"nodeId": shop.id("raw.orders"), "reason": "bad load on Monday"},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    taint_id = body["taint"]["id"]
    assert [d["nodeId"] for d in body["atRisk"]["datasets"]] == [
        shop.id("raw.orders"),
        shop.id("clean.orders"),
        shop.id("mart.daily"),
    ]
    assert [(j["nodeId"], j["order"]) for j in body["atRisk"]["jobsToRerun"]] == [
        (shop.id("job:clean"), 1),
        (shop.id("job:report"), 2),
    ]
    listed = api(viewer).get("/api/v1/taints").json()
    assert len(listed["taints"]) == 1 and len(listed["atRisk"]["datasets"]) == 3
    assert api(viewer).delete(f"/api/v1/taints/{taint_id}").status_code == 403
    cleared = client.delete(f"/api/v1/taints/{taint_id}")
    assert cleared.status_code == 200 and cleared.json()["taint"]["active"] is False
    assert client.get("/api/v1/taints").json()["atRisk"]["datasets"] == []
    assert client.get("/api/v1/taints?all=true").json()["taints"][0]["clearedBy"] == (
        engineer.username
    )


def test_taint_input_errors_name_the_field(api, engineer, shop):
    client = api(engineer)
    bad = [
        ({"reason": "x"}, "nodeId", 400),
        ({"nodeId": shop.id("raw.orders")}, "reason", 400),
        ({"nodeId": shop.id("job:clean"), "reason": "x"}, "nodeId", 400),
        ({"nodeId": "dataset:nope:nope", "reason": "x"}, "nodeId", 404),
        (
            {
                "nodeId": shop.id("raw.orders"),
                "reason": "x",
                "windowStart": "2025-03-01T00:00:00Z",
                "windowEnd": "2025-02-01T00:00:00Z",
            },
            "windowEnd",
            400,
        ),
    ]
    for payload, field, status in bad:
        response = client.post("/api/v1/taints", payload, format="json")
        assert response.status_code == status, (payload, response.content)
        assert response.json()["field"] == field
    assert Taint.objects.count() == 0


@pytest.mark.parametrize(
    ("params", "field", "status"),
    [
        ({}, "nodeId", 400),
        ({"nodeId": "orders"}, "nodeId", 400),
        ({"nodeId": "dataset:postgres://warehouse-db:5432:missing"}, "nodeId", 404),
        ({"nodeId": "DS", "depth": "-1"}, "depth", 400),
        ({"nodeId": "DS", "depth": "5000"}, "depth", 400),
        ({"nodeId": "DS", "depth": "two"}, "depth", 400),
        ({"nodeId": "DS", "asOf": "yesterday"}, "asOf", 400),
        ({"nodeId": "DS", "direction": "sideways"}, "direction", 400),
        ({"nodeId": "DS", "maxNodes": "0"}, "maxNodes", 400),
        ({"nodeId": "DS", "format": "xml"}, "format", 400),
    ],
)
def test_bad_input_is_a_400_or_404_naming_the_parameter(api, viewer, shop, params, field, status):
    params = {k: (shop.id("raw.orders") if v == "DS" else v) for k, v in params.items()}
    response = api(viewer).get(url("lineage", **params))
    assert response.status_code == status, response.content
    body = response.json()
    assert body["field"] == field
    if status == 404:
        assert params["nodeId"] in body["error"]


def test_other_endpoints_reject_bad_input(api, viewer, shop):
    client = api(viewer)
    cases = [
        (url("column-lineage", nodeId=shop.id("job:clean")), "nodeId"),
        (url("lineage/path", **{"from": shop.id("raw.orders")}), "to"),
        (
            url("lineage/path", **{"from": shop.id("raw.orders"), "to": shop.id("raw.orders.id")}),
            "to",
        ),
        (url("lineage/diff", t1="2025-01-01"), "t2"),
        (url("lineage/diff", t1="soon", t2="2025-01-01"), "t1"),
        (url("lineage/impact", nodeId="job:"), "nodeId"),
        (url("lineage/orphans", limit="0"), "limit"),
    ]
    for path, field in cases:
        response = client.get(path)
        assert response.status_code == 400, (path, response.content)
        assert response.json()["field"] == field
    assert client.get("/api/v1/taints/999").status_code == 404


def test_roles(api, producer, outsider, viewer, shop):
    target = url("lineage", nodeId=shop.id("raw.orders"))
    assert api(None).get(target).status_code == 401
    assert api(producer).get(target).status_code == 403
    assert api(outsider).get(target).status_code == 403
    assert api(viewer).get(target).status_code == 200
    payload = {"nodeId": shop.id("raw.orders"), "reason": "bad"}
    assert api(viewer).post("/api/v1/taints", payload, format="json").status_code == 403
    assert api(None).post("/api/v1/taints", payload, format="json").status_code == 401


def test_graph_endpoints_run_a_fixed_number_of_queries(
    api, viewer, shop, django_assert_max_num_queries
):
    client = api(viewer)
    for i in range(15):
        shop.dataset(f"extra{i}")
        shop.job(f"extra_job{i}", reads=["clean.orders"], writes=[f"extra{i}"])
    # Warm the snapshots (built once per process). Inside a test transaction PostgreSQL
    # runs one more statement per read (firing this transaction's pending triggers).
    client.get(url("lineage", nodeId=shop.id("raw.orders")))
    client.get(url("column-lineage", nodeId=shop.id("clean.orders.amount")))
    # Counted cold (node cache emptied): 3 for the token and role, 1 to resolve the node,
    # 1 revision read, then a fixed number to load what is shown, whatever its size.
    checks = [
        (url("lineage", nodeId=shop.id("raw.orders"), depth=5), 9),
        (url("lineage", nodeId=shop.id("raw.orders"), depth=5, asOf="2025-02-01"), 11),
        (url("column-lineage", nodeId=shop.id("clean.orders"), withDownstream="true"), 11),
        (url("lineage/impact", nodeId=shop.id("raw.orders")), 12),
        (url("lineage/root-cause", nodeId=shop.id("mart.daily")), 12),
        (url("lineage/path", **{"from": shop.id("raw.orders"), "to": shop.id("extra3")}), 10),
    ]
    for path, limit in checks:
        # As a process that starts after the host's node document file was written (on
        # PostgreSQL; SQLite has none, and names its nodes by query).
        node_store_written()
        with django_assert_max_num_queries(limit):
            assert client.get(path).status_code == 200
    # Warm, the lineage graph needs no query beyond auth, resolution and the revision.
    path = url("lineage", nodeId=shop.id("raw.orders"), depth=5)
    client.get(path)
    with django_assert_max_num_queries(6):
        assert client.get(path).status_code == 200


# Committed writes: each in its own transaction, as in production (one test transaction would
# make every change share one transaction id, which invalidates conservatively).
@pytest.mark.django_db(transaction=True)
def test_large_answers_are_served_from_the_response_cache_until_a_change_touches_them(
    api, viewer, steward, shop, monkeypatch
):
    monkeypatch.setattr(responses, "MIN_BUILD_SECONDS", 0.0)
    built: list[object] = []
    lineage = queries.lineage

    def counted(*args: object, **kwargs: object) -> object:
        built.append(args)
        return lineage(*args, **kwargs)

    monkeypatch.setattr(queries, "lineage", counted)
    shop.dataset("elsewhere.a")
    shop.dataset("elsewhere.b")
    client = api(viewer)
    path = url("lineage", nodeId=shop.id("raw.orders"), depth=5, direction="downstream")
    first = client.get(path).json()
    assert client.get(path).json() == first and len(built) == 1
    # A change away from this answer keeps it cached.
    shop.job("unrelated", reads=["elsewhere.a"], writes=["elsewhere.b"])
    assert client.get(path).json() == first and len(built) == 1
    # An edge from a node it reached changes it.
    shop.dataset("mart.weekly")
    shop.job("weekly", reads=["mart.daily"], writes=["mart.weekly"])
    changed = {n["id"] for n in client.get(path).json()["graph"]}
    assert shop.id("mart.weekly") in changed
    # So does an edit of a dataset it shows.
    from catalog import actions

    actions.update_dataset(
        shop.ds["mart.daily"], {"description": "Daily totals"}, actions.Actor(user=steward)
    )
    body = client.get(path).json()
    daily = next(n for n in body["graph"] if n["id"] == shop.id("mart.daily"))
    assert daily["data"]["description"] == "Daily totals"
