"""An OpenLineage emitter for PySpark jobs (the demo's and anyone's).

Usage::

    emitter = LineageEmitter(spark, EmitterConfig(url="http://127.0.0.1:8000", api_key=token))
    with emitter.job("marts.customer_360", owners=["team:crm"]) as run:
        run.write(df, "data/lakehouse/marts/customer_360")

Each run emits START (when its first output is known, or on ``start()``), then COMPLETE, or
FAIL with an ``errorMessage`` facet when the block raises (the exception propagates). Column
lineage is derived from each written DataFrame's analysed plan. Delivery never raises: see
:mod:`pipelines.lineage.transport`.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import DatasetFacet, JobFacet, RunFacet, documentation_job
from openlineage.client.transport.transport import Transport
from openlineage.client.uuid import generate_new_uuid

from pipelines.lineage import facets
from pipelines.lineage.naming import DatasetId, dataset_for_uri
from pipelines.lineage.plan import ColumnLineage, derive_column_lineage
from pipelines.lineage.transport import SpoolingTransport, http_transport

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
OwnerLookup = Callable[[DatasetId], Sequence[str]]

_RUN_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, facets.PRODUCER)


def utc_now() -> datetime:
    """Return the current time, timezone-aware UTC."""
    return datetime.now(UTC)


class SimulatedClock:
    """A clock that starts at a given instant and moves ``step`` forward at every reading."""

    def __init__(self, start: datetime, step: timedelta = timedelta(seconds=20)) -> None:
        if start.tzinfo is None:
            raise ValueError("SimulatedClock needs a timezone-aware start")
        self.current = start.astimezone(UTC)
        self.step = step

    def __call__(self) -> datetime:
        reading = self.current
        self.current = reading + self.step
        return reading


def deterministic_run_id(namespace: str, job: str, run_key: str) -> str:
    """Return the run id of ``job`` for ``run_key`` (e.g. a simulated day): same input, same id."""
    return str(uuid.uuid5(_RUN_ID_NAMESPACE, f"{namespace}/{job}/{run_key}"))


@dataclass(frozen=True)
class RunRef:
    """A run as seen by its children: job namespace and name, run id, and the root run."""

    namespace: str
    name: str
    run_id: str
    root: tuple[str, str, str] | None = None


@dataclass
class EmitterConfig:
    """Where events go and how hard to try. Without ``url`` events only go to the spool."""

    url: str | None = None
    api_key: str | None = None
    endpoint: str = "api/v1/lineage"
    job_namespace: str = "spark"
    spool_path: str = "lineage-spool.ndjson"
    sql_log_path: str | None = None
    sql_user: str = "spark"
    table_namespace: str = "spark_catalog"
    retries: int = 3
    backoff: float = 0.5
    cooldown: float = 30.0
    timeout: float = 5.0
    gzip: bool = True


class LineageEmitter:
    """Builds and delivers OpenLineage events for PySpark jobs."""

    def __init__(
        self,
        spark: Any,
        config: EmitterConfig,
        *,
        clock: Clock = utc_now,
        owners: OwnerLookup | Mapping[str, Sequence[str]] | None = None,
        inner_transport: Transport | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.spark = spark
        self.config = config
        self.clock = clock
        self._owners = owners
        inner = inner_transport
        if inner is None and config.url:
            inner = http_transport(
                config.url,
                config.api_key,
                endpoint=config.endpoint,
                timeout=config.timeout,
                gzip=config.gzip,
            )
        self.transport = SpoolingTransport(
            inner,
            config.spool_path,
            retries=config.retries,
            backoff=config.backoff,
            cooldown=config.cooldown,
            sleep=sleep or time.sleep,
        )
        self.client = OpenLineageClient(
            transport=self.transport,
            config={"facets": {"source_code_location": {"disabled": True}}},
        )

    # public API ----------------------------------------------------------------------------

    def job(
        self,
        name: str,
        *,
        run_key: str | None = None,
        parent: RunRef | None = None,
        owners: Iterable[str] = (),
        description: str | None = None,
        nominal_time: datetime | None = None,
    ) -> JobRun:
        """Return a run of job ``name``, to use as a context manager.

        ``run_key`` (e.g. the simulated day) makes the run id deterministic, so re-running the
        same day re-sends the same run and ingestion stays idempotent.
        """
        namespace = self.config.job_namespace
        run_id = (
            deterministic_run_id(namespace, name, run_key)
            if run_key is not None
            else str(generate_new_uuid())
        )
        return JobRun(
            self,
            name=name,
            run_id=run_id,
            parent=parent,
            owners=list(owners),
            description=description,
            nominal_time=nominal_time,
        )

    def emit(self, event: RunEvent) -> bool:
        """Deliver one event (sent or spooled, never raising); return True if it was sent."""
        sent_before = self.transport.stats.sent
        try:
            self.client.emit(event)
        except Exception:  # lineage must never break the pipeline
            log.exception("could not build or deliver a lineage event")
            return False
        return self.transport.stats.sent > sent_before

    def owners_of(self, dataset: DatasetId) -> list[str]:
        """Return the owners known for a dataset (by dataset or by its name)."""
        if self._owners is None:
            return []
        if callable(self._owners):
            return list(self._owners(dataset))
        return list(self._owners.get(dataset.name, ()))

    def close(self) -> None:
        """Release the HTTP session."""
        self.client.close(timeout=0)

    # Spark helpers ---------------------------------------------------------------------------

    def qualify(self, path: str) -> str:
        """Return the fully qualified URI of a path as Hadoop resolves it (``file:/abs/p``…)."""
        jvm_path, fs = self._hadoop_path(path)
        return str(fs.makeQualified(jvm_path).toString())

    def delete_path(self, path: str) -> bool:
        """Delete a file or folder through Hadoop (any file system Spark can reach)."""
        from pipelines.spark import delete_path

        return delete_path(self.spark, path)

    def _hadoop_path(self, path: str) -> tuple[Any, Any]:
        jvm = self.spark.sparkContext._jvm
        jvm_path = jvm.org.apache.hadoop.fs.Path(path)
        conf = self.spark.sparkContext._jsc.hadoopConfiguration()
        return jvm_path, jvm_path.getFileSystem(conf)

    def qualified_table(self, table: str) -> str:
        """Return a catalog table's full name (``spark_catalog.marts.daily_revenue``)."""
        found = self.spark.catalog.getTable(table)
        return ".".join([found.catalog or "", *(found.namespace or []), found.name]).lstrip(".")

    def table_location(self, table: str) -> str:
        """Return the storage location of a catalog table."""
        for row in self.spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect():
            if str(row[0]).strip() == "Location":
                return str(row[1]).strip()
        raise ValueError(f"table {table} has no location")

    def log_sql(self, statement: str, run: JobRun, moment: datetime, status: str) -> None:
        """Append a job's statement to the SQL query log (JSON Lines) when one is configured."""
        query_id = uuid.uuid5(uuid.UUID(run.run_id), f"{len(run.statements)}:{statement}")
        self._log_record(statement, moment, status, self.config.sql_user, query_id)

    def log_query(self, statement: str, moment: datetime, user: str) -> None:
        """Append a statement someone ran by hand (no job, no lineage event) to the log."""
        query_id = uuid.uuid5(uuid.NAMESPACE_URL, f"{user}:{facets.iso_utc(moment)}:{statement}")
        self._log_record(statement, moment, "success", user, query_id)

    def _log_record(
        self, statement: str, moment: datetime, status: str, user: str, query_id: uuid.UUID
    ) -> None:
        if not self.config.sql_log_path:
            return
        catalog = self.spark.catalog
        record = {
            "query": statement,
            "start_time": facets.iso_utc(moment),
            "user": user,
            "database": catalog.currentCatalog(),
            "schema": catalog.currentDatabase(),
            "dialect": facets.SQL_DIALECT,
            "query_id": str(query_id),
            "status": status,
        }
        path = Path(self.config.sql_log_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record, sort_keys=True) + "\n")


