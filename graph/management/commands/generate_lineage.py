"""`manage.py generate_lineage --datasets N`: load a synthetic lakehouse lineage graph.

The graph comes from graph/synthetic.py (layers, fan-in/fan-out, hub
datasets read by thousands of jobs, ~10 columns per dataset, history with
closed edges; fixed seed). Rows are bulk-loaded: COPY on PostgreSQL,
batched executemany on SQLite, with explicit ids after the current maximum,
so 100,000 datasets (~50,000 jobs, ~300,000 table edges, ~2,000,000 column
edges) load in minutes. The lineage revision is reset once at the end
rather than logging every edge.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.management.color import no_style
from django.db import DatabaseError, connection, models, transaction
from django.utils.dateparse import parse_datetime

from catalog import bulk
from catalog.models import (
    Dataset,
    DatasetField,
    DatasetOwnership,
    FlagSource,
    Namespace,
    Owner,
    PiiCategory,
    PropagatedFlag,
    RetentionPolicy,
    SubjectKind,
)
from graph import directory, documents, propagation, revision, snapshot
from graph.management.commands.render_node_documents import write_snapshot_bases
from graph.models import ColumnEdge, Job, Run, TableEdge
from graph.synthetic import (
    FIELD_TYPES,
    OPEN,
    RETENTION,
    SUBJECT_KIND,
    SUBTYPES,
    GenConfig,
    generate,
)


def _times(us: np.ndarray) -> list[datetime | None]:
    """Microsecond timestamps (-1: none) as instants."""
    stamps = np.maximum(us, 0).astype("datetime64[us]").tolist()
    return [
        None if v < 0 else stamp.replace(tzinfo=UTC)
        for v, stamp in zip(us.tolist(), stamps, strict=True)
    ]


class Writer:
    """Bulk-writes rows of one model at a time (catalog.bulk: COPY on PostgreSQL), a
    transaction per batch; unset columns get what the model's constructor gives."""

    def __init__(self, progress: Callable[[str, int], None], batch: int) -> None:
        self.progress = progress
        self.batch = batch

    def write(self, model: type[models.Model], columns: dict[str, Any], count: int) -> None:
        """``columns``: each field's values (a list or an array), or one value for all."""
        values = [
            v.tolist() if isinstance(v, np.ndarray) else v if isinstance(v, list) else [v] * count
            for v in columns.values()
        ]
        for start in range(0, count, self.batch):
            stop = min(count, start + self.batch)
            rows = list(zip(*(column[start:stop] for column in values), strict=True))
            with transaction.atomic():
                bulk.insert_values(model, list(columns), rows)
            self.progress(model._meta.db_table, stop - start)


@contextmanager
def _without_row_checks() -> Iterator[None]:
    """On PostgreSQL, skip per-row foreign-key triggers while loading generated rows.

    The generator only emits ids it created, and per-row checks of ~10 million
    references would dominate the load. Needs a superuser; without one the
    checks simply run.
    """
    replica = False
    if connection.vendor == "postgresql":
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET session_replication_role = replica")
            replica = True
        except DatabaseError:
            replica = False
    try:
        yield
    finally:
        if replica:
            with connection.cursor() as cursor:
                cursor.execute("SET session_replication_role = DEFAULT")


def _next_id(model: type[models.Model]) -> int:
    top = model._default_manager.aggregate(top=models.Max("pk"))["top"]
    return int(top or 0) + 1


def _any_loaded(
    model: type[Dataset | Job], namespaces: list[str], namespace_of: np.ndarray, names: list[str]
) -> bool:
    """Whether the database already holds one of these (namespace, name) pairs."""
    wanted = {(namespaces[ns], name) for ns, name in zip(namespace_of.tolist(), names, strict=True)}
    held = model._default_manager.filter(namespace__name__in=namespaces)
    return any(pair in wanted for pair in held.values_list("namespace__name", "name").iterator())


