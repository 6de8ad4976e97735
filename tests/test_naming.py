"""Canonical dataset names: one table is one dataset, whichever channel or person named it."""

from __future__ import annotations

import importlib
import io
from urllib.parse import quote

import pytest
from django.apps import apps as django_apps
from django.core.management import call_command
from django.urls import reverse

from catalog import actions as catalog_actions
from catalog import catalog_file
from catalog.models import (
    Dataset,
    DatasetField,
    FlagSource,
    Namespace,
    PiiCategory,
    PropagatedFlag,
)
from catalog.naming import canonical, canonical_namespace, platform
from graph import propagation
from graph.models import ColumnEdge, TableEdge
from graph.resolve import resolve_node_id
from ingest.events import parse_event
from ingest.normalizer import NamingReport, canonicalise_names, normalize
from tests.ingest_builders import at, columns, dataset, run_event, run_id, schema

SNOWFLAKE = "snowflake://acme-analytics"

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("namespace", "name", "expected"),
    [
        # Snowflake folds unquoted identifiers to upper case; quoted ones keep their case.
        (SNOWFLAKE, "raw_db.sales.orders", (SNOWFLAKE, "RAW_DB.SALES.ORDERS")),
        ("snowflake://ACME-Analytics", "Raw_Db.Sales.Orders", (SNOWFLAKE, "RAW_DB.SALES.ORDERS")),
        (SNOWFLAKE, 'raw_db.sales."Orders"', (SNOWFLAKE, 'RAW_DB.SALES."Orders"')),
        (SNOWFLAKE, 'raw_db.sales."ORDERS"', (SNOWFLAKE, "RAW_DB.SALES.ORDERS")),
        (SNOWFLAKE, 'raw_db.sales."a""b"', (SNOWFLAKE, 'RAW_DB.SALES."a""b"')),
        # PostgreSQL folds to lower case; the spec writes its scheme postgres://.
        (
            "postgresql://Shop-DB:5432",
            "Shop.Public.Orders",
            ("postgres://shop-db:5432", "shop.public.orders"),
        ),
        (
            "postgres://db:5432",
            'shop.public."Orders"',
            ("postgres://db:5432", 'shop.public."Orders"'),
        ),
        # A namespace without its port names the platform's default one.
        (
            "postgres://Shop-DB",
            "shop.public.orders",
            ("postgres://shop-db:5432", "shop.public.orders"),
        ),
        ("postgres://[::1]", "d.s.t", ("postgres://[::1]:5432", "d.s.t")),
        (
            "postgres://a,B:5433,[::1]/x",
            "d.s.t",
            ("postgres://a:5432,b:5433,[::1]:5432/x", "d.s.t"),
        ),
        ("postgres://u:pw@a,b", "d.s.t", ("postgres://u:pw@a:5432,b:5432", "d.s.t")),
        ("postgres://db?sslmode=require", "d.s.t", ("postgres://db:5432?sslmode=require", "d.s.t")),
        ("postgres://[::1]:6432", "d.s.t", ("postgres://[::1]:6432", "d.s.t")),
        ("redshift://c.eu-west-1", "dev.public.t", ("redshift://c.eu-west-1:5439", "dev.public.t")),
        # Redshift folds quoted identifiers too (enable_case_sensitive_identifier is off).
        (
            "redshift://c.eu-west-1:5439",
            'Dev.Public."Orders"',
            ("redshift://c.eu-west-1:5439", "dev.public.orders"),
        ),
        # BigQuery: project.dataset.table, case kept; legacy and quoted spellings rewritten.
        ("bigquery", "acme-data:sales.Orders", ("bigquery", "acme-data.sales.Orders")),
        ("bigquery", "`acme-data.sales.Orders`", ("bigquery", "acme-data.sales.Orders")),
        # Paths: normalised; object keys have no leading slash; s3a:// is s3://.
        ("s3a://Lake", "/raw//orders/./part/", ("s3://lake", "raw/orders/part")),
        ("file", "/warehouse/raw/../staging/orders/", ("file", "/warehouse/staging/orders")),
        ("hdfs://NameNode:8020", "/data//x", ("hdfs://namenode:8020", "/data/x")),
        # An unknown platform keeps names as sent.
        ("kafka://broker:9092", "Orders.Topic", ("kafka://broker:9092", "Orders.Topic")),
        ("warehouse", "Mixed.Case", ("warehouse", "Mixed.Case")),
        # A name the platform's rules cannot read is kept as sent.
        (SNOWFLAKE, 'raw_db."unclosed', (SNOWFLAKE, 'raw_db."unclosed')),
    ],
)
def test_it_spells_each_platform_as_the_openlineage_naming_spec_does(namespace, name, expected):
    assert canonical(namespace, name) == expected
    assert canonical(*expected) == expected  # canonical names are canonical again


