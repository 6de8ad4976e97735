"""Catalog API: Marquez shapes, steward edits with history, roles, bad input."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import quote

import pytest
import time_machine
from django.utils import timezone

from catalog.models import ChangeRecord, Dataset, DatasetField, RetentionPolicy, SubjectKind
from tests import factories

pytestmark = pytest.mark.django_db

NS = "postgres://shop-db:5432"
NAME = "shop.public.customers"


def dataset_url(ns: str = NS, name: str = NAME, suffix: str = "") -> str:
    return f"/api/v1/namespaces/{quote(ns, safe='')}/datasets/{quote(name, safe='')}{suffix}"


@pytest.fixture
def customers():
    return factories.dataset(NS, NAME)


def test_it_lists_namespaces_in_marquez_shape(api, viewer, customers):
    body = api(viewer).get("/api/v1/namespaces").json()
    assert body["namespaces"][0]["name"] == NS
    assert {"name", "createdAt", "updatedAt", "ownerName", "description"} <= set(
        body["namespaces"][0]
    )


def test_a_steward_sets_a_namespaces_owner_and_description_as_in_marquez(
    api, viewer, steward, customers
):
    url = f"/api/v1/namespaces/{quote(NS, safe='')}"
    before = api(viewer).get(url).json()
    body = {"ownerName": "shop-team", "description": "The shop's database"}
    assert api(viewer).put(url, body, format="json").status_code == 403
    answer = api(steward).put(url, body, format="json")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["ownerName"], answer.json()["description"]) == (
        "shop-team",
        "The shop's database",
    )
    shown = api(viewer).get(url).json()
    assert shown == answer.json() and shown["updatedAt"] > before["updatedAt"]
    listed = api(viewer).get("/api/v1/namespaces").json()["namespaces"]
    assert {n["name"]: n["ownerName"] for n in listed}[NS] == "shop-team"
    cleared = api(steward).put(url, {"ownerName": "shop-team"}, format="json").json()
    assert cleared["description"] is None
    again = api(steward).put(url, {"ownerName": "shop-team"}, format="json").json()
    assert again["updatedAt"] == cleared["updatedAt"]  # nothing changed


def test_a_namespaces_owner_leaves_lineage_data_alone_and_its_name_does_not(
    api, steward, customers
):
    from catalog.models import Namespace
    from graph import revision
    from graph.nodecache import node_changes

    before = revision.current()
    url = f"/api/v1/namespaces/{quote(NS, safe='')}"
    edit = api(steward).put(url, {"ownerName": "shop-team", "description": "x"}, format="json")
    assert edit.status_code == 200 and edit.json()["ownerName"] == "shop-team"
    assert revision.current() == before  # no node shows it: nothing to render again
    Namespace.objects.filter(name=NS).update(name="postgres://shop-db2:5432")
    renamed = revision.current()
    assert node_changes(before, renamed, 100) is None  # every node's id changed
    # A namespace made or deleted may change how node ids resolve: logged too.
    made = Namespace.objects.create(name="s3://new")
    assert node_changes(renamed, revision.current(), 100) is None
    created = revision.current()
    made.delete()
    assert node_changes(created, revision.current(), 100) is None


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "ownerName"),
        ({"ownerName": ""}, "ownerName"),
        ({"ownerName": 7}, "ownerName"),
        ({"ownerName": "x" * 256}, "ownerName"),
        ({"ownerName": "a", "colour": "red"}, "colour"),
        ({"ownerName": "a", "description": ["x"]}, "description"),
    ],
)
def test_it_rejects_bad_namespace_edits_naming_the_field(api, steward, customers, payload, field):
    url = f"/api/v1/namespaces/{quote(NS, safe='')}"
    response = api(steward).put(url, payload, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert api(steward).get(url).json()["ownerName"] is None


def test_it_answers_404_for_an_edit_of_an_unknown_namespace(api, steward, customers):
    response = api(steward).put("/api/v1/namespaces/nowhere", {"ownerName": "a"}, format="json")
    assert response.status_code == 404
    assert response.json()["field"] == "namespace"
    assert api(steward).get("/api/v1/namespaces/nowhere").status_code == 404


def test_it_lists_datasets_of_a_namespace_with_url_encoded_names(api, viewer, customers):
    body = api(viewer).get(f"/api/v1/namespaces/{quote(NS, safe='')}/datasets").json()
    assert body["totalCount"] == 1
    ds = body["datasets"][0]
    assert ds["id"] == {"namespace": NS, "name": NAME}
    assert [f["name"] for f in ds["fields"]] == ["customer_id", "email", "country"]


def test_it_finds_datasets_whose_names_hold_slashes(api, viewer):
    factories.dataset("file", "/data/lake/raw/customers")
    response = api(viewer).get(dataset_url("file", "/data/lake/raw/customers"))
    assert response.status_code == 200
    assert response.json()["name"] == "/data/lake/raw/customers"


def test_a_field_whose_name_holds_slashes_is_reachable(api, viewer, steward):
    factories.dataset("s3://lake", "raw/events", fields=("payload/user/id", "kind"))
    url = dataset_url("s3://lake", "raw/events", "/fields/" + quote("payload/user/id", safe=""))
    assert api(viewer).get(url).json()["name"] == "payload/user/id"
    edited = api(steward).patch(url, {"description": "Who"}, format="json")
    assert edited.status_code == 200, edited.content
    assert edited.json()["description"] == "Who"
    kind = api(viewer).get(dataset_url("s3://lake", "raw/events", "/fields/kind")).json()
    assert kind["description"] is None
    # A dataset whose own name holds "/fields/" keeps its routes.
    factories.dataset("s3://lake", "raw/fields/2024", fields=("day",))
    history = api(viewer).get(dataset_url("s3://lake", "raw/fields/2024", "/history"))
    assert history.status_code == 200, history.content
    whole = api(viewer).get(dataset_url("s3://lake", "raw/fields/2024"))
    assert whole.json()["name"] == "raw/fields/2024"
    day = api(viewer).get(dataset_url("s3://lake", "raw/fields/2024", "/fields/day"))
    assert day.json()["name"] == "day"
    # Field names that end as other routes do, or hold "/fields/" themselves.
    factories.dataset("s3://lake", "raw/odd", fields=())
    odd_url = dataset_url("s3://lake", "raw/odd", "/fields/")
    for field in ("x/history", "a/fields/b", "v/versions"):
        DatasetField.objects.get_or_create(
            dataset=Dataset.objects.get(name="raw/odd"), name=field, defaults={"ordinal": 9}
        )
        url = odd_url + quote(field, safe="")
        assert api(viewer).get(url).json()["name"] == field, field
        edited = api(steward).patch(url, {"description": field}, format="json")
        assert edited.status_code == 200, (field, edited.content)
        assert edited.json()["description"] == field
    missing = api(viewer).get(
        dataset_url("s3://lake", "raw/events", "/fields/" + quote("a/b", safe=""))
    )
    assert missing.status_code == 404


def test_a_dataset_named_datasets_is_reachable_and_so_is_a_namespace_ending_in_datasets(
    api, viewer, steward
):
    factories.dataset("s3://lake", "datasets")
    factories.dataset("s3://other/datasets", "orders")
    response = api(viewer).get(dataset_url("s3://lake", "datasets"))
    assert response.status_code == 200, response.content
    assert response.json()["name"] == "datasets"
    edited = api(steward).patch(
        dataset_url("s3://lake", "datasets"), {"description": "d"}, format="json"
    )
    assert edited.status_code == 200, edited.content
    listed = api(viewer).get(f"/api/v1/namespaces/{quote('s3://other/datasets', safe='')}/datasets")
    assert [d["name"] for d in listed.json()["datasets"]] == ["orders"]
    missing = api(steward).patch(dataset_url("nowhere", "datasets"), {}, format="json")
    assert missing.status_code == 404, missing.content


def test_it_answers_404_naming_an_unknown_dataset(api, viewer):
    response = api(viewer).get(dataset_url(NS, "nope"))
    assert response.status_code == 404
    assert "nope" in response.json()["error"]


def test_it_lets_a_steward_edit_owners_tags_and_retention_with_history(api, steward, customers):
    RetentionPolicy.objects.create(name="two-years", duration=timedelta(days=730), action="delete")
    response = api(steward).patch(
        dataset_url(),
        {
            "description": "All customers",
            "owners": [{"name": "crm-team", "type": "DATA_OWNER"}],
            "tags": ["gold"],
            "retentionPolicy": "two-years",
            "sensitivity": "confidential",
        },
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["owners"] == [
        {
            "name": "crm-team",
            "type": "DATA_OWNER",
            "kind": "team",
            "displayName": None,
            "email": None,
        }
    ]
    assert body["retentionPolicy"]["durationDays"] == 730
    changes = {c.attribute: c for c in ChangeRecord.objects.all()}
    assert set(changes) == {"description", "owners", "tags", "retention_policy", "sensitivity"}
    assert changes["owners"].actor_name == steward.username
    assert changes["owners"].old == []


def test_an_owners_kind_and_contact_change_only_when_given(api, steward, customers):
    def owners(*specs):
        response = api(steward).patch(dataset_url(), {"owners": list(specs)}, format="json")
        assert response.status_code == 200, response.content
        return response.json()["owners"]

    assert owners({"name": "ana"}) == [
        {"name": "ana", "type": None, "kind": "team", "displayName": None, "email": None}
    ]
    assert owners({"name": "ana", "kind": "person"})[0]["kind"] == "person"
    contact = {"email": "ana@example.com", "displayName": "Ana Lima"}
    assert owners({"name": "ana", **contact})[0] == {
        "name": "ana",
        "type": None,
        "kind": "person",
        **contact,
    }
    assert owners({"name": "ana", "type": "DATA_OWNER"})[0] == {
        "name": "ana",
        "type": "DATA_OWNER",
        "kind": "person",
        **contact,
    }
    assert owners({"name": "ana", "email": ""})[0]["email"] is None
    # Owners as a dataset's answer shows them (nulls and all) can be sent back as they are.
    read = api(steward).get(dataset_url()).json()["owners"]
    assert owners(*read) == read
    bad = api(steward).patch(
        dataset_url(), {"owners": [{"name": "ana", "email": "not-an-address"}]}, format="json"
    )
    assert bad.status_code == 400
    assert bad.json()["field"] == "owners[0].email"


def test_it_flags_a_field_as_pii_identifying_a_subject(api, steward, customers):
    SubjectKind.objects.create(name="customer")
    response = api(steward).patch(
        dataset_url(suffix="/fields/customer_id"),
        {"pii": "identifier", "subjectKind": "customer"},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["subjectKind"] == "customer"
    assert response.json()["flagSource"] == "declared"


def test_it_reads_the_catalog_as_of_a_past_instant(api, steward, viewer, customers):
    SubjectKind.objects.create(name="customer")
    with time_machine.travel(timezone.now() + timedelta(days=1)):
        api(steward).patch(dataset_url(suffix="/fields/email"), {"pii": "email"}, format="json")
        api(steward).patch(dataset_url(), {"owners": [{"name": "crm-team"}]}, format="json")
    before = timezone.now() + timedelta(hours=1)
    body = api(viewer).get(dataset_url(), {"asOf": before.isoformat()}).json()
    assert body["owners"] == []
    assert {f["name"]: f["pii"] for f in body["fields"]}["email"] is None
    later = (
        api(viewer).get(dataset_url(), {"asOf": (before + timedelta(days=2)).isoformat()}).json()
    )
    assert later["owners"][0]["name"] == "crm-team"
    assert {f["name"]: f["pii"] for f in later["fields"]}["email"] == "email"


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"pii": "shoe-size"}, "pii"),
        ({"subjectKind": "martian"}, "subjectKind"),
        ({"sensitivity": 7}, "sensitivity"),
        ({"colour": "red"}, "colour"),
        ({"tags": "gold"}, "tags"),
        ({"tags": ["gold", "x" * 129]}, "tags[1]"),
        ({"tags": [""]}, "tags[0]"),
        ({"tags": ["key", "a,b"]}, "tags[1]"),
    ],
)
def test_it_rejects_bad_field_edits_naming_the_field(api, steward, customers, payload, field):
    response = api(steward).patch(dataset_url(suffix="/fields/email"), payload, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert not ChangeRecord.objects.exists()


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"retentionPolicy": "forever"}, "retentionPolicy"),
        ({"owners": [{"type": "x"}]}, "owners[0].name"),
        ({"tags": "gold"}, "tags"),
        ({"tags": ["gold,silver"]}, "tags[0]"),
        ({"sensitivity": "secret"}, "sensitivity"),
    ],
)
def test_it_rejects_bad_dataset_edits_naming_the_field(api, steward, customers, payload, field):
    response = api(steward).patch(dataset_url(), payload, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert not ChangeRecord.objects.exists()


def test_a_tag_named_before_the_comma_rule_can_be_sent_back(api, steward, customers):
    from catalog.models import Tag

    Tag.objects.create(name="eu,us")
    response = api(steward).patch(dataset_url(), {"tags": ["eu,us"]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["tags"] == ["eu,us"]


def test_it_rejects_a_body_that_is_not_json(api, steward, customers):
    response = api(steward).generic(
        "PATCH", dataset_url(), "{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]


def test_it_answers_401_without_a_token(api, customers):
    response = api(None).get("/api/v1/namespaces")
    assert response.status_code == 401
    assert response.json()["field"] == "Authorization"


def test_it_answers_401_for_a_revoked_token(api, viewer, customers):
    from catalog import actions

    token, key = actions.issue_token(viewer)
    actions.revoke_token(token)
    client = api(None)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/v1/namespaces").status_code == 401


def test_it_forbids_a_viewer_to_edit(api, viewer, customers):
    response = api(viewer).patch(dataset_url(), {"description": "x"}, format="json")
    assert response.status_code == 403
    assert "steward" in response.json()["error"]


def test_it_forbids_a_producer_to_read(api, producer, customers):
    assert api(producer).get("/api/v1/namespaces").status_code == 403


def test_it_serves_the_openapi_schema(api, viewer):
    response = api(viewer).get("/api/schema/")
    assert response.status_code == 200
    assert b"/api/v1/namespaces" in response.content


def test_the_api_reference_describes_operations_in_the_users_words(api, viewer):
    import re

    schema = api(viewer).get("/api/schema/", {"format": "json"}).json()
    internal = re.compile(r"\b(graph|catalog|ingest|privacy|ops)\.[a-z_]+\.|\bBase\b|\.py\b|^GET ")
    leaked = [
        (method, path, op["description"][:80])
        for path, operations in schema["paths"].items()
        for method, op in operations.items()
        if internal.search(op.get("description", ""))
    ]
    assert leaked == []
