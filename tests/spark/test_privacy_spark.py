"""Subject scan and erasure on Spark, checked against the data written.

A small lake of file datasets (Parquet, CSV, JSON, a partitioned Parquet
table and a single CSV file) holds one customer's rows under several keys:
their id, their email in another case, and the SHA-256 of their email.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
import time_machine

from catalog.models import (
    Dataset,
    DatasetField,
    Namespace,
    PiiCategory,
    RetentionAction,
    RetentionPolicy,
    SubjectKind,
)
from graph.models import ColumnEdge, Job
from pipelines.privacy import erase as erase_job
from pipelines.privacy import scan as scan_job
from privacy import actions
from privacy.models import AuditEntry, PrivacyRun
from tests.privacy_builders import NOW, T0
from tests.spark.conftest import CollectingTransport

pytestmark = pytest.mark.spark

SUBJECT_ID = 4242
SUBJECT_EMAIL = "ada@example.com"
PLANS = "/api/v1/privacy/erasure-plans"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _customers() -> list[tuple[int | None, str, str, str]]:
    rows: list[tuple[int | None, str, str, str]] = [
        (i, f"user{i}@example.com", f"User {i}", "FR" if i % 2 else "DE") for i in range(1, 301)
    ]
    rows[41] = (SUBJECT_ID, "Ada@Example.com", "Ada Lovelace", "UK")
    rows.append((9999, "ADA@EXAMPLE.COM", "Ada L.", "UK"))  # a second account, same email
    rows.append((None, "nobody@example.com", "No Id", "FR"))  # a null key never matches
    return rows


@pytest.fixture(scope="module")
def lake(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Write the lake once; each test erases in its own copy (see ``fresh_lake``)."""
    root = tmp_path_factory.mktemp("privacy-lake")
    customers = _customers()
    orders = [(n, (SUBJECT_ID if n % 17 == 0 else 1000 + n), float(n)) for n in range(1, 201)]
    clean = [
        (c[0], sha(c[1].lower()), c[3]) for c in customers if c[0] is not None and c[0] != 9999
    ]
    spark.createDataFrame(
        customers, "customer_id bigint, email string, name string, country string"
    ).repartition(3).write.parquet(str(root / "raw/customers"))
    spark.createDataFrame(
        [(o, str(c), a) for o, c, a in orders], "order_id int, customer_id string, amount double"
    ).coalesce(2).write.option("header", "true").csv(str(root / "raw/orders"))
    spark.createDataFrame(clean, "cust_key bigint, email_sha string, country string").write.json(
        str(root / "staging/customers_clean")
    )
    spark.createDataFrame(
        clean, "cust_key bigint, email_sha string, country string"
    ).write.partitionBy("country").parquet(str(root / "marts/by_country"))
    export = root / "exports"
    export.mkdir()
    lines = ["customer_id,email"] + [f"{c[0]},{c[1]}" for c in customers if c[0] and c[0] % 7 == 0]
    lines.append(f"{SUBJECT_ID},{SUBJECT_EMAIL}")
    (export / "mailing.csv").write_text("\n".join(lines) + "\n")
    truth = {
        "customers_by_id": sum(1 for c in customers if c[0] == SUBJECT_ID),
        "customers": sum(
            1 for c in customers if c[0] == SUBJECT_ID or c[1].lower() == SUBJECT_EMAIL
        ),
        "orders": sum(1 for o in orders if o[1] == SUBJECT_ID),
        "clean": sum(1 for c in clean if c[0] == SUBJECT_ID or c[1] == sha(SUBJECT_EMAIL)),
        "by_country": sum(1 for c in clean if c[0] == SUBJECT_ID or c[1] == sha(SUBJECT_EMAIL)),
        "mailing": sum(
            1
            for line in lines[1:]
            if line.split(",")[0] == str(SUBJECT_ID) or line.split(",")[1].lower() == SUBJECT_EMAIL
        ),
        "totals": {
            "customers": len(customers),
            "orders": len(orders),
            "clean": len(clean),
            "mailing": len(lines) - 1,
        },
    }
    return {"root": root, "truth": truth}


@pytest.fixture
def fresh_lake(lake: dict[str, Any], tmp_path: Path) -> Path:
    import shutil

    copy = tmp_path / "lake"
    shutil.copytree(lake["root"], copy)
    return copy