def test_it_tells_the_platform_from_the_namespace():
    assert platform("postgresql://db:5432") == "postgres"
    assert platform("s3a://bucket") == "s3"
    assert platform("file") == "file"
    assert canonical_namespace("Snowflake://ACME") == "snowflake://acme"
    assert canonical_namespace("custom://Host") == "custom://Host"


def _sql_log(tmp_path, text, dialect="snowflake", namespace=SNOWFLAKE):
    log = tmp_path / "queries.jsonl"
    log.write_text(text)
    call_command(
        "ingest_sql_log", str(log), namespace=namespace, dialect=dialect, fmt="jsonl",
        database="raw_db", schema="sales", no_progress=True, stdout=io.StringIO(),
        stderr=io.StringIO(),
    )  # fmt: skip


def test_it_makes_one_dataset_of_a_table_named_by_openlineage_and_a_query_log(tmp_path):
    # An OpenLineage producer writes the names in lower case, as it was configured.
    orders = dataset("raw_db.sales.orders", SNOWFLAKE, schema=schema("id", "customer_id", "amount"))
    normalize(
        [
            parse_event(e)
            for e in (
                run_event("START", run_id(1), at(1), job="load_orders", job_ns="airflow",
                          outputs=[orders]),
                run_event("COMPLETE", run_id(1), at(1, 1), job="load_orders", job_ns="airflow",
                          outputs=[orders]),
            )
        ]
    )  # fmt: skip
    # The query log reads the same table unquoted, and quoted as Snowflake stores it.
    _sql_log(
        tmp_path,
        '{"query": "CREATE TABLE marts.totals AS SELECT customer_id, SUM(amount) AS total '
        'FROM orders GROUP BY customer_id", "start_time": "2026-03-02T00:00:00Z"}\n'
        '{"query": "INSERT INTO \\"RAW_DB\\".\\"MARTS\\".\\"Recent\\" SELECT id FROM '
        'RAW_DB.SALES.\\"ORDERS\\"", "start_time": "2026-03-02T01:00:00Z"}\n',
    )
    names = set(Dataset.objects.values_list("name", flat=True))
    assert names == {"RAW_DB.SALES.ORDERS", "RAW_DB.MARTS.TOTALS", 'RAW_DB.MARTS."Recent"'}
    # Lineage runs through the one dataset: the producer's job wrote it, the log's read it.
    reads = TableEdge.objects.filter(dataset__name="RAW_DB.SALES.ORDERS")
    assert {(e.job.name.split(".")[0], e.direction) for e in reads} == {
        ("load_orders", "out"),
        ("create_table_as", "in"),
        ("insert", "in"),
    }


def test_it_keeps_column_lineage_through_a_table_named_in_two_cases():
    target = dataset(
        "ANALYTICS.PUBLIC.CUSTOMERS",
        SNOWFLAKE,
        schema=schema("id"),
        columnLineage=columns({"id": [("raw_db.sales.orders", "customer_id")]}, ns=SNOWFLAKE),
    )
    source = dataset("Raw_Db.Sales.Orders", SNOWFLAKE, schema=schema("customer_id"))
    normalize(
        [
            parse_event(run_event("COMPLETE", run_id(2), at(2), job="build", inputs=[source],
                                  outputs=[target]))
        ]
    )  # fmt: skip
    assert set(Dataset.objects.values_list("name", flat=True)) == {
        "RAW_DB.SALES.ORDERS",
        "ANALYTICS.PUBLIC.CUSTOMERS",
    }
    orders = Dataset.objects.get(name="RAW_DB.SALES.ORDERS")
    assert list(orders.fields.values_list("name", flat=True)) == ["customer_id"]


