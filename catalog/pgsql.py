"""PostgreSQL specifics: statements with server-side binding, commits that need not wait.

Django's psycopg cursor quotes every parameter into the statement text on the
client: long text lists cost about a microsecond a character. Bound parameters go
as they are. Django's connections prepare nothing (psycopg's ``prepare_threshold``
is None), so a statement is planned on every run unless it goes through
``execute_prepared``: only for statements of fixed text that run on every request
and whose planning showed in a benchmark.

Normalising transactions commit without waiting for the disk (``relax_commit``):
what they write is derived from raw events that were stored durably first.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper


@contextmanager
def bound_cursor(
    using: BaseDatabaseWrapper | None = None,
) -> Iterator[psycopg.Cursor[tuple[Any, ...]]]:
    """A driver cursor on Django's connection (``using``, default the default one); driver
    errors come out as Django's."""
    db = connection if using is None else using
    db.ensure_connection()
    with db.wrap_database_errors, psycopg.Cursor(db.connection) as cursor:
        yield cursor


def execute_prepared(
    cursor: psycopg.Cursor[tuple[Any, ...]], sql: str, params: Sequence[Any]
) -> None:
    """Run a statement of fixed text as a prepared statement of its connection: planned
    once per connection (until a rollback, which makes psycopg deallocate them all).

    Preparing stays off for everything else on the connection, Django's own queries
    included: psycopg would otherwise count and keep the text of each of them.
    """
    connection = cursor.connection
    threshold, connection.prepare_threshold = connection.prepare_threshold, 0
    try:
        cursor.execute(sql, params, prepare=True)
    finally:
        connection.prepare_threshold = threshold


def fetch_prepared(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The rows of a statement of fixed text: prepared on PostgreSQL (``execute_prepared``),
    through Django's cursor elsewhere."""
    if connection.vendor != "postgresql":
        with connection.cursor() as plain:
            plain.execute(sql, params)
            return list(plain.fetchall())
    with bound_cursor() as cursor:
        execute_prepared(cursor, sql, params)
        return cursor.fetchall()


def relax_commit() -> None:
    """Let the current transaction commit without waiting for its WAL to reach disk.

    Only for transactions that write what can be derived again: normalised
    rows, whose raw events were stored durably first. A crash may undo the
    last fraction of a second of such commits; the events they normalised are
    then still pending (or claimed, and freed by the sweep) and are processed
    again. Call it inside ``transaction.atomic``; no-op elsewhere.
    """
    if connection.vendor == "postgresql" and connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")


def flush_commits() -> None:
    """Make every commit so far durable: a synchronous commit flushes the WAL before it."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id()")
