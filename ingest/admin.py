"""Stored events are evidence, shown read-only: the Ingestion page and ``replay_events``
send one through again. A dead letter that will never go through (its event is wrong for
good) is deleted here once looked into, and then counts no more as one."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from catalog.admin import ReadOnlyAdmin
from ingest import models


@admin.register(models.RawEvent)
class RawEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "event_type", "event_time", "job_name", "state", "attempts")
    list_filter = ("state", "kind", "source")
    search_fields = ("fingerprint", "job_name", "run_uuid")
    date_hierarchy = "received_at"

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        # One at a time, from its own page: a deletion in bulk could take live events along.
        return {}

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return (
            obj is not None
            and obj.state == models.EventState.FAILED
            and request.user.has_perm("ingest.delete_rawevent")
        )
