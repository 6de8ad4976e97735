"""catalog.bulk: COPY-based inserts and updates on PostgreSQL, the ORM elsewhere."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import DataError, IntegrityError, connection, transaction

from catalog import bulk
from catalog.models import Dataset, Namespace, RetentionAction, RetentionPolicy
from graph import revision
from graph.models import Direction, Job, Run, RunState, TableEdge
from tests.graph_builders import T0, T1, T2

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def wiring():
    ns = Namespace.objects.create(name="postgres://db:5432")
    job = Job.objects.create(namespace=ns, name="etl.daily", created_at=T0, updated_at=T0)
    datasets = [
        Dataset.objects.create(namespace=ns, name=f"public.t{i}", first_seen=T0, last_seen=T0)
        for i in range(3)
    ]
    return job, datasets


def test_it_inserts_rows_and_gives_each_its_primary_key(wiring):
    job = wiring[0]
    runs = [
        Run(
            run_uuid=uuid.uuid4(),
            job=job,
            state=RunState.COMPLETED,
            created_at=T1,
            facets={"sql": {"query": "select 1"}, "n": [1, 2]},
        )
        for _ in range(3)
    ]
    bulk.insert(Run, runs)
    assert all(run.pk for run in runs)
    stored = {r.pk: r for r in Run.objects.filter(job=job)}
    assert set(stored) == {run.pk for run in runs}
    assert stored[runs[0].pk].facets == {"sql": {"query": "select 1"}, "n": [1, 2]}
    assert stored[runs[0].pk].run_uuid == runs[0].run_uuid


def test_it_skips_rows_that_break_a_unique_constraint_when_asked(wiring):
    job, datasets = wiring
    TableEdge.objects.create(job=job, dataset=datasets[0], direction=Direction.INPUT, valid_from=T0)
    fresh = [
        TableEdge(job=job, dataset=d, direction=Direction.INPUT, valid_from=T1) for d in datasets
    ]
    bulk.insert(TableEdge, fresh, ignore_conflicts=True)
    # One open edge per (job, dataset, direction): the first dataset's stays as it was.
    assert TableEdge.objects.count() == 3
    assert TableEdge.objects.get(dataset=datasets[0]).valid_from == T0


def test_it_inserts_tuples_of_named_fields(wiring):
    job, datasets = wiring
    names = ("job_id", "dataset_id", "direction", "valid_from", "valid_to")
    rows = [(job.pk, d.pk, Direction.OUTPUT, T0, T1) for d in datasets]
    bulk.insert_values(TableEdge, names, rows)
    stored = sorted(TableEdge.objects.values_list(*names))
    assert stored == sorted(rows)
    assert all(TableEdge.objects.values_list("pk", flat=True))


def test_it_skips_tuples_that_break_a_unique_constraint_when_asked(wiring):
    job, datasets = wiring
    TableEdge.objects.create(job=job, dataset=datasets[0], direction=Direction.INPUT, valid_from=T0)
    names = ("job_id", "dataset_id", "direction", "valid_from")
    rows = [(job.pk, d.pk, Direction.INPUT, T1) for d in datasets]
    bulk.insert_values(TableEdge, names, rows, ignore_conflicts=True)
    assert TableEdge.objects.count() == 3
    assert TableEdge.objects.get(dataset=datasets[0]).valid_from == T0
    with pytest.raises(IntegrityError), transaction.atomic():
        bulk.insert_values(TableEdge, names, rows[1:2] * 2)
    assert TableEdge.objects.count() == 3


def test_it_inserts_json_fields_from_tuples(wiring):
    job = wiring[0]
    uid = uuid.uuid4()
    names = ("run_uuid", "job_id", "state", "created_at", "facets", "facet_times")
    bulk.insert_values(Run, names, [(uid, job.pk, RunState.NEW, T1, {"a": [1]}, {})])
    assert Run.objects.get(run_uuid=uid).facets == {"a": [1]}


def test_values_of_every_column_type_arrive_as_given(wiring):
    job = wiring[0]
    uid = uuid.uuid4()
    names = ("run_uuid", "job_id", "state", "created_at", "ended_at", "facets", "facet_times")
    # A UUID given as text, an enum member, a NULL timestamp, nested JSON.
    row: tuple[object, ...] = (
        str(uid),
        job.pk,
        RunState.FAILED,
        T1,
        None,
        {"x": {"y": [1, "z", None]}},
        {},
    )
    bulk.insert_values(Run, names, [row])
    stored = Run.objects.get(run_uuid=uid)
    assert (stored.state, stored.created_at, stored.ended_at) == (RunState.FAILED, T1, None)
    assert stored.facets == {"x": {"y": [1, "z", None]}}
    if connection.vendor == "postgresql":
        assert all(bulk._binary_type(f) for f in Run._meta.concrete_fields)


def test_a_column_type_without_a_binary_form_goes_as_text():
    rows = [
        RetentionPolicy(
            name=f"p{i}", duration=timedelta(days=i, hours=3), action=RetentionAction.DELETE
        )
        for i in range(1, 3)
    ]
    bulk.insert(RetentionPolicy, rows)
    assert sorted(RetentionPolicy.objects.values_list("name", "duration")) == [
        ("p1", timedelta(days=1, hours=3)),
        ("p2", timedelta(days=2, hours=3)),
    ]
    if connection.vendor == "postgresql":
        duration = RetentionPolicy._meta.get_field("duration")
        assert bulk._binary_type(duration) is None  # interval: the text stream


def test_a_value_too_long_for_its_column_is_refused_and_nothing_is_written(wiring):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite does not hold text to a column's length")
    job, datasets = wiring
    names = ("job_id", "dataset_id", "direction", "valid_from")
    rows = [(job.pk, datasets[0].pk, Direction.INPUT, T0), (job.pk, datasets[1].pk, "sideways", T0)]
    with pytest.raises(DataError), transaction.atomic():
        bulk.insert_values(TableEdge, names, rows)
    assert not TableEdge.objects.exists()


def test_a_failed_insert_writes_nothing(wiring):
    job, datasets = wiring
    rows = [TableEdge(job=job, dataset=datasets[0], direction=Direction.INPUT, valid_from=T0)] * 2
    with pytest.raises(IntegrityError), transaction.atomic():
        bulk.insert(TableEdge, rows)
    assert not TableEdge.objects.exists()


def test_it_updates_the_named_fields_only(wiring):
    job, datasets = wiring
    edges = [
        TableEdge.objects.create(job=job, dataset=d, direction=Direction.OUTPUT, valid_from=T0)
        for d in datasets
    ]
    for edge in edges[:2]:
        edge.valid_to = T2
        edge.valid_from = T1  # not named: must not be written
    bulk.update(TableEdge, edges[:2], ["valid_to"])
    stored = {e.pk: e for e in TableEdge.objects.all()}
    assert [stored[e.pk].valid_to for e in edges] == [T2, T2, None]
    assert {e.valid_from for e in stored.values()} == {T0}


def test_bulk_writes_move_the_lineage_revision(wiring):
    job, datasets = wiring
    before = revision.current()
    bulk.insert(
        TableEdge,
        [TableEdge(job=job, dataset=datasets[1], direction=Direction.INPUT, valid_from=T0)],
    )
    after_insert = revision.current()
    assert after_insert.value > before.value
    edge = TableEdge.objects.get()
    edge.valid_to = T1
    bulk.update(TableEdge, [edge], ["valid_to"])
    assert revision.current().value > after_insert.value
