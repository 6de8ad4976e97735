"""Django's admin shows the catalog, the lineage and their evidence, and edits none of
them: an edit there would skip the naming rules, the dataset's history and the copies a
flag reaches. Subscriptions, users and token revocation are managed there."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import Model
from django.test import Client
from django.urls import reverse

from catalog.actions import issue_token
from catalog.models import ApiToken, ChangeRecord, DatasetField
from graph.models import ColumnEdge, TableEdge, Taint
from ingest.models import RawEvent
from ops.models import Subscription
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
    taint = Taint.objects.create(dataset=shop.raw, reason="bad load")
    records = [
        shop.customers,
        DatasetField.objects.get(dataset=shop.customers, name="email"),
        shop.customers.namespace,
        shop.retention,
        shop.customer_kind,
        ChangeRecord.objects.first(),
        shop.ingest,
        shop.runs[next(iter(shop.runs))],
        TableEdge.objects.first(),
        ColumnEdge.objects.first(),
        taint,
    ]
    return [obj for obj in records if obj is not None]


def test_catalog_lineage_and_evidence_are_shown_but_not_edited(superuser: Client) -> None:
    objects = _read_only_objects()
    assert len(objects) == 11
    for obj in objects:
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


def test_stored_events_are_shown_read_only(superuser: Client) -> None:
    event = RawEvent.objects.create(
        fingerprint="f" * 64, kind="run", body='{"eventType": "START"}', event_time=T0
    )
    assert superuser.get(_url(event, "change")).status_code == 200
    assert superuser.post(_url(event, "change"), {"state": "done"}).status_code == 403


def test_subscriptions_are_managed_and_tokens_revoked_in_the_admin(superuser: Client) -> None:
    assert superuser.get(reverse("admin:ops_subscription_add")).status_code == 200
    assert Subscription.objects.count() == 0
    owner = User.objects.create_user("tom")
    issue_token(owner, "laptop")
    token = ApiToken.objects.get(user=owner)
    assert superuser.get(reverse("admin:catalog_apitoken_add")).status_code == 403
    page = superuser.get(_url(token, "change"))
    assert page.status_code == 200 and b'name="_save"' in page.content
