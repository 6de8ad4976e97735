"""Read-only admin for the privacy audit, erasure plans and runs (never the sealed values)."""

from __future__ import annotations

from django.contrib import admin

from catalog.admin import ReadOnlyAdmin
from privacy.models import AuditEntry, ErasurePlan, PrivacyRun


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor_name", "action", "outcome", "subject_kind", "result_count")
    list_filter = ("action", "outcome", "subject_kind")
    search_fields = ("actor_name",)
    date_hierarchy = "at"


@admin.register(ErasurePlan)
class ErasurePlanAdmin(ReadOnlyAdmin):
    list_display = ("id", "created_at", "created_by_name", "subject_kind")
    exclude = ("value_hashes",)


@admin.register(PrivacyRun)
class PrivacyRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "state", "created_at", "created_by_name", "subject_kind")
    list_filter = ("kind", "state")
    exclude = ("sealed", "value_hashes")
