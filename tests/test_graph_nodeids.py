"""Node ids: parsed once into typed values, resolved against the namespaces that exist."""

from __future__ import annotations

import pytest

from graph.nodeids import (
    DatasetNodeId,
    FieldNodeId,
    JobNodeId,
    MalformedNodeId,
    UnknownNodeId,
    namespace_candidates,
    parse_node_id,
)
from graph.resolve import resolve_node_id
from tests.graph_builders import LineageBuilder, node_store_written

NAMESPACES = {"postgres://shop-db:5432", "postgres://shop-db", "s3://acme-lake", "file"}


def test_it_parses_a_namespace_holding_colons():
    assert parse_node_id("dataset:postgres://shop-db:5432:public.orders", NAMESPACES) == (
        DatasetNodeId("postgres://shop-db:5432", "public.orders")
    )


def test_it_prefers_the_longest_matching_namespace():
    # "postgres://shop-db" also matches; the longer namespace wins.
    node = parse_node_id("dataset:postgres://shop-db:5432:orders", NAMESPACES)
    assert node.namespace == "postgres://shop-db:5432"


def test_it_keeps_slashes_and_colons_in_names():
    node = parse_node_id("dataset:s3://acme-lake:/raw/orders:2025/part", NAMESPACES)
    assert node == DatasetNodeId("s3://acme-lake", "/raw/orders:2025/part")
    assert str(node) == "dataset:s3://acme-lake:/raw/orders:2025/part"


def test_it_parses_jobs_and_fields():
    assert parse_node_id("job:file:etl.daily", NAMESPACES) == JobNodeId("file", "etl.daily")
    assert parse_node_id("datasetField:file:/lake/t:email", NAMESPACES) == FieldNodeId(
        "file", "/lake/t", "email"
    )


@pytest.mark.parametrize(
    "raw",
    ["", "orders", "table:file:x", "dataset:nocolon", "datasetField:file:onlydataset"],
)
def test_it_rejects_malformed_ids(raw):
    with pytest.raises(MalformedNodeId):
        parse_node_id(raw, NAMESPACES)


def test_it_reports_unknown_namespaces():
    with pytest.raises(UnknownNodeId) as info:
        parse_node_id("dataset:mysql://other:3306:t", NAMESPACES)
    assert info.value.raw == "dataset:mysql://other:3306:t"


def test_it_lists_namespace_candidates_longest_first():
    assert namespace_candidates("a:b:c") == ["a:b", "a"]


@pytest.mark.django_db
def test_it_resolves_ids_against_the_database():
    g = LineageBuilder(namespace="postgres://shop-db:5432")
    ds = g.dataset("public.orders", fields=("id", "email"))
    g.job("load", writes=["public.orders"])
    resolved = resolve_node_id("dataset:postgres://shop-db:5432:public.orders")
    assert resolved.pk == ds.pk and resolved.dataset_pk == ds.pk
    job = resolve_node_id(f"job:{g.jobs_ns.name}:load")
    assert job.pk == g.jobs["load"].pk and job.kind == "job"
    field = resolve_node_id("datasetField:postgres://shop-db:5432:public.orders:email")
    assert field.pk == g.field("public.orders.email").pk
    assert field.dataset_pk == ds.pk


@pytest.mark.django_db
def test_it_resolves_fields_of_datasets_whose_names_hold_colons():
    g = LineageBuilder(namespace="s3://acme-lake")
    g.dataset("raw/orders:v2", fields=("id",))
    # An object key spelled with a leading slash is the same key (catalog.naming).
    resolved = resolve_node_id("datasetField:s3://acme-lake:/raw/orders:v2:id")
    assert resolved.id == FieldNodeId("s3://acme-lake", "raw/orders:v2", "id")


