"""OpenLineage for PySpark: column lineage from Spark plans, facets, resilient delivery."""

from pipelines.lineage.emitter import (
    EmitterConfig,
    JobRun,
    LineageEmitter,
    RunRef,
    SimulatedClock,
    deterministic_run_id,
    utc_now,
)
from pipelines.lineage.naming import DatasetId, dataset_for_uri
from pipelines.lineage.plan import ColumnLineage, Transformation, derive_column_lineage
from pipelines.lineage.transport import SpoolingTransport, http_transport

__all__ = [
    "ColumnLineage",
    "DatasetId",
    "EmitterConfig",
    "JobRun",
    "LineageEmitter",
    "RunRef",
    "SimulatedClock",
    "SpoolingTransport",
    "Transformation",
    "dataset_for_uri",
    "derive_column_lineage",
    "deterministic_run_id",
    "http_transport",
    "utc_now",
]
