from django.contrib import admin

from ingest import models


@admin.register(models.RawEvent)
class RawEventAdmin(admin.ModelAdmin[models.RawEvent]):
    list_display = ("id", "kind", "event_type", "event_time", "job_name", "state", "attempts")
    list_filter = ("state", "kind", "source")
    search_fields = ("fingerprint", "job_name", "run_uuid")
    readonly_fields = ("fingerprint", "body", "received_at", "claimed_at", "processed_at")
    date_hierarchy = "received_at"
