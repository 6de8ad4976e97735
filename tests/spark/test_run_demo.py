"""`manage.py run_demo`: the demo lakehouse posts its lineage to the app over real HTTP."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from catalog.models import ApiToken, Dataset, FlagSource
from graph.models import ColumnEdge
from ingest.models import EventState, RawEvent, SqlLogUpload
from ingest.sql_queries import readers_of

# Not transactional: the server thread shares this test's in-memory SQLite connection.
pytestmark = [pytest.mark.spark, pytest.mark.django_db]


def test_it_loads_the_demo_over_http_and_applies_its_catalog(
    tmp_path: Path, django_capture_on_commit_callbacks: Callable[..., Any]
) -> None:
    lake = tmp_path / "lakehouse"
    out = io.StringIO()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("run_demo", "--days", "1", "--data-dir", str(lake), stdout=out)

    assert "28 events sent" in out.getvalue()  # 13 jobs and the day's parent, START + COMPLETE
    # The demo's SQL query log was loaded too (a START and a COMPLETE per statement), and it
    # is listed with the uploads.
    statements = (lake / "sql_logs/spark_sql_queries.jsonl").read_text().splitlines()
    writes = [s for s in statements if not json.loads(s)["query"].startswith("SELECT")]
    assert len(writes) >= 2
    assert RawEvent.objects.count() == 28 + 2 * len(writes)
    upload = SqlLogUpload.objects.get()
    assert (upload.records, upload.problem_count, upload.source) == (len(statements), 0, "command")
    assert set(RawEvent.objects.values_list("state", flat=True)) == {EventState.DONE}
    assert ColumnEdge.objects.filter(job__name="marts.customer_360").exists()
    assert not (lake / "lineage-spool.ndjson").exists()
    customers = Dataset.objects.get(namespace__name="file", name=str(lake / "raw/customers"))
    email = customers.fields.get(name="email")
    assert email.subject_kind is not None  # the demo's catalog file was applied
    assert not ApiToken.objects.filter(revoked_at__isnull=True, name="run_demo").exists()
    # Personal data follows the data: the copies downstream carry the flags the raw layer
    # declares, propagated along column lineage.
    staging = Dataset.objects.get(namespace__name="file", name=str(lake / "staging/customers"))
    # The analyst's plain SELECTs are reads of the dataset, under the name Spark's table has.
    names = [(staging.namespace.name, staging.name)]
    names += [(a.namespace.name, a.name) for a in staging.aliases.select_related("namespace")]
    assert [(r.reader, r.reads) for r in readers_of(names)] == [("ana.lytics", 1)]
    copied = staging.fields.get(name="name")
    assert (copied.pii_category, copied.flag_source) == ("name", FlagSource.PROPAGATED)
    mart = Dataset.objects.get(namespace__name="file", name=str(lake / "marts/customer_360"))
    full_name = mart.fields.get(name="full_name")
    assert (full_name.pii_category, full_name.flag_source) == ("name", FlagSource.PROPAGATED)
    # Spark names each table twice (its path, and <db>.<table> in the symlinks
    # facet): one dataset, with the catalog name as its alias.
    assert not Dataset.objects.filter(namespace__name="spark_catalog").exists()
    revenue = Dataset.objects.get(namespace__name="file", name=str(lake / "marts/daily_revenue"))
    assert list(revenue.aliases.values_list("namespace__name", "name")) == [
        ("spark_catalog", "marts.daily_revenue")
    ]
    cust_key = mart.fields.get(name="cust_key")
    assert cust_key.subject_kind is not None and cust_key.flag_source == FlagSource.PROPAGATED
    # A rerun sends the very same events (see test_demo_lakehouse), which are stored once.