def _catalog(root: Path) -> dict[str, Dataset]:
    """Catalog the lake as OpenLineage names it (namespace ``file``, absolute paths)."""
    customer = SubjectKind.objects.create(name="customer")
    delete = RetentionPolicy.objects.create(name="d", duration=NOW - T0, action="delete")
    anonymise = RetentionPolicy.objects.create(
        name="a", duration=NOW - T0, action=RetentionAction.ANONYMISE
    )
    ns = Namespace.objects.create(name="file")
    etl = Namespace.objects.create(name="spark://etl")
    job = Job.objects.create(namespace=etl, name="stage", created_at=T0, updated_at=T0)
    found: dict[str, Dataset] = {}

    def ds(key: str, rel: str, fields: dict[str, str], fmt: str = "", **extra: Any) -> Dataset:
        dataset = Dataset.objects.create(
            namespace=ns,
            name=str(root / rel),
            storage_format=fmt,
            first_seen=T0,
            last_seen=T0,
            **extra,
        )
        for i, (name, pii) in enumerate(fields.items()):
            DatasetField.objects.create(
                dataset=dataset, name=name, ordinal=i, pii_category=pii, first_seen=T0
            )
        found[key] = dataset
        return dataset

    e, i, n = PiiCategory.EMAIL, PiiCategory.IDENTIFIER, PiiCategory.NAME
    ds("customers", "raw/customers", {"customer_id": i, "email": e, "name": n}, "parquet")
    ds(
        "orders",
        "raw/orders",
        {"order_id": "", "customer_id": i, "amount": ""},
        "csv",
        retention_policy=anonymise,
    )
    ds(
        "clean",
        "staging/customers_clean",
        {"cust_key": "", "email_sha": "", "country": ""},
        "json",
        retention_policy=delete,
    )
    ds("by_country", "marts/by_country", {"cust_key": "", "email_sha": ""})  # format detected
    ds("mailing", "exports/mailing.csv", {"customer_id": "", "email": ""})
    ds("nowhere", "warehouse.crm_notes", {"customer_id": ""})
    found["nowhere"].namespace = Namespace.objects.create(name="postgres://crm:5432")
    found["nowhere"].save()

    for key, name in (
        ("customers", "customer_id"),
        ("customers", "email"),
        ("orders", "customer_id"),
    ):
        f = found[key].fields.get(name=name)
        f.subject_kind = customer
        f.save()
    f = found["nowhere"].fields.get(name="customer_id")
    f.subject_kind = customer
    f.save()

    def edge(
        src: tuple[str, str], dst: tuple[str, str], subtype: str = "IDENTITY", masking: bool = False
    ) -> None:
        ColumnEdge.objects.create(
            job=job,
            source_field=found[src[0]].fields.get(name=src[1]),
            target_dataset=found[dst[0]],
            target_field=found[dst[0]].fields.get(name=dst[1]),
            transformation_type="DIRECT",
            transformation_subtype=subtype,
            masking=masking,
            valid_from=T0,
        )

    edge(("customers", "customer_id"), ("clean", "cust_key"))
    edge(("customers", "email"), ("clean", "email_sha"), "TRANSFORMATION", masking=True)
    edge(("clean", "cust_key"), ("by_country", "cust_key"))
    edge(("clean", "email_sha"), ("by_country", "email_sha"))
    edge(("customers", "customer_id"), ("mailing", "customer_id"))
    edge(("customers", "email"), ("mailing", "email"))
    return found


@pytest.fixture
def officer(api, compliance, settings, db):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.PRIVACY_RUNS_INLINE = True
    return api(compliance)


def _run(client, response) -> dict[str, Any]:
    assert response.status_code == 202, response.json()
    run: dict[str, Any] = client.get(response.json()["statusUrl"]).json()
    return run


def _counts(run: dict[str, Any], field: str) -> dict[str, Any]:
    names = {d["nodeId"]: d["name"].rsplit("/", 1)[-1] for d in run["datasets"]}
    return {names[d["nodeId"]]: (d["result"] or {}).get(field) for d in run["datasets"]}


IDENTIFIERS = [
    {"kind": "identifier", "value": str(SUBJECT_ID)},
    {"kind": "email", "value": "ADA@example.com"},
]


def test_it_counts_the_subjects_rows_in_every_file_format(
    lake, officer, django_capture_on_commit_callbacks
):
    _catalog(lake["root"])
    with time_machine.travel(NOW, tick=False), django_capture_on_commit_callbacks(execute=True):
        response = officer.post(
            "/api/v1/privacy/scans",
            {"subjectKind": "customer", "identifiers": IDENTIFIERS},
            format="json",
        )
    run = _run(officer, response)
    assert run["state"] == "done", run
    truth = lake["truth"]
    assert _counts(run, "rowsFound") == {
        "customers": truth["customers"],
        "orders": truth["orders"],
        "customers_clean": truth["clean"],
        "by_country": truth["by_country"],
        "mailing.csv": truth["mailing"],
        "warehouse.crm_notes": None,
    }
    nowhere = next(d for d in run["datasets"] if d["name"].endswith("warehouse.crm_notes"))
    assert nowhere["runnable"] is False
    assert nowhere["result"]["status"] == "not_scannable"
    assert run["progress"] == {"done": 5, "total": 5}
    assert PrivacyRun.objects.get().sealed == ""


