"""Lineage facts keep their keys without database constraints ("Fact keys", graph/models.py).

Run inputs and outputs, table and column edges and schema sightings have no foreign key
constraint in the database, for the normaliser's speed. These tests prove what the
constraints would have: after every kind of write the normaliser does, each fact points at
rows that exist, and deleting a dataset, field, job, run or version through the app takes
its facts with it.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from django.db import connection

from catalog.models import Dataset, DatasetField, DatasetVersion
from graph.models import ColumnEdge, Job, Run, RunDataset, TableEdge
from ingest.events import parse_event
from ingest.models import SchemaObservation
from ingest.normalizer import normalize
from tests.ingest_builders import (
    PG,
    all_fixture_events,
    at,
    columns,
    dataset,
    dataset_event,
    drop,
    run_event,
    run_id,
    schema,
)

pytestmark = pytest.mark.django_db

# (model, key, model it points at) for every key without a database constraint.
FACT_KEYS: list[tuple[Any, str, Any]] = [
    (RunDataset, "run_id", Run),
    (RunDataset, "dataset_id", Dataset),
    (RunDataset, "dataset_version_id", DatasetVersion),
    (TableEdge, "job_id", Job),
    (TableEdge, "dataset_id", Dataset),
    (ColumnEdge, "job_id", Job),
    (ColumnEdge, "source_field_id", DatasetField),
    (ColumnEdge, "target_dataset_id", Dataset),
    (ColumnEdge, "target_field_id", DatasetField),
    (SchemaObservation, "dataset_id", Dataset),
]


def dangling() -> dict[str, int]:
    """{model.key: facts whose key points at no row} for every fact key."""
    found = {}
    for model, key, parent in FACT_KEYS:
        rows = model.objects.exclude(**{f"{key}__isnull": True}).exclude(
            **{f"{key}__in": parent.objects.values("pk")}
        )
        if count := rows.count():
            found[f"{model.__name__}.{key}"] = count
    return found


def ingest(*events):
    return normalize([parse_event(e) for e in events])


def run(n, day, inputs, outputs, job="etl.orders"):
    return [
        run_event("START", run_id(n), at(day, 1), job=job, inputs=inputs),
        run_event("COMPLETE", run_id(n), at(day, 2), job=job, inputs=inputs, outputs=outputs),
    ]


def lineage_history() -> list[dict]:
    """Runs that rewire, change schemas, carry column lineage, drop and rename datasets."""
    source = dataset("shop.orders", schema=schema("id", "email", "total"))
    out_v1 = dataset(
        "dw.orders",
        schema=schema("id", "email_hash"),
        columnLineage=columns(
            {"id": [("shop.orders", "id")], "email_hash": [("shop.orders", "email")]}
        ),
    )
    out_v2 = dataset(
        "dw.orders",
        schema=schema("id", "total"),
        columnLineage=columns({"id": [("shop.orders", "id")], "total": [("shop.orders", "total")]}),
    )
    renamed = dataset(
        "dw.orders_v2",
        lifecycleStateChange={
            "lifecycleStateChange": "RENAME",
            "previousIdentifier": {"namespace": PG, "name": "dw.orders"},
        },
    )
    return [
        *run(1, 1, [source], [out_v1]),
        *run(2, 2, [source, dataset("shop.refunds", schema=schema("id"))], [out_v2]),
        *run(3, 3, [source], [out_v1], job="etl.other"),
        drop("shop.refunds", at(4)),
        *run(4, 5, [source], [out_v2]),
        dataset_event(at(6), renamed),
        *run(5, 7, [dataset("dw.orders_v2")], [dataset("reports.daily")], job="etl.report"),
    ]


def test_the_fact_tables_have_no_database_constraints():
    if connection.vendor != "postgresql":
        pytest.skip("constraint introspection is checked on PostgreSQL")
    tables = {model._meta.db_table for model, _, _ in FACT_KEYS}
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints
        for table in tables:
            keys = [c for c in constraints(cursor, table).values() if c["foreign_key"]]
            assert keys == [], table


def test_every_fact_points_at_a_row_after_events_in_order():
    ingest(*lineage_history())
    assert RunDataset.objects.exists() and ColumnEdge.objects.exists()
    assert dangling() == {}


def test_every_fact_points_at_a_row_after_events_in_any_order():
    # Late events move versions back (the replay deletes and re-creates versions).
    events = lineage_history()
    for seed in range(3):
        random.Random(seed).shuffle(events)
        for event in events:
            ingest(event)
        assert dangling() == {}, seed


def test_every_fact_points_at_a_row_after_the_fixture_events():
    events = all_fixture_events()
    ingest(*events)
    ingest(*reversed(events))
    assert dangling() == {}


def test_deleting_through_the_app_takes_the_facts_along():
    ingest(*lineage_history())
    DatasetVersion.objects.filter(dataset__name="dw.orders").delete()
    assert dangling() == {}
    assert RunDataset.objects.filter(dataset__name="dw.orders", dataset_version=None).exists()
    DatasetField.objects.filter(dataset__name="shop.orders", name="email").delete()
    assert dangling() == {}
    Dataset.objects.filter(name="shop.orders").delete()
    assert dangling() == {}
    assert not TableEdge.objects.filter(dataset__name="shop.orders").exists()
    Run.objects.filter(job__name="etl.report").delete()
    assert dangling() == {}
    Job.objects.all().delete()
    assert dangling() == {}
    assert not TableEdge.objects.exists() and not ColumnEdge.objects.exists()
    assert not RunDataset.objects.exists()
