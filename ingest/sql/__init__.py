"""SQL query logs → OpenLineage lineage (pure Python; no Django imports here).

``SqlLineageParser`` turns SQL text into statement lineage, ``readers``
stream query-log files, and ``events`` builds the OpenLineage RunEvents the
normaliser ingests, so SQL lineage lands exactly like OpenLineage lineage.
"""

from ingest.sql.dialects import SUPPORTED_DIALECTS, UnknownDialectError, resolve_dialect
from ingest.sql.folding import DEFAULT_FOLD_PATTERNS, DateSuffixFolder
from ingest.sql.model import (
    DatasetRef,
    FieldRef,
    InputField,
    Lifecycle,
    ParsedRecord,
    StatementError,
    StatementKind,
    StatementLineage,
    Subtype,
    TargetLineage,
    Transformation,
    TransformationType,
)
from ingest.sql.parser import DEFAULT_SCRATCH_PATTERNS, SchemaProvider, SqlLineageParser
from ingest.sql.session import LineageSession

__all__ = [
    "DEFAULT_FOLD_PATTERNS",
    "DEFAULT_SCRATCH_PATTERNS",
    "SUPPORTED_DIALECTS",
    "DatasetRef",
    "DateSuffixFolder",
    "FieldRef",
    "InputField",
    "Lifecycle",
    "LineageSession",
    "ParsedRecord",
    "SchemaProvider",
    "SqlLineageParser",
    "StatementError",
    "StatementKind",
    "StatementLineage",
    "Subtype",
    "TargetLineage",
    "Transformation",
    "TransformationType",
    "UnknownDialectError",
    "resolve_dialect",
]
