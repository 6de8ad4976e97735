"""Graph pages: search, job and run pages, explorer data, impact and exports, fragments."""

from __future__ import annotations

import csv
import io
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from django.test import Client

from catalog.models import Dataset
from graph import page_data
from graph.models import Taint
from graph.nodeids import FieldNodeId, JobNodeId
from graph.resolve import resolve_node_id
from tests import page_builders as pb

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop():
    return pb.build_shop()


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def node(ds) -> str:
    return f"dataset:{ds.namespace.name}:{ds.name}"


def data(client: Client, **params) -> dict[str, Any]:
    response = client.get(f"/graph/data?{urlencode(params)}")
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def edge_pairs(body: dict[str, Any]) -> set[tuple[str, str]]:
    return {(e["source"], e["target"]) for e in body["edges"]}


def page_urls(shop) -> list[str]:
    ds = shop.customers
    params = urlencode({"namespace": ds.namespace.name, "name": ds.name})
    job = urlencode({"namespace": shop.report.namespace.name, "name": shop.report.name})
    return [
        "/search/?q=customers",
        "/search/?q=cust&pii=1",
        "/search/suggest?q=cust",
        f"/jobs/show?{job}",
        f"/runs/{shop.runs['ingest-2'].run_uuid}",
        "/graph/",
        f"/graph/?{urlencode({'node': node(ds)})}",
        f"/impact/?{urlencode({'node': node(ds)})}",
        f"/datasets/lineage?{params}",
        f"/datasets/runs?{params}",
        "/stewardship/orphans",
    ]


def test_it_renders_each_graph_page_for_a_viewer(shop, viewer):
    client = client_for(viewer)
    for url in page_urls(shop):
        response = client.get(url)
        assert response.status_code == 200, url


def test_it_keeps_anonymous_visitors_out(shop):
    for url in page_urls(shop):
        response = Client().get(url)
        assert response.status_code == 302, url
    assert Client().get(f"/graph/data?node={node(shop.customers)}").status_code == 302


def test_it_forbids_a_producer(shop, producer):
    assert client_for(producer).get("/search/?q=x").status_code == 403
    assert client_for(producer).get(f"/graph/data?node={node(shop.customers)}").status_code == 403


# --- search -----------------------------------------------------------------


def test_it_ranks_exact_and_last_segment_matches_first(shop, viewer):
    pb.make_dataset(pb.LAKE, "lake/archive/customers_2019_backup")
    results = page_data.search("customers", Dataset.objects.all(), kinds=("datasets",), limit=10)
    names = [d.name for d in results.datasets]
    assert names[0] in {"shop.public.customers", "lake/raw/customers", "lake/clean/customers"}
    assert names.index("lake/archive/customers_2019_backup") > names.index("shop.public.customers")


def test_it_finds_jobs_columns_owners_and_tags(shop, viewer):
    html = client_for(viewer).get("/search/?q=customer").content.decode()
    assert "ingest_customers" in html  # job
    assert "customer_id" in html  # column
    client = client_for(viewer)
    assert "CRM team" in client.get("/search/?q=crm").content.decode()
    assert "gold" in client.get("/search/?q=gold").content.decode()


def test_it_filters_search_by_pii_owner_retention_namespace_and_platform(shop, viewer):
    client = client_for(viewer)
    html = client.get("/search/?q=customers&pii=1&retention=-").content.decode()
    assert "lake/raw/customers" in html
    assert "shop.public.customers</a>" not in html  # it has a retention policy
    html = client.get(
        f"/search/?{urlencode({'q': 'customers', 'namespace': pb.SHOP})}"
    ).content.decode()
    assert "lake/raw/customers" not in html and "shop.public.customers" in html
    html = client.get("/search/?q=customer&owner=data-eng").content.decode()
    assert "lake/clean/customers" in html and "shop.public.customers</a>" not in html
    html = client.get("/search/?platform=postgres").content.decode()
    assert "shop.public.orders" in html and "lake/raw" not in html


