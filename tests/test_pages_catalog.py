"""Catalog pages: overview, dataset list, dataset page, steward edits in place, stewardship."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.utils import timezone

from catalog.models import ChangeRecord, Dataset, DatasetField, FlagSource
from catalog.views import schema_diff, version_rows
from graph.models import Run, RunState
from tests import page_builders as pb

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop():
    return pb.build_shop()


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def q(**params: str) -> str:
    return urlencode(params)


def ds_params(ds, **extra: str) -> str:
    return q(namespace=ds.namespace.name, name=ds.name, **extra)


PAGES = [
    "/",
    "/datasets/",
    "/datasets/?pii=1&retention=-",
    "/stewardship/",
]


@pytest.mark.parametrize("url", PAGES)
def test_it_renders_each_catalog_page_for_a_viewer(shop, viewer, url):
    response = client_for(viewer).get(url)
    assert response.status_code == 200
    assert b"Lineage Explorer" in response.content


def test_the_overview_lists_the_namespaces_that_hold_datasets(shop, viewer):
    """A namespace of jobs alone (spark://etl) is found by search, not listed with none."""
    from django.core.cache import cache

    cache.clear()
    client = client_for(viewer)
    listed = client.get("/").content.decode().split('id="ns-h"')[1]
    assert f">{pb.SHOP}<" in listed and pb.SPARK not in listed
    hidden = pb.make_dataset("s3://hidden-only", "secret.table", ("id",))
    Dataset.objects.filter(pk=hidden.pk).update(is_hidden=True)
    options = client.get("/datasets/").content.decode()
    assert f'value="{pb.SHOP}"' in options and f'value="{pb.SPARK}"' not in options
    assert "hidden-only" not in options
    health = client.get("/health/").content.decode()
    assert f">{pb.SHOP}<" in health and f">{pb.SPARK}<" not in health


@pytest.mark.parametrize("url", [*PAGES, "/datasets/show?namespace=x&name=y"])
def test_it_sends_anonymous_visitors_to_sign_in(url):
    response = Client().get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_it_forbids_a_producer_to_read_pages(shop, producer):
    assert client_for(producer).get("/datasets/").status_code == 403


def test_it_shows_a_dataset_with_owners_retention_and_field_badges(shop, viewer):
    response = client_for(viewer).get(f"/datasets/show?{ds_params(shop.customers)}")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Every customer who ever signed up" in html
    assert "CRM team" in html
    assert "two-years" in html
    assert "identifies customer" in html
    assert "PII · Email address" in html
    # Schema history with the diff between the two versions.
    assert "phone" in html and "diff-removed" in html
    assert "int → bigint" in html
    # The change history.
    assert '<span class="mono">email</span> personal data' in html


def test_the_about_box_shows_owners_contact_tag_and_retention_descriptions(shop, viewer):
    from catalog.models import Owner, Tag

    policy = shop.customers.retention_policy
    policy.legal_basis, policy.description = "GDPR 6(1)(b)", "Kept while the contract runs"
    policy.save()
    Owner.objects.filter(name=shop.customers.ownerships.first().owner.name).update(
        email="crm@example.com"
    )
    tag, _ = Tag.objects.update_or_create(
        name="gold", defaults={"description": "Curated and tested"}
    )
    shop.customers.tags.add(tag)
    html = client_for(viewer).get(f"/datasets/show?{ds_params(shop.customers)}").content.decode()
    assert 'href="mailto:crm@example.com"' in html
    assert 'title="Curated and tested">gold</span>' in html
    assert "GDPR 6(1)(b)" in html and "Kept while the contract runs" in html


def test_it_marks_propagated_flags_apart_from_declared_ones(shop, viewer):
    html = client_for(viewer).get(f"/datasets/show?{ds_params(shop.raw)}").content.decode()
    assert "badge-propagated" in html
    assert "propagated along lineage" in html


def test_it_shows_no_edit_controls_to_a_viewer(shop, viewer):
    html = client_for(viewer).get(f"/datasets/show?{ds_params(shop.customers)}").content.decode()
    assert "data-edit" not in html.replace("data-editable", "")
    assert "/datasets/edit" not in html


def test_it_shows_edit_controls_to_a_steward(shop, steward):
    html = client_for(steward).get(f"/datasets/show?{ds_params(shop.customers)}").content.decode()
    assert "/datasets/edit?" in html
    assert "/datasets/field?" in html


def test_it_answers_404_for_an_unknown_dataset(viewer):
    response = client_for(viewer).get("/datasets/show?namespace=nope&name=nothing")
    assert response.status_code == 404


def test_it_pins_the_dataset_page_query_count(shop, viewer, django_assert_max_num_queries):
    client = client_for(viewer)
    client.get("/")  # warm the session
    with django_assert_max_num_queries(16):
        response = client.get(f"/datasets/show?{ds_params(shop.customers)}")
    assert response.status_code == 200


def test_it_shows_the_dataset_as_of_a_past_instant(shop, steward, viewer):
    client = client_for(steward)
    client.post(
        f"/datasets/edit?{ds_params(shop.customers)}",
        {
            "description": "Changed later",
            "owners": "crm-team (DATA_OWNER)",
            "tags": "gold",
            "sensitivity": "confidential",
            "retention_policy": shop.retention.pk,
        },
    )
    html = (
        client_for(viewer)
        .get(f"/datasets/show?{ds_params(shop.customers, asOf='2025-01-15T00:00:00Z')}")
        .content.decode()
    )
    about = html.split('id="history-h"')[0]
    assert "Every customer who ever signed up" in about
    assert "Changed later" not in about
    assert "as it was on 2025-01-15" in html
    # The schema of that instant: phone was still there, country not yet.
    assert ">phone<" in html


def test_every_part_of_the_dataset_page_shows_the_instant_asked_for(shop, viewer):
    client = client_for(viewer)
    now = client.get(f"/datasets/show?{ds_params(shop.raw)}").content.decode()
    assert "personal-data field" in now.split('id="asof-input"')[0]
    # Before the first run wrote it, raw/customers held no personal data yet (propagation
    # brings the flags with the column edges from T0 on, and the source's email flag
    # only from T1): the head's badges count the flags of that instant.
    then = client.get(f"/datasets/show?{ds_params(shop.customers, asOf='2025-01-15T00:00:00Z')}")
    head = then.content.decode().split('id="asof-input"')[0]
    assert "1 personal-data field" in head  # customer_id only: email was flagged at T1
    # Runs and history stop at the instant: the ingest run of T3 (failed) is not listed.
    runs = client.get(
        f"/datasets/runs?{ds_params(shop.customers, asOf='2025-02-15T00:00:00Z')}"
    ).content.decode()
    assert "failed" not in runs and "completed" in runs
    assert "failed" in client.get(f"/datasets/runs?{ds_params(shop.customers)}").content.decode()


def test_a_run_whose_failure_came_later_was_running_at_the_instant_asked_for(shop, viewer):
    """A failure recorded without an end time (the run's last event said FAILED a day on)
    is shown as running for an instant before that event, as the lineage answers show it."""
    job = pb.make_job(pb.SPARK, "late_failure")
    run = pb.make_run(job, pb.T3, RunState.FAILED, outputs=(shop.customers,), error="boom")
    Run.objects.filter(pk=run.pk).update(ended_at=None, state_event_time=pb.T3 + timedelta(days=1))
    # A run whose state's time is unknown: its end, after the instant, tells it was running.
    untimed = pb.make_run(pb.make_job(pb.SPARK, "untimed"), pb.T3, outputs=(shop.customers,))
    Run.objects.filter(pk=untimed.pk).update(
        ended_at=pb.T3 + timedelta(hours=2), state_event_time=None
    )
    during = pb.T3 + timedelta(hours=1)
    html = (
        client_for(viewer)
        .get(f"/datasets/runs?{ds_params(shop.customers, asOf=during.isoformat())}")
        .content.decode()
    )
    row = html.split("late_failure")[1].split("</tr>")[0]
    assert "running" in row and "failed" not in row
    row = html.split("untimed")[1].split("</tr>")[0]
    assert "running" in row and "completed" not in row


def test_before_a_dataset_existed_its_page_says_so(shop, viewer):
    client = client_for(viewer)
    shop.c360.first_seen = shop.c360.first_seen.replace(year=2025, month=2)
    shop.c360.save(update_fields=["first_seen"])
    html = client.get(
        f"/datasets/show?{ds_params(shop.c360, asOf='2025-01-15T00:00:00Z')}"
    ).content.decode()
    assert "did not exist yet on 2025-01-15 00:00:00 UTC" in html
    assert "not yet seen" in html
    assert 'id="fields"' not in html and "Active" not in html
    lineage = client.get(
        f"/datasets/lineage?{ds_params(shop.c360, asOf='2025-01-15T00:00:00Z')}"
    ).content.decode()
    assert "did not exist yet" in lineage and "a source" not in lineage


@pytest.mark.parametrize("path", ["/datasets/show", "/datasets/lineage", "/datasets/runs"])
def test_a_bad_instant_on_the_dataset_page_is_a_clear_error(shop, viewer, path):
    response = client_for(viewer).get(f"{path}?{ds_params(shop.customers, asOf='yesterday')}")
    assert response.status_code == 400
    html = response.content.decode()
    assert "asOf is not an ISO-8601 instant: &#x27;yesterday&#x27;" in html


def test_a_dropped_dataset_is_not_called_a_source(shop, viewer):
    pb.drop(shop.revenue, pb.T3)
    client = client_for(viewer)
    lineage = client.get(f"/datasets/lineage?{ds_params(shop.revenue)}").content.decode()
    assert "Dropped on 2025-04-01 00:00" in lineage and "a source" not in lineage
    then = client.get(
        f"/datasets/lineage?{ds_params(shop.revenue, asOf='2025-03-15T00:00:00Z')}"
    ).content.decode()
    assert "revenue_report" in then and "Dropped" not in then
    page = client.get(
        f"/datasets/show?{ds_params(shop.revenue, asOf='2025-03-15T00:00:00Z')}"
    ).content.decode()
    assert "<dt>State</dt><dd>Active" in page
    node = f"dataset:{shop.revenue.namespace.name}:{shop.revenue.name}"
    cause = client.get(f"/root-cause/?{q(node=node)}").content.decode()
    assert "this is a source" not in cause and "it is dropped" in cause


def test_the_lineage_box_counts_what_it_lists(shop, viewer):
    html = client_for(viewer).get(f"/datasets/lineage?{ds_params(shop.clean)}").content.decode()
    # Two datasets one job downstream (revenue_by_country and customer_360).
    assert 'One job downstream <span class="muted small">(2)</span>' in html
    assert "in all, within 5 jobs" in html


def test_the_history_shows_readable_values_and_people_first(shop, steward):
    client = client_for(steward)
    client.post(
        f"/datasets/edit?{ds_params(shop.customers)}",
        {
            "description": "",
            "owners": "crm-team (DATA_OWNER), data-eng (TECHNICAL_OWNER)",
            "tags": "",
            "new_owners": "on",
        },
    )
    ChangeRecord.objects.create(
        at=pb.T3, source="lineage", dataset=shop.customers, attribute="lifecycle", new="OVERWRITE"
    )
    html = client.get(f"/datasets/show?{ds_params(shop.customers)}").content.decode()
    history = html.split('id="history-h"')[1]
    assert "crm-team (DATA_OWNER), data-eng (TECHNICAL_OWNER)" in history
    assert "{&#x27;name&#x27;" not in history and "[{" not in history
    assert "OVERWRITE" not in history  # lineage's records are one click away
    assert 'aria-current="true">Edits by people<' in history
    lineage = client.get(f"/datasets/show?{ds_params(shop.customers, show='lineage')}")
    assert "OVERWRITE" in lineage.content.decode().split('id="history-h"')[1]
    everything = client.get(f"/datasets/history?{ds_params(shop.customers, show='all')}")
    text = everything.content.decode()
    assert "OVERWRITE" in text and "crm-team (DATA_OWNER)" in text


def test_it_lets_a_steward_edit_a_dataset_in_place(shop, steward):
    client = client_for(steward)
    form = client.get(f"/datasets/edit?{ds_params(shop.orders)}", HTTP_X_FRAGMENT="1")
    assert form.status_code == 200
    assert b"<form" in form.content and b"<html" not in form.content
    response = client.post(
        f"/datasets/edit?{ds_params(shop.orders)}",
        {
            "description": "All orders",
            "owners": "sales (DATA_OWNER), data-eng",
            "new_owners": "on",
            "tags": "gold, core",
            "sensitivity": "internal",
            "retention_policy": shop.retention.pk,
        },
        HTTP_X_FRAGMENT="1",
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "All orders" in html and "sales" in html and "DATA_OWNER" in html
    attributes = set(
        ChangeRecord.objects.filter(dataset=shop.orders).values_list("attribute", flat=True)
    )
    assert attributes == {"description", "owners", "tags", "sensitivity", "retention_policy"}
    history = client.get(f"/datasets/history?{ds_params(shop.orders)}").content.decode()
    assert "stella-steward" in history and "All orders" in history


def test_it_redirects_back_after_a_plain_form_post(shop, steward):
    response = client_for(steward).post(
        f"/datasets/edit?{ds_params(shop.orders)}", {"description": "x", "owners": "", "tags": ""}
    )
    assert response.status_code == 302
    assert response["Location"].startswith("/datasets/show?")


def test_it_rejects_a_malformed_owner_list_with_the_form_again(shop, steward):
    response = client_for(steward).post(
        f"/datasets/edit?{ds_params(shop.orders)}",
        {"description": "", "owners": "crm (DATA_OWNER", "tags": ""},
        HTTP_X_FRAGMENT="1",
    )
    assert response.status_code == 422
    assert b"Unclosed bracket" in response.content
    assert not ChangeRecord.objects.filter(dataset=shop.orders).exists()


@pytest.mark.parametrize(
    ("owners", "extra", "message"),
    [
        (
            "Priya Novak [DATA_OWNER",
            {"new_owners": "on"},
            "&#x27;Priya Novak [DATA_OWNER&#x27; is not an owner name",
        ),
        ("Priya Novak", {}, "Not a known owner or user: Priya Novak."),
        ("crm-team (DATA OWNER!)", {}, "&#x27;DATA OWNER!&#x27; is not an ownership type"),
        ("", {"add_owner": "nobody-known"}, "Not a known owner or user: nobody-known."),
        (
            "",
            {"add_owner": "crm-team", "add_owner_type": "x-y"},
            "&#x27;x-y&#x27; is not an ownership type",
        ),
    ],
)
def test_an_owner_must_be_known_unless_a_new_one_is_asked_for(
    shop, steward, owners, extra, message
):
    response = client_for(steward).post(
        f"/datasets/edit?{ds_params(shop.orders)}",
        {"description": "", "owners": owners, "tags": "", **extra},
        HTTP_X_FRAGMENT="1",
    )
    assert response.status_code == 422
    assert message in response.content.decode()
    assert not ChangeRecord.objects.filter(dataset=shop.orders).exists()


def test_the_owner_picker_offers_known_owners_and_users_and_adds_one(shop, steward):
    client = client_for(steward)
    form = client.get(f"/datasets/edit?{ds_params(shop.orders)}", HTTP_X_FRAGMENT="1").content
    assert b'<datalist id="known-owners">' in form
    assert b'<option value="crm-team">' in form and b'<option value="stella-steward">' in form
    response = client.post(
        f"/datasets/edit?{ds_params(shop.orders)}",
        {
            "description": "",
            "owners": "crm-team",
            "add_owner": "stella-steward",
            "add_owner_type": "DATA_STEWARD",
            "tags": "",
        },
        HTTP_X_FRAGMENT="1",
    )
    assert response.status_code == 200
    owners = sorted(
        shop.orders.ownerships.values_list("owner__name", "ownership_type", "owner__kind")
    )
    assert owners == [("crm-team", "", "team"), ("stella-steward", "DATA_STEWARD", "person")]


def test_it_lets_a_steward_flag_a_field_as_pii(shop, steward):
    client = client_for(steward)
    url = f"/datasets/field?{ds_params(shop.orders, field='customer_id')}"
    assert client.get(url, HTTP_X_FRAGMENT="1").status_code == 200
    response = client.post(
        url,
        {
            "pii_category": "identifier",
            "subject_kind": shop.customer_kind.pk,
            "sensitivity": "",
            "description": "Who ordered",
        },
        HTTP_X_FRAGMENT="1",
    )
    assert response.status_code == 200
    assert b"identifies customer" in response.content
    assert b"<tr" in response.content
    field = DatasetField.objects.get(dataset=shop.orders, name="customer_id")
    assert field.pii_category == "identifier"
    assert field.flag_source == FlagSource.DECLARED
    record = ChangeRecord.objects.get(dataset=shop.orders, attribute="pii_category")
    assert (record.old, record.new, record.actor_name) == ("", "identifier", "stella-steward")


def test_a_steward_tags_a_field_and_the_dataset_page_shows_its_tags_then_and_now(shop, steward):
    from catalog import actions

    client = client_for(steward)
    url = f"/datasets/field?{ds_params(shop.orders, field='customer_id')}"
    form = {"pii_category": "", "sensitivity": "", "description": "Who ordered"}
    too_long = client.post(url, {**form, "tags": f"key, {'t' * 129}"}, HTTP_X_FRAGMENT="1")
    assert too_long.status_code == 422
    assert "longer than 128 characters" in too_long.content.decode()
    assert not ChangeRecord.objects.filter(dataset=shop.orders).exists()
    before = timezone.now()
    response = client.post(url, {**form, "tags": "key, join key, key"}, HTTP_X_FRAGMENT="1")
    assert response.status_code == 200
    row = response.content.decode()
    assert ">join key</span>" in row and ">key</span>" in row
    record = ChangeRecord.objects.get(dataset=shop.orders, attribute="tags")
    assert (record.field_name, record.old, record.new) == ("customer_id", [], ["join key", "key"])
    assert 'value="join key, key"' in client.get(url, HTTP_X_FRAGMENT="1").content.decode()
    page = client.get(f"/datasets/show?{ds_params(shop.orders)}").content.decode()
    assert ">join key</span>" in page
    then = client.get(
        f"/datasets/show?{ds_params(shop.orders, asOf=before.strftime('%Y-%m-%dT%H:%M:%S'))}"
    ).content.decode()
    assert "Showing this dataset as it was" in then and ">join key</span>" not in then
    # Changed since: the page as of an instant in between shows the tags of then.
    between = timezone.now()
    actions.update_field(
        DatasetField.objects.get(dataset=shop.orders, name="customer_id"),
        {"tags": ["key"]},
        actions.Actor(name="sam"),
        at=between + timedelta(seconds=2),
    )
    now = client.get(f"/datasets/show?{ds_params(shop.orders)}").content.decode()
    assert ">join key</span>" not in now and ">key</span>" in now
    then = client.get(
        "/datasets/show?"
        + ds_params(
            shop.orders, asOf=(between + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S")
        )
    ).content.decode()
    assert ">join key</span>" in then


def test_it_forbids_a_viewer_to_edit(shop, viewer):
    client = client_for(viewer)
    for url in (
        f"/datasets/edit?{ds_params(shop.orders)}",
        f"/datasets/field?{ds_params(shop.orders, field='customer_id')}",
    ):
        assert client.get(url).status_code == 403
        assert (
            client.post(url, {"description": "hacked", "pii_category": "email"}).status_code == 403
        )
    assert not ChangeRecord.objects.filter(dataset=shop.orders).exists()


def test_it_answers_404_for_an_unknown_field(shop, steward):
    response = client_for(steward).get(f"/datasets/field?{ds_params(shop.orders, field='nope')}")
    assert response.status_code == 404


def test_it_compares_two_schema_versions(shop, viewer):
    versions = list(shop.customers.versions.order_by("created_at"))
    response = client_for(viewer).get(
        "/datasets/schema?"
        + ds_params(
            shop.customers, **{"from": str(versions[0].version), "to": str(versions[1].version)}
        ),
        HTTP_X_FRAGMENT="1",
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "country" in html and "phone" in html and "int → bigint" in html


def test_it_answers_400_when_a_schema_version_is_missing(shop, viewer):
    response = client_for(viewer).get(
        "/datasets/schema?" + ds_params(shop.customers, **{"from": "x"})
    )
    assert response.status_code == 400


def test_it_diffs_schemas_by_field_name():
    diff = schema_diff(
        [{"name": "a", "type": "int"}, {"name": "b", "type": "text"}],
        [{"name": "a", "type": "bigint"}, {"name": "c", "type": "text"}],
    )
    assert [f["name"] for f in diff.added] == ["c"]
    assert [f["name"] for f in diff.removed] == ["b"]
    assert [(c.name, c.old_type, c.new_type) for c in diff.changed] == [("a", "int", "bigint")]
    assert schema_diff([{"name": "a"}], [{"name": "a"}]).is_empty


def test_it_pairs_each_version_with_its_predecessor(shop):
    rows = version_rows(list(shop.customers.versions.order_by("-created_at")))
    assert rows[0].diff is not None and rows[-1].diff is None


def test_it_lists_the_stewardship_worklists(shop, viewer, steward):
    # Subject kinds are for stewards and compliance officers: no link others cannot follow.
    assert "/stewardship/subject-kinds" in client_for(steward).get("/stewardship/").content.decode()
    html = client_for(viewer).get("/stewardship/").content.decode()
    assert "/stewardship/subject-kinds" not in html
    # clean/customers holds no declared PII; raw/customers has propagated PII and no retention.
    assert "lake/raw/customers" in html
    assert "lake/marts/customer_360" in html  # unowned
    assert (
        '<span class="mono">email</span> personal data' in html
    )  # recently changed classification


def test_an_edit_through_the_api_shows_on_the_stewardship_page_at_once(
    shop, viewer, steward, api, django_capture_on_commit_callbacks
):
    from urllib.parse import quote

    def without_retention() -> str:
        html = client_for(viewer).get("/stewardship/").content.decode()
        section = html.split('id="pii-no-retention"', 1)[1].split("</section>", 1)[0]
        return section

    assert "lake/raw/customers" in without_retention()  # and the lists are kept a minute
    url = f"/api/v1/namespaces/{quote(pb.LAKE, safe='')}/datasets/lake%2Fraw%2Fcustomers"
    policy = shop.retention.name
    with django_capture_on_commit_callbacks(execute=True):
        edited = api(steward).patch(url, {"retentionPolicy": policy}, format="json")
    assert edited.status_code == 200
    assert "lake/raw/customers" not in without_retention()


def test_it_pins_the_stewardship_query_count(shop, viewer, django_assert_max_num_queries):
    client = client_for(viewer)
    client.get("/")
    with django_assert_max_num_queries(16):
        assert client.get("/stewardship/").status_code == 200


def test_it_filters_the_dataset_list(shop, viewer):
    client = client_for(viewer)
    html = client.get("/datasets/?owner=-").content.decode()
    assert "lake/marts/customer_360" in html and "shop.public.customers" not in html
    html = client.get("/datasets/?platform=postgres").content.decode()
    assert "shop.public.orders" in html and "lake/raw/customers" not in html
    html = client.get("/datasets/?tag=gold").content.decode()
    assert "shop.public.customers" in html and "shop.public.orders" not in html


def test_a_tag_on_a_field_is_found_and_lists_the_fields_dataset(shop, viewer):
    from catalog import actions

    steward = actions.Actor(name="sam")
    field = DatasetField.objects.get(dataset=shop.orders, name="customer_id")
    actions.update_field(field, {"tags": ["join-key"]}, steward)
    client = client_for(viewer)
    html = client.get("/search/?q=join-key&kind=tags").content.decode()
    assert "· 0 datasets, 1 field</span>" in html
    html = client.get("/datasets/?tag=join-key").content.decode()
    assert "shop.public.orders" in html and "shop.public.customers" not in html
    actions.update_field(field, {"tags": ["gold"]}, steward)  # customers has the tag itself
    html = client.get("/datasets/?tag=gold").content.decode()
    assert "shop.public.orders" in html and "shop.public.customers" in html
    assert "· 1 dataset, 1 field</span>" in client.get("/search/?q=gold&kind=tags").content.decode()


def test_the_dataset_list_of_one_namespace_says_who_owns_it(shop, viewer):
    from catalog.actions import describe_namespace

    namespace = shop.orders.namespace
    url = f"/datasets/?{urlencode({'namespace': namespace.name})}"
    assert 'id="namespace-about"' not in client_for(viewer).get(url).content.decode()
    describe_namespace(namespace, "shop-team", "The shop's database")
    html = client_for(viewer).get(url).content.decode()
    assert "owned by shop-team · The shop&#x27;s database" in html


def test_it_pages_the_dataset_list_by_name_and_caps_the_count(viewer, monkeypatch):
    from catalog import views

    for i in range(60):
        pb.make_dataset(pb.LAKE, f"lake/t{i:02d}")
    client = client_for(viewer)
    first = client.get("/datasets/").content.decode()
    assert "lake/t00" in first and "lake/t49" in first and "lake/t50" not in first
    assert "60 datasets" in first
    second = client.get("/datasets/?page=2").content.decode()
    assert "lake/t50" in second and "lake/t59" in second
    monkeypatch.setattr(views, "LIST_COUNT_CAP", 20)
    capped = client.get("/datasets/?page=2").content.decode()
    assert "more than 20 datasets" in capped and "lake/t50" in capped
