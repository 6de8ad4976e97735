"""Trigram indexes for name search (PostgreSQL only; nothing to do elsewhere).

The explorer's search matches names anywhere in them (``icontains``, which is
``UPPER(col) LIKE UPPER('%q%')``). At 100,000 datasets and 1,000,000 fields a
sequential scan of that expression takes hundreds of milliseconds; a GIN
trigram index on the same expression answers in a few. The models do not
declare these indexes (they are PostgreSQL expressions), so they live here.
Without the pg_trgm extension (no privilege to create it) search still works,
only slower: the migration warns and goes on.
"""

from __future__ import annotations

import sys
from typing import Any

from django.db import DatabaseError, migrations, transaction

INDEXES = (
    ("catalog_dataset_name_trgm", "catalog_dataset", 'UPPER("name"::text)'),
    ("catalog_dataset_description_trgm", "catalog_dataset", 'UPPER("description")'),
    ("catalog_datasetfield_name_trgm", "catalog_datasetfield", 'UPPER("name"::text)'),
)


def create_indexes(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except DatabaseError as exc:
        sys.stderr.write(f"WARNING: pg_trgm unavailable ({exc}); name search will scan tables\n")
        return
    for name, table, expression in INDEXES:
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {table} USING gin ({expression} gin_trgm_ops)"
        )


def drop_indexes(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, _table, _expression in INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("catalog", "0002_dataset_lineage_facets")]

    operations = [migrations.RunPython(create_indexes, drop_indexes, elidable=False)]