def test_the_jobs_breadcrumb_lists_jobs_by_name(shop, viewer):
    client = client_for(viewer)
    job = client.get(
        f"/jobs/show?{urlencode({'namespace': shop.c360_job.namespace.name, 'name': shop.c360_job.name})}"
    ).content.decode()
    assert 'href="/search/?kind=jobs"' in job
    html = client.get("/search/?kind=jobs").content.decode()
    assert shop.c360_job.name in html and "by name" in html
    assert "Type a name" not in html
    assert "No jobs" in client.get("/search/?kind=jobs&namespace=nowhere").content.decode()


def test_it_pins_the_search_query_count(shop, viewer, django_assert_max_num_queries):
    client = client_for(viewer)
    client.get("/")
    # Bounded whatever the catalog size: at most three queries per kind of result.
    with django_assert_max_num_queries(20):
        assert client.get("/search/?q=customer").status_code == 200


# --- job and run ------------------------------------------------------------


def test_it_shows_a_job_with_runs_intervals_and_sql(shop, viewer):
    job = shop.c360_job
    html = (
        client_for(viewer)
        .get(f"/jobs/show?{urlencode({'namespace': job.namespace.name, 'name': job.name})}")
        .content.decode()
    )
    assert "lake/raw/customers" in html and "lake/clean/customers" in html
    assert "2025-03-01 00:00" in html  # the rewiring instant closes raw and opens clean
    assert "timeline" in html
    report = shop.report
    html = (
        client_for(viewer)
        .get(f"/jobs/show?{urlencode({'namespace': report.namespace.name, 'name': report.name})}")
        .content.decode()
    )
    assert "GROUP BY c.country" in html


def test_it_shows_run_states_durations_and_errors(shop, viewer):
    job = shop.ingest
    html = (
        client_for(viewer)
        .get(f"/jobs/show?{urlencode({'namespace': job.namespace.name, 'name': job.name})}")
        .content.decode()
    )
    assert "failed" in html and "completed" in html
    assert "Connection refused" in html
    assert "5 min 00 s" in html and "2 min 00 s" in html
    run_html = client_for(viewer).get(f"/runs/{shop.runs['ingest-2'].run_uuid}").content.decode()
    assert "Connection refused: shop-db:5432" in run_html
    assert "shop.public.customers" in run_html


def test_it_pins_the_job_page_query_count(shop, viewer, django_assert_max_num_queries):
    job = shop.ingest
    client = client_for(viewer)
    client.get("/")
    with django_assert_max_num_queries(14):
        client.get(f"/jobs/show?{urlencode({'namespace': job.namespace.name, 'name': job.name})}")


def test_it_answers_404_for_unknown_jobs_and_runs(viewer):
    client = client_for(viewer)
    assert client.get("/jobs/show?namespace=x&name=y").status_code == 404
    assert client.get("/runs/8f8a5d0e-0000-4000-8000-000000000000").status_code == 404


# --- explorer data ----------------------------------------------------------


def test_it_draws_the_table_graph_around_a_dataset(shop, viewer):
    body = data(client_for(viewer), node=node(shop.raw), depth=5)
    ids = {n["id"] for n in body["nodes"]}
    assert node(shop.customers) in ids  # upstream
    assert node(shop.revenue) in ids and node(shop.c360) in ids  # downstream
    assert "job:spark://etl:clean_customers" in ids
    assert (node(shop.raw), "job:spark://etl:clean_customers") in edge_pairs(body)
    by_id = {n["id"]: n for n in body["nodes"]}
    assert by_id[node(shop.customers)]["distance"] == -1
    assert by_id[node(shop.revenue)]["distance"] == 2
    assert by_id[node(shop.customers)]["pii"] is True
    assert by_id["job:spark://etl:ingest_customers"]["state"] == "FAILED"


def test_it_marks_jobs_with_the_run_they_had_then(shop, viewer):
    """ingest_customers last failed at T3; before, its last run had completed."""
    client = client_for(viewer)

    def ingest_state(**params: str) -> str:
        body = data(client, node=node(shop.raw), depth=1, direction="upstream", **params)
        return str({n["id"]: n for n in body["nodes"]}["job:spark://etl:ingest_customers"]["state"])

    assert ingest_state() == "FAILED"
    assert ingest_state(asOf="2025-03-15T00:00:00Z") == "COMPLETED"
    assert ingest_state(asOf="2025-01-15T00:00:00Z") == ""  # no run yet