def test_it_finds_a_dataset_by_any_spelling_of_its_name(api, viewer):
    normalize(
        [parse_event(run_event("COMPLETE", run_id(3), at(3), job="load",
                               outputs=[dataset("RAW_DB.SALES.ORDERS", SNOWFLAKE,
                                                schema=schema("id"))]))]
    )  # fmt: skip
    resolved = resolve_node_id("dataset:snowflake://ACME-analytics:raw_db.sales.orders")
    assert str(resolved.id) == f"dataset:{SNOWFLAKE}:RAW_DB.SALES.ORDERS"
    field = resolve_node_id("datasetField:snowflake://acme-analytics:raw_db.Sales.orders:id")
    assert str(field.id) == f"datasetField:{SNOWFLAKE}:RAW_DB.SALES.ORDERS:id"
    # The API and the page, by URL.
    url = f"/api/v1/namespaces/{quote(SNOWFLAKE, safe='')}/datasets/raw_db.sales.orders"
    response = api(viewer).get(url)
    assert response.status_code == 200, response.content
    assert response.json()["name"] == "RAW_DB.SALES.ORDERS"
    listed = api(viewer).get(
        f"/api/v1/namespaces/{quote('Snowflake://ACME-Analytics', safe='')}/datasets"
    )
    assert [d["name"] for d in listed.json()["datasets"]] == ["RAW_DB.SALES.ORDERS"]


def test_it_imports_catalog_entries_under_their_canonical_names():
    parsed = catalog_file.parse(
        "datasets:\n"
        f"  - namespace: {SNOWFLAKE}\n"
        "    name: raw_db.sales.orders\n"
        "    description: Orders as sold\n"
    )
    catalog_file.apply(parsed)
    assert Dataset.objects.get().name == "RAW_DB.SALES.ORDERS"


# -- data stored before canonical names: twins merge -------------------------------------------


def _as_sent(monkeypatch):
    """Store events as this app did before names were canonical (the twins being tested)."""
    monkeypatch.setattr("ingest.events.naming.canonical", lambda namespace, name: (namespace, name))


def _lineage_of_twins(monkeypatch):
    _as_sent(monkeypatch)
    lower = dataset("raw_db.sales.orders", SNOWFLAKE, schema=schema("id", "customer_id"))
    upper = dataset("RAW_DB.SALES.ORDERS", SNOWFLAKE, schema=schema("id", "customer_id"))
    totals = dataset(
        "RAW_DB.MARTS.TOTALS",
        SNOWFLAKE,
        schema=schema("customer_id"),
        columnLineage=columns(
            {"customer_id": [("RAW_DB.SALES.ORDERS", "customer_id")]}, ns=SNOWFLAKE
        ),
    )
    normalize(
        [
            parse_event(e)
            for e in (
                run_event("COMPLETE", run_id(1), at(1), job="load", outputs=[lower]),
                run_event("COMPLETE", run_id(2), at(2), job="report", inputs=[upper],
                          outputs=[totals]),
            )
        ]
    )  # fmt: skip
    monkeypatch.undo()
    twin = Dataset.objects.get(name="raw_db.sales.orders")
    customer = catalog_actions.ensure_subject_kind("customer")
    steward = catalog_actions.Actor(name="sam-steward")
    catalog_actions.update_dataset(
        twin, {"owners": [catalog_actions.OwnerSpec("team-sales", "DATA_OWNER")]}, steward
    )
    catalog_actions.update_field(
        twin.fields.get(name="customer_id"),
        {"pii_category": PiiCategory.IDENTIFIER, "subject_kind": customer},
        steward,
    )
    return twin


def test_it_merges_twins_keeping_their_lineage_fields_flags_and_history(monkeypatch):
    _lineage_of_twins(monkeypatch)
    assert Dataset.objects.filter(name__iexact="raw_db.sales.orders").count() == 2

    report = canonicalise_names()

    assert report.merged == [
        (f"dataset:{SNOWFLAKE}:raw_db.sales.orders", f"dataset:{SNOWFLAKE}:RAW_DB.SALES.ORDERS")
    ]
    orders = Dataset.objects.get(name__iexact="raw_db.sales.orders")
    assert orders.name == "RAW_DB.SALES.ORDERS"
    # Lineage through the one dataset: written by load, read by report, column by column.
    assert sorted((e.job.name, e.direction) for e in orders.edges.all()) == [
        ("load", "out"),
        ("report", "in"),
    ]
    (edge,) = ColumnEdge.objects.all()
    assert (edge.source_field.dataset_id, edge.source_field.name) == (orders.pk, "customer_id")
    assert sorted(orders.fields.values_list("name", flat=True)) == ["customer_id", "id"]
    assert orders.versions.count() == 1  # both spellings sent the same schema
    # What the steward said of the twin holds for the table, and flows downstream.
    field = orders.fields.get(name="customer_id")
    assert (field.pii_category, field.subject_kind.name) == (PiiCategory.IDENTIFIER, "customer")
    assert catalog_actions.owners_value(orders) == [{"name": "team-sales", "type": "DATA_OWNER"}]
    copy = DatasetField.objects.get(dataset__name="RAW_DB.MARTS.TOTALS", name="customer_id")
    assert (copy.flag_source, copy.pii_category) == (FlagSource.PROPAGATED, PiiCategory.IDENTIFIER)
    incremental = set(PropagatedFlag.objects.values_list("field_id", "source_id", "valid_to"))
    PropagatedFlag.objects.all().delete()
    propagation.recompute_all()
    assert set(PropagatedFlag.objects.values_list("field_id", "source_id", "valid_to")) == (
        incremental
    )
    # History: the steward's edits, and the merge itself.
    history = set(orders.changes.values_list("attribute", "field_name"))
    assert {("owners", ""), ("subject_kind", "customer_id"), ("merged", "")} <= history
    # Every spelling leads to it; doing it again changes nothing.
    assert str(resolve_node_id(f"dataset:{SNOWFLAKE}:raw_db.sales.orders").id) == orders.node_id
    assert canonicalise_names() == NamingReport()


