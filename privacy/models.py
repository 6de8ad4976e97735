"""Subject searches' audit trail, erasure plans and the Spark runs that verify and erase.

Subject identifiers are never stored in clear: the audit keeps a keyed hash
(HMAC-SHA256 with ``settings.PRIVACY_HASH_KEY``); a Spark run holds the values
sealed (encrypted, see ``privacy.sealing``) only while it is pending or
running, and clears them when it ends.
"""

from __future__ import annotations

import uuid

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
    LOOKUP = "lookup", "Audit lookup by value"
    AUDIT_READ = "audit_read", "Audit log read"
    SUBJECT_KINDS = "subject_kinds", "Subject kinds"


class AuditOutcome(models.TextChoices):
    OK = "ok", "Done"
    REQUESTED = "requested", "Requested"
    FAILED = "failed", "Failed"
    DENIED = "denied", "Denied"
    REFUSED = "refused", "Refused: the identifiers do not match the plan"


class AuditEntry(models.Model):
    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_name = models.CharField(max_length=150)
    action = models.CharField(max_length=16, choices=AuditAction.choices)
    outcome = models.CharField(max_length=10, choices=AuditOutcome.choices, default=AuditOutcome.OK)
    subject_kind = models.CharField(max_length=64, blank=True)
    value_hashes = models.JSONField(
        default=list, help_text="[{index, kind, field, hash}]: keyed hashes of the identifiers"
    )
    as_of = models.DateTimeField(null=True, blank=True)
    result_count = models.IntegerField(null=True, blank=True)
    # The erasure plan or Spark run the entry is about.
    reference = models.UUIDField(null=True, blank=True, db_index=True)
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

    @property
    def result_text(self) -> str:
        """The result count with its unit, which depends on the action (and, for Spark work,
        on whether it is the request or its outcome)."""
        n = self.result_count
        if n is None:
            return "—"
        if self.action in (AuditAction.ERASURE_PLAN, AuditAction.EXPORT):
            unit = "step"
        elif self.action == AuditAction.LOOKUP:
            unit = "entry" if n == 1 else "entries"
            return f"{n:,} {unit}"
        elif self.action == AuditAction.SEARCH:
            unit = "dataset"
        elif self.outcome == AuditOutcome.REQUESTED:
            return f"{n:,} dataset{'' if n == 1 else 's'} to read"
        elif self.action == AuditAction.ERASURE_APPLY:
            return f"{n:,} row{'' if n == 1 else 's'} matched for erasure"
        else:
            return f"{n:,} row{'' if n == 1 else 's'} found"
        return f"{n:,} {unit}{'' if n == 1 else 's'}"


class AuditValueHash(models.Model):
    """One keyed hash of an audited entry, indexed so a value can be looked up."""

    entry = models.ForeignKey(AuditEntry, on_delete=models.CASCADE, related_name="hashes")
    digest = models.CharField(max_length=64, db_index=True)

    def __str__(self) -> str:
        return f"{self.digest[:12]}… of entry {self.entry_id}"


class PlanState(models.TextChoices):
    BUILDING = "building", "Building"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


class ErasurePlan(models.Model):
    """Ordered erasure steps for one data subject, computed from lineage at creation time.

    With a broker the steps are computed by a task (a subject can reach tens of
    thousands of datasets): the plan is ``building`` until then.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_name = models.CharField(max_length=150)
    subject_kind = models.CharField(max_length=64)
    value_hashes = models.JSONField(default=list)
    # Identifier kinds and field filters, without their values.
    identifiers = models.JSONField(default=list)
    steps = models.JSONField(default=list)
    owners = models.JSONField(default=list)
    summary = models.JSONField(default=dict)
    state = models.CharField(max_length=12, choices=PlanState.choices, default=PlanState.READY)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"erasure plan {self.id} ({self.subject_kind})"

    @property
    def is_ready(self) -> bool:
        return self.state == PlanState.READY


class RunKind(models.TextChoices):
    SCAN = "scan", "Spark scan"
    DRY_RUN = "dry_run", "Erasure dry run"
    APPLY = "apply", "Erasure apply"


class RunState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class PrivacyRun(models.Model):
    """A Spark scan, erasure dry run or erasure apply, run by a Celery task."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=8, choices=RunKind.choices)
    state = models.CharField(max_length=8, choices=RunState.choices, default=RunState.PENDING)
    plan = models.ForeignKey(
        ErasurePlan, null=True, blank=True, on_delete=models.CASCADE, related_name="runs"
    )
    subject_kind = models.CharField(max_length=64)
    value_hashes = models.JSONField(default=list)
    as_of = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_name = models.CharField(max_length=150)
    started_at = models.DateTimeField(null=True, blank=True)
    # Renewed by the worker while the run works; a run not heard from for
    # PRIVACY_RUN_STALE_SECONDS lost its worker and is failed by the sweep.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    progress_done = models.IntegerField(default=0)
    progress_total = models.IntegerField(default=0)
    # What the run works on: [{key, namespace, name, location, format, runnable, reason, …}].
    targets = models.JSONField(default=list)
    # Per target key: {status, rowsFound / rowsMatched / rowsBefore / rowsAfter, error, …}.
    results = models.JSONField(default=dict)
    error = models.TextField(blank=True)
    # The identifier values, encrypted; emptied as soon as the run ends.
    sealed = models.TextField(blank=True)
    # Base URL the erasure job posts its own OpenLineage events to.
    lineage_url = models.CharField(max_length=512, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} {self.id} ({self.state})"

    @property
    def finished(self) -> bool:
        return self.state in (RunState.DONE, RunState.FAILED)
