"""Small lineage graphs built straight from the models, for graph query tests.

    g = LineageBuilder()
    g.datasets("raw.orders", "clean.orders")
    g.job("clean_orders", reads=["raw.orders"], writes=["clean.orders"],
          columns={"clean.orders.id": ["raw.orders.id"]})
    g.close_read("clean_orders", "raw.orders", at=T2)

Names are dataset names within ``namespace``; columns are ``dataset.field``
(the field is the part after the last dot).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from catalog.models import Dataset, DatasetField, Namespace
from graph.models import (
    ColumnEdge,
    Direction,
    Job,
    Run,
    RunState,
    TableEdge,
    TransformationSubtype,
    TransformationType,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)
T1 = datetime(2025, 2, 1, tzinfo=UTC)
T2 = datetime(2025, 3, 1, tzinfo=UTC)
T3 = datetime(2025, 4, 1, tzinfo=UTC)

NS = "postgres://warehouse-db:5432"
JOBS_NS = "airflow://etl"

ColumnSpec = str | tuple[str, str] | tuple[str, str, str]


class LineageBuilder:
    def __init__(self, namespace: str = NS, jobs_namespace: str = JOBS_NS) -> None:
        self.ns, _ = Namespace.objects.get_or_create(name=namespace)
        self.jobs_ns, _ = Namespace.objects.get_or_create(name=jobs_namespace)
        self.ds: dict[str, Dataset] = {}
        self.jobs: dict[str, Job] = {}
        self.fields: dict[str, DatasetField] = {}

    # --- nodes ------------------------------------------------------------------------

    def dataset(
        self,
        name: str,
        fields: Sequence[str] = ("id", "value"),
        at: datetime = T0,
        namespace: str | None = None,
        **extra: object,
    ) -> Dataset:
        ns = self.ns
        if namespace is not None:
            ns, _ = Namespace.objects.get_or_create(name=namespace)
        ds = Dataset.objects.create(namespace=ns, name=name, first_seen=at, last_seen=at, **extra)
        self.ds[name] = ds
        for i, field in enumerate(fields):
            self.fields[f"{name}.{field}"] = DatasetField.objects.create(
                dataset=ds, name=field, type="string", ordinal=i, first_seen=at
            )
        return ds

    def datasets(self, *names: str, fields: Sequence[str] = ("id", "value")) -> None:
        for name in names:
            self.dataset(name, fields)

    def field(self, spec: str) -> DatasetField:
        return self.fields[spec]

    # --- jobs and edges ---------------------------------------------------------------

    def job(
        self,
        name: str,
        reads: Iterable[str] = (),
        writes: Iterable[str] = (),
        at: datetime = T0,
        until: datetime | None = None,
        columns: Mapping[str, Iterable[ColumnSpec]] | None = None,
        state: str | None = None,
    ) -> Job:
        job = self.jobs.get(name)
        if job is None:
            job = Job.objects.create(namespace=self.jobs_ns, name=name, created_at=at)
            self.jobs[name] = job
        for ds in reads:
            self.edge(name, ds, Direction.INPUT, at, until)
        for ds in writes:
            self.edge(name, ds, Direction.OUTPUT, at, until)
        for target, sources in (columns or {}).items():
            for source in sources:
                self.column(name, source, target, at=at, until=until)
        if state is not None:
            self.run(name, state, at)
        return job

    def edge(
        self,
        job: str,
        dataset: str,
        direction: str,
        at: datetime = T0,
        until: datetime | None = None,
    ) -> TableEdge:
        return TableEdge.objects.create(
            job=self.jobs[job],
            dataset=self.ds[dataset],
            direction=direction,
            valid_from=at,
            valid_to=until,
        )

    def column(
        self,
        job: str | None,
        source: ColumnSpec,
        target: str,
        at: datetime = T0,
        until: datetime | None = None,
    ) -> ColumnEdge:
        """``source`` is "ds.field", or ("ds.field", subtype) or ("ds.field", subtype, type).

        A ``target`` without a field part after the dataset name ("ds.") is a
        dataset-level dependency.
        """
        subtype: str
        ttype: str
        if isinstance(source, str):
            spec, subtype, ttype = source, TransformationSubtype.IDENTITY, TransformationType.DIRECT
        elif len(source) == 2:
            spec, subtype = source[0], source[1]
            ttype = (
                TransformationType.INDIRECT
                if subtype
                in (
                    TransformationSubtype.JOIN,
                    TransformationSubtype.FILTER,
                    TransformationSubtype.GROUP_BY,
                    TransformationSubtype.SORT,
                    TransformationSubtype.WINDOW,
                    TransformationSubtype.CONDITIONAL,
                )
                else TransformationType.DIRECT
            )
        else:
            spec, subtype, ttype = source[0], source[1], source[2]
        target_ds, _, target_field = target.rpartition(".")
        return ColumnEdge.objects.create(
            job=self.jobs[job] if job else None,
            source_field=self.fields[spec],
            target_dataset=self.ds[target_ds],
            target_field=self.fields[target] if target_field else None,
            transformation_type=ttype,
            transformation_subtype=subtype,
            valid_from=at,
            valid_to=until,
        )

    def close(self, job: str, dataset: str, direction: str, at: datetime) -> None:
        TableEdge.objects.filter(
            job=self.jobs[job], dataset=self.ds[dataset], direction=direction, valid_to=None
        ).update(valid_to=at)

    def close_read(self, job: str, dataset: str, at: datetime) -> None:
        self.close(job, dataset, Direction.INPUT, at)
        ColumnEdge.objects.filter(
            job=self.jobs[job], source_field__dataset=self.ds[dataset], valid_to=None
        ).update(valid_to=at)

    def run(self, job: str, state: str = RunState.COMPLETED, at: datetime = T0) -> Run:
        run = Run.objects.create(
            run_uuid=uuid.uuid4(),
            job=self.jobs[job],
            state=state,
            state_event_time=at,
            started_at=at,
            ended_at=at,
            created_at=at,
            error_message="boom" if state == RunState.FAILED else "",
        )
        Job.objects.filter(pk=run.job_id).update(latest_run=run)
        return run

    def chain(self, *names: str, prefix: str = "job") -> None:
        """raw → job → ds → job → ds …: each consecutive pair joined by one job."""
        for name in names:
            if name not in self.ds:
                self.dataset(name)
        for i in range(len(names) - 1):
            self.job(f"{prefix}_{i}", reads=[names[i]], writes=[names[i + 1]])

    def id(self, name: str) -> str:
        """Node id of a dataset (``name``), job (``job:name``) or field (``ds.field``)."""
        if name.startswith("job:"):
            return f"job:{self.jobs_ns.name}:{name[4:]}"
        if name in self.ds:
            return f"dataset:{self.ns.name}:{name}"
        ds, _, field = name.rpartition(".")
        return f"datasetField:{self.ns.name}:{ds}:{field}"


def node_store_written() -> Any:
    """The node directory of the host's document file written now, as a deploy or the
    scheduled pass writes it, and as a process that starts now maps it (PostgreSQL); None
    where node data is not shared (SQLite), where answers come from the database."""
    from graph import directory, documents, nodecache

    nodecache.cache.clear()
    directory.reset()
    if documents.render_documents(full=True).skipped:
        return None
    found = directory.get()
    assert found is not None
    return found
