"""Catalog as code: import is validated whole, idempotent and reports its changes."""

from __future__ import annotations

from io import StringIO

import pytest
import yaml
from django.core.management import CommandError, call_command

from catalog.models import ChangeRecord, Dataset, DatasetField, Namespace, Owner, RetentionPolicy
from tests import factories

pytestmark = pytest.mark.django_db

CATALOG = """
subjectKinds:
  - {name: customer, description: People who buy from us}
retentionPolicies:
  - {name: two-years, days: 730, action: delete, legalBasis: "GDPR 6(1)(b)"}
datasets:
  - namespace: postgres://shop-db:5432
    name: shop.public.customers
    description: All customers
    owners: [{name: crm-team, type: DATA_OWNER}, web-team]
    tags: [gold]
    sensitivity: confidential
    retentionPolicy: two-years
    fields:
      customer_id: {pii: identifier, subjectKind: customer}
      email: {pii: email, subjectKind: customer}
"""


def run_import(tmp_path, text: str, *args: str) -> str:
    path = tmp_path / "catalog.yaml"
    path.write_text(text)
    out = StringIO()
    call_command("catalog_import", str(path), *args, stdout=out)
    return out.getvalue()


def test_it_imports_owners_flags_and_retention_with_history(tmp_path):
    factories.dataset("postgres://shop-db:5432", "shop.public.customers")
    output = run_import(tmp_path, CATALOG)
    ds = Dataset.objects.get(name="shop.public.customers")
    assert ds.retention_policy.name == "two-years"
    assert sorted(o.owner.name for o in ds.ownerships.all()) == ["crm-team", "web-team"]
    email = DatasetField.objects.get(dataset=ds, name="email")
    assert (email.pii_category, email.subject_kind.name) == ("email", "customer")
    assert ChangeRecord.objects.filter(source="import").count() == 9
    assert "changed" in output


def test_it_changes_nothing_on_a_second_import(tmp_path):
    run_import(tmp_path, CATALOG)
    before = ChangeRecord.objects.count()
    output = run_import(tmp_path, CATALOG)
    assert ChangeRecord.objects.count() == before
    assert "nothing changed" in output


def test_it_creates_datasets_the_file_declares_before_lineage_arrives(tmp_path):
    run_import(tmp_path, CATALOG)
    assert Dataset.objects.filter(name="shop.public.customers").exists()


def test_it_round_trips_through_export(tmp_path):
    run_import(tmp_path, CATALOG)
    out = StringIO()
    call_command("catalog_export", stdout=out)
    exported = yaml.safe_load(out.getvalue())
    assert exported["datasets"][0]["fields"]["email"] == {"pii": "email", "subjectKind": "customer"}
    assert "nothing changed" in run_import(tmp_path, out.getvalue())


def test_an_export_imported_anew_gives_the_same_catalog(tmp_path):
    extra = """
  - namespace: postgres://shop-db:5432
    name: shop.public.orders
    owners: [{name: ana, kind: person, email: ana@example.com, displayName: Ana Lima}]
    fields:
      placed_at: {description: When the order was placed, tags: [time, audit]}
"""
    run_import(tmp_path, CATALOG + extra)
    first = StringIO()
    call_command("catalog_export", stdout=first)
    exported = yaml.safe_load(first.getvalue())
    orders = next(d for d in exported["datasets"] if d["name"] == "shop.public.orders")
    assert orders["owners"] == [
        {"name": "ana", "kind": "person", "displayName": "Ana Lima", "email": "ana@example.com"}
    ]
    assert orders["fields"] == {
        "placed_at": {"description": "When the order was placed", "tags": ["audit", "time"]}
    }
    Dataset.objects.all().delete()
    Owner.objects.all().delete()
    run_import(tmp_path, first.getvalue())
    again = StringIO()
    call_command("catalog_export", stdout=again)
    assert again.getvalue() == first.getvalue()


def test_it_reports_an_owners_new_kind_and_contact(tmp_path):
    run_import(tmp_path, CATALOG)
    changed = "{name: web-team, kind: person, email: web@example.com}]"
    assert "owner web-team email: '' → 'web@example.com'" in run_import(
        tmp_path, CATALOG.replace("web-team]", changed), "--dry-run"
    )
    output = run_import(tmp_path, CATALOG.replace("web-team]", changed))
    assert "owner web-team kind: 'team' → 'person'" in output
    assert "owner web-team email: '' → 'web@example.com'" in output
    assert Owner.objects.get(name="web-team").kind == "person"
    assert "nothing changed" in run_import(tmp_path, CATALOG.replace("web-team]", changed))