def test_it_marks_a_dataset_dropped_only_from_its_drop_on_at_both_levels(shop, viewer):
    pb.drop(shop.revenue, pb.T3)
    client = client_for(viewer)

    def dropped(level: str, **params: str) -> bool:
        body = data(client, node=node(shop.revenue), depth=1, level=level, **params)
        return bool({n["id"]: n for n in body["nodes"]}[node(shop.revenue)]["dropped"])

    for level in ("table", "column"):
        assert dropped(level) is True
        assert dropped(level, asOf="2025-03-15T00:00:00Z") is False, level
        assert dropped(level, asOf="2025-04-15T00:00:00Z") is True, level


def test_it_counts_hidden_neighbours(shop, viewer):
    body = data(client_for(viewer), node=node(shop.clean), depth=1, direction="downstream")
    by_id = {n["id"]: n for n in body["nodes"]}
    report = by_id["job:spark://etl:revenue_report"]
    assert report["degIn"] == 2  # clean and orders; orders is not drawn
    assert node(shop.orders) not in by_id


def test_it_redraws_the_graph_as_of_a_past_instant(shop, viewer):
    client = client_for(viewer)
    c360_job = "job:spark://etl:build_customer_360"
    now = edge_pairs(data(client, node=node(shop.c360), direction="upstream", depth=1))
    then = edge_pairs(
        data(
            client, node=node(shop.c360), direction="upstream", depth=1, asOf="2025-02-01T00:00:00Z"
        )
    )
    assert (node(shop.clean), c360_job) in now and (node(shop.raw), c360_job) not in now
    assert (node(shop.raw), c360_job) in then and (node(shop.clean), c360_job) not in then


def test_a_job_that_writes_nothing_any_more_is_drawn_only_while_it_did(shop, viewer):
    from graph.models import TableEdge

    # revenue_by_country was dropped at T3: revenue_report still "reads" clean and orders
    # (its input rows stay open), but it writes nothing now.
    TableEdge.objects.filter(dataset=shop.revenue).update(valid_to=pb.T3)
    client = client_for(viewer)
    report = "job:spark://etl:revenue_report"
    now = data(client, node=node(shop.clean), direction="downstream", depth=2)
    assert report not in {n["id"] for n in now["nodes"]}
    assert all(report not in pair for pair in edge_pairs(now))
    then = data(
        client, node=node(shop.clean), direction="downstream", depth=2, asOf="2025-03-15T00:00:00Z"
    )
    assert (node(shop.clean), report) in edge_pairs(then)
    mermaid = client.get(
        f"/impact/export?{urlencode({'node': node(shop.clean), 'format': 'mermaid'})}"
    ).content.decode()
    assert "revenue_report" not in mermaid and "build_customer_360" in mermaid
    # In diff mode it shows as removed since an instant when it was live.
    diff = data(
        client,
        node=node(shop.clean),
        direction="downstream",
        depth=2,
        compare="2025-03-15T00:00:00Z",
    )
    removed = {n["id"] for n in diff["nodes"] if n.get("diff") == "removed"}
    assert report in removed
    page = client.get(
        f"/jobs/show?{urlencode({'namespace': 'spark://etl', 'name': 'revenue_report'})}"
    )
    html = page.content.decode()
    assert "Retired: it has written no dataset since 2025-04-01 00:00" in html
    assert "job retired" in html and ">current<" not in html


def test_it_lists_the_instants_where_the_graph_changed(shop, viewer):
    body = data(client_for(viewer), node=node(shop.c360), depth=3)
    assert "2025-03-01T00:00:00Z" in body["instants"]
    assert body["instants"] == sorted(body["instants"])


