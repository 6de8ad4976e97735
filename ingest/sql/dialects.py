"""The SQL dialects query logs come in, and how each names its tables."""

from __future__ import annotations

from dataclasses import dataclass


class UnknownDialectError(ValueError):
    """Raised for a dialect name this parser does not support."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"unknown SQL dialect {name!r}; supported: {', '.join(sorted(SUPPORTED_DIALECTS))}"
        )


@dataclass(frozen=True, slots=True)
class DialectSpec:
    name: str
    sqlglot: str
    openlineage: str
    # 3: database.schema.table (Postgres, Snowflake, BigQuery project.dataset.table,
    # Trino catalog.schema.table); 2: database.table (MySQL, Hive / Spark).
    name_parts: int
    # Whether "…" is a string literal (it is an identifier in ANSI dialects).
    double_quoted_strings: bool
    # Whether unquoted identifiers are case-insensitive, so a fingerprint may fold case.
    case_insensitive: bool
    # Catalog names that mean "the default catalog" and are dropped from names.
    implicit_catalogs: frozenset[str] = frozenset()


_SPECS = {
    "postgres": DialectSpec("postgres", "postgres", "postgres", 3, False, True),
    "redshift": DialectSpec("redshift", "redshift", "redshift", 3, False, True),
    "snowflake": DialectSpec("snowflake", "snowflake", "snowflake", 3, False, True),
    "bigquery": DialectSpec("bigquery", "bigquery", "bigquery", 3, True, False),
    "trino": DialectSpec("trino", "trino", "trino", 3, False, True),
    "mysql": DialectSpec("mysql", "mysql", "mysql", 2, True, False),
    # SQL Server: database.schema.table, identifiers case-insensitive by default collation.
    "tsql": DialectSpec("tsql", "tsql", "mssql", 3, False, True),
    "spark": DialectSpec(
        "spark", "spark", "hive", 2, True, True, frozenset({"spark_catalog", "hive_metastore"})
    ),
    "hive": DialectSpec(
        "hive", "hive", "hive", 2, True, True, frozenset({"spark_catalog", "hive_metastore"})
    ),
}

_ALIASES = {
    "postgresql": "postgres",
    "pg": "postgres",
    "sparksql": "spark",
    "spark_sql": "spark",
    "databricks": "spark",
    "presto": "trino",
    "mariadb": "mysql",
    "sqlserver": "tsql",
    "mssql": "tsql",
}

SUPPORTED_DIALECTS = frozenset(_SPECS) | frozenset(_ALIASES)


def resolve_dialect(name: str | None) -> DialectSpec:
    """Return the spec of a dialect name (case-insensitive, common aliases too)."""
    key = (name or "").strip().lower()
    key = _ALIASES.get(key, key)
    try:
        return _SPECS[key]
    except KeyError:
        raise UnknownDialectError(name or "") from None
