"""``__any_of``: the same rows as ``__in``, on fields and relations, empty lists included."""

from __future__ import annotations

import uuid

import pytest

from catalog.lookups import array_literal
from catalog.models import Dataset, DatasetField
from tests.factories import dataset as make_dataset

pytestmark = pytest.mark.django_db


def test_any_of_matches_in_on_keys_and_relations():
    datasets = [make_dataset(name=f"shop.public.t{i}", fields=("id", "name")) for i in range(4)]
    wanted = [datasets[0].pk, datasets[2].pk]
    assert set(Dataset.objects.filter(pk__any_of=wanted)) == {datasets[0], datasets[2]}
    by_any = set(DatasetField.objects.filter(dataset_id__any_of=wanted))
    assert by_any == set(DatasetField.objects.filter(dataset_id__in=wanted)) and len(by_any) == 4


def test_any_of_an_empty_list_matches_nothing_and_excludes_nothing():
    make_dataset(name="shop.public.t", fields=("id",))
    assert not Dataset.objects.filter(pk__any_of=[]).exists()
    assert Dataset.objects.exclude(pk__any_of=[]).count() == 1


def test_any_of_matches_names_with_quotes_backslashes_braces_and_commas():
    names = ['shop."quoted"', "shop.back\\slash", "shop.{braces},comma", "NULL", "shop. spaced "]
    made = {name: make_dataset(name=name) for name in [*names, "shop.other"]}
    found = set(Dataset.objects.filter(name__any_of=names))
    assert found == {made[name] for name in names}


def test_any_of_matches_uuids():
    from graph.models import Job, Run

    namespace = make_dataset().namespace
    job = Job.objects.create(namespace=namespace, name="shop.load")
    runs = [Run.objects.create(job=job, run_uuid=uuid.uuid4()) for _ in range(3)]
    wanted = [runs[0].run_uuid, runs[2].run_uuid, uuid.uuid4()]
    assert set(Run.objects.filter(run_uuid__any_of=wanted)) == {runs[0], runs[2]}


def test_any_of_never_matches_a_name_longer_than_the_column_holds():
    made = make_dataset(name="x" * 1024)
    assert not Dataset.objects.filter(name__any_of=["x" * 1500]).exists()
    assert list(Dataset.objects.filter(name__any_of=["x" * 1024])) == [made]


@pytest.mark.parametrize(
    "values, column, literal",
    [
        ([3, 1, 2], "bigint", ("{3,1,2}", "bigint[]")),
        ([], "integer", ("{}", "bigint[]")),
        ([2**63], "bigint", None),
        ([uuid.UUID(int=1)], "uuid", ("{00000000-0000-0000-0000-000000000001}", "uuid[]")),
        (['a"b', "c\\d", "e,f"], "varchar(1024)", ('{"a\\"b","c\\\\d","e,f"}', "text[]")),
        (["10.0.0.1"], "inet", None),
        ([1, "a"], "bigint", None),
        ([True], "boolean", None),
        ([None, 1], "bigint", None),
    ],
)
def test_array_literal_covers_ints_uuids_and_strings_of_their_own_columns(values, column, literal):
    assert array_literal(values, column) == literal


def test_in_windows_holds_every_row_in_its_own_window_and_no_other():
    """Each job's runs in its own [start, end] (end None: open), the flag set: exactly the
    rows a per-row check keeps (on PostgreSQL; elsewhere a superset of them)."""
    from datetime import UTC, datetime, timedelta

    from django.db import connection

    from catalog.lookups import in_windows
    from graph.models import Run
    from tests.graph_builders import LineageBuilder

    g = LineageBuilder()
    g.datasets("a", "b")
    for name in ("j0", "j1", "j2"):
        g.job(name, reads=["a"], writes=["b"])
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for n in range(30):
        run = g.run(f"j{n % 3}", at=t0 + timedelta(hours=n))
        Run.objects.filter(pk=run.pk).update(edges_applied=n % 4 != 0)
    jobs = {name: g.jobs[name].pk for name in ("j0", "j1", "j2")}
    windows = {
        jobs["j0"]: (t0 + timedelta(hours=3), t0 + timedelta(hours=12)),
        jobs["j1"]: (t0 + timedelta(hours=10), None),
        jobs["j2"]: (t0 + timedelta(hours=29), t0 + timedelta(hours=29)),
    }

    def within(run: Run) -> bool:
        start, end = windows[run.job_id]
        return start <= run.ended_at and (end is None or run.ended_at <= end)

    found = set(
        Run.objects.filter(in_windows(Run, "job", "ended_at", windows, flag="edges_applied"))
    )
    wanted = {run for run in Run.objects.filter(edges_applied=True) if within(run)}
    assert wanted and wanted <= found
    if connection.vendor == "postgresql":
        assert found == wanted
    assert {r for r in found if within(r) and r.edges_applied} == wanted
    assert not Run.objects.filter(in_windows(Run, "job", "ended_at", {})).exists()


def test_any_of_and_where_in_take_more_values_than_sqlite_takes_parameters():
    """On SQLite a list of parameters fails past its limit (32,766 in a stock build): here
    the limit is lowered to 20 and 500 ids are asked for."""
    import sqlite3

    from django.db import connection

    from catalog.lookups import where_in

    made = [make_dataset(name=f"shop.public.t{i}") for i in range(3)]
    wanted = [made[0].pk, made[2].pk, *range(10**6, 10**6 + 500)]
    connection.ensure_connection()
    lowered = connection.vendor == "sqlite"
    if lowered:
        before = connection.connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 20)
    try:
        assert set(Dataset.objects.filter(pk__any_of=wanted)) == {made[0], made[2]}
        assert list(Dataset.objects.exclude(pk__any_of=wanted)) == [made[1]]
        assert set(Dataset.objects.filter(name__any_of=[d.name for d in made] * 200)) == set(made)
        where, params = where_in("id", wanted)
        table = Dataset._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id FROM {table} WHERE {where} ORDER BY id", params)
            assert [row[0] for row in cursor.fetchall()] == [made[0].pk, made[2].pk]
    finally:
        if lowered:
            connection.connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, before)
