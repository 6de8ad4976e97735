"""Small builders for catalog and graph rows used across tests."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from catalog.models import Dataset, DatasetField, Namespace


def dataset(
    namespace: str = "postgres://shop-db:5432",
    name: str = "shop.public.customers",
    fields: tuple[str, ...] = ("customer_id", "email", "country"),
    at: datetime | None = None,
    **extra: Any,
) -> Dataset:
    ns, _ = Namespace.objects.get_or_create(name=namespace)
    when = at or timezone.now()
    ds = Dataset.objects.create(namespace=ns, name=name, first_seen=when, last_seen=when, **extra)
    for i, field_name in enumerate(fields):
        DatasetField.objects.create(
            dataset=ds, name=field_name, type="string", ordinal=i, first_seen=when
        )
    return ds