def test_it_marks_edges_added_and_removed_between_two_instants(shop, viewer):
    body = data(
        client_for(viewer),
        node=node(shop.c360),
        direction="upstream",
        depth=1,
        compare="2025-02-01T00:00:00Z",
    )
    diff = {(e["source"], e["target"]): e["diff"] for e in body["edges"]}
    job = "job:spark://etl:build_customer_360"
    assert diff[(node(shop.clean), job)] == "added"
    assert diff[(node(shop.raw), job)] == "removed"
    assert diff[(node(shop.orders), job)] == "same"


def test_it_draws_column_lineage_with_datasets_as_groups(shop, viewer):
    from catalog import actions
    from catalog.models import DatasetField

    # A steward says customer_360's hash holds no personal data.
    blocked = DatasetField.objects.get(dataset__name="lake/marts/customer_360", name="email_hash")
    actions.update_field(blocked, {"propagation_blocked": True}, actions.Actor(name="stella"))
    field = f"datasetField:{pb.SHOP}:shop.public.customers:email"
    body = data(client_for(viewer), node=field, level="column", direction="downstream", depth=5)
    ids = {n["id"] for n in body["nodes"]}
    assert f"datasetField:{pb.LAKE}:lake/clean/customers:email_hash" in ids
    assert f"datasetField:{pb.LAKE}:lake/marts/customer_360:email_hash" in ids
    masked = [e for e in body["edges"] if e["masking"]]
    assert masked and masked[0]["transformation"] == "DIRECT/TRANSFORMATION"
    # Personal data flows only between personal fields, not into what holds none.
    personal = {n["id"] for n in body["nodes"] if n.get("pii") or n.get("subject")}
    flows = {(e["source"], e["target"]) for e in body["edges"] if e["pii"]}
    assert flows and flows == {
        (e["source"], e["target"])
        for e in body["edges"]
        if e["source"] in personal and e["target"] in personal
    }
    into_blocked = [e for e in body["edges"] if e["target"].endswith("customer_360:email_hash")]
    assert into_blocked and not any(e["pii"] for e in into_blocked)
    parents = {n["parent"] for n in body["nodes"] if n["kind"] == "field"}
    assert node(shop.raw) in parents and node(shop.raw) in ids


def test_it_exports_the_drawn_graph_as_csv_and_mermaid(shop, viewer):
    client = client_for(viewer)
    params = {"node": node(shop.customers), "direction": "downstream", "depth": 5}
    drawn = edge_pairs(data(client, **params))
    response = client.get(f"/graph/export?{urlencode({**params, 'format': 'csv'})}")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["origin", "origin_type", "destination", "destination_type"]
    assert {(r[0], r[2]) for r in rows[1:]} == drawn
    mermaid = client.get(f"/graph/export?{urlencode({**params, 'format': 'mermaid'})}")
    text = mermaid.content.decode()
    assert text.startswith("flowchart LR") and text.count("-->") == len(drawn)
    # Column level, downstream only: the fields the explorer draws, and nothing upstream.
    field = f"datasetField:{pb.SHOP}:shop.public.customers:email"
    column = {"node": field, "level": "column", "direction": "downstream", "depth": 5}
    drawn = edge_pairs(data(client, **column))
    body = client.get(f"/graph/export?{urlencode({**column, 'format': 'csv'})}").content
    rows = list(csv.reader(io.StringIO(body.decode())))
    assert rows[0][4:] == [
        "job",
        "transformation_type",
        "transformation_subtype",
        "masking",
        "description",
    ]
    assert drawn and {(r[0], r[2]) for r in rows[1:]} == drawn
    assert all(r[1] == r[3] == "DATASET_FIELD" for r in rows[1:])
    bad = client.get(f"/graph/export?{urlencode({**params, 'format': 'xml'})}")
    assert bad.status_code == 400 and "format" in bad.content.decode()
    unknown = client.get(f"/graph/export?{urlencode({'node': 'dataset:nope:x'})}")
    assert unknown.status_code == 404