@pytest.mark.django_db
def test_it_raises_unknown_for_missing_datasets_and_fields():
    g = LineageBuilder(namespace="file")
    g.dataset("t", fields=("a",))
    for raw in ("dataset:file:nope", "datasetField:file:t:nope", "job:file:nope"):
        with pytest.raises(UnknownNodeId):
            resolve_node_id(raw)


def test_a_node_whose_row_went_is_unknown_at_once(db):
    from catalog.models import Dataset
    from graph import nodeids
    from tests.factories import dataset

    ds = dataset(namespace="s3://lake", name="raw/orders")
    raw = "dataset:s3://lake:raw/orders"
    assert resolve_node_id(raw).pk == ds.pk
    Dataset.objects.filter(pk=ds.pk).delete()
    with pytest.raises(nodeids.UnknownNodeId):
        resolve_node_id(raw)


def test_a_new_longer_namespace_takes_over_the_split(db):
    from tests.factories import dataset

    dataset(namespace="s3://lake", name="zone:orders")
    raw = "dataset:s3://lake:zone:orders"
    assert resolve_node_id(raw).id.name == "zone:orders"
    dataset(namespace="s3://lake:zone", name="orders")
    assert resolve_node_id(raw).id.namespace == "s3://lake:zone"


@pytest.mark.django_db
@pytest.mark.parametrize("with_directory", [True, False])
def test_it_resolves_the_longest_names_with_or_without_the_directory(settings, with_directory):
    g = LineageBuilder(namespace="s3://lake")
    g.dataset("zone", fields=("orders:v2:id",))
    g.dataset("zone:orders", fields=("v2:id",))
    g.dataset("zone:orders:v2", fields=("id",))
    if with_directory:
        node_store_written()  # on PostgreSQL; SQLite has none
    else:
        settings.GRAPH_SHARED_NODE_DATA = False
    found = resolve_node_id("datasetField:s3://lake:zone:orders:v2:id")
    assert found.id == FieldNodeId("s3://lake", "zone:orders:v2", "id")
    # A field id of thousands of colons under a namespace that exists: one split each.
    with pytest.raises(UnknownNodeId):
        resolve_node_id("datasetField:s3://lake:" + "x:" * 2000)
    with pytest.raises(UnknownNodeId):
        resolve_node_id("datasetField:" + "a:" * 2040)


def test_a_field_id_of_thousands_of_colons_is_a_404_not_a_500(api, viewer):
    LineageBuilder(namespace="a").dataset("a", fields=("a",))
    response = api(viewer).get(
        "/api/v1/column-lineage", {"nodeId": "datasetField:" + "a:" * 2040 + "a"}
    )
    assert response.status_code == 404, response.content


@pytest.mark.django_db
def test_a_field_through_an_alias_is_found_under_a_shorter_alias_name():
    from catalog.models import DatasetAlias, Namespace

    g = LineageBuilder(namespace="file")
    a = g.dataset("/w/a", fields=("v2:q",))
    b = g.dataset("/w/b", fields=("id",))
    hive = Namespace.objects.create(name="hive://ms:9083")
    DatasetAlias.objects.create(namespace=hive, name="t", dataset=a)
    DatasetAlias.objects.create(namespace=hive, name="t:v2", dataset=b)
    found = resolve_node_id("datasetField:hive://ms:9083:t:v2:q")
    assert str(found.id) == "datasetField:file:/w/a:v2:q"


@pytest.mark.django_db
def test_a_job_is_found_under_its_namespace_as_sent():
    g = LineageBuilder(namespace="postgres://shop-db:5432", jobs_namespace="postgres://shop-db")
    g.dataset("orders")
    g.job("load", writes=["orders"])
    for spelling in ("postgres://shop-db", "Snowflake://ACME"):
        g = LineageBuilder(namespace="postgres://shop-db:5432", jobs_namespace=spelling)
        g.job(f"load_{spelling[:4]}", writes=[])
        found = resolve_node_id(f"job:{spelling}:load_{spelling[:4]}")
        assert (found.id.namespace, found.kind) == (spelling, "job")