def test_whoever_was_told_of_a_twin_is_told_of_the_table_it_merged_into(monkeypatch):
    from ops.models import Delivery, Notice, Subscription

    twin = _lineage_of_twins(monkeypatch)
    survivor = Dataset.objects.get(name="RAW_DB.SALES.ORDERS")
    told = Subscription.objects.create(name="sales team", dataset=twin, email="s@example.com")
    notice = Notice.objects.create(subscription=told, kind="schema", key="k", title="earlier")
    Delivery.objects.create(notice=notice, channel="email", target="s@example.com")
    # Another team subscribed under both names: told once after the merge.
    for ds in (twin, survivor):
        Subscription.objects.create(name="ops", dataset=ds, email="ops@example.com")

    canonicalise_names()

    told.refresh_from_db()
    assert told.dataset == survivor and told.active
    # What the team was told before the merge is still on record.
    assert list(told.notices.values_list("title", "deliveries__target")) == [
        ("earlier", "s@example.com")
    ]
    assert sorted(Subscription.objects.filter(dataset=survivor).values_list("email", "active")) == [
        ("ops@example.com", False),
        ("ops@example.com", True),
        ("s@example.com", True),
    ]


def test_it_makes_one_dataset_of_a_table_named_with_and_without_its_default_port(
    api, viewer, tmp_path
):
    sent = dataset("shop.public.orders", "postgres://shop-db", schema=schema("id", "email"))
    normalize([parse_event(run_event("COMPLETE", run_id(5), at(5), job="load", outputs=[sent]))])
    _sql_log(
        tmp_path,
        '{"query": "INSERT INTO shop.public.copy SELECT id, email FROM shop.public.orders", '
        '"start_time": "2026-03-06T00:00:00Z"}\n',
        dialect="postgres",
        namespace="postgres://shop-db:5432",
    )
    orders = Dataset.objects.get(name="shop.public.orders")
    assert orders.namespace.name == "postgres://shop-db:5432"
    assert Dataset.objects.count() == 2  # the orders and their copy
    assert {(e.job.name.split(".")[0], e.direction) for e in orders.edges.all()} == {
        ("load", "out"),
        ("insert", "in"),
    }
    # Looked up under either spelling, it is the one dataset.
    for raw in ("dataset:postgres://shop-db:shop.public.orders", orders.node_id):
        assert str(resolve_node_id(raw).id) == orders.node_id
    from ops.slis import Scope

    assert orders in Scope(namespace="postgres://shop-db").datasets()  # an SLI scope
    bare = quote("postgres://shop-db", safe="")
    for path in ("", "/versions"):
        found = api(viewer).get(f"/api/v1/namespaces/{bare}/datasets/shop.public.orders{path}")
        assert found.status_code == 200, (path, found.content)
    response = api(viewer).get(
        "/api/v1/lineage", {"nodeId": "dataset:postgres://shop-db:shop.public.orders"}
    )
    assert response.status_code == 200, response.content
    assert f"{orders.node_id}" in {node["id"] for node in response.json()["graph"]}


