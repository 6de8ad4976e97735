"""`manage.py run_demo`: the demo lakehouse posts its lineage to the app over real HTTP."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command

from catalog.models import ApiToken, Dataset
from ingest.models import RawEvent

pytestmark = [pytest.mark.spark, pytest.mark.django_db(transaction=True)]


def test_it_loads_the_demo_over_http_and_applies_its_catalog(tmp_path: Path) -> None:
    lake = tmp_path / "lakehouse"
    out = io.StringIO()
    call_command("run_demo", "--days", "1", "--data-dir", str(lake), stdout=out)

    assert "events sent" in out.getvalue()
    events = RawEvent.objects.count()
    assert events == 2 * 14  # 13 jobs and the day's parent run, START and COMPLETE each
    assert not (lake / "lineage-spool.ndjson").exists()
    customers = Dataset.objects.get(name=str(lake / "raw/customers"))
    email = customers.fields.get(name="email")
    assert email.subject_kind is not None  # the demo's catalog file was applied
    assert not ApiToken.objects.filter(revoked_at__isnull=True, name="run_demo").exists()
    # A rerun sends the very same events (see test_demo_lakehouse), which are stored once.