def test_it_sets_a_fields_tags_with_history_and_reports_them(tmp_path):
    tagged = CATALOG.replace(
        "email: {pii: email, subjectKind: customer}",
        "email: {pii: email, subjectKind: customer, tags: [login, ' login ', contact]}",
    )
    output = run_import(tmp_path, tagged)
    assert "shop.public.customers:email tags: [] → ['contact', 'login']" in output
    email = DatasetField.objects.get(name="email")
    assert sorted(t.name for t in email.tags.all()) == ["contact", "login"]
    assert "nothing changed" in run_import(tmp_path, tagged)
    output = run_import(tmp_path, tagged.replace("tags: [login, ' login ', contact]", "tags: []"))
    assert "email tags: ['contact', 'login'] → []" in output
    assert not email.tags.exists()


def test_it_sets_namespaces_owners_and_descriptions_and_exports_them(tmp_path):
    owned = CATALOG.replace(
        "datasets:",
        "namespaces:\n  - {name: 'postgres://shop-db:5432', ownerName: shop-team,"
        " description: The shop}\ndatasets:",
        1,
    )
    output = run_import(tmp_path, owned)
    assert "namespace postgres://shop-db:5432 ownerName: '' → 'shop-team'" in output
    namespace = Namespace.objects.get(name="postgres://shop-db:5432")
    assert (namespace.owner_name, namespace.description) == ("shop-team", "The shop")
    assert "nothing changed" in run_import(tmp_path, owned)
    out = StringIO()
    call_command("catalog_export", stdout=out)
    exported = yaml.safe_load(out.getvalue())
    assert exported["namespaces"] == [
        {"name": "postgres://shop-db:5432", "ownerName": "shop-team", "description": "The shop"}
    ]
    Namespace.objects.all().delete()
    Owner.objects.all().delete()
    run_import(tmp_path, out.getvalue())
    again = StringIO()
    call_command("catalog_export", stdout=again)
    assert again.getvalue() == out.getvalue()
    # The file's whole say: without a description, the namespace has none.
    run_import(tmp_path, owned.replace(" description: The shop", ""))
    assert Namespace.objects.get(name="postgres://shop-db:5432").description == ""


def test_names_made_before_todays_rules_are_still_taken(tmp_path):
    from catalog.models import SubjectKind, Tag

    SubjectKind.objects.create(name="Customer")
    Tag.objects.create(name="eu,us")
    text = """
subjectKinds: [{name: Customer}]
retentionPolicies: [{name: century, days: 36525, action: delete}]
datasets: [{namespace: a, name: b, tags: ['eu,us'], fields: {x: {subjectKind: Customer}}}]
"""
    run_import(tmp_path, text)
    ds = Dataset.objects.get(name="b")
    assert [t.name for t in ds.tags.all()] == ["eu,us"]
    assert ds.fields.get(name="x").subject_kind.name == "Customer"
    assert RetentionPolicy.objects.get(name="century").duration_days == 36525


