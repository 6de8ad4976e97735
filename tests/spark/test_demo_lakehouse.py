"""The demo lakehouse on Spark: derived lineage of every job, history, SQL log, idempotency."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.demo import data, runner
from pipelines.demo.jobs import CHANGE_DAY, JOBS
from pipelines.fingerprint import canonical_fingerprint
from tests.spark.conftest import CollectingTransport
from tests.spark.demo_lineage import completed_by_job, job_lineage

pytestmark = pytest.mark.spark

EXPECTED = yaml.safe_load(
    Path(__file__).with_name("expected_demo_lineage.yaml").read_text(encoding="utf-8")
)
DAY1 = data.simulated_day(1).isoformat()
CHANGED = data.simulated_day(CHANGE_DAY).isoformat()


@pytest.fixture(scope="module")
def demo(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run day 1 and the change day, then day 1 again, collecting every event."""
    root = tmp_path_factory.mktemp("lakehouse")
    first = CollectingTransport()
    summary = runner.run_demo(spark, str(root), days=[1, CHANGE_DAY], inner_transport=first)
    sql_log = Path(summary.sql_log_path).read_text(encoding="utf-8")
    legacy_left = Path(root, "reports/legacy_country_summary").exists()
    again = CollectingTransport()
    runner.run_demo(spark, str(root), days=[1], inner_transport=again)
    return {
        "root": str(root),
        "events": first.events,
        "rerun": again.events,
        "sql_log": sql_log,
        "legacy_left_after_drop": legacy_left,
    }


def _lineage_on(demo: dict[str, Any], day: str) -> dict[str, Any]:
    return {
        job: job_lineage(event, demo["root"])
        for job, event in completed_by_job(demo["events"], day).items()
    }


def test_it_derives_the_expected_column_lineage_for_every_demo_job(demo: dict[str, Any]) -> None:
    day1 = _lineage_on(demo, DAY1)
    expected_day1 = EXPECTED["day1"]
    assert sorted(day1) == sorted(expected_day1)
    for job in expected_day1:
        assert day1[job] == expected_day1[job], job

    changed = _lineage_on(demo, CHANGED)
    expected_changed = {**expected_day1, **EXPECTED[f"day{CHANGE_DAY}"]}
    for job, lineage in changed.items():
        assert lineage == expected_changed[job], job


def test_it_runs_every_demo_job_on_some_day(demo: dict[str, Any]) -> None:
    seen = {e["job"]["name"] for e in demo["events"]}
    assert {job.name for job in JOBS} | {runner.PARENT_JOB} == seen


def test_it_changes_a_jobs_inputs_and_drops_a_dataset_on_the_change_day(
    demo: dict[str, Any],
) -> None:
    day1, changed = _lineage_on(demo, DAY1), _lineage_on(demo, CHANGED)
    assert day1["reports.country_kpis"]["inputs"] == ["marts/customer_360", "marts/web_sessions"]
    assert changed["reports.country_kpis"]["inputs"] == [
        "marts/customer_360",
        "marts/daily_revenue",
    ]
    assert "reports.legacy_country_summary" in day1
    assert demo["legacy_left_after_drop"] is False
    assert "reports.legacy_country_summary" not in changed
    dropped = changed["maintenance.drop_legacy_country_summary"]["outputs"]
    assert dropped == {
        "reports/legacy_country_summary": {"fields": {}, "dataset": [], "lifecycle": "DROP"}
    }


def test_it_emits_start_before_complete_under_the_days_parent_run(demo: dict[str, Any]) -> None:
    by_run: dict[str, list[dict[str, Any]]] = {}
    for event in demo["events"]:
        by_run.setdefault(event["run"]["runId"], []).append(event)
    parents = {
        e["eventTime"][:10]: e["run"]["runId"]
        for e in demo["events"]
        if e["job"]["name"] == runner.PARENT_JOB
    }
    for events in by_run.values():
        assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
        assert events[0]["eventTime"] < events[1]["eventTime"]
        start = events[0]
        job_facets, run_facets = start["job"]["facets"], start["run"]["facets"]
        assert job_facets["jobType"]["integration"] == "SPARK"
        assert job_facets["jobType"]["processingType"] == "BATCH"
        assert run_facets["processing_engine"]["name"] == "spark"
        if start["job"]["name"] != runner.PARENT_JOB:
            parent = run_facets["parent"]
            assert parent["run"]["runId"] == parents[start["eventTime"][:10]]
            assert parent["job"] == {"namespace": runner.JOB_NAMESPACE, "name": runner.PARENT_JOB}