class Command(BaseCommand):
    help = "Generate a synthetic lakehouse lineage graph (for benchmarks and demos)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--datasets", type=int, required=True, help="how many datasets")
        parser.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
        parser.add_argument("--columns", type=int, default=10, help="fields per dataset")
        parser.add_argument(
            "--closed-fraction",
            type=float,
            default=0.2,
            help="share of table edges closed in the history (default 0.2)",
        )
        parser.add_argument("--hubs", type=int, default=None, help="hub datasets (N/10000)")
        parser.add_argument(
            "--anchor",
            default="2026-01-01T00:00:00Z",
            help="the generated history ends at this instant (ISO-8601)",
        )
        parser.add_argument("--owners", type=int, default=300, help="owner teams")
        parser.add_argument("--batch", type=int, default=100_000, help="rows per transaction")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["datasets"] < 10:
            raise CommandError("--datasets must be at least 10")
        if options["columns"] < 2:
            raise CommandError("--columns must be at least 2")
        if not 0 <= options["closed_fraction"] <= 0.9:
            raise CommandError("--closed-fraction must be between 0 and 0.9")
        anchor = parse_datetime(options["anchor"].replace("Z", "+00:00"))
        if anchor is None:
            raise CommandError(f"--anchor is not an ISO-8601 instant: {options['anchor']!r}")
        if anchor.tzinfo is None:
            anchor = anchor.replace(tzinfo=UTC)
        config = GenConfig(
            datasets=options["datasets"],
            seed=options["seed"],
            columns=options["columns"],
            closed_fraction=options["closed_fraction"],
            hubs=options["hubs"],
            anchor=anchor,
            owners=options["owners"],
        )
        self.stdout.write(f"Generating {config.datasets:,} datasets (seed {config.seed})…")
        gen = generate(config)
        self.stdout.write(", ".join(f"{k} {v:,}" for k, v in gen.stats.items()))
        if _any_loaded(Dataset, gen.namespaces, gen.ds_namespace, gen.ds_name) or _any_loaded(
            Job, gen.job_namespaces, gen.job_namespace, gen.job_name
        ):
            raise CommandError(
                "Datasets or jobs of this graph (or one like it) are already loaded: nothing "
                "was written; use a fresh database."
            )

        total = (
            config.owners
            + config.datasets * (2 + config.columns)
            + int((gen.ds_owner2 >= 0).sum())
            + gen.stats["jobs"] * 2
            + gen.stats["table_edges"]
            + gen.stats["column_edges"]
        )
        bar = None
        if not options["no_progress"]:
            from tqdm import tqdm

            bar = tqdm(total=total, unit="row", unit_scale=True, file=self.stderr._out)

        def progress(label: str, rows: int) -> None:
            if bar is not None:
                bar.set_description(label)
                bar.update(rows)

        writer = Writer(progress, options["batch"])
        with revision.bulk_load(), _without_row_checks():
            self._load(gen, writer)
        if bar is not None:
            bar.close()
        with connection.cursor() as cursor:
            loaded = [
                Namespace,
                Dataset,
                DatasetField,
                Owner,
                DatasetOwnership,
                Job,
                Run,
                TableEdge,
                ColumnEdge,
            ]
            for sql in connection.ops.sequence_reset_sql(no_style(), loaded):
                cursor.execute(sql)
            if connection.vendor == "postgresql":
                # Fresh statistics for every table loaded: planned on the estimates of an
                # empty table, the owners of a few datasets are found by probing the
                # ownership index once per owner (milliseconds per answer, not microseconds)
                # until autovacuum gets round to it.
                for model in loaded:
                    cursor.execute(f"ANALYZE {model._meta.db_table}")
        self.stdout.write(self.style.SUCCESS(f"Loaded {total:,} rows."))
        # The declared flags reach their copies, as they would have as the lineage arrived.
        started = time.perf_counter()
        sources = propagation.recompute_all()
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"ANALYZE {PropagatedFlag._meta.db_table}")
        self.stdout.write(
            f"Propagated the flags of {sources:,} declared fields to "
            f"{PropagatedFlag.objects.count():,} copies in {time.perf_counter() - started:.1f} s."
        )
        snapshot.reset()
        directory.reset()
        # So that no lineage request renders a node: every first view reads its document
        # from the host's file.
        rendered = documents.render_documents(full=True)
        if not rendered.skipped:
            self.stdout.write(
                f"Rendered {rendered.datasets:,} dataset and {rendered.jobs:,} job documents "
                f"into the host's file in {rendered.seconds:.1f} s."
            )
        write_snapshot_bases(self.stdout)

    def _load(self, gen: Any, writer: Writer) -> None:
        cfg = gen.config
        n, cols = cfg.datasets, cfg.columns
        ns_ids = {name: Namespace.objects.get_or_create(name=name)[0].pk for name in gen.namespaces}
        job_ns_ids = {
            name: Namespace.objects.get_or_create(name=name)[0].pk for name in gen.job_namespaces
        }
        policies = [
            RetentionPolicy.objects.get_or_create(
                name=name, defaults={"duration": timedelta(days=days), "action": action}
            )[0].pk
            for name, days, action in RETENTION
        ]
        kind = SubjectKind.objects.get_or_create(name=SUBJECT_KIND)[0].pk
        owner_base = _next_id(Owner)
        owner_names = [f"team-{i:04d}-s{cfg.seed}" for i in range(cfg.owners)]
        existing = set(Owner.objects.filter(name__in=owner_names).values_list("name", flat=True))
        if existing:
            raise CommandError("Owners of this seed already exist; use a fresh database.")
        writer.write(
            Owner,
            {
                "id": np.arange(cfg.owners) + owner_base,
                "name": owner_names,
                "kind": "team",
                "email": [f"{name}@example.com" for name in owner_names],
            },
            cfg.owners,
        )

        ds_base = _next_id(Dataset)
        ds_ids = np.arange(n) + ds_base
        ns_of = np.asarray([ns_ids[name] for name in gen.namespaces])[gen.ds_namespace]
        retention_ids = np.asarray([*policies, 0])[gen.ds_retention]
        writer.write(
            Dataset,
            {
                "id": ds_ids,
                "namespace_id": ns_of,
                "name": gen.ds_name,
                "platform": [
                    name.split(":")[0]
                    for name in np.asarray(gen.namespaces)[gen.ds_namespace].tolist()
                ],
                "retention_policy_id": [
                    None if r < 0 else int(p)
                    for r, p in zip(gen.ds_retention.tolist(), retention_ids.tolist(), strict=True)
                ],
                "first_seen": _times(gen.ds_first_seen),
                "last_seen": _times(np.full(n, snapshot.to_us(cfg.anchor))),
                "created_at": _times(gen.ds_first_seen),
                "updated_at": _times(gen.ds_first_seen),
            },
            n,
        )

        field_base = _next_id(DatasetField)
        field_ds = np.repeat(ds_ids, cols)
        ordinal = np.tile(np.arange(cols), n)
        names = [gen.field_name[o] for o in range(cols)] * n
        pii = [""] * (n * cols)
        subject: list[int | None] = [None] * (n * cols)
        for local in gen.subject_fields.tolist():
            names[local] = "customer_id"
            pii[local] = PiiCategory.IDENTIFIER
            subject[local] = kind
        for local in gen.email_fields.tolist():
            names[local] = "email"
            pii[local] = PiiCategory.EMAIL
        writer.write(
            DatasetField,
            {
                "id": np.arange(n * cols) + field_base,
                "dataset_id": field_ds,
                "name": names,
                "type": np.asarray(FIELD_TYPES)[gen.field_type].tolist(),
                "ordinal": ordinal,
                "pii_category": pii,
                "subject_kind_id": subject,
                "flag_source": FlagSource.DECLARED,
                "first_seen": _times(np.repeat(gen.ds_first_seen, cols)),
            },
            n * cols,
        )

        own_ds = np.concatenate([ds_ids, ds_ids[gen.ds_owner2 >= 0]])
        own_owner = np.concatenate([gen.ds_owner, gen.ds_owner2[gen.ds_owner2 >= 0]]) + owner_base
        writer.write(
            DatasetOwnership,
            {
                "id": np.arange(own_ds.size) + _next_id(DatasetOwnership),
                "dataset_id": own_ds,
                "owner_id": own_owner,
                "ownership_type": "DATA_OWNER",
            },
            int(own_ds.size),
        )

        jobs = len(gen.job_name)
        job_base = _next_id(Job)
        run_base = _next_id(Run)
        job_ids = np.arange(jobs) + job_base
        job_ns = np.asarray([job_ns_ids[name] for name in gen.job_namespaces])[gen.job_namespace]
        writer.write(
            Job,
            {
                "id": job_ids,
                "namespace_id": job_ns,
                "name": gen.job_name,
                "job_type": "JOB",
                "processing_type": "BATCH",
                "integration": "SPARK",
                "created_at": _times(gen.job_created),
                "updated_at": _times(gen.job_created),
            },
            jobs,
        )
        rng = np.random.default_rng(cfg.seed + 1)
        uuids = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(jobs)]
        failed = [state == "FAILED" for state in gen.job_state]
        writer.write(
            Run,
            {
                "id": np.arange(jobs) + run_base,
                "run_uuid": uuids,
                "job_id": job_ids,
                "state": gen.job_state,
                "state_event_time": _times(
                    np.where(gen.job_ended == OPEN, gen.job_started, gen.job_ended),
                ),
                "started_at": _times(gen.job_started),
                "ended_at": _times(gen.job_ended),
                "error_message": [
                    "Task failed: upstream file missing" if f else "" for f in failed
                ],
                "created_at": _times(gen.job_started),
                "updated_at": _times(gen.job_started),
            },
            jobs,
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Job._meta.db_table} SET latest_run_id = id - %s + %s "
                "WHERE id >= %s AND id < %s",
                [job_base, run_base, job_base, job_base + jobs],
            )

        te = gen.te_job.size
        writer.write(
            TableEdge,
            {
                "id": np.arange(te) + _next_id(TableEdge),
                "job_id": gen.te_job + job_base,
                "dataset_id": gen.te_ds + ds_base,
                "direction": np.where(gen.te_out == 1, "out", "in").tolist(),
                "valid_from": _times(gen.te_from),
                "valid_to": _times(gen.te_to),
            },
            te,
        )
        ce = gen.ce_job.size
        ttype = np.asarray([t for t, _, _ in SUBTYPES])[gen.ce_kind]
        subtype = np.asarray([s for _, s, _ in SUBTYPES])[gen.ce_kind]
        writer.write(
            ColumnEdge,
            {
                "id": np.arange(ce) + _next_id(ColumnEdge),
                "job_id": gen.ce_job + job_base,
                "source_field_id": gen.ce_src + field_base,
                "target_dataset_id": gen.ce_tds + ds_base,
                "target_field_id": [None if t < 0 else t + field_base for t in gen.ce_tgt.tolist()],
                "transformation_type": ttype.tolist(),
                "transformation_subtype": subtype.tolist(),
                "valid_from": _times(gen.ce_from),
                "valid_to": _times(gen.ce_to),
            },
            ce,
        )
