"""The audit trail of subject searches, scans and erasures.

Subject identifiers are never stored: only a keyed hash (HMAC-SHA256).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditAction(models.TextChoices):
    SEARCH = "search", "Subject search"
    SCAN = "scan", "Spark scan"
    ERASURE_PLAN = "erasure_plan", "Erasure plan"
    ERASURE_DRY_RUN = "erasure_dry_run", "Erasure dry run"
    ERASURE_APPLY = "erasure_apply", "Erasure applied"
    EXPORT = "export", "Export"


class AuditEntry(models.Model):
    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=16, choices=AuditAction.choices)
    subject_kind = models.CharField(max_length=64, blank=True)
    value_hashes = models.JSONField(default=list, help_text="Keyed hashes of the identifiers")
    as_of = models.DateTimeField(null=True, blank=True)
    result_count = models.IntegerField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        permissions = [
            ("search_subjects", "Can search for a data subject's datasets"),
            ("view_audit", "Can read the privacy audit log"),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_name} at {self.at:%Y-%m-%d %H:%M}"
