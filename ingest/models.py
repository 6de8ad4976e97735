"""RawEvent: the durable outbox and dead-letter store for every accepted event."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone


class EventState(models.TextChoices):
    PENDING = "pending", "Pending"
    PROCESSING = "processing", "Processing"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class EventKind(models.TextChoices):
    RUN = "run", "RunEvent"
    DATASET = "dataset", "DatasetEvent"
    JOB = "job", "JobEvent"


class RawEvent(models.Model):
    """One accepted event, stored verbatim before any processing.

    ``fingerprint`` is the SHA-256 of the event's canonical JSON, so the same
    event posted twice is stored once.
    """

    fingerprint = models.CharField(max_length=64, unique=True)
    kind = models.CharField(max_length=8, choices=EventKind.choices)
    body = models.TextField(help_text="The event's JSON, verbatim")
    event_type = models.CharField(max_length=16, blank=True)
    event_time = models.DateTimeField(db_index=True)
    run_uuid = models.UUIDField(null=True, blank=True, db_index=True)
    job_namespace = models.CharField(max_length=1024, blank=True)
    job_name = models.CharField(max_length=1024, blank=True)
    source = models.CharField(max_length=16, default="api")
    state = models.CharField(max_length=12, choices=EventState.choices, default=EventState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    received_at = models.DateTimeField(default=timezone.now, db_index=True)
    # When a task was last queued for it: the sweep re-queues only events queued long ago.
    queued_at = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    processed_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-received_at", "-id"]
        indexes = [
            models.Index(fields=["state", "received_at"]),
            models.Index(fields=["job_namespace", "job_name", "event_time"]),
            models.Index(fields=["state", "claimed_at"]),
        ]
        permissions = [
            ("post_lineage", "Can post OpenLineage events"),
            ("operate_ingestion", "Can replay events and upload SQL logs"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.event_type} {self.fingerprint[:12]}"

    @property
    def job_label(self) -> str:
        return f"{self.job_namespace}:{self.job_name}" if self.job_name else ""


NO_RUN = uuid.UUID(int=0)


class SchemaObservation(models.Model):
    """One sighting of a dataset's schema (or of its closing) at an event time.

    DatasetVersion rows are derived from these: a version starts at each
    sighting whose schema differs from the sighting before it in event time,
    so versions come out the same whatever order the events arrive in.
    """

    dataset = models.ForeignKey("catalog.Dataset", on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField()
    schema_hash = models.CharField(max_length=64)
    # The run whose event carried it (NO_RUN for dataset and job events).
    run_uuid = models.UUIDField(default=NO_RUN)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["dataset", "at", "schema_hash", "run_uuid"], name="schema_sighting_once"
            )
        ]
        indexes = [models.Index(fields=["dataset", "at"])]

    def __str__(self) -> str:
        return f"{self.dataset_id}@{self.at:%Y-%m-%d %H:%M} {self.schema_hash[:8]}"