def test_it_reports_without_writing_on_a_dry_run(tmp_path):
    output = run_import(tmp_path, CATALOG, "--dry-run")
    assert "would change" in output
    assert not Dataset.objects.exists()
    assert not RetentionPolicy.objects.exists()


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            "datasets: [{namespace: a, name: b, fields: {x: {pii: shoe}}}]",
            "datasets[0].fields.x.pii",
        ),
        (
            "datasets: [{namespace: a, name: b, retentionPolicy: forever}]",
            "datasets[0].retentionPolicy",
        ),
        (
            "datasets: [{namespace: a, name: b, fields: {x: {subjectKind: martian}}}]",
            "datasets[0].fields.x.subjectKind",
        ),
        ("retentionPolicies: [{name: p, days: -1, action: delete}]", "retentionPolicies[0].days"),
        ("datasets: [{name: b}]", "datasets[0].namespace"),
        ("datasets: [{namespace: a, name: b, colour: red}]", "datasets[0].colour"),
        (
            "datasets: [{namespace: a, name: b, owners: [{name: x, email: nope}]}]",
            "datasets[0].owners[0].email",
        ),
        (
            "datasets: [{namespace: a, name: b, owners: [{name: x, phone: 1}]}]",
            "datasets[0].owners[0].phone",
        ),
        (
            f"datasets: [{{namespace: a, name: b, owners: [{{name: x, email: {'a' * 250}@b.co}}]}}]",
            "datasets[0].owners[0].email",
        ),
        (
            f"datasets: [{{namespace: a, name: b, owners: [{{name: x, displayName: {'a' * 256}}}]}}]",
            "datasets[0].owners[0].displayName",
        ),
        (
            f"datasets: [{{namespace: a, name: b, fields: {{x: {{tags: [ok, {'t' * 129}]}}}}}}]",
            "datasets[0].fields.x.tags[1]",
        ),
        (f"datasets: [{{namespace: a, name: b, tags: [{'t' * 129}]}}]", "datasets[0].tags[0]"),
        (
            "datasets: [{namespace: a, name: b, fields: {x: {tags: gold}}}]",
            "datasets[0].fields.x.tags",
        ),
        ("datasets: [{namespace: a, name: b, tags: [ok, 'a,b']}]", "datasets[0].tags[1]"),
        ("datasets: [{namespace: a, name: b, tags: ['  ']}]", "datasets[0].tags[0]"),
        ("datasets: {a: 1}", "datasets"),
        ("namespaces: [{name: a, owner: x}]", "namespaces[0].owner"),
        ("namespaces: [{ownerName: x}]", "namespaces[0].name"),
        (f"namespaces: [{{name: a, ownerName: {'o' * 256}}}]", "namespaces[0].ownerName"),
        ("subjectKinds: [{name: customer, descripton: typo}]", "subjectKinds[0].descripton"),
        ("subjectKinds: [{name: Big Customers}]", "subjectKinds[0].name"),
        (f"subjectKinds: [{{name: {'k' * 65}}}]", "subjectKinds[0].name"),
        (
            "retentionPolicies: [{name: p, days: 1, action: delete, basis: x}]",
            "retentionPolicies[0].basis",
        ),
        (
            "retentionPolicies: [{name: p, days: 36526, action: delete}]",
            "retentionPolicies[0].days",
        ),
        ("namespaces: [{name: a, 1: x, foo: y}]", "namespaces[0].1"),
        (
            f"retentionPolicies: [{{name: {'p' * 129}, days: 1, action: delete}}]",
            "retentionPolicies[0].name",
        ),
        (
            f"retentionPolicies: [{{name: p, days: 1, action: delete, legalBasis: {'b' * 256}}}]",
            "retentionPolicies[0].legalBasis",
        ),
        ("datasets: [unclosed", "file"),
    ],
)
def test_it_rejects_a_bad_file_naming_the_place_and_writes_nothing(tmp_path, text, where):
    with pytest.raises(CommandError) as excinfo:
        run_import(tmp_path, CATALOG.split("datasets:")[0] + text)
    assert where in str(excinfo.value)
    assert not Dataset.objects.exists()


def test_it_applies_nothing_when_a_later_dataset_is_bad(tmp_path):
    bad = CATALOG + "  - {namespace: x, name: y, fields: {f: {pii: nope}}}\n"
    with pytest.raises(CommandError):
        run_import(tmp_path, bad)
    assert not Dataset.objects.exists()


def test_it_declares_on_the_dataset_an_alias_or_another_spelling_names(tmp_path):
    from catalog.models import DatasetAlias, Namespace

    path = factories.dataset("file", "/warehouse/raw/orders")
    metastore, _ = Namespace.objects.get_or_create(name="hive://metastore:9083")
    DatasetAlias.objects.create(namespace=metastore, name="raw.orders", dataset=path)
    factories.dataset("postgres://shop-db:5432", "shop.public.customers")
    run_import(
        tmp_path,
        """
datasets:
  - namespace: hive://metastore:9083
    name: raw.orders
    fields:
      email: {pii: email}
  - namespace: postgresql://Shop-DB:5432
    name: SHOP.PUBLIC.CUSTOMERS
    description: All customers
""",
    )
    assert Dataset.objects.count() == 2
    assert DatasetField.objects.get(dataset=path, name="email").pii_category == "email"
    assert Dataset.objects.get(name="shop.public.customers").description == "All customers"
