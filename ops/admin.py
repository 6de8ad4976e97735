"""Subscriptions to notices are managed in the admin; notices and deliveries are records of
what was told to whom, neither edited nor deleted."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from ops.models import Delivery, Notice, Subscription


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin[Subscription]):
    list_display = ("name", "dataset", "namespace", "owner", "webhook_url", "email", "active")
    # In this order whether or not the first four are read-only (``get_readonly_fields``).
    fields = ("name", "dataset", "namespace", "owner", "kinds", "webhook_url", "email", "active")
    list_filter = ("active",)
    search_fields = ("name", "email", "webhook_url")
    raw_id_fields = ("dataset",)
    # A webhook written without a scheme is an https one.
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def get_readonly_fields(
        self, request: HttpRequest, obj: Subscription | None = None
    ) -> tuple[str, ...]:
        """Who was told, and which datasets it covers, are part of its notices' record once
        it was told something: another team or other datasets take a subscription of their
        own. Where it is told (each delivery keeps its target) and which kinds of notice
        stay editable."""
        if obj is not None and obj.notices.exists():
            return ("name", "dataset", "namespace", "owner")
        return ()

    def has_delete_permission(self, request: HttpRequest, obj: Subscription | None = None) -> bool:
        """One that was told something is turned off instead: its notices are a record."""
        if obj is not None and obj.notices.exists():
            return False
        return super().has_delete_permission(request, obj)


class RecordAdmin(admin.ModelAdmin[Any]):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Notice)
class NoticeAdmin(RecordAdmin):
    list_display = ("created_at", "kind", "title", "subscription")
    list_filter = ("kind",)


@admin.register(Delivery)
class DeliveryAdmin(RecordAdmin):
    list_display = ("notice", "channel", "target", "state", "attempts", "sent_at")
    list_filter = ("state", "channel")
