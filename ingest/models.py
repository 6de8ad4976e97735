"""RawEvent: the durable outbox and dead-letter store for every accepted event."""

from __future__ import annotations

import json
import uuid

from django.conf import settings
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

    fingerprint = models.CharField(max_length=64)
    kind = models.CharField(max_length=8, choices=EventKind.choices)
    body = models.TextField(help_text="The event's JSON, verbatim")
    event_type = models.CharField(max_length=16, blank=True)
    event_time = models.DateTimeField(db_index=True)
    run_uuid = models.UUIDField(null=True, blank=True)
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
    # Set when retention replaced the body by a summary (ingest.retention); never replayed then.
    compacted_at = models.DateTimeField(null=True, blank=True)
    # The facets left out of it, as the JSON list the client was answered ("" for none).
    warnings = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-received_at", "-id"]
        # Every accepted event updates each of these indexes, so only those that queries use:
        # a unique constraint (unlike ``unique=True`` it adds no LIKE-pattern twin index).
        constraints = [
            models.UniqueConstraint(fields=["fingerprint"], name="raw_event_fingerprint")
        ]
        indexes = [
            models.Index(fields=["state", "received_at"]),
            # The sweep looks for claims left behind; most events are never claimed.
            models.Index(
                fields=["claimed_at"],
                condition=models.Q(state="processing"),
                name="raw_event_claimed",
            ),
            # The ingestion page lists the few events with facets left out.
            models.Index(
                fields=["received_at"], condition=~models.Q(warnings=""), name="raw_event_warned"
            ),
        ]
        permissions = [
            ("post_lineage", "Can post OpenLineage events"),
            ("operate_ingestion", "Can replay events and upload SQL logs"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.event_type} {self.fingerprint[:12]}"

    @property
    def warning_list(self) -> list[dict[str, str]]:
        """The facets left out of it: ``{"field", "error"}`` each."""
        return json.loads(self.warnings) if self.warnings else []

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

    # A fact key (graph/models.py): no constraint in the database.
    dataset = models.ForeignKey(
        "catalog.Dataset", on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
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


class FacetObservation(models.Model):
    """One event's documentation or ownership facet on a dataset, at its event time.

    The newest facet sets today's value; these say what every facet said when, so a
    facet that arrives after a newer one still puts its value in the history at its
    time, as arrival in time order would have (ingest.normalizer).
    """

    # A fact key (graph/models.py): no constraint in the database.
    dataset = models.ForeignKey(
        "catalog.Dataset", on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
    facet = models.CharField(max_length=16)  # documentation | ownership
    key = models.CharField(max_length=128)  # graph.actions.time_key(event time, fingerprint)
    at = models.DateTimeField()
    value = models.JSONField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["dataset", "facet", "key"], name="facet_seen_once")
        ]

    def __str__(self) -> str:
        return f"{self.dataset_id} {self.facet}@{self.at:%Y-%m-%d %H:%M}"


# -- SQL query logs (ingest.sql): uploads, their problems, and reads --------------------


class SqlLogFormat(models.TextChoices):
    CSV = "csv", "CSV"
    JSONL = "jsonl", "JSON Lines"
    PGCSVLOG = "pgcsvlog", "PostgreSQL csvlog"


class SqlLogState(models.TextChoices):
    PENDING = "pending", "Pending"
    PROCESSING = "processing", "Processing"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class SqlLogUpload(models.Model):
    """A query log being (or having been) turned into lineage, with its progress and tallies."""

    namespace = models.CharField(max_length=1024)
    dialect = models.CharField(max_length=32)
    format = models.CharField(max_length=12, choices=SqlLogFormat.choices)
    default_database = models.CharField(max_length=255, blank=True)
    default_schema = models.CharField(max_length=255, blank=True)
    # Where the log is read from: a stored upload or, for the command, the given path.
    path = models.CharField(max_length=2048)
    original_name = models.CharField(max_length=512, blank=True)
    size_bytes = models.BigIntegerField(default=0)
    source = models.CharField(max_length=16, default="upload")  # upload | api | command
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    state = models.CharField(
        max_length=12, choices=SqlLogState.choices, default=SqlLogState.PENDING
    )
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The earliest time among its records (set by each pass): a table it read and that lost
    # its columns after this is one the log may have dropped or renamed itself.
    first_record_at = models.DateTimeField(null=True, blank=True)
    bytes_read = models.BigIntegerField(default=0)
    records = models.IntegerField(default=0)
    statements = models.IntegerField(default=0)
    events = models.IntegerField(default=0)
    reads = models.IntegerField(default=0)
    skipped_failed = models.IntegerField(default=0)
    line_errors = models.IntegerField(default=0)
    parse_errors = models.IntegerField(default=0)
    cache_hits = models.IntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"SQL log #{self.pk} {self.original_name or self.path}"

    @property
    def progress(self) -> float:
        """Fraction of the file read, 0..1."""
        if self.state == SqlLogState.DONE:
            return 1.0
        return min(1.0, self.bytes_read / self.size_bytes) if self.size_bytes else 0.0

    @property
    def problem_count(self) -> int:
        return self.line_errors + self.parse_errors


class SqlLogProblem(models.Model):
    """A line of a query log, or a statement in it, that gave no lineage, and why."""

    upload = models.ForeignKey(SqlLogUpload, on_delete=models.CASCADE, related_name="problems")
    line = models.IntegerField()
    statement = models.IntegerField(null=True, blank=True)
    field = models.CharField(max_length=64, blank=True)
    message = models.TextField()
    excerpt = models.TextField(blank=True)

    class Meta:
        ordering = ["upload", "line", "id"]
        indexes = [models.Index(fields=["upload", "line"])]

    def __str__(self) -> str:
        return f"SQL log #{self.upload_id} line {self.line}: {self.message[:60]}"


class SqlLogColumnsUnknown(models.Model):
    """A table a processed log read with ``*`` (or unqualified columns) before the catalog
    knew its columns: that column lineage is missing, and the log is processed again once
    the catalog knows them (``ingest.sql_actions.retake_logs``)."""

    upload = models.ForeignKey(
        SqlLogUpload, on_delete=models.CASCADE, related_name="columns_unknown"
    )
    namespace = models.CharField(max_length=1024)
    name = models.CharField(max_length=1024)

    class Meta:
        ordering = ["upload", "namespace", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["upload", "namespace", "name"], name="sql_log_columns_unknown_once"
            )
        ]

    def __str__(self) -> str:
        return f"SQL log #{self.upload_id} awaits the columns of {self.namespace}:{self.name}"


class DatasetRead(models.Model):
    """Plain SELECTs from query logs: who read a dataset on a day, how often (never an edge).

    Datasets are named, not linked, so reads of tables the catalog has not
    seen yet are kept too. Counted per upload, so re-processing an upload
    rewrites its own counts instead of adding to them.
    """

    upload = models.ForeignKey(SqlLogUpload, on_delete=models.CASCADE, related_name="dataset_reads")
    namespace = models.CharField(max_length=1024)
    name = models.CharField(max_length=1024)
    reader = models.CharField(max_length=255, blank=True)
    fingerprint = models.CharField(max_length=32)
    day = models.DateField()
    count = models.IntegerField(default=0)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()

    class Meta:
        ordering = ["-last_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["upload", "namespace", "name", "reader", "fingerprint", "day"],
                name="dataset_read_once_per_upload",
            )
        ]
        indexes = [models.Index(fields=["namespace", "name", "last_at"])]

    def __str__(self) -> str:
        return f"{self.reader or '?'} read {self.namespace}:{self.name} {self.count} times on {self.day}"
