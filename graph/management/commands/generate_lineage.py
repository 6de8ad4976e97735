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

import io
import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.management.color import no_style
from django.db import DatabaseError, connection, models, transaction
from django.utils.dateparse import parse_datetime

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

Column = tuple[str, Any]  # (kind, values): kind in int, str, ts, bool, json, const


def _ts_text(values: np.ndarray, postgres: bool) -> list[str | None]:
    """Microsecond timestamps (-1 = NULL) as text both backends accept."""
    stamps = np.datetime_as_string(np.maximum(values, 0).astype("datetime64[us]"), unit="us")
    suffix = "+00" if postgres else ""
    return [
        None if v < 0 else s.replace("T", " ") + suffix
        for v, s in zip(values.tolist(), stamps.tolist(), strict=True)
    ]


class Writer:
    """Bulk-writes rows of one model at a time, filling unset columns with field defaults."""

    def __init__(self, progress: Callable[[str, int], None], batch: int) -> None:
        self.postgres = connection.vendor == "postgresql"
        self.progress = progress
        self.batch = batch
        self.now = datetime.now(UTC)

    def _default(self, field: models.Field[Any, Any]) -> Any:
        if field.null and not field.has_default():
            return None
        default = field.get_default()
        if isinstance(field, models.JSONField):
            return json.dumps(default if default is not None else {})
        if isinstance(field, models.DateTimeField):
            return self._ts(default if isinstance(default, datetime) else self.now)
        if isinstance(field, models.BooleanField):
            return bool(default)
        return default

    def _ts(self, moment: datetime) -> str:
        text = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        return text + "+00" if self.postgres else text

    def _render(self, kind: str, values: Any, count: int) -> Sequence[Any]:
        if kind == "const":
            return [values] * count
        if kind == "int":
            return np.asarray(values).tolist()  # type: ignore[no-any-return]
        if kind == "ts":
            return _ts_text(np.asarray(values, dtype=np.int64), self.postgres)
        if kind == "bool":
            return [bool(v) for v in values]
        return list(values)

    def write(self, model: type[models.Model], columns: dict[str, Column], count: int) -> None:
        fields = model._meta.concrete_fields
        names = [f.column for f in fields]
        unknown = set(columns) - set(names)
        if unknown:
            raise CommandError(f"{model.__name__} has no column(s) {sorted(unknown)}")
        rendered = [
            self._render(*columns[f.column], count)
            if f.column in columns
            else [self._default(f)] * count
            for f in fields
        ]
        label = model._meta.db_table
        for start in range(0, count, self.batch):
            stop = min(count, start + self.batch)
            rows = list(zip(*(col[start:stop] for col in rendered), strict=True))
            with transaction.atomic():
                if self.postgres:
                    self._copy(label, names, rows)
                else:
                    marks = ", ".join(["%s"] * len(names))
                    with connection.cursor() as cursor:
                        cursor.executemany(
                            f"INSERT INTO {label} ({', '.join(names)}) VALUES ({marks})", rows
                        )
            self.progress(label, stop - start)

    def _copy(self, table: str, names: list[str], rows: list[tuple[Any, ...]]) -> None:
        buffer = io.StringIO()
        for row in rows:
            buffer.write("\t".join(_copy_value(v) for v in row))
            buffer.write("\n")
        raw = connection.connection
        assert raw is not None
        with (
            raw.cursor() as cursor,
            cursor.copy(f"COPY {table} ({', '.join(names)}) FROM STDIN") as copy,
        ):
            copy.write(buffer.getvalue())