def test_it_matches_only_the_columns_an_identifier_maps_to(
    lake, officer, django_capture_on_commit_callbacks
):
    _catalog(lake["root"])
    with time_machine.travel(NOW, tick=False), django_capture_on_commit_callbacks(execute=True):
        response = officer.post(
            "/api/v1/privacy/scans",
            {"subjectKind": "customer", "identifiers": IDENTIFIERS[:1]},
            format="json",
        )
    counts = _counts(_run(officer, response), "rowsFound")
    assert counts["customers"] == lake["truth"]["customers_by_id"]
    assert counts["customers_clean"] == 1


def test_it_runs_from_the_command_line_with_values_on_stdin(lake, spark, tmp_path, monkeypatch):
    plan = {
        "version": 1,
        "kind": "scan",
        "runId": "cli",
        "datasets": [
            {
                "key": "orders",
                "location": str(lake["root"] / "raw/orders"),
                "format": "auto",
                "columns": [{"name": "customer_id", "identifiers": [0]}],
            },
            {
                "key": "missing",
                "location": str(tmp_path / "nope"),
                "format": "parquet",
                "columns": [],
            },
        ],
    }
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps([str(SUBJECT_ID)])))
    assert scan_job.main(["--plan", str(plan_path), "--result", str(tmp_path / "out.json")]) == 0
    result = json.loads((tmp_path / "out.json").read_text())
    assert [(d["key"], d["status"], d["rowsFound"]) for d in result["datasets"]] == [
        ("orders", "scanned", lake["truth"]["orders"]),
        ("missing", "error", None),
    ]
    assert str(SUBJECT_ID) not in json.dumps(result)
    assert (
        "[redacted]" in result["datasets"][1]["error"] or "nope" in result["datasets"][1]["error"]
    )


def _read(spark, path: Path, fmt: str):
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true")
    return reader.load(str(path))