def test_it_refuses_column_level_from_a_job_on_every_graph_route(shop, viewer):
    client = client_for(viewer)
    params = {"node": "job:spark://etl:build_customer_360", "level": "column"}
    for path in ("/graph/data", "/graph/export"):
        response = client.get(f"{path}?{urlencode(params)}")
        assert response.status_code == 400, path
        assert "Column level starts from a dataset or a column" in response.content.decode()
    page = client.get(f"/graph/?{urlencode(params)}")
    assert page.status_code == 400 and "a job has none" in page.content.decode()


def test_it_flags_tainted_and_at_risk_nodes(shop, viewer):
    Taint.objects.create(dataset=shop.raw, reason="bad load")
    body = data(client_for(viewer), node=node(shop.customers), direction="downstream", depth=5)
    by_id = {n["id"]: n for n in body["nodes"]}
    assert by_id[node(shop.raw)]["tainted"] is True
    assert by_id[node(shop.clean)]["atRisk"] is True
    assert by_id[node(shop.customers)]["atRisk"] is False


def test_every_node_a_taint_reaches_is_marked_however_far_it_reaches(viewer):
    """A taint reaching more than two thousand datasets (the impact page's first cut) marks
    the farthest of them and its job; at column level, the tainted dataset is marked too."""
    datasets = pb.build_chain(length=2, fan_out=45)
    Taint.objects.create(dataset=datasets[0], reason="bad load")
    farthest = datasets[-1]
    client = client_for(viewer)
    body = data(client, node=node(farthest), direction="upstream", depth=1)
    by_id = {n["id"]: n for n in body["nodes"]}
    assert by_id[node(farthest)]["atRisk"] is True and by_id[node(farthest)]["tainted"] is False
    assert [n["atRisk"] for n in body["nodes"] if n["kind"] == "job"] == [True]
    columns = data(client, node=node(datasets[0]), level="column", direction="downstream")
    root = next(n for n in columns["nodes"] if n["id"] == node(datasets[0]))
    assert root["tainted"] is True and root["atRisk"] is False


def test_it_cuts_a_large_graph_at_the_limit_keeping_the_nearest(viewer):
    datasets = pb.build_chain(length=3, fan_out=4)
    body = data(
        client_for(viewer), node=node(datasets[0]), direction="downstream", depth=5, limit=30
    )
    assert body["truncated"] is True
    assert len(body["nodes"]) <= 30
    assert max(n["distance"] for n in body["nodes"]) <= 3


@pytest.mark.parametrize(
    ("params", "status", "field"),
    [
        ({"node": "nonsense"}, 400, "node"),
        ({"node": "dataset:nope:nothing"}, 404, "node"),
        ({"node": "DS", "depth": "0"}, 400, "depth"),
        ({"node": "DS", "depth": "x"}, 400, "depth"),
        ({"node": "DS", "direction": "sideways"}, 400, "direction"),
        ({"node": "DS", "asOf": "yesterday"}, 400, "asOf"),
        ({"node": "DS", "level": "row"}, 400, "level"),
    ],
)
def test_it_rejects_bad_explorer_input_naming_the_parameter(shop, viewer, params, status, field):
    params = {k: (node(shop.raw) if v == "DS" else v) for k, v in params.items()}
    response = client_for(viewer).get(f"/graph/data?{urlencode(params)}")
    assert response.status_code == status
    assert response.json()["field"] == field
    page = client_for(viewer).get(f"/graph/?{urlencode(params)}")
    assert page.status_code == status


def test_it_resolves_node_ids_whose_namespaces_hold_colons(shop):
    ref = resolve_node_id(f"datasetField:{pb.SHOP}:shop.public.customers:email")
    assert ref.id == FieldNodeId(pb.SHOP, "shop.public.customers", "email")
    assert ref.label == "shop.public.customers · email"
    job = resolve_node_id("job:spark://etl:revenue_report")
    assert job.id == JobNodeId("spark://etl", "revenue_report")


def test_it_pins_the_explorer_data_query_count(shop, viewer, django_assert_max_num_queries):
    client = client_for(viewer)
    client.get("/")
    with django_assert_max_num_queries(30):
        data(client, node=node(shop.raw), depth=5)


