"""Statements sent with server-side parameter binding on PostgreSQL.

Django's psycopg cursor quotes every parameter into the statement text on the
client: long text lists cost about a microsecond a character, and a statement
whose text changes with its parameters is planned anew each time. Bound
parameters go as they are, and a statement of fixed text is prepared by the
driver after a few runs on the (persistent) connection, so PostgreSQL stops
planning it. Only for statements that run on every request.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.db import connection


@contextmanager
def bound_cursor() -> Iterator[psycopg.Cursor[tuple[Any, ...]]]:
    """A driver cursor on Django's connection; driver errors come out as Django's."""
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        yield cursor