def test_it_erases_the_subject_and_swaps_new_versions_in(
    fresh_lake, lake, spark, officer, django_capture_on_commit_callbacks, monkeypatch
):
    from pyspark.sql import functions as F

    found = _catalog(fresh_lake)
    events = CollectingTransport()
    monkeypatch.setattr(actions, "lineage_transport_factory", lambda: events)
    truth = lake["truth"]
    with time_machine.travel(NOW, tick=False):
        plan = officer.post(
            PLANS, {"subjectKind": "customer", "identifiers": IDENTIFIERS}, format="json"
        ).json()
        steps = {s["name"].rsplit("/", 1)[-1]: s for s in plan["steps"]}
        assert [s["name"].rsplit("/", 1)[-1] for s in plan["steps"]][:2] == ["customers", "orders"]
        assert steps["orders"]["operation"] == "anonymise"
        assert steps["customers_clean"]["operation"] == "delete"
        assert steps["warehouse.crm_notes"]["execution"] == "manual"
        url = f"{PLANS}/{plan['id']}"
        with django_capture_on_commit_callbacks(execute=True):
            posted = officer.post(
                f"{url}/dry-run",
                {"subjectKind": "customer", "identifiers": IDENTIFIERS},
                format="json",
            )
        dry = _run(officer, posted)
        assert dry["state"] == "done", dry
        assert _counts(dry, "rowsMatched") == {
            "customers": truth["customers"],
            "orders": truth["orders"],
            "customers_clean": truth["clean"],
            "by_country": truth["by_country"],
            "mailing.csv": truth["mailing"],
            "warehouse.crm_notes": None,
        }
        assert _counts(dry, "rowsBefore")["orders"] == truth["totals"]["orders"]
        # A dry run changes nothing.
        assert (
            _read(spark, fresh_lake / "raw/customers", "parquet").count()
            == truth["totals"]["customers"]
        )
        with django_capture_on_commit_callbacks(execute=True):
            posted = officer.post(
                f"{url}/apply",
                {"subjectKind": "customer", "identifiers": IDENTIFIERS, "confirm": True},
                format="json",
            )
        applied = _run(officer, posted)
    assert applied["state"] == "done", applied
    assert set(_counts(applied, "status").values()) == {"erased", "manual"}

    customers = _read(spark, fresh_lake / "raw/customers", "parquet")
    assert customers.count() == truth["totals"]["customers"] - truth["customers"]
    assert customers.filter(F.col("customer_id") == SUBJECT_ID).count() == 0
    assert customers.filter(F.lower("email") == SUBJECT_EMAIL).count() == 0
    assert customers.filter(F.col("customer_id").isNull()).count() == 1  # null keys kept

    orders = _read(spark, fresh_lake / "raw/orders", "csv")
    assert orders.count() == truth["totals"]["orders"]  # anonymised, not deleted
    assert orders.filter(F.col("customer_id") == str(SUBJECT_ID)).count() == 0
    assert orders.filter(F.col("customer_id").isNull()).count() == truth["orders"]
    assert orders.filter(F.col("amount").isNull()).count() == 0

    clean = _read(spark, fresh_lake / "staging/customers_clean", "json")
    assert clean.count() == truth["totals"]["clean"] - truth["clean"]
    by_country = _read(spark, fresh_lake / "marts/by_country", "parquet")
    assert by_country.filter(F.col("email_sha") == sha(SUBJECT_EMAIL)).count() == 0
    assert sorted(os.listdir(fresh_lake / "marts/by_country"))[0].startswith("_") or any(
        d.startswith("country=") for d in os.listdir(fresh_lake / "marts/by_country")
    )
    assert all(
        d.startswith(("country=", "_", ".")) for d in os.listdir(fresh_lake / "marts/by_country")
    )
    mailing = (fresh_lake / "exports/mailing.csv").read_text()
    assert SUBJECT_EMAIL not in mailing.lower() and str(SUBJECT_ID) not in mailing
    assert len(mailing.strip().splitlines()) - 1 == truth["totals"]["mailing"] - truth["mailing"]
    # No staging or old copies are left beside the data.
    for parent in ("raw", "staging", "marts", "exports"):
        assert not [n for n in os.listdir(fresh_lake / parent) if ".erasure-" in n]

    # The erasure job reported itself through OpenLineage.
    kinds = [e["eventType"] for e in events.events]
    assert kinds[0] == "START" and kinds[-1] == "COMPLETE"
    complete = events.events[-1]
    assert complete["job"]["name"] == "privacy_erasure"
    outputs = {o["name"] for o in complete["outputs"]}
    assert str(fresh_lake / "raw/customers") in outputs
    assert str(fresh_lake / "raw/orders") in outputs
    assert (
        "columnLineage"
        in next(o for o in complete["outputs"] if o["name"].endswith("raw/customers"))["facets"]
    )
    text = json.dumps(events.events)
    assert str(SUBJECT_ID) not in text and SUBJECT_EMAIL not in text.lower()
    assert AuditEntry.objects.filter(action="erasure_apply", outcome="ok").count() == 1
    del found


def test_it_leaves_a_dataset_untouched_when_the_new_version_fails_its_check(
    fresh_lake, lake, spark, tmp_path
):
    location = str(fresh_lake / "raw/customers")
    before = sorted(os.listdir(location))
    plan = {
        "version": 1,
        "kind": "erasure",
        "runId": "broken",
        "apply": True,
        "lineage": {"url": None, "spoolPath": str(tmp_path / "spool.ndjson")},
        "datasets": [
            {
                "key": "customers",
                "location": location,
                "format": "parquet",
                "operation": "delete",
                "anonymiseColumns": [],
                "columns": [{"name": "customer_id", "identifiers": [0]}],
            }
        ],
    }
    events = CollectingTransport()
    original = erase_job.erased_frame
    try:
        erase_job.erased_frame = lambda frame, condition, target: frame  # keeps the rows
        result = erase_job.run_erasure(spark, plan, [str(SUBJECT_ID)], lineage_transport=events)
    finally:
        erase_job.erased_frame = original
    outcome = result["datasets"][0]
    assert outcome["status"] == "error"
    assert "failed its check" in outcome["error"]
    assert str(SUBJECT_ID) not in outcome["error"]
    assert sorted(os.listdir(location)) == before
    assert _read(spark, Path(location), "parquet").count() == lake["truth"]["totals"]["customers"]
    assert not [n for n in os.listdir(fresh_lake / "raw") if ".erasure-" in n]
    assert events.events[-1]["eventType"] == "FAIL"
    assert str(SUBJECT_ID) not in json.dumps(events.events)


def test_it_swaps_two_folders(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("new")
    (b / "x").write_text("old")
    erase_job.exchange_paths(str(a), str(b))
    assert (b / "x").read_text() == "new"
    assert (a / "x").read_text() == "old"


def test_it_finds_partition_columns(tmp_path):
    (tmp_path / "country=FR" / "day=1").mkdir(parents=True)
    (tmp_path / "_SUCCESS").write_text("")
    assert erase_job.partition_columns(str(tmp_path)) == ["country", "day"]