@pytest.mark.parametrize(
    ("migration_name", "spellings", "canonical_ns"),
    [
        (
            "0010_default_ports",
            ("postgres://shop-db", "postgres://shop-db:5432"),
            "postgres://shop-db:5432",
        ),
        (
            "0011_multi_host_ports",
            ("postgres://a,b:5433", "postgres://a:5432,b:5433"),
            "postgres://a:5432,b:5433",
        ),
    ],
)
def test_the_migration_moves_datasets_stored_without_their_port(
    monkeypatch, capsys, migration_name, spellings, canonical_ns
):
    _as_sent(monkeypatch)
    for ns in spellings:
        sent = dataset("shop.public.orders", ns, schema=schema("id"))
        normalize(
            [parse_event(run_event("COMPLETE", run_id(6), at(6), job="load", outputs=[sent]))]
        )
    monkeypatch.undo()
    assert Dataset.objects.count() == 2
    migration = importlib.import_module(f"ingest.migrations.{migration_name}")

    migration.canonical_names(django_apps, None)

    assert "0 datasets renamed, 1 twins merged" in capsys.readouterr().out
    orders = Dataset.objects.get()
    assert (orders.namespace.name, orders.name) == (canonical_ns, "shop.public.orders")
    assert [(e.job.name, e.direction) for e in orders.edges.all()] == [("load", "out")]


def test_the_migration_moves_aliases_and_subscriptions_to_the_namespace_with_its_port(
    monkeypatch, capsys
):
    from catalog.models import DatasetAlias
    from ops.models import Subscription

    _as_sent(monkeypatch)
    sent = dataset("shop.public.orders", "postgres://shop-db", schema=schema("id"))
    normalize([parse_event(run_event("COMPLETE", run_id(8), at(8), job="load", outputs=[sent]))])
    monkeypatch.undo()
    bare = Namespace.objects.get(name="postgres://shop-db")
    orders = Dataset.objects.get()
    DatasetAlias.objects.create(namespace=bare, name="shop.public.orders_v1", dataset=orders)
    told = Subscription.objects.create(name="shop team", namespace=bare, email="t@example.com")
    migration = importlib.import_module("ingest.migrations.0010_default_ports")

    migration.canonical_names(django_apps, None)

    with_port = Namespace.objects.get(name="postgres://shop-db:5432")
    assert Dataset.objects.get().namespace == with_port
    assert DatasetAlias.objects.get().namespace == with_port
    told.refresh_from_db()
    assert told.namespace == with_port
    found = resolve_node_id("dataset:postgres://shop-db:shop.public.orders_v1")
    assert found.pk == orders.pk
    capsys.readouterr()
    migration.canonical_names(django_apps, None)
    assert capsys.readouterr().out == ""  # nothing left to do


def test_it_renames_a_dataset_stored_under_another_spelling(monkeypatch):
    _as_sent(monkeypatch)
    normalize(
        [parse_event(run_event("COMPLETE", run_id(4), at(4), job="load",
                               outputs=[dataset("Shop.Public.Orders", "postgresql://DB:5432",
                                                schema=schema("id"))]))]
    )  # fmt: skip
    monkeypatch.undo()

    report = canonicalise_names()

    ds = Dataset.objects.get()
    assert (ds.namespace.name, ds.name) == ("postgres://db:5432", "shop.public.orders")
    assert report.renamed == [("dataset:postgresql://DB:5432:Shop.Public.Orders", ds.node_id)]
    assert ds.changes.filter(attribute="name").exists()
    assert [(e.job.name, e.direction) for e in ds.edges.all()] == [("load", "out")]


def test_the_migration_merges_the_twins_a_database_holds(monkeypatch, capsys):
    _lineage_of_twins(monkeypatch)
    migration = importlib.import_module("ingest.migrations.0009_canonical_dataset_names")

    migration.canonical_names(django_apps, None)

    assert "0 datasets renamed, 1 twins merged, 0 symlinked" in capsys.readouterr().out
    orders = Dataset.objects.get(name__iexact="raw_db.sales.orders")
    assert orders.name == "RAW_DB.SALES.ORDERS"
    assert orders.changes.filter(attribute="merged").count() == 1
    migration.canonical_names(django_apps, None)  # nothing left to do
    assert capsys.readouterr().out == ""


# -- symlinks: a dataset's other names are aliases, not datasets ---------------------------------

HIVE = "hive://metastore:9083"
PATH = "/warehouse/raw/orders"


def _with_symlink(n, when, **facets):
    return dataset(
        PATH,
        "file",
        symlinks={"identifiers": [{"namespace": HIVE, "name": "raw.orders", "type": "TABLE"}]},
        **facets,
    )


