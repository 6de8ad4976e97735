"""Bulk writes of model rows: COPY on PostgreSQL, the ORM's bulk methods elsewhere.

The normaliser writes tens of rows per event (runs, run io, edges, schema
observations). Through ``bulk_create`` each value passes Django's field
preparation and psycopg's client-side query building, which together cost
more than PostgreSQL's own work. COPY sends the rows as one stream, adapted
by psycopg's C dumpers; updates go through a temporary table, so they stay
one set-based statement (the graph's revision triggers fire per statement).
Triggers and constraints apply as for any INSERT or UPDATE.

The stream is in COPY's binary format when psycopg has a binary dumper for
every column's type (all the normaliser's tables): a timestamp or a UUID
goes as its eight or sixteen bytes, not as text that both sides format and
parse, about a sixth of the client's work per row.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any

from django.db import connection, models, transaction
from django.db.models import Field, Model
from psycopg.types.json import Jsonb


def errors() -> Any:
    """Driver errors raised through the raw cursor as Django's (IntegrityError, …), as the
    ORM raises them: callers retry unique-key races and deadlocks by those types."""
    return connection.wrap_database_errors


def _fields(model: type[Model], names: Sequence[str]) -> list[Field[Any, Any]]:
    out: list[Field[Any, Any]] = []
    for name in names:
        found = model._meta.get_field(name)
        assert isinstance(found, Field)
        out.append(found)
    return out


def _converter(f: Field[Any, Any]) -> Callable[[Any], Any] | None:
    """What a value of the field needs before psycopg dumps it (None: nothing)."""
    if isinstance(f, models.JSONField):
        return lambda value: None if value is None else Jsonb(value)
    if isinstance(f, models.UUIDField):
        return _as_uuid
    return None


def _as_uuid(value: Any) -> uuid.UUID | None:
    return value if value is None or isinstance(value, uuid.UUID) else uuid.UUID(str(value))


# The binary COPY's psycopg type of each column type Django declares on PostgreSQL.
_BINARY_TYPES = {
    "bigint": "int8",
    "integer": "int4",
    "smallint": "int2",
    "boolean": "bool",
    "uuid": "uuid",
    "jsonb": "jsonb",
    "text": "text",
    "varchar": "text",
    "timestamp with time zone": "timestamptz",
    "date": "date",
    "double precision": "float8",
}


def _binary_type(f: Field[Any, Any]) -> str | None:
    declared = f.db_type(connection) or ""
    return _BINARY_TYPES.get(declared.split("(", 1)[0].strip())


def _copy_rows(
    cursor: Any, target: str, fields: list[Field[Any, Any]], rows: Iterable[Sequence[Any]]
) -> None:
    """COPY rows (sequences of the fields' values, in order) into ``target``; binary when
    every column's type has a binary form here."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    types = [_binary_type(f) for f in fields]
    converting = [(i, c) for i, f in enumerate(fields) if (c := _converter(f)) is not None]
    if converting:
        rows = (_converted(row, converting) for row in rows)
    binary = all(types)
    with cursor.copy(
        f"COPY {target} ({columns}) FROM STDIN{' (FORMAT BINARY)' if binary else ''}"
    ) as copy:
        if binary:
            copy.set_types(types)
        for row in rows:
            copy.write_row(row)


def _insert_fields(model: type[Model], with_pk: bool) -> list[Field[Any, Any]]:
    pk = model._meta.pk
    return [
        f for f in model._meta.concrete_fields if isinstance(f, Field) and (with_pk or f is not pk)
    ]


def _converted(row: Sequence[Any], converting: list[tuple[int, Callable[[Any], Any]]]) -> list[Any]:
    values = list(row)
    for i, convert in converting:
        values[i] = convert(values[i])
    return values


def _copy(cursor: Any, table: str, fields: list[Field[Any, Any]], rows: list[Any]) -> None:
    """COPY model instances' values of these fields into ``table``."""
    values = attrgetter(*(f.attname for f in fields))
    if len(fields) == 1:
        _copy_rows(cursor, table, fields, ((values(row),) for row in rows))
    else:
        _copy_rows(cursor, table, fields, map(values, rows))


def _allocate_ids(cursor: Any, model: type[Model], count: int) -> list[int]:
    pk = model._meta.pk
    assert pk is not None
    cursor.execute(
        "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
        [model._meta.db_table, pk.column, count],
    )
    return [row[0] for row in cursor.fetchall()]


def insert(model: type[Model], rows: list[Any], ignore_conflicts: bool = False) -> None:
    """Insert model instances; without ``ignore_conflicts`` each row gets its primary key.

    With ``ignore_conflicts`` rows that would violate a unique constraint are
    skipped (``ON CONFLICT DO NOTHING``) and primary keys are not set.
    """
    if not rows:
        return
    if connection.vendor != "postgresql":
        model._default_manager.bulk_create(rows, ignore_conflicts=ignore_conflicts)
        return
    table = connection.ops.quote_name(model._meta.db_table)
    with transaction.atomic(savepoint=False), connection.cursor() as wrapper, errors():
        cursor = wrapper.cursor
        if not ignore_conflicts:
            for row, pk in zip(rows, _allocate_ids(cursor, model, len(rows)), strict=True):
                row.pk = pk
                row._state.adding = False
                row._state.db = connection.alias
            _copy(cursor, table, _insert_fields(model, with_pk=True), rows)
            return
        fields = _insert_fields(model, with_pk=False)
        scratch = _scratch_table(cursor, model, fields)
        _copy(cursor, scratch, fields, rows)
        columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {scratch} "
            "ON CONFLICT DO NOTHING"
        )


