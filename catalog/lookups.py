"""``__any_of``: ``IN`` for a long list of ids, sent as one array parameter.

``IN (%s, %s, …)`` with thousands of values costs milliseconds of client-side
query building per statement; ``= ANY(%s)`` is one parameter. On SQLite, where
a list of parameters fails past its limit (32,766 in a stock build), values
Django sends as ints or text (UUIDs too) go as one JSON array, read by
``json_each``.

Django binds parameters on the client, where psycopg quotes a list element by
element in Python (5 ms for 10,000 ids). Integers, UUIDs and strings compared
with columns of their kind are therefore sent as one array literal, built
with ``str.join`` and cast on the server: the same rows, at half the cost.
Strings are cast to ``text[]``, not to the column's ``varchar(n)``, which
would cut a longer value down to one that matches. Other values (and
``None``, which ``IN`` never matches) keep psycopg's own list adaptation.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from django.db import connection
from django.db.models import Field, ForeignObject, Model, Q
from django.db.models.expressions import RawSQL
from django.db.models.lookups import In


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


BIGINT = range(-(2**63), 2**63)
INTEGER_COLUMNS = ("bigint", "integer", "smallint")
TEXT_COLUMNS = ("varchar", "text")


def array_literal(values: list[Any], column_type: str) -> tuple[str, str] | None:
    """PostgreSQL's text form of ``values`` and the array type to cast it to, when the
    values are ints, UUIDs or strings and the column of the same kind; else None."""
    kinds = {type(v) for v in values}
    if kinds <= {int} and column_type.startswith(INTEGER_COLUMNS):
        if values and (min(values) not in BIGINT or max(values) not in BIGINT):
            return None
        return "{" + ",".join(map(str, values)) + "}", "bigint[]"
    if kinds == {uuid.UUID} and column_type == "uuid":
        return "{" + ",".join(map(str, values)) + "}", "uuid[]"
    if kinds == {str} and column_type.startswith(TEXT_COLUMNS):
        return "{" + ",".join(map(_quoted, values)) + "}", "text[]"
    return None


class AnyOf(In[Any]):
    lookup_name = "any_of"

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        values = [self.lhs.output_field.get_db_prep_value(v, connection) for v in self.rhs]
        literal = array_literal(values, self.lhs.output_field.db_type(connection) or "")
        if literal is None:
            return f"{lhs} = ANY(%s)", [*lhs_params, values]
        text, array_type = literal
        return f"{lhs} = ANY(%s::{array_type})", [*lhs_params, text]

    def as_sqlite(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        values = [
            self.lhs.output_field.get_db_prep_value(v, connection)
            for v in self.rhs
            if v is not None  # as IN: None matches nothing
        ]
        if not values or not {type(v) for v in values} <= {int, str}:
            sql, params = super().as_sql(compiler, connection)
            return sql, list(params)
        lhs, lhs_params = self.process_lhs(compiler, connection)
        return f"{lhs} IN (SELECT value FROM json_each(%s))", [*lhs_params, json.dumps(values)]


Field.register_lookup(AnyOf)
# Relations keep a lookup table of their own (Django stops at ForeignObject).
ForeignObject.register_lookup(AnyOf)


def where_in(column: str, values: Sequence[int]) -> tuple[str, list[Any]]:
    """Raw SQL's ``column IN values`` for integer ids: one array parameter, its text built as
    ``__any_of`` builds it (on SQLite a JSON array)."""
    listed = ",".join(map(str, values))
    if connection.vendor == "postgresql":
        return f"{column} = ANY(%s::bigint[])", ["{" + listed + "}"]
    return f"{column} IN (SELECT value FROM json_each(%s))", ["[" + listed + "]"]


def in_windows(
    model: type[Model],
    key: str,
    time: str,
    windows: Mapping[int, tuple[datetime, datetime | None]],
    flag: str = "",
) -> Q:
    """The rows of ``model`` whose ``time`` lies in the window [start, end] of their ``key``
    (end None: no end), and, given a boolean ``flag`` field, whose flag is set. On
    PostgreSQL one range per window of the (key, time) index (partial on the flag, if
    any); elsewhere the span of all the windows, a superset the caller narrows."""
    if not windows:
        return Q(pk__in=[])
    starts = [start for start, _ in windows.values()]
    ends = [end for _, end in windows.values()]
    span = Q(**{f"{key}__any_of": list(windows), f"{time}__gte": min(starts)})
    if flag:
        span &= Q(**{flag: True})
    if None not in ends:
        span &= Q(**{f"{time}__lte": max(end for end in ends if end is not None)})
    if connection.vendor != "postgresql":
        return span
    meta, quote = model._meta, connection.ops.quote_name
    table, pk = quote(meta.db_table), quote(meta.pk.column)
    column, at, *flagged = (
        quote(cast("Field[Any, Any]", meta.get_field(name)).column)
        for name in (key, time, flag)
        if name
    )
    # Quoted names from the model's own metadata; every value is a parameter. LATERAL with
    # OFFSET 0 (not merged into a join): one index range per window, where a join may read
    # the whole table.
    rows = RawSQL(  # noqa: S611
        f"SELECT r.id FROM unnest(%s::bigint[], %s::timestamptz[], %s::timestamptz[]) "
        f"AS w(k, lo, hi) CROSS JOIN LATERAL (SELECT o.{pk} AS id FROM {table} o "
        f"WHERE o.{column} = w.k AND o.{at} >= w.lo "
        f"AND o.{at} <= coalesce(w.hi, 'infinity'){''.join(f' AND o.{f}' for f in flagged)} "
        "OFFSET 0) r",
        ["{" + ",".join(map(str, windows)) + "}", starts, ends],
    )
    return Q(pk__in=rows)
