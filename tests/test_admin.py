"""Django's admin shows the catalog, the lineage and their evidence, and edits none of
them: an edit there would skip the naming rules, the dataset's history and the copies a
flag reaches. Subscriptions, users and token revocation are managed there."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db.models import Model
from django.test import Client
from django.urls import reverse

from catalog.actions import issue_token
from catalog.auth import STEWARD
from catalog.models import ChangeRecord, DatasetField, DatasetVersion, Owner, RetentionPolicy
from graph.models import ColumnEdge, RunDataset, TableEdge, Taint
from ingest.models import EventState, RawEvent
from ops.models import Delivery, Notice, Subscription
from tests.page_builders import T0, build_shop

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser(db: Any) -> Client:
    user = User.objects.create_superuser("root", password="pw-root")
    client = Client()
    client.force_login(user)
    return client


def _url(obj: Model, action: str) -> str:
    meta = obj._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_{action}", args=[obj.pk])


def _read_only_objects() -> list[Model]:
    shop = build_shop()
    run = next(iter(shop.runs.values()))
    found: list[Model | None] = [
        shop.customers,
        DatasetField.objects.get(dataset=shop.customers, name="email"),
        ChangeRecord.objects.first(),
        DatasetVersion.objects.first(),
        shop.ingest,
        run,
        RunDataset.objects.first(),
        TableEdge.objects.first(),
        ColumnEdge.objects.first(),
        Taint.objects.create(dataset=shop.raw, reason="bad load"),
    ]
    assert all(obj is not None for obj in found)
    return [obj for obj in found if obj is not None]


def test_catalog_lineage_and_evidence_are_shown_but_not_edited(superuser: Client) -> None:
    for obj in _read_only_objects():
        meta = obj._meta
        listing = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        assert superuser.get(listing).status_code == 200, listing
        page = superuser.get(_url(obj, "change"))
        assert page.status_code == 200, meta.model_name
        assert b'name="_save"' not in page.content, meta.model_name
        assert superuser.post(_url(obj, "change"), {}).status_code == 403, meta.model_name
        assert superuser.get(_url(obj, "delete")).status_code == 403, meta.model_name
        add = reverse(f"admin:{meta.app_label}_{meta.model_name}_add")
        assert superuser.get(add).status_code == 403, meta.model_name


def test_a_flag_cannot_be_set_in_the_admin_where_it_would_reach_no_copy(
    superuser: Client,
) -> None:
    build_shop()
    field = DatasetField.objects.filter(pii_category="").select_related("dataset").first()
    assert field is not None
    history = ChangeRecord.objects.count()
    response = superuser.post(
        _url(field, "change"),
        {"name": field.name, "pii_category": "email", "dataset": field.dataset_id},
    )
    assert response.status_code == 403
    field.refresh_from_db()
    assert field.pii_category == ""
    assert ChangeRecord.objects.count() == history


def test_what_datasets_name_is_described_there_never_renamed_nor_deleted(
    superuser: Client,
) -> None:
    shop = build_shop()
    owner = Owner.objects.get(name="crm-team")
    page = superuser.post(
        _url(owner, "change"),
        {"name": "someone-else", "kind": "team", "display_name": "CRM", "email": "crm@x.org"},
    )
    assert page.status_code == 302
    owner.refresh_from_db()
    assert (owner.name, owner.display_name, owner.email) == ("crm-team", "CRM", "crm@x.org")
    for named in (owner, shop.customer_kind, shop.customers.namespace, shop.retention):
        assert named is not None
        assert superuser.get(_url(named, "delete")).status_code == 403
    assert superuser.get(reverse("admin:catalog_tag_add")).status_code == 403


def test_retention_policies_are_defined_there_in_whole_days(superuser: Client) -> None:
    add = reverse("admin:catalog_retentionpolicy_add")
    form = {"name": "five-years", "action": "delete", "legal_basis": "", "description": ""}
    page = superuser.post(add, {**form, "days": "40000"})
    assert page.status_code == 200
    assert "less than or equal to 36525" in page.content.decode()
    assert superuser.post(add, {**form, "days": "1825"}).status_code == 302
    policy = RetentionPolicy.objects.get(name="five-years")
    assert policy.duration_days == 1825
    page = superuser.get(_url(policy, "change"))
    assert b'name="days" value="1825"' in page.content


def test_dead_letters_alone_are_deleted_there_one_at_a_time(superuser: Client) -> None:
    failed, done = (
        RawEvent.objects.create(
            fingerprint=f"{n}" * 64, kind="run", body="{}", event_time=T0, state=state
        )
        for n, state in ((1, EventState.FAILED), (2, EventState.DONE))
    )
    assert superuser.post(_url(done, "change"), {"state": "pending"}).status_code == 403
    assert superuser.get(_url(done, "delete")).status_code == 403
    assert superuser.post(_url(failed, "delete"), {"post": "yes"}).status_code == 302
    assert list(RawEvent.objects.values_list("pk", flat=True)) == [done.pk]


def test_role_groups_keep_their_permissions(superuser: Client) -> None:
    role = Group.objects.get(name=STEWARD)
    granted = set(role.permissions.values_list("pk", flat=True))
    page = superuser.post(_url(role, "change"), {"name": "stewards", "permissions": []})
    assert page.status_code == 302
    role.refresh_from_db()
    assert role.name == STEWARD
    assert set(role.permissions.values_list("pk", flat=True)) == granted
    assert superuser.get(_url(role, "delete")).status_code == 403


def test_subscriptions_are_managed_and_tokens_revoked_there(superuser: Client) -> None:
    team = Owner.objects.create(name="crm-team")
    page = superuser.post(
        reverse("admin:ops_subscription_add"),
        {"name": "crm", "owner": team.pk, "webhook_url": "hooks.example.com/x", "active": "on"},
    )
    assert page.status_code == 302
    assert Subscription.objects.get().webhook_url == "https://hooks.example.com/x"
    owner = User.objects.create_user("tom")
    token, _ = issue_token(owner, "laptop")
    assert superuser.get(reverse("admin:catalog_apitoken_add")).status_code == 403
    assert superuser.post(_url(token, "change"), {"user": "", "name": "x"}).status_code == 403
    assert superuser.get(_url(token, "delete")).status_code == 403
    listing = reverse("admin:catalog_apitoken_changelist")
    page = superuser.post(listing, {"action": "revoke", "_selected_action": [token.pk]})
    assert page.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None and token.user == owner


def test_what_a_subscription_was_told_stays_on_record(superuser: Client) -> None:
    team = Owner.objects.create(name="crm-team")
    told, untold = (
        Subscription.objects.create(name=name, owner=team, email="crm@example.com")
        for name in ("told", "untold")
    )
    notice = Notice.objects.create(subscription=told, kind="stale", key="k", title="stale")
    delivery = Delivery.objects.create(notice=notice, channel="email", target="crm@example.com")
    for record in (notice, delivery):
        assert superuser.get(_url(record, "delete")).status_code == 403
    # One that was told something is turned off, not deleted: not one at a time, nor in bulk.
    assert superuser.get(_url(told, "delete")).status_code == 403
    listing = reverse("admin:ops_subscription_changelist")
    chosen = {"action": "delete_selected", "_selected_action": [told.pk], "post": "yes"}
    assert b"Cannot delete subscription" in superuser.post(listing, chosen).content
    assert superuser.post(_url(untold, "delete"), {"post": "yes"}).status_code == 302
    assert list(Subscription.objects.values_list("name", flat=True)) == ["told"]
    assert list(Delivery.objects.values_list("notice__title", flat=True)) == ["stale"]
    # Who was told and about what stay as told; where it is told next can change.
    other = Owner.objects.create(name="billing-team")
    edit = {"name": "billing", "owner": other.pk, "email": "crm-alerts@example.com"}
    assert superuser.post(_url(told, "change"), {**edit, "active": "on"}).status_code == 302
    told.refresh_from_db()
    assert (told.name, told.owner, told.email) == ("told", team, "crm-alerts@example.com")
    assert b'name="owner"' not in superuser.get(_url(told, "change")).content