def insert_values(
    model: type[Model],
    names: Sequence[str],
    rows: list[tuple[Any, ...]],
    ignore_conflicts: bool = False,
) -> None:
    """Insert rows given as tuples of the fields ``names`` (attribute names, ``run_id``
    for a foreign key); the primary key comes from its sequence, the other fields get
    what the model's constructor would give them. No model instances are built: for the many rows whose keys
    nobody reads back (run io, edges, observations)."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        instances = [model(**dict(zip(names, row, strict=True))) for row in rows]
        model._default_manager.bulk_create(instances, ignore_conflicts=ignore_conflicts)
        return
    fields = _fields(model, names)
    given = {f.attname for f in fields}
    # What the model's constructor would give them: a default, '' or None.
    defaults = [f for f in _insert_fields(model, with_pk=False) if f.attname not in given]
    if defaults:
        fixed = tuple(f.get_default() for f in defaults)
        fields = [*fields, *defaults]
        rows = [(*row, *fixed) for row in rows]
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    columns = ", ".join(quote(f.column) for f in fields)
    with transaction.atomic(savepoint=False), connection.cursor() as wrapper, errors():
        cursor = wrapper.cursor
        target = _scratch_table(cursor, model, fields) if ignore_conflicts else table
        _copy_rows(cursor, target, fields, rows)
        if ignore_conflicts:
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {target} "
                "ON CONFLICT DO NOTHING"
            )


def insert_new(
    model: type[Model], names: Sequence[str], rows: list[tuple[Any, ...]], returning: Sequence[str]
) -> list[tuple[Any, ...]]:
    """Insert rows given as tuples of the fields ``names`` that break no unique constraint;
    gives the ``returning`` columns of the rows inserted (PostgreSQL only)."""
    if not rows:
        return []
    assert connection.vendor == "postgresql", "insert_new is for PostgreSQL"
    fields = _fields(model, names)
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    columns = ", ".join(quote(f.column) for f in fields)
    wanted = ", ".join(quote(f.column) for f in _fields(model, returning))
    with transaction.atomic(savepoint=False), connection.cursor() as wrapper, errors():
        cursor = wrapper.cursor
        scratch = _scratch_table(cursor, model, fields)
        _copy_rows(cursor, scratch, fields, rows)
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {scratch} "
            f"ON CONFLICT DO NOTHING RETURNING {wanted}"
        )
        return [tuple(row) for row in cursor.fetchall()]


def update(model: type[Model], rows: list[Any], names: Sequence[str]) -> None:
    """Write the fields ``names`` of many rows by primary key, in one statement."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        model._default_manager.bulk_update(rows, list(names), batch_size=500)
        return
    pk = model._meta.pk
    assert isinstance(pk, Field)
    fields = _fields(model, names)
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    assignments = ", ".join(f"{quote(f.column)} = s.{quote(f.column)}" for f in fields)
    with transaction.atomic(savepoint=False), connection.cursor() as wrapper, errors():
        cursor = wrapper.cursor
        scratch = _scratch_table(cursor, model, [pk, *fields])
        _copy(cursor, scratch, [pk, *fields], rows)
        cursor.execute(
            f"UPDATE {table} AS t SET {assignments} FROM {scratch} AS s "
            f"WHERE t.{quote(pk.column)} = s.{quote(pk.column)}"
        )


def _scratch_table(cursor: Any, model: type[Model], fields: list[Field[Any, Any]]) -> str:
    """An empty temporary table with these columns of the model's table (no constraints).

    Created once per session and column set; its rows go at each commit and are
    cleared before each use.
    """
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    tag = zlib.crc32(columns.encode())
    name = quote(f"bulk_{model._meta.db_table}_{tag:08x}")
    cursor.execute(
        f"CREATE TEMP TABLE IF NOT EXISTS {name} ON COMMIT DELETE ROWS AS "
        f"SELECT {columns} FROM {quote(model._meta.db_table)} WITH NO DATA"
    )
    cursor.execute(f"DELETE FROM {name}")
    return name