def test_it_describes_datasets_with_schema_owners_and_sql(demo: dict[str, Any]) -> None:
    complete = completed_by_job(demo["events"], DAY1)
    raw = complete["raw.customers"]["outputs"][0]["facets"]
    address = next(f for f in raw["schema"]["fields"] if f["name"] == "address")
    assert [f["name"] for f in address["fields"]] == ["street", "city", "postcode"]
    assert raw["ownership"]["owners"] == [{"name": "team:crm-platform", "type": "MAINTAINER"}]
    assert raw["dataSource"]["name"] == "file"

    revenue = complete["marts.daily_revenue"]
    assert revenue["job"]["facets"]["sql"]["dialect"] == "spark"
    assert revenue["job"]["facets"]["sql"]["query"].startswith(
        "INSERT OVERWRITE TABLE marts.daily_revenue"
    )
    symlink = revenue["outputs"][0]["facets"]["symlinks"]["identifiers"][0]
    assert symlink == {
        "namespace": "spark_catalog",
        "name": "marts.daily_revenue",
        "type": "TABLE",
    }
    assert "sql" not in complete["marts.customer_360"]["job"]["facets"]


def test_it_writes_a_sql_query_log_of_the_spark_sql_it_ran(demo: dict[str, Any]) -> None:
    records = [json.loads(line) for line in demo["sql_log"].splitlines()]
    assert {tuple(sorted(r)) for r in records} == {
        ("database", "dialect", "query", "query_id", "schema", "start_time", "status", "user")
    }
    targets = [r["query"].split("\n")[0] for r in records]
    assert (
        targets
        == [
            "INSERT OVERWRITE TABLE marts.daily_revenue",
            "INSERT OVERWRITE TABLE reports.top_customers",
            # The analyst's morning queries, run on Spark after the nightly batch.
            "SELECT country, SUM(revenue) AS revenue",
            "SELECT customer_id, country",
        ]
        * 2
    )
    by_analyst = [r for r in records if r["query"].startswith("SELECT")]
    assert {r["user"] for r in by_analyst} == {runner.ANALYST}
    assert by_analyst[0]["start_time"] == f"{DAY1}T09:00:00.000Z"
    assert {r["dialect"] for r in records} == {"spark"}
    assert {r["status"] for r in records} == {"success"}
    assert records[0]["start_time"].startswith(DAY1)


def test_it_sends_the_same_events_when_a_day_is_run_again(demo: dict[str, Any]) -> None:
    first = sorted(
        canonical_fingerprint(e) for e in demo["events"] if e["eventTime"].startswith(DAY1)
    )
    again = sorted(canonical_fingerprint(e) for e in demo["rerun"])
    assert first == again


def test_it_writes_the_generated_rows(spark: Any, demo: dict[str, Any]) -> None:
    root = demo["root"]
    customers = spark.read.parquet(f"{root}/raw/customers")
    assert customers.count() == data.customer_count(1)  # the rerun of day 1 came last
    assert (
        spark.read.parquet(f"{root}/staging/web_events").where("customer_id IS NULL").count() == 0
    )


def test_it_generates_the_same_source_rows_for_the_same_seed() -> None:
    assert data.source_data(7, 2) == data.source_data(7, 2)
    assert data.source_data(7, 2) != data.source_data(8, 2)
    day1, day2 = data.source_data(7, 1), data.source_data(7, 2)
    assert day2.customers[: len(day1.customers)] == day1.customers
    assert day2.orders[: len(day1.orders)] == day1.orders
    assert len(day2.customers) == data.customer_count(2)
