"""Jobs, runs and lineage edges, each edge valid over [valid_from, valid_to).

Table lineage is kept as job input/output edges (dataset → job → dataset),
the way OpenLineage reports it; column lineage links field to field through
a job. ``valid_to`` is NULL while an edge is current. All times are the
events' own ``eventTime``, never arrival time.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from catalog.models import Dataset, DatasetField, Namespace


class RunState(models.TextChoices):
    NEW = "NEW", "New"
    RUNNING = "RUNNING", "Running"
    COMPLETED = "COMPLETED", "Completed"
    FAILED = "FAILED", "Failed"
    ABORTED = "ABORTED", "Aborted"


TERMINAL_RUN_STATES = frozenset({RunState.COMPLETED, RunState.FAILED, RunState.ABORTED})


class Job(models.Model):
    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="jobs")
    name = models.CharField(max_length=1024)
    # BATCH / STREAMING (jobType facet processingType) and QUERY / JOB / DAG …
    processing_type = models.CharField(max_length=32, blank=True)
    job_type = models.CharField(max_length=64, blank=True)
    integration = models.CharField(max_length=64, blank=True)
    description = models.TextField(blank=True)
    location = models.CharField(max_length=2048, blank=True)
    sql = models.TextField(blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children"
    )
    latest_run = models.ForeignKey(
        "Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    facets = models.JSONField(default=dict, blank=True)
    # Event time of the newest event that set each facet, so late events do not win.
    facet_times = models.JSONField(default=dict, blank=True)
    # The end of the job's edge timeline: the last applied run's end and a digest of its
    # datasets and column mappings. A later run with the same digest changes no edge, so
    # the normaliser need not replay the timeline (empty digest: not known, replay).
    timeline_end = models.DateTimeField(null=True, blank=True)
    timeline_digest = models.CharField(max_length=32, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["namespace__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="job_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.namespace.name}:{self.name}"

    @property
    def node_id(self) -> str:
        return f"job:{self.namespace.name}:{self.name}"


class Run(models.Model):
    run_uuid = models.UUIDField(unique=True)
    # Indexed by (job, -created_at) below, which serves lookups by job alone too.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="runs", db_index=False)
    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.NEW)
    # Event time of the event that decided ``state`` (ties broken by state rank),
    # so events arriving in any order land in the same final state.
    state_event_time = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    nominal_start_time = models.DateTimeField(null=True, blank=True)
    nominal_end_time = models.DateTimeField(null=True, blank=True)
    parent_run_uuid = models.UUIDField(null=True, blank=True)
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="children",
        db_index=False,  # indexed where set: see Meta
    )
    error_message = models.TextField(blank=True)
    error_stack = models.TextField(blank=True)
    facets = models.JSONField(default=dict, blank=True)
    # Event time of the newest event that set each facet, so late events do not win.
    facet_times = models.JSONField(default=dict, blank=True)
    # The run's column mappings (union over its events), the input of column-edge validity:
    # {"covered": [output dataset ids with a columnLineage facet],
    #  "edges": [[source_field_id, target_dataset_id, target_field_id|null, type, subtype,
    #             masking, description], ...]}
    column_lineage = models.JSONField(default=dict, blank=True)
    # Set once the run's inputs/outputs have been applied to edge validity.
    edges_applied = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["job", "-created_at"]),
            # Most runs have no parent. Indexing only those that do keeps the index small and
            # keeps the planner from scanning every parentless run to find the few waiting ones.
            models.Index(
                fields=["parent"], condition=models.Q(parent__isnull=False), name="run_parent"
            ),
            # Runs whose parent arrived later are looked up by the parent's uuid on every batch.
            models.Index(
                fields=["parent_run_uuid"],
                condition=models.Q(parent__isnull=True, parent_run_uuid__isnull=False),
                name="run_waiting_for_parent",
            ),
            # A job's timeline around a late run is read by completion time
            # (graph.actions.recompute_jobs), however long the job's history.
            models.Index(
                fields=["job", "ended_at"],
                condition=models.Q(edges_applied=True),
                name="run_timeline",
            ),
            # A job's latest run as of an instant is the one with the newest state event by
            # then (graph.details._latest_run_join), however many runs the job has.
            models.Index(fields=["job", "-state_event_time"], name="run_state_time"),
        ]

    def __str__(self) -> str:
        return str(self.run_uuid)

    @property
    def duration_ms(self) -> int | None:
        if self.started_at and self.ended_at:
            return int((self.ended_at - self.started_at).total_seconds() * 1000)
        return None


# Fact keys. The keys of the lineage facts (run inputs and outputs, table and column edges, schema
# sightings) have no foreign key constraint in the database. Only the normaliser (and the
# synthetic graph generator) writes them: it creates or locks every dataset, field, job and
# run it points at in the same transaction, and nothing deletes those rows but the ORM, which cascades in Python. A
# constraint would make PostgreSQL check and lock the parent row for each of the ~15 fact
# rows an event writes, at commit: a sixth of a normalising worker's time
# (measured 2026-11-24, commit 0c23d00). Such keys say ``db_constraint=False``;
# tests/test_fact_keys.py proves no fact is left pointing at nothing.


class Direction(models.TextChoices):
    INPUT = "in", "Input"
    OUTPUT = "out", "Output"


class RunDataset(models.Model):
    """A dataset one run read or wrote, with the dataset version it saw."""

    # The unique (run, dataset, direction) and the (dataset, direction, event_time) indexes
    # serve lookups by run and by dataset: no single-column indexes to keep up on each insert.
    # Fact keys (above): no constraint in the database.
    run = models.ForeignKey(
        Run, related_name="io", on_delete=models.CASCADE, db_index=False, db_constraint=False
    )
    dataset = models.ForeignKey(
        Dataset,
        related_name="run_io",
        on_delete=models.CASCADE,
        db_index=False,
        db_constraint=False,
    )
    direction = models.CharField(max_length=3, choices=Direction.choices)
    dataset_version = models.ForeignKey(
        "catalog.DatasetVersion",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
    )
    event_time = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "dataset", "direction"], name="run_dataset_unique"
            )
        ]
        indexes = [models.Index(fields=["dataset", "direction", "-event_time"])]

    def __str__(self) -> str:
        return f"{self.run_id} {self.direction} {self.dataset_id}"


class TableEdge(models.Model):
    """dataset → job (direction=in) or job → dataset (direction=out), valid over an interval."""

    # Served by the two composite indexes below (edges are rewritten on every wiring change).
    job = models.ForeignKey(
        Job, related_name="edges", on_delete=models.CASCADE, db_index=False, db_constraint=False
    )
    dataset = models.ForeignKey(
        Dataset, related_name="edges", on_delete=models.CASCADE, db_index=False, db_constraint=False
    )
    direction = models.CharField(max_length=3, choices=Direction.choices)
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["dataset", "direction", "valid_from", "valid_to", "job"]),
            models.Index(fields=["job", "direction", "valid_from", "valid_to", "dataset"]),
        ]
        constraints = [
            # At most one open edge per (job, dataset, direction).
            models.UniqueConstraint(
                fields=["job", "dataset", "direction"],
                condition=models.Q(valid_to__isnull=True),
                name="table_edge_one_open",
            )
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.direction} {self.dataset_id}"


class TransformationType(models.TextChoices):
    DIRECT = "DIRECT", "Direct"
    INDIRECT = "INDIRECT", "Indirect"


class TransformationSubtype(models.TextChoices):
    IDENTITY = "IDENTITY", "Identity"
    TRANSFORMATION = "TRANSFORMATION", "Transformation"
    AGGREGATION = "AGGREGATION", "Aggregation"
    FILTER = "FILTER", "Filter"
    JOIN = "JOIN", "Join"
    GROUP_BY = "GROUP_BY", "Group by"
    SORT = "SORT", "Sort"
    WINDOW = "WINDOW", "Window"
    CONDITIONAL = "CONDITIONAL", "Conditional"


class ColumnEdge(models.Model):
    """source field → target field through a job, valid over an interval.

    ``target_field`` is NULL for dataset-level (INDIRECT) dependencies from the
    columnLineage facet's ``dataset`` list: the source field affects the whole
    target dataset (a filter or join key, say).
    """

    # job, source_field and target_field lead composite indexes (Meta): no single-column
    # indexes to keep up on each of the many inserts and closings.
    job = models.ForeignKey(
        Job,
        null=True,
        blank=True,
        related_name="column_edges",
        on_delete=models.CASCADE,
        db_index=False,
        db_constraint=False,
    )
    source_field = models.ForeignKey(
        DatasetField,
        related_name="downstream_edges",
        on_delete=models.CASCADE,
        db_index=False,
        db_constraint=False,
    )
    target_dataset = models.ForeignKey(
        Dataset,
        on_delete=models.CASCADE,
        related_name="incoming_column_edges",
        db_constraint=False,
    )
    target_field = models.ForeignKey(
        DatasetField,
        null=True,
        blank=True,
        related_name="upstream_edges",
        on_delete=models.CASCADE,
        db_index=False,
        db_constraint=False,
    )
    transformation_type = models.CharField(
        max_length=16, choices=TransformationType.choices, default=TransformationType.DIRECT
    )
    transformation_subtype = models.CharField(
        max_length=16, choices=TransformationSubtype.choices, blank=True
    )
    masking = models.BooleanField(default=False)
    description = models.TextField(blank=True)
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["source_field", "valid_from", "valid_to"]),
            models.Index(fields=["target_field", "valid_from", "valid_to"]),
            models.Index(fields=["job", "valid_to"]),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=[
                    "job",
                    "source_field",
                    "target_dataset",
                    "target_field",
                    "transformation_type",
                    "transformation_subtype",
                ],
                condition=models.Q(valid_to__isnull=True, target_field__isnull=False),
                name="column_edge_one_open",
            )
        ]

    def __str__(self) -> str:
        return f"{self.source_field_id} -> {self.target_field_id or self.target_dataset_id}"


class Taint(models.Model):
    """A dataset marked bad (optionally for a window of data); downstream is at risk."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="taints")
    reason = models.TextField()
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    cleared_at = models.DateTimeField(null=True, blank=True)
    cleared_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]
        permissions = [("taint_dataset", "Can mark datasets as tainted")]

    def __str__(self) -> str:
        return f"taint on {self.dataset_id}"