def test_it_keeps_the_state_in_the_explorer_url(shop, viewer):
    params = {
        "node": node(shop.raw),
        "level": "table",
        "direction": "downstream",
        "depth": "4",
        "asOf": "2025-02-01T00:00:00Z",
    }
    html = client_for(viewer).get(f"/graph/?{urlencode(params)}").content.decode()
    assert '"direction": "downstream"' in html and '"depth": 4' in html
    assert '"asOf": "2025-02-01T00:00:00Z"' in html


# --- impact -----------------------------------------------------------------


def test_it_groups_impact_by_distance_with_owners_pii_and_retention(shop, viewer):
    html = (
        client_for(viewer)
        .get(f"/impact/?{urlencode({'node': node(shop.customers)})}")
        .content.decode()
    )
    assert "1 job away" in html and "2 jobs away" in html and "3 jobs away" in html
    assert "data-eng" in html  # owner to notify
    assert "lake/marts/customer_360" in html


def test_it_exports_impact_as_csv_and_mermaid(shop, viewer):
    client = client_for(viewer)
    response = client.get(
        f"/impact/export?{urlencode({'node': node(shop.customers), 'format': 'csv'})}"
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    lines = response.content.decode().splitlines()
    assert lines[0].startswith("distance,node_id,namespace,name,owners")
    assert any("lake/raw/customers" in line and "data-eng" in line for line in lines)
    mermaid = client.get(
        f"/impact/export?{urlencode({'node': node(shop.customers), 'format': 'mermaid'})}"
    ).content.decode()
    assert mermaid.startswith("flowchart LR")
    assert "-->" in mermaid and "lake/raw/customers" in mermaid


def test_it_exports_the_impact_as_it_was(shop, viewer):
    client = client_for(viewer)

    def c360_row(**params: str) -> list[str]:
        body = client.get(
            f"/impact/export?{urlencode({'node': node(shop.raw), **params})}"
        ).content.decode()
        rows = list(csv.reader(io.StringIO(body)))
        return next(r for r in rows if r[3] == "lake/marts/customer_360")

    # Before T2 customer_360 read raw/customers directly; now it reads clean/customers.
    then = c360_row(asOf="2025-02-01T00:00:00Z")
    now = c360_row()
    assert then[0] == "1" and now[0] == "2"
    assert "build_customer_360" in then[-1]


def test_it_rejects_a_bad_export_format(shop, viewer):
    response = client_for(viewer).get(
        f"/impact/export?{urlencode({'node': node(shop.raw), 'format': 'xml'})}"
    )
    assert response.status_code == 400
    assert response.json()["field"] == "format"


# --- fragments ---------------------------------------------------------------


def test_it_summarises_upstream_and_downstream_for_the_dataset_page(shop, viewer):
    params = urlencode({"namespace": shop.clean.namespace.name, "name": shop.clean.name})
    html = client_for(viewer).get(f"/datasets/lineage?{params}").content.decode()
    assert "clean_customers" in html  # producer
    assert "revenue_report" in html  # consumer
    assert "lake/raw/customers" in html and "lake/marts/revenue_by_country" in html


def test_it_lists_runs_that_wrote_and_read_a_dataset(shop, viewer):
    params = urlencode({"namespace": shop.raw.namespace.name, "name": shop.raw.name})
    html = client_for(viewer).get(f"/datasets/runs?{params}").content.decode()
    assert "ingest_customers" in html and "clean_customers" in html


def test_it_lists_orphaned_datasets(shop, viewer):
    html = client_for(viewer).get("/stewardship/orphans").content.decode()
    assert "lake/tmp/scratch" in html
    assert "lake/raw/customers" not in html
    # Final outputs a job still writes are in use, not candidates for deletion.
    assert "lake/marts/revenue_by_country" not in html and "lake/marts/customer_360" not in html


def test_it_puts_failed_upstream_jobs_first_in_the_root_cause(shop, viewer):
    html = (
        client_for(viewer)
        .get(f"/root-cause/?{urlencode({'node': node(shop.revenue)})}")
        .content.decode()
    )
    jobs = html.split('id="jobs-h"')[1]
    assert jobs.index("ingest_customers") < jobs.index("clean_customers")
    assert "Connection refused" in jobs
    suspects = html.split('id="suspects-h"')[1].split('id="jobs-h"')[0]
    assert "lake/raw/customers" in suspects and "lake/clean/customers" in suspects


def test_it_renders_the_root_cause_page_without_a_node(viewer):
    assert client_for(viewer).get("/root-cause/").status_code == 200


def test_it_shows_the_columns_an_impact_reaches_at_column_level(shop, viewer):
    email = f"datasetField:{pb.SHOP}:shop.public.customers:email"
    html = (
        client_for(viewer)
        .get(f"/impact/?{urlencode({'node': email, 'level': 'column'})}")
        .content.decode()
    )
    assert "Columns reached" in html
    assert "email_hash" in html and "lake/clean/customers" in html
    assert "lake/marts/revenue_by_country" not in html  # country and amount only


def test_it_draws_personal_data_flags_as_classified_at_the_instant(shop, steward, viewer):
    from catalog import actions as catalog_actions

    country = shop.revenue.fields.get(name="country")
    catalog_actions.update_field(
        country, {"pii_category": "location"}, catalog_actions.Actor(user=steward)
    )
    client = client_for(viewer)

    def revenue_flag(**params: str) -> bool:
        body = data(client, node=node(shop.clean), depth=1, direction="downstream", **params)
        flag = {n["id"]: n for n in body["nodes"]}[node(shop.revenue)]["pii"]
        assert isinstance(flag, bool)
        return flag

    assert revenue_flag() is True
    assert revenue_flag(asOf="2025-06-01T00:00:00Z") is False  # classified only today


def test_an_unknown_run_is_a_404_page_naming_it(viewer):
    response = client_for(viewer).get("/runs/00000000-0000-0000-0000-000000000000")
    assert response.status_code == 404
    html = response.content.decode()
    assert "No run 00000000-0000-0000-0000-000000000000 is recorded" in html
    assert "No Run matches" not in html


def test_an_engineer_marks_a_dataset_tainted_sees_the_rerun_order_and_clears_it(
    shop, engineer, viewer
):
    from graph.models import Taint

    client = client_for(engineer)
    url = f"/datasets/taints?{urlencode({'namespace': shop.raw.namespace.name, 'name': shop.raw.name})}"
    page = (
        f"/datasets/show?{urlencode({'namespace': shop.raw.namespace.name, 'name': shop.raw.name})}"
    )
    assert "No active taint on this dataset" in client.get(url).content.decode()
    response = client.post(
        url, {"reason": "Bad export on the 3rd", "windowStart": "", "windowEnd": ""}
    )
    assert response.status_code == 302 and response["Location"] == f"{page}#taints-h"
    html = client.get(url).content.decode()
    assert "Bad export on the 3rd" in html and "by erin-engineer" in html
    # raw → clean_customers → clean → revenue_report / build_customer_360: the cleaner first.
    order = html.split('<ol class="rerun-order">')[1].split("</ol>")[0]
    assert order.index("clean_customers") < order.index("revenue_report")
    assert order.index("clean_customers") < order.index("build_customer_360")
    assert "lake/marts/revenue_by_country" in html  # at risk downstream
    # The impact page shows the same, with the form.
    impact = client.get(f"/impact/?{urlencode({'node': node(shop.raw)})}").content.decode()
    assert "Bad export on the 3rd" in impact and "Mark as tainted" in impact
    # A viewer sees the taint but no form and no button, and may not post.
    seen = client_for(viewer).get(url).content.decode()
    assert "Bad export on the 3rd" in seen and "Mark as tainted" not in seen and "Clear" not in seen
    assert client_for(viewer).post(url, {"reason": "x"}).status_code == 403
    taint = Taint.objects.get()
    assert client_for(viewer).post(f"/taints/{taint.pk}/clear").status_code == 403
    for elsewhere in ("https://evil.example/", "/\t/evil.example", "//evil.example"):
        url_back = client.get(f"{url}&next={quote(elsewhere)}").content.decode()
        assert "evil.example" not in url_back
    cleared = client.post(f"/taints/{taint.pk}/clear", {"next": "/\t/evil.example"})
    assert cleared.status_code == 302 and cleared["Location"] == f"{page}#taints-h"
    assert "No active taint on this dataset" in client.get(url).content.decode()


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"reason": "  "}, "“what is wrong” is required"),
        ({"reason": "x", "windowEnd": "2025-01-02T00:00"}, "“to” needs a “from”"),
        (
            {"reason": "x", "windowStart": "2025-01-02T00:00", "windowEnd": "2025-01-01T00:00"},
            "“to” is before “from”",
        ),
        ({"reason": "x", "windowStart": "soon"}, "“from” is not an ISO-8601 instant"),
    ],
)
def test_a_bad_taint_form_is_shown_again_naming_what_is_wrong(shop, engineer, form, message):
    from graph.models import Taint

    url = f"/datasets/taints?{urlencode({'namespace': shop.raw.namespace.name, 'name': shop.raw.name})}"
    response = client_for(engineer).post(url, form)
    assert response.status_code == 422
    assert message in response.content.decode()
    assert not Taint.objects.exists()


