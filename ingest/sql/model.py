"""Value types of SQL lineage: datasets, column dependencies, statements.

Everything here is immutable and hashable so a parsed statement can be
cached and shared by every repeat of it in a log.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass


class StatementKind(enum.StrEnum):
    SELECT = "SELECT"
    INSERT = "INSERT"
    INSERT_OVERWRITE = "INSERT_OVERWRITE"
    CTAS = "CTAS"
    CREATE_VIEW = "CREATE_VIEW"
    MERGE = "MERGE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    COPY = "COPY"
    UNLOAD = "UNLOAD"
    DDL = "DDL"
    OTHER = "OTHER"


# Kinds whose outputs get table-level edges; SELECT is a read, DDL a lifecycle change.
WRITE_KINDS = frozenset(
    {
        StatementKind.INSERT,
        StatementKind.INSERT_OVERWRITE,
        StatementKind.CTAS,
        StatementKind.CREATE_VIEW,
        StatementKind.MERGE,
        StatementKind.UPDATE,
        StatementKind.DELETE,
        StatementKind.COPY,
        StatementKind.UNLOAD,
    }
)


class Lifecycle(enum.StrEnum):
    """OpenLineage lifecycleStateChange values a DDL statement maps to."""

    CREATE = "CREATE"
    DROP = "DROP"
    TRUNCATE = "TRUNCATE"
    RENAME = "RENAME"
    ALTER = "ALTER"
    OVERWRITE = "OVERWRITE"


class TransformationType(enum.StrEnum):
    DIRECT = "DIRECT"
    INDIRECT = "INDIRECT"


class Subtype(enum.StrEnum):
    IDENTITY = "IDENTITY"
    TRANSFORMATION = "TRANSFORMATION"
    AGGREGATION = "AGGREGATION"
    JOIN = "JOIN"
    FILTER = "FILTER"
    GROUP_BY = "GROUP_BY"
    SORT = "SORT"
    WINDOW = "WINDOW"
    CONDITIONAL = "CONDITIONAL"


DIRECT_SUBTYPES = frozenset({Subtype.IDENTITY, Subtype.TRANSFORMATION, Subtype.AGGREGATION})
_DIRECT_RANK = {Subtype.IDENTITY: 0, Subtype.TRANSFORMATION: 1, Subtype.AGGREGATION: 2}


@dataclass(frozen=True, slots=True)
class Transformation:
    """How a source column reaches a target (OpenLineage transformation)."""

    subtype: Subtype
    masking: bool = False

    @property
    def type(self) -> TransformationType:
        if self.subtype in DIRECT_SUBTYPES:
            return TransformationType.DIRECT
        return TransformationType.INDIRECT

    def then(self, outer: Transformation) -> Transformation:
        """Return the transformation of ``outer`` applied on top of this one."""
        masking = self.masking or outer.masking
        if outer.subtype not in DIRECT_SUBTYPES:
            return Transformation(outer.subtype, masking)
        if self.subtype not in DIRECT_SUBTYPES:
            return Transformation(self.subtype, masking)
        if _DIRECT_RANK[outer.subtype] >= _DIRECT_RANK[self.subtype]:
            return Transformation(outer.subtype, masking)
        return Transformation(self.subtype, masking)


IDENTITY = Transformation(Subtype.IDENTITY)
TRANSFORMATION = Transformation(Subtype.TRANSFORMATION)
AGGREGATION = Transformation(Subtype.AGGREGATION)


@dataclass(frozen=True, slots=True, order=True)
class DatasetRef:
    """A dataset as SQL names it: a table (``db.schema.table``) or a location URI.

    ``namespace`` is empty for tables (they live in the log's namespace) and
    set for locations (``s3://bucket``, ``file``, ``gs://bucket``); Snowflake
    stages (``@stage/path``) use ``stage`` and live in the log's namespace.
    """

    name: str
    namespace: str = ""

    @property
    def is_location(self) -> bool:
        return bool(self.namespace)

    def __str__(self) -> str:
        if not self.namespace or self.namespace == "stage":
            return self.name
        if self.namespace == "file":
            return f"file://{self.name}"
        return f"{self.namespace}/{self.name}" if self.name else self.namespace


@dataclass(frozen=True, slots=True, order=True)
class FieldRef:
    dataset: DatasetRef
    field: str


@dataclass(frozen=True, slots=True)
class InputField:
    """One source column of a target column (or of the whole target dataset)."""

    source: FieldRef
    transformations: frozenset[Transformation]


@dataclass(frozen=True, slots=True)
class TargetLineage:
    """Column lineage of one written dataset."""

    dataset: DatasetRef
    # target column -> its source columns, in target-column order
    fields: Mapping[str, tuple[InputField, ...]]
    # dataset-level (INDIRECT) dependencies: filters, joins, grouping, sorting
    dataset_inputs: tuple[InputField, ...] = ()
    # every column of the target, when the statement defines the whole schema
    schema: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True, slots=True)
class StatementLineage:
    """What one SQL statement read and wrote, down to columns."""

    kind: StatementKind
    inputs: tuple[DatasetRef, ...]
    outputs: tuple[DatasetRef, ...]
    targets: tuple[TargetLineage, ...] = ()
    fingerprint: str = ""
    # Fingerprint with date suffixes folded: names the job across daily tables.
    job_key: str = ""
    index: int = 0
    lifecycle: Lifecycle | None = None
    previous_name: DatasetRef | None = None
    # temporary / scratch datasets among inputs and outputs (hidden in views)
    hidden_datasets: frozenset[DatasetRef] = frozenset()
    # temporary / scratch datasets the lineage was followed through
    passed_through: tuple[DatasetRef, ...] = ()
    # true when the statement only feeds temporary / scratch tables
    hidden: bool = False
    parser: str = "sqlglot"
    warnings: tuple[str, ...] = ()
    # Tables read with ``*`` (or unqualified columns) whose columns the catalog did not know:
    # the column lineage is missing what they would give (ingest.sql_actions takes it again).
    columns_unknown: frozenset[DatasetRef] = frozenset()

    @property
    def is_read(self) -> bool:
        return self.kind is StatementKind.SELECT or (
            self.kind is StatementKind.COPY and not self.outputs
        )

    @property
    def has_lineage(self) -> bool:
        return self.kind in WRITE_KINDS and bool(self.outputs) and not self.hidden


@dataclass(frozen=True, slots=True)
class StatementError:
    """A statement that could not be parsed, with the reason."""

    index: int
    reason: str
    excerpt: str


@dataclass(frozen=True, slots=True)
class ParsedRecord:
    """The lineage of one log record (a statement or a script)."""

    fingerprint: str
    statements: tuple[StatementLineage, ...]
    errors: tuple[StatementError, ...] = ()
    cached: bool = False

    @property
    def lineage(self) -> tuple[StatementLineage, ...]:
        """Statements that produce edges."""
        return tuple(s for s in self.statements if s.has_lineage)

    @property
    def reads(self) -> tuple[StatementLineage, ...]:
        """Plain reads (SELECT, COPY … TO STDOUT): recorded, never edges."""
        return tuple(s for s in self.statements if s.is_read and s.inputs and not s.hidden)

    @property
    def ddl(self) -> tuple[StatementLineage, ...]:
        return tuple(
            s for s in self.statements if s.kind is StatementKind.DDL and s.outputs and not s.hidden
        )


@dataclass(frozen=True, slots=True)
class Defaults:
    """Names the SQL leaves out: database (catalog / project) and schema."""

    database: str | None = None
    schema: str | None = None