def _copy_value(value: Any) -> str:
    if value is None:
        return "\\N"
    if value is True:
        return "t"
    if value is False:
        return "f"
    text = str(value)
    if "\\" in text or "\t" in text or "\n" in text:
        text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    return text


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
                "id": ("int", np.arange(cfg.owners) + owner_base),
                "name": ("str", owner_names),
                "kind": ("const", "team"),
                "email": ("str", [f"{name}@example.com" for name in owner_names]),
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
                "id": ("int", ds_ids),
                "namespace_id": ("int", ns_of),
                "name": ("str", gen.ds_name),
                "platform": (
                    "str",
                    [
                        name.split(":")[0]
                        for name in np.asarray(gen.namespaces)[gen.ds_namespace].tolist()
                    ],
                ),
                "retention_policy_id": (
                    "str",
                    [
                        None if r < 0 else int(p)
                        for r, p in zip(
                            gen.ds_retention.tolist(), retention_ids.tolist(), strict=True
                        )
                    ],
                ),
                "first_seen": ("ts", gen.ds_first_seen),
                "last_seen": ("ts", np.full(n, snapshot.to_us(cfg.anchor))),
                "created_at": ("ts", gen.ds_first_seen),
                "updated_at": ("ts", gen.ds_first_seen),
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
                "id": ("int", np.arange(n * cols) + field_base),
                "dataset_id": ("int", field_ds),
                "name": ("str", names),
                "type": ("str", np.asarray(FIELD_TYPES)[gen.field_type].tolist()),
                "ordinal": ("int", ordinal),
                "pii_category": ("str", pii),
                "subject_kind_id": ("str", subject),
                "flag_source": ("const", FlagSource.DECLARED),
                "first_seen": ("ts", np.repeat(gen.ds_first_seen, cols)),
            },
            n * cols,
        )

        own_ds = np.concatenate([ds_ids, ds_ids[gen.ds_owner2 >= 0]])
        own_owner = np.concatenate([gen.ds_owner, gen.ds_owner2[gen.ds_owner2 >= 0]]) + owner_base
        writer.write(
            DatasetOwnership,
            {
                "id": ("int", np.arange(own_ds.size) + _next_id(DatasetOwnership)),
                "dataset_id": ("int", own_ds),
                "owner_id": ("int", own_owner),
                "ownership_type": ("const", "DATA_OWNER"),
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
                "id": ("int", job_ids),
                "namespace_id": ("int", job_ns),
                "name": ("str", gen.job_name),
                "job_type": ("const", "JOB"),
                "processing_type": ("const", "BATCH"),
                "integration": ("const", "SPARK"),
                "created_at": ("ts", gen.job_created),
                "updated_at": ("ts", gen.job_created),
            },
            jobs,
        )
        rng = np.random.default_rng(cfg.seed + 1)
        uuids = [str(uuid.UUID(bytes=rng.bytes(16), version=4)) for _ in range(jobs)]
        failed = [state == "FAILED" for state in gen.job_state]
        writer.write(
            Run,
            {
                "id": ("int", np.arange(jobs) + run_base),
                "run_uuid": ("str", uuids),
                "job_id": ("int", job_ids),
                "state": ("str", gen.job_state),
                "state_event_time": (
                    "ts",
                    np.where(gen.job_ended == OPEN, gen.job_started, gen.job_ended),
                ),
                "started_at": ("ts", gen.job_started),
                "ended_at": ("ts", gen.job_ended),
                "error_message": (
                    "str",
                    ["Task failed: upstream file missing" if f else "" for f in failed],
                ),
                "created_at": ("ts", gen.job_started),
                "updated_at": ("ts", gen.job_started),
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
                "id": ("int", np.arange(te) + _next_id(TableEdge)),
                "job_id": ("int", gen.te_job + job_base),
                "dataset_id": ("int", gen.te_ds + ds_base),
                "direction": ("str", np.where(gen.te_out == 1, "out", "in").tolist()),
                "valid_from": ("ts", gen.te_from),
                "valid_to": ("ts", gen.te_to),
            },
            te,
        )
        ce = gen.ce_job.size
        ttype = np.asarray([t for t, _, _ in SUBTYPES])[gen.ce_kind]
        subtype = np.asarray([s for _, s, _ in SUBTYPES])[gen.ce_kind]
        writer.write(
            ColumnEdge,
            {
                "id": ("int", np.arange(ce) + _next_id(ColumnEdge)),
                "job_id": ("int", gen.ce_job + job_base),
                "source_field_id": ("int", gen.ce_src + field_base),
                "target_dataset_id": ("int", gen.ce_tds + ds_base),
                "target_field_id": (
                    "str",
                    [None if t < 0 else t + field_base for t in gen.ce_tgt.tolist()],
                ),
                "transformation_type": ("str", ttype.tolist()),
                "transformation_subtype": ("str", subtype.tolist()),
                "valid_from": ("ts", gen.ce_from),
                "valid_to": ("ts", gen.ce_to),
            },
            ce,
        )