def test_a_job_retired_before_a_taints_window_is_not_re_run(shop):
    from graph import queries
    from graph.models import TableEdge
    from graph.taint import mark_tainted

    # revenue_report stopped writing at T2; the bad data was written from T3 on.
    TableEdge.objects.filter(dataset=shop.revenue).update(valid_to=pb.T2)
    taint = mark_tainted(shop.clean, reason="bad", window_start=pb.T3)
    order = [r.job.name for r in queries.taint_impact([taint]).jobs_to_rerun]
    assert "revenue_report" not in order and "build_customer_360" in order
    # Bad since T1, while it still wrote: it is re-run. Bad now only: it writes nothing now.
    since_t1 = mark_tainted(shop.clean, reason="bad", window_start=pb.T1)
    assert "revenue_report" in [r.job.name for r in queries.taint_impact([since_t1]).jobs_to_rerun]
    now = mark_tainted(shop.clean, reason="bad")
    assert "revenue_report" not in [r.job.name for r in queries.taint_impact([now]).jobs_to_rerun]


def test_a_dataset_read_only_by_a_retired_job_is_an_orphan(shop, viewer):
    from graph.models import TableEdge

    # orders is read by revenue_report and build_customer_360: retire both.
    TableEdge.objects.filter(dataset__in=[shop.revenue, shop.c360]).update(valid_to=pb.T3)
    html = client_for(viewer).get("/stewardship/orphans").content.decode()
    assert "shop.public.orders" in html


