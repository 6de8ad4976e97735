"""OpenLineage facets built from Spark schemas, derived lineage and job metadata."""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from openlineage.client.facet_v2 import (
    column_lineage_dataset,
    datasource_dataset,
    error_message_run,
    job_type_job,
    lifecycle_state_change_dataset,
    nominal_time_run,
    ownership_dataset,
    ownership_job,
    parent_run,
    processing_engine_run,
    schema_dataset,
    sql_job,
    symlinks_dataset,
)

from pipelines.lineage.naming import DatasetId
from pipelines.lineage.plan import ColumnLineage, Sources

PRODUCER = "https://github.com/lineage-explorer/lineage-explorer/tree/main/pipelines"
SQL_DIALECT = "spark"


def schema_facet(spark_schema: Mapping[str, Any]) -> schema_dataset.SchemaDatasetFacet:
    """Return the schema facet of a Spark StructType given as its JSON dict (nested fields too)."""
    return schema_dataset.SchemaDatasetFacet(
        fields=_schema_fields(spark_schema.get("fields", [])), producer=PRODUCER
    )


def _schema_fields(
    fields: Iterable[Mapping[str, Any]],
) -> list[schema_dataset.SchemaDatasetFacetFields]:
    result = []
    for position, spark_field in enumerate(fields, start=1):
        data_type = spark_field.get("type")
        comment = (spark_field.get("metadata") or {}).get("comment")
        result.append(
            schema_dataset.SchemaDatasetFacetFields(
                name=str(spark_field["name"]),
                type=spark_type_name(data_type),
                description=str(comment) if comment else None,
                ordinal_position=position,
                fields=_schema_fields(_nested_struct(data_type)) or None,
            )
        )
    return result


def _nested_struct(data_type: Any) -> list[Mapping[str, Any]]:
    """Return the struct fields reachable from a type (through arrays and map values)."""
    if not isinstance(data_type, Mapping):
        return []
    kind = data_type.get("type")
    if kind == "struct":
        return list(data_type.get("fields", []))
    if kind == "array":
        return _nested_struct(data_type.get("elementType"))
    if kind == "map":
        return _nested_struct(data_type.get("valueType"))
    return []


def spark_type_name(data_type: Any) -> str:
    """Return a short Spark SQL type name for a StructType JSON type (``array<string>``…)."""
    if not isinstance(data_type, Mapping):
        return str(data_type)
    kind = data_type.get("type")
    if kind == "struct":
        return "struct"
    if kind == "array":
        return f"array<{spark_type_name(data_type.get('elementType'))}>"
    if kind == "map":
        key = spark_type_name(data_type.get("keyType"))
        return f"map<{key},{spark_type_name(data_type.get('valueType'))}>"
    return str(kind)


def datasource_facet(dataset: DatasetId) -> datasource_dataset.DatasourceDatasetFacet:
    """Return the dataSource facet: the namespace names the source."""
    return datasource_dataset.DatasourceDatasetFacet(
        name=dataset.namespace, uri=dataset.namespace, producer=PRODUCER
    )


def ownership_facet(owners: Iterable[str]) -> ownership_dataset.OwnershipDatasetFacet:
    """Return a dataset ownership facet; owners are names like ``team:sales``."""
    return ownership_dataset.OwnershipDatasetFacet(
        owners=[ownership_dataset.Owner(name=o, type="MAINTAINER") for o in owners],
        producer=PRODUCER,
    )


def job_ownership_facet(owners: Iterable[str]) -> ownership_job.OwnershipJobFacet:
    """Return a job ownership facet."""
    return ownership_job.OwnershipJobFacet(
        owners=[ownership_job.Owner(name=o, type="MAINTAINER") for o in owners],
        producer=PRODUCER,
    )


# Spark's built-in catalog: SQL leaves it out of table names (``marts.daily_revenue``).
SESSION_CATALOG = "spark_catalog"


def symlinks_facet(namespace: str, table: str) -> symlinks_dataset.SymlinksDatasetFacet:
    """Return a symlinks facet naming the catalog table that points at a file dataset.

    A table of the session catalog is named as SQL names it, ``database.table``, so the
    statements of a SQL query log name the same dataset.
    """
    name = table.removeprefix(SESSION_CATALOG + ".")
    return symlinks_dataset.SymlinksDatasetFacet(
        identifiers=[symlinks_dataset.Identifier(namespace=namespace, name=name, type="TABLE")],
        producer=PRODUCER,
    )