@dataclass
class _Output:
    dataset: OutputDataset
    lineage: ColumnLineage | None = None


@dataclass
class JobRun:
    """One run of a job; a context manager that ends in COMPLETE, FAIL or ABORT."""

    emitter: LineageEmitter
    name: str
    run_id: str
    parent: RunRef | None = None
    owners: list[str] = field(default_factory=list)
    description: str | None = None
    nominal_time: datetime | None = None
    statements: list[str] = field(default_factory=list)
    started: bool = False
    finished: bool = False
    _inputs: dict[DatasetId, InputDataset] = field(default_factory=dict)
    _outputs: dict[DatasetId, _Output] = field(default_factory=dict)

    @property
    def ref(self) -> RunRef:
        """Return this run as a parent reference for child runs."""
        root = None
        if self.parent is not None:
            parent = self.parent
            root = parent.root or (parent.namespace, parent.name, parent.run_id)
        return RunRef(self.emitter.config.job_namespace, self.name, self.run_id, root)

    def __enter__(self) -> JobRun:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self._finish(RunState.COMPLETE)
        elif isinstance(exc, Exception):
            self._finish(RunState.FAIL, exc)
        else:
            self._finish(RunState.ABORT, exc)

    def start(self) -> None:
        """Emit START now (it is otherwise emitted when the first output is known)."""
        if not self.started:
            self.started = True
            self.emitter.emit(self._event(RunState.START))

    # outputs -------------------------------------------------------------------------------

    def write(
        self,
        df: Any,
        path: str,
        *,
        format: str = "parquet",
        mode: str = "overwrite",
        partition_by: Sequence[str] = (),
        options: Mapping[str, str] | None = None,
        owners: Iterable[str] | None = None,
    ) -> DatasetId:
        """Write ``df`` to ``path`` and record it as an output with its column lineage."""
        target = self.emitter.qualify(path)
        dataset = self.record_output(df, target, mode=mode, owners=owners)
        self.start()
        writer = df.write.format(format).mode(mode)
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        if options:
            writer = writer.options(**options)
        writer.save(target)
        return dataset

    def insert_overwrite(
        self, table: str, query: str, *, owners: Iterable[str] | None = None
    ) -> DatasetId:
        """Run ``INSERT OVERWRITE TABLE table <query>`` as Spark SQL, recording its lineage."""
        spark = self.emitter.spark
        statement = f"INSERT OVERWRITE TABLE {table}\n{query.strip()}"
        location = self.emitter.table_location(table)
        dataset = self.record_output(
            spark.sql(query),
            location,
            mode="overwrite",
            owners=owners,
            table=self.emitter.qualified_table(table),
        )
        self.statements.append(statement)
        self.start()
        self.run_sql(statement)
        return dataset

    def run_sql(self, statement: str) -> Any:
        """Execute one Spark SQL statement, writing it to the SQL query log."""
        moment = self.emitter.clock()
        try:
            result = self.emitter.spark.sql(statement)
        except Exception:
            self.emitter.log_sql(statement, self, moment, "failed")
            raise
        self.emitter.log_sql(statement, self, moment, "success")
        return result

    def drop(self, path: str, *, table: str | None = None) -> DatasetId:
        """Delete a dataset (and its catalog table) and record a DROP lifecycle change."""
        dataset = dataset_for_uri(self.emitter.qualify(path))
        dataset_facets: dict[str, DatasetFacet] = {
            "dataSource": facets.datasource_facet(dataset),
            "lifecycleStateChange": facets.lifecycle_facet("DROP"),
        }
        if table and self.emitter.spark.catalog.tableExists(table):
            dataset_facets["symlinks"] = facets.symlinks_facet(
                self.emitter.config.table_namespace, self.emitter.qualified_table(table)
            )
        self._outputs[dataset] = _Output(
            OutputDataset(
                namespace=dataset.namespace,
                name=dataset.name,
                facets=dataset_facets,
                outputFacets=None,
            )
        )
        self.start()
        if table:
            statement = f"DROP TABLE IF EXISTS {table}"
            self.statements.append(statement)
            self.run_sql(statement)
        self.emitter.delete_path(path)
        return dataset

    def record_output(
        self,
        df: Any,
        location: str,
        *,
        mode: str | None = None,
        owners: Iterable[str] | None = None,
        table: str | None = None,
    ) -> DatasetId:
        """Record ``df`` as written to ``location`` (when the job writes it by itself)."""
        dataset = dataset_for_uri(location)
        lineage = _safe_lineage(df)
        for input_id, relation in lineage.inputs.items():
            self._add_input(input_id, relation.schema_json, relation.table)
        dataset_facets: dict[str, DatasetFacet] = {
            "schema": facets.schema_facet(json.loads(df.schema.json())),
            "dataSource": facets.datasource_facet(dataset),
            "columnLineage": facets.column_lineage_facet(lineage),
        }
        owner_names = list(owners) if owners is not None else self.emitter.owners_of(dataset)
        if owner_names:
            dataset_facets["ownership"] = facets.ownership_facet(owner_names)
        if table:
            dataset_facets["symlinks"] = facets.symlinks_facet(
                self.emitter.config.table_namespace, table
            )
        if mode == "overwrite":
            dataset_facets["lifecycleStateChange"] = facets.lifecycle_facet("OVERWRITE")
        self._outputs[dataset] = _Output(
            OutputDataset(
                namespace=dataset.namespace,
                name=dataset.name,
                facets=dataset_facets,
                outputFacets=None,
            ),
            lineage,
        )
        return dataset

    # events --------------------------------------------------------------------------------

    def _add_input(self, dataset: DatasetId, schema_json: str | None, table: str | None) -> None:
        if dataset in self._inputs:
            return
        dataset_facets: dict[str, DatasetFacet] = {"dataSource": facets.datasource_facet(dataset)}
        if schema_json:
            dataset_facets["schema"] = facets.schema_facet(json.loads(schema_json))
        if table:
            dataset_facets["symlinks"] = facets.symlinks_facet(
                self.emitter.config.table_namespace, table
            )
        owner_names = self.emitter.owners_of(dataset)
        if owner_names:
            dataset_facets["ownership"] = facets.ownership_facet(owner_names)
        self._inputs[dataset] = InputDataset(
            namespace=dataset.namespace, name=dataset.name, facets=dataset_facets, inputFacets=None
        )

    def _finish(self, state: RunState, error: BaseException | None = None) -> None:
        if self.finished:
            return
        self.start()
        self.finished = True
        self.emitter.emit(self._event(state, error))

    def _event(self, state: RunState, error: BaseException | None = None) -> RunEvent:
        run_facets: dict[str, RunFacet] = {
            "processing_engine": facets.processing_engine_facet(str(self.emitter.spark.version)),
        }
        if self.parent is not None:
            run_facets["parent"] = facets.parent_facet(
                self.parent.namespace, self.parent.name, self.parent.run_id, self.parent.root
            )
        if self.nominal_time is not None:
            run_facets["nominalTime"] = facets.nominal_time_facet(self.nominal_time)
        if error is not None:
            run_facets["errorMessage"] = facets.error_facet(error)
        job_facets: dict[str, JobFacet] = {"jobType": facets.job_type_facet()}
        if self.statements:
            job_facets["sql"] = facets.sql_facet(";\n".join(self.statements))
        if self.owners:
            job_facets["ownership"] = facets.job_ownership_facet(self.owners)
        if self.description:
            job_facets["documentation"] = documentation_job.DocumentationJobFacet(
                description=self.description, producer=facets.PRODUCER
            )
        return RunEvent(
            eventType=state,
            eventTime=facets.iso_utc(self.emitter.clock()),
            run=Run(runId=self.run_id, facets=run_facets),
            job=Job(namespace=self.emitter.config.job_namespace, name=self.name, facets=job_facets),
            inputs=[self._inputs[k] for k in sorted(self._inputs)],
            outputs=[self._outputs[k].dataset for k in sorted(self._outputs)],
            producer=facets.PRODUCER,
        )


def _safe_lineage(df: Any) -> ColumnLineage:
    """Return the DataFrame's column lineage, or an empty one if the plan cannot be read."""
    try:
        lineage = derive_column_lineage(df)
    except Exception as error:  # lineage must never break the pipeline
        log.warning("column lineage unavailable: %s", error)
        return ColumnLineage(warnings=[f"column lineage unavailable: {error}"])
    for warning in lineage.warnings:
        log.info("column lineage: %s", warning)
    return lineage
