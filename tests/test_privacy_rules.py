"""Domain rules without HTTP: keyed hashes and seals, storage targets, erasure order, CSV."""

from __future__ import annotations

import csv
import io
import pprint

import pytest
import time_machine

from privacy import erasure
from privacy.queries import DatasetHit, Evidence, FieldHit, Retention
from privacy.sealing import Concealed, SealError, normalise, seal, unseal, value_hash


def hit(
    pk: int,
    name: str,
    relation: str = "derived",
    namespace: str = "s3://lake",
    location: str = "",
    fmt: str = "",
    retention: Retention | None = None,
    fields: list[FieldHit] | None = None,
    personal: list[tuple[str, str]] | None = None,
) -> DatasetHit:
    return DatasetHit(
        id=pk,
        namespace=namespace,
        name=name,
        node_id=f"dataset:{namespace}:{name}",
        relation=relation,
        distance=0,
        fields=fields or [],
        personal_fields=personal or [],
        owners=[],
        retention=retention,
        location=location,
        storage_format=fmt,
        lifecycle_state="ACTIVE",
        evidence=Evidence(None),
    )


def key_field(name: str, pii: str = "", identifiers: tuple[int, ...] = (0,)) -> FieldHit:
    return FieldHit(
        name, f"f:{name}", "derived", "string", pii, None, False, identifiers, None, None
    )


def test_it_hashes_values_with_the_configured_key(settings):
    settings.PRIVACY_HASH_KEY = "one"
    first = value_hash("customer", "4242")
    assert first == value_hash("customer", "4242")
    assert first != value_hash("employee", "4242")
    settings.PRIVACY_HASH_KEY = "two"
    assert value_hash("customer", "4242") != first
    assert "4242" not in first


def test_it_normalises_emails_only_by_case():
    assert normalise("  Ada@Example.COM ", "email") == "ada@example.com"
    assert normalise(" AbC-1 ") == "AbC-1"


def test_it_hides_a_value_from_repr_but_not_from_use():
    value = Concealed("8675309")
    assert repr(value) == "'[identifier withheld]'"
    assert "8675309" not in pprint.pformat({"rows": [value]})
    assert f"{value}" == "8675309" and value == "8675309"


def test_it_opens_only_fresh_untouched_seals():
    token = seal(["4242", "ada@example.com"])
    assert "4242" not in token
    assert unseal(token) == ["4242", "ada@example.com"]
    with pytest.raises(SealError):
        unseal(token[:-3] + "xyz")
    with time_machine.travel("2999-01-01", tick=False), pytest.raises(SealError):
        unseal(token)


def test_it_finds_how_spark_can_read_a_dataset():
    assert erasure.storage_target(hit(1, "x", namespace="postgres://db:5432")).scannable is False
    parquet = erasure.storage_target(hit(1, "/lake/orders", namespace="file"))
    assert (parquet.location, parquet.format, parquet.local) == ("/lake/orders", "auto", True)
    csv = erasure.storage_target(hit(1, "exports/a.csv", namespace="s3://bucket"))
    assert (csv.location, csv.format, csv.local) == ("s3://bucket/exports/a.csv", "csv", False)
    delta = erasure.storage_target(hit(1, "t", location="/lake/t", fmt="delta"))
    assert (delta.scannable, delta.reason) == (False, "delta is not scannable")
    declared = erasure.storage_target(hit(1, "t", location="file:///lake/t", fmt="JSONL"))
    assert (declared.format, declared.local) == ("json", True)


@pytest.mark.parametrize(
    ("relation", "retention", "expected"),
    [
        ("aggregate", None, "recompute"),
        ("direct", None, "delete"),
        ("derived", Retention("r", 30, "anonymise", ""), "anonymise"),
        ("derived", Retention("r", 30, "archive", ""), "delete"),
        ("derived", Retention("r", 30, "delete", ""), "delete"),
    ],
)
def test_it_picks_the_operation_from_relation_and_retention(relation, retention, expected):
    assert erasure.operation_for(hit(1, "x", relation, retention=retention))[0] == expected


def test_it_orders_sources_first_and_breaks_cycles_stably():
    a, b, c, d = (hit(i, n) for i, n in enumerate("abcd", start=1))
    src = hit(5, "z-source", "direct")
    ordered, on_cycle = erasure.topological_order(
        [a, b, c, d, src], [(5, 1), (1, 2), (2, 3), (3, 2), (5, 4)]
    )
    names = [h.name for h in ordered]
    assert names[0] == "z-source"  # direct sources first, whatever their name
    assert names.index("a") < names.index("b")
    assert on_cycle == {2, 3}
    assert names[-2:] == ["b", "c"]


def test_it_writes_key_and_personal_columns_into_an_anonymise_step():
    found = hit(
        1,
        "orders",
        "direct",
        location="/lake/orders",
        retention=Retention("sales", 3650, "anonymise", ""),
        fields=[key_field("customer_id", "identifier")],
        personal=[("customer_id", "identifier"), ("phone", "phone")],
    )

    class Search:
        all_hits = [found]

    step = erasure.plan_steps(Search(), [])[0]
    assert step["operation"] == "anonymise"
    assert step["execution"] == "spark"
    assert step["anonymiseColumns"] == ["customer_id", "phone"]
    assert step["keyColumns"] == [
        {"name": "customer_id", "identifiers": [0], "masked": False, "caseInsensitive": False}
    ]


def test_it_keeps_spreadsheet_formulas_out_of_the_csv():
    text = erasure.plan_csv(
        [{"order": 1, "name": "=HYPERLINK(1)", "owners": [{"name": "+team"}], "notes": []}]
    )
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[1][2] == "'=HYPERLINK(1)"
    assert rows[1][13] == "'+team"