def lifecycle_facet(state: str) -> lifecycle_state_change_dataset.LifecycleStateChangeDatasetFacet:
    """Return a lifecycleStateChange facet (DROP, OVERWRITE, CREATE, TRUNCATE…)."""
    return lifecycle_state_change_dataset.LifecycleStateChangeDatasetFacet(
        lifecycleStateChange=lifecycle_state_change_dataset.LifecycleStateChange(state),
        producer=PRODUCER,
    )


def column_lineage_facet(
    lineage: ColumnLineage,
) -> column_lineage_dataset.ColumnLineageDatasetFacet:
    """Return the columnLineage facet: per-field inputs plus dataset-wide INDIRECT inputs."""
    fields = {
        name: column_lineage_dataset.Fields(inputFields=_input_fields(sources))
        for name, sources in lineage.fields.items()
        if sources
    }
    return column_lineage_dataset.ColumnLineageDatasetFacet(
        fields=fields, dataset=_input_fields(lineage.dataset), producer=PRODUCER
    )


def _input_fields(sources: Sources) -> list[column_lineage_dataset.InputField]:
    return [
        column_lineage_dataset.InputField(
            namespace=source.dataset.namespace,
            name=source.dataset.name,
            field=source.field,
            transformations=[
                column_lineage_dataset.Transformation(
                    type=t.type, subtype=t.subtype, description="", masking=t.masking
                )
                for t in sorted(sources[source])
            ],
        )
        for source in sorted(sources)
    ]


def job_type_facet() -> job_type_job.JobTypeJobFacet:
    """Return the jobType facet of a Spark batch job."""
    return job_type_job.JobTypeJobFacet(
        processingType="BATCH", integration="SPARK", jobType="JOB", producer=PRODUCER
    )


def sql_facet(query: str) -> sql_job.SQLJobFacet:
    """Return the sql job facet for a Spark SQL statement."""
    return sql_job.SQLJobFacet(query=query, dialect=SQL_DIALECT, producer=PRODUCER)


def processing_engine_facet(spark_version: str) -> processing_engine_run.ProcessingEngineRunFacet:
    """Return the processing_engine run facet naming Spark and the client version."""
    from openlineage.client import __version__ as client_version

    return processing_engine_run.ProcessingEngineRunFacet(
        version=spark_version,
        name="spark",
        openlineageAdapterVersion=str(client_version),
        producer=PRODUCER,
    )


def parent_facet(
    namespace: str, name: str, run_id: str, root: tuple[str, str, str] | None = None
) -> parent_run.ParentRunFacet:
    """Return the parent run facet (with its root, the top of the run hierarchy)."""
    root_ns, root_name, root_run = root or (namespace, name, run_id)
    return parent_run.ParentRunFacet(
        run=parent_run.Run(runId=run_id, facets=None),
        job=parent_run.Job(namespace=namespace, name=name, facets=None),
        root=parent_run.Root(
            run=parent_run.RootRun(runId=root_run, facets=None),
            job=parent_run.RootJob(namespace=root_ns, name=root_name, facets=None),
        ),
        producer=PRODUCER,
    )


def iso_utc(moment: datetime) -> str:
    """Return an aware datetime as ISO-8601 UTC with milliseconds and a ``Z``."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def nominal_time_facet(start: datetime) -> nominal_time_run.NominalTimeRunFacet:
    """Return the nominalTime run facet (the scheduled time the run stands for)."""
    return nominal_time_run.NominalTimeRunFacet(nominalStartTime=iso_utc(start), producer=PRODUCER)


def error_facet(error: BaseException) -> error_message_run.ErrorMessageRunFacet:
    """Return the errorMessage run facet of an exception, with its Python stack trace."""
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return error_message_run.ErrorMessageRunFacet(
        message=f"{type(error).__name__}: {error}",
        programmingLanguage="python",
        stackTrace=trace,
        producer=PRODUCER,
    )