def test_it_makes_a_symlinked_name_an_alias_that_lineage_and_lookups_land_on(api, viewer, client):
    normalize(
        [parse_event(run_event("COMPLETE", run_id(5), at(5), job="load",
                               outputs=[_with_symlink(5, at(5), schema=schema("id"))]))]
    )  # fmt: skip
    # A query log, or another producer, names the table by its metastore name.
    report = dataset("raw.orders", HIVE)
    normalize(
        [parse_event(run_event("COMPLETE", run_id(6), at(6), job="report", inputs=[report],
                               outputs=[dataset("marts.totals", HIVE)]))]
    )  # fmt: skip
    orders = Dataset.objects.get(name=PATH)
    assert set(Dataset.objects.values_list("name", flat=True)) == {PATH, "marts.totals"}
    assert sorted((e.job.name, e.direction) for e in orders.edges.all()) == [
        ("load", "out"),
        ("report", "in"),
    ]
    body = api(viewer).get(f"/api/v1/namespaces/file/datasets/{quote(PATH, safe='')}").json()
    assert body["aliases"] == [{"namespace": HIVE, "name": "raw.orders"}]
    by_alias = api(viewer).get(f"/api/v1/namespaces/{quote(HIVE, safe='')}/datasets/raw.orders")
    assert by_alias.json()["nodeId"] == f"dataset:file:{PATH}"
    assert str(resolve_node_id(f"dataset:{HIVE}:raw.orders").id) == f"dataset:file:{PATH}"
    field = resolve_node_id(f"datasetField:{HIVE}:raw.orders:id")
    assert str(field.id) == f"datasetField:file:{PATH}:id"
    # The pages: the dataset by its alias, and the search finds it by its alias's name.
    client.force_login(viewer)
    page = client.get(reverse("dataset-detail"), {"namespace": HIVE, "name": "raw.orders"})
    assert page.status_code == 200
    assert f'Also named <span class="mono">{HIVE}:raw.orders</span>' in page.content.decode()
    listing = client.get(reverse("dataset-list"), {"q": "raw.orders"}).content.decode()
    assert PATH in listing, listing[listing.find("<main") :]


def test_a_dataset_stored_before_its_name_became_an_alias_merges_into_it(
    django_capture_on_commit_callbacks,
):
    # The metastore name was seen first, as a dataset of its own, with lineage and an owner.
    normalize(
        [parse_event(run_event("COMPLETE", run_id(7), at(7), job="ingest_orders",
                               outputs=[dataset("raw.orders", HIVE, schema=schema("id"))]))]
    )  # fmt: skip
    twin = Dataset.objects.get(name="raw.orders")
    catalog_actions.update_dataset(
        twin,
        {"owners": [catalog_actions.OwnerSpec("team-sales")]},
        catalog_actions.Actor(name="sam-steward"),
    )
    # Then Spark names the table by its path, with the metastore name as a symlink.
    with django_capture_on_commit_callbacks(execute=True):
        normalize(
            [parse_event(run_event("COMPLETE", run_id(8), at(8), job="load",
                                   outputs=[_with_symlink(8, at(8), schema=schema("id"))]))]
        )  # fmt: skip
    (orders,) = Dataset.objects.all()
    assert orders.name == PATH
    assert sorted((e.job.name, e.direction) for e in orders.edges.all()) == [
        ("ingest_orders", "out"),
        ("load", "out"),
    ]
    assert [o["name"] for o in catalog_actions.owners_value(orders)] == ["team-sales"]
    assert list(orders.aliases.values_list("name", flat=True)) == ["raw.orders"]
    assert orders.changes.filter(attribute="merged").exists()


def test_datasets_stored_as_symlink_aliases_before_become_aliases():
    normalize(
        [parse_event(run_event("COMPLETE", run_id(9), at(9), job="load",
                               outputs=[dataset(PATH, "file", schema=schema("id"))]))]
    )  # fmt: skip
    orders = Dataset.objects.get()
    # As the normaliser used to record a symlink: a dataset row pointing at the table.
    legacy = Dataset.objects.create(
        namespace=Namespace.objects.create(name=HIVE), name="raw.orders", alias_of=orders
    )

    report = canonicalise_names()

    assert report.aliased == [(legacy.node_id, orders.node_id)]
    assert list(Dataset.objects.all()) == [orders]
    assert list(orders.aliases.values_list("name", flat=True)) == ["raw.orders"]
