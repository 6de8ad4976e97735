"""Bulk writes of model rows: COPY on PostgreSQL, the ORM's bulk methods elsewhere.

The normaliser writes tens of rows per event (runs, run io, edges, schema
observations). Through ``bulk_create`` each value passes Django's field
preparation and psycopg's client-side query building, which together cost
more than PostgreSQL's own work. COPY sends the rows as one stream, adapted
by psycopg's C dumpers; updates go through a temporary table, so they stay
one set-based statement (the graph's revision triggers fire per statement).
Triggers and constraints apply as for any INSERT or UPDATE.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
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


def _converter(f: Field[Any, Any]) -> Callable[[Any], Any]:
    if isinstance(f, models.JSONField):
        return lambda value: None if value is None else Jsonb(value)
    return lambda value: value


def _insert_fields(model: type[Model], with_pk: bool) -> list[Field[Any, Any]]:
    pk = model._meta.pk
    return [
        f for f in model._meta.concrete_fields if isinstance(f, Field) and (with_pk or f is not pk)
    ]


def _copy(cursor: Any, table: str, fields: list[Field[Any, Any]], rows: list[Any]) -> None:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    converters = [(f.attname, _converter(f)) for f in fields]
    with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([convert(getattr(row, name)) for name, convert in converters])


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
    converters = [_converter(f) for f in fields]
    plain = all(not isinstance(f, models.JSONField) for f in fields)
    columns = ", ".join(quote(f.column) for f in fields)
    with transaction.atomic(savepoint=False), connection.cursor() as wrapper, errors():
        cursor = wrapper.cursor
        target = _scratch_table(cursor, model, fields) if ignore_conflicts else table
        with cursor.copy(f"COPY {target} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(
                    row if plain else [c(v) for c, v in zip(converters, row, strict=True)]
                )
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
    converters = [_converter(f) for f in fields]
    plain = all(not isinstance(f, models.JSONField) for f in fields)
    with transaction.atomic(savepoint=False), connection.cursor() as wrapper, errors():
        cursor = wrapper.cursor
        scratch = _scratch_table(cursor, model, fields)
        with cursor.copy(f"COPY {scratch} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(
                    row if plain else [c(v) for c, v in zip(converters, row, strict=True)]
                )
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