def test_coverage_misses_are_the_datasets_stewardship_calls_orphans(shop):
    from graph import queries
    from graph.models import TableEdge
    from ops import slis

    TableEdge.objects.filter(dataset__in=[shop.revenue, shop.c360]).update(valid_to=pb.T3)
    coverage = slis.coverage(slis.Scope(), slice(0, 100))
    orphans = queries.untouched()
    assert "shop.public.orders" in {m["name"] for m in coverage.misses}
    assert {m["id"] for m in coverage.misses} == {d.node_id for d in orphans.items}
    assert coverage.missing == orphans.total


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("/data/lake/raw/customers.parquet", "raw/customers.parquet"),
        ("shop.public.orders", "public.orders"),
        ("orders", "orders"),
        ("/lake/x/", "lake/x"),
    ],
)
def test_a_short_name_keeps_the_last_two_segments(name, short):
    from graph.page_data import short_name

    assert short_name(name) == short


def test_each_graph_page_answers_from_one_lineage_revision(shop, viewer, revision_reads):
    """A page reads the change log's revision once at most, so that everything it shows
    (the lineage, the summaries, the lists) is of one state, as the API's answers are."""
    client = client_for(viewer)
    for url in page_urls(shop):
        revision_reads.clear()
        assert client.get(url).status_code == 200, url
        assert len(revision_reads) <= 1, url