class GraphRevision(models.Model):
    """One row (id=1) counting committed changes to lineage edges.

    Database triggers (graph/revision.py) bump it in the committing
    transaction, so every process can tell in one indexed read whether its
    in-memory adjacency snapshot is current; ``token`` changes with every
    bump, so a rolled-back bump is never mistaken for a committed one.
    """

    value = models.BigIntegerField(default=0)
    token = models.CharField(max_length=40, blank=True)

    class Meta:
        db_table = "graph_revision"

    def __str__(self) -> str:
        return f"revision {self.value}"


class GraphRevisionLog(models.Model):
    """Which transaction (``xid``) produced each revision, for incremental refresh."""

    revision = models.BigIntegerField(primary_key=True)
    xid = models.BigIntegerField(db_index=True)
    token = models.CharField(max_length=40, blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        db_table = "graph_revision_log"

    def __str__(self) -> str:
        return f"revision {self.revision} by transaction {self.xid}"


class GraphChange(models.Model):
    """One changed edge (kind ``t`` table, ``c`` column) or a reset (``*``), per transaction."""

    xid = models.BigIntegerField(db_index=True)
    kind = models.CharField(max_length=1)
    obj_id = models.BigIntegerField(null=True, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "graph_change"

    def __str__(self) -> str:
        return f"{self.kind} {self.obj_id} in transaction {self.xid}"
