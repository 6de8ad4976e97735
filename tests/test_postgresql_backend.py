"""lineage_site.postgresql: Django's PostgreSQL backend with psycopg's C timestamp loader."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection

from catalog.models import Dataset, Namespace
from lineage_site.postgresql.base import zone_loader

pytestmark = pytest.mark.django_db

T = datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC)


@pytest.fixture
def postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("the PostgreSQL backend is tested on PostgreSQL")


@pytest.fixture
def datasets():
    ns = Namespace.objects.create(name="postgres://db:5432")
    for i in range(3):
        Dataset.objects.create(
            namespace=ns, name=f"t{i}", first_seen=T + timedelta(days=i), last_seen=T
        )


def test_postgresql_urls_use_the_project_backend(postgresql):
    assert connection.settings_dict["ENGINE"] == "lineage_site.postgresql"


def test_timestamps_read_back_as_written_in_django_zone(postgresql, datasets):
    values = list(Dataset.objects.order_by("name").values_list("first_seen", flat=True))
    assert values == [T, T + timedelta(days=1), T + timedelta(days=2)]
    assert all(v.tzinfo is UTC for v in values)
    # A server-side cursor (named) takes the same loader.
    streamed = [d.first_seen for d in Dataset.objects.order_by("name").iterator(chunk_size=2)]
    assert streamed == values and all(v.tzinfo is UTC for v in streamed)


def test_raw_cursors_read_timestamps_in_django_zone(postgresql):
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::timestamptz, 'infinity'::timestamptz < now()", [T])
        value, _ = cursor.fetchone()
    assert value == T and value.tzinfo is UTC


def test_the_loader_sets_the_zone_it_is_made_for(postgresql):
    other = timezone(timedelta(hours=2))
    with connection.cursor() as cursor:
        raw = cursor.cursor
        raw.adapters.register_loader("timestamptz", zone_loader(other))
        raw.execute("SELECT '2026-03-01 12:00:00+00'::timestamptz")
        assert raw.fetchone()[0] == datetime(2026, 3, 1, 12, 0, tzinfo=other)
        raw.adapters.register_loader("timestamptz", zone_loader(None))
        raw.execute("SELECT '2026-03-01 12:00:00+00'::timestamptz")
        assert raw.fetchone()[0] == datetime(2026, 3, 1, 12, 0)
