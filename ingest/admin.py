"""Stored events are evidence, shown read-only: the Ingestion page and ``replay_events``
send one through again."""

from django.contrib import admin

from catalog.admin import ReadOnlyAdmin
from ingest import models


@admin.register(models.RawEvent)
class RawEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "event_type", "event_time", "job_name", "state", "attempts")
    list_filter = ("state", "kind", "source")
    search_fields = ("fingerprint", "job_name", "run_uuid")
    date_hierarchy = "received_at"
