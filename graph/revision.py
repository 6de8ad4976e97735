"""The lineage revision: a cheap, cross-process marker of committed edge changes.

Database triggers on ``graph_tableedge`` and ``graph_columnedge`` record each
changed edge id in ``graph_change`` and bump ``graph_revision`` once per
transaction. They live in the database rather than in Python so that every
writer is covered — ORM saves, ``bulk_create``, ``update()``, raw SQL, COPY —
without the writers knowing about the snapshot.

On PostgreSQL the bump is a deferred constraint trigger, so it runs at commit
time: the revision row is locked only for the instant before commit (writers
do not serialise on it), and revision numbers follow commit order, so a
reader that has applied revision N can fetch exactly what committed after N.
On SQLite (one writer at a time) plain row triggers do the same per row.

Readers call :func:`current` (one indexed read) and, when it moved,
:func:`changes_since` to learn which edges to reload.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from catalog.pgsql import bound_cursor

VERSION = "v8"


class Kind(StrEnum):
    """What one entry of the change log is about; node documents are of DATASET or JOB."""

    TABLE = "t"  # a table edge
    COLUMN = "c"  # a column edge
    DATASET = "d"  # a dataset, its fields, owners, tags, flags or changes
    JOB = "j"  # a job or its runs
    ALL_DATA = "D"  # something every node's data may show (a namespace, an owner's name)
    RESET = "*"  # anything: the log cannot say what changed


# The packages whose code decides what a node document says.
RENDERING_PACKAGES = ("graph", "catalog")


@functools.cache
def code_digest() -> str:
    """A digest of the code that renders node documents and of the change log's version:
    documents and passes carry it, and a release that changes it trusts none of the old
    ones (graph/nodecache.py, graph/documents.py, graph/docfile.py)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(VERSION.encode())
    for package in RENDERING_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" not in path.parts:
                digest.update(str(path.relative_to(root)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Revision:
    value: int
    token: str


@dataclass(frozen=True)
class Watch:
    """A table whose changes are logged: ``ref`` is the SQL giving the changed object's id
    from a row aliased ``r`` (NULL for changes that touch every node's data)."""

    table: str
    kind: str
    ref: str
    events: tuple[str, ...] = ("INSERT", "UPDATE", "DELETE")
    # When given, an UPDATE is logged only where one of these columns changed.
    columns: tuple[str, ...] = ()


WATCHED = (
    Watch("graph_tableedge", Kind.TABLE, "r.id"),
    Watch("graph_columnedge", Kind.COLUMN, "r.id"),
    # What the lineage answers show about datasets and jobs (cached per process).
    Watch("catalog_dataset", Kind.DATASET, "r.id"),
    Watch("catalog_datasetfield", Kind.DATASET, "r.dataset_id"),
    Watch("catalog_datasetownership", Kind.DATASET, "r.dataset_id"),
    Watch("catalog_dataset_tags", Kind.DATASET, "r.dataset_id"),
    Watch(
        "catalog_datasetfield_tags",
        Kind.DATASET,
        "(SELECT f.dataset_id FROM catalog_datasetfield f WHERE f.id = r.datasetfield_id)",
    ),
    # A steward's edit is recorded with the edit; as-of answers rewind datasets by these.
    Watch("catalog_changerecord", Kind.DATASET, "r.dataset_id"),
    # Propagated flags as of past instants: a flag found for the past alone (lineage that
    # arrived late) changes no field's row, yet changes what the dataset showed then.
    Watch(
        "catalog_propagatedflag",
        Kind.DATASET,
        "(SELECT f.dataset_id FROM catalog_datasetfield f WHERE f.id = r.field_id)",
    ),
    # A field's gaps (catalog.FieldGap) change what its dataset showed in the past alone.
    Watch(
        "catalog_fieldgap",
        Kind.DATASET,
        "(SELECT f.dataset_id FROM catalog_datasetfield f WHERE f.id = r.field_id)",
    ),
    Watch("graph_job", Kind.JOB, "r.id"),
    Watch("graph_run", Kind.JOB, "r.job_id"),
    # Renaming an owner, tag, policy or subject kind changes many datasets' data; a new
    # namespace may change how node ids resolve (graph/directory.py), and so may a renamed
    # one (its owner and description are shown in no node's data).
    Watch("catalog_namespace", Kind.ALL_DATA, "NULL", columns=("name",)),
    Watch("catalog_owner", Kind.ALL_DATA, "NULL", ("UPDATE", "DELETE")),
    Watch("catalog_tag", Kind.ALL_DATA, "NULL", ("UPDATE", "DELETE")),
    Watch("catalog_retentionpolicy", Kind.ALL_DATA, "NULL", ("UPDATE", "DELETE")),
    Watch("catalog_subjectkind", Kind.ALL_DATA, "NULL", ("UPDATE", "DELETE")),
)


def _pg_log_function(watch: Watch) -> str:
    rows = f"SELECT DISTINCT tx, '{watch.kind}', {watch.ref} FROM {{rows}}"
    if watch.ref == "NULL":
        rows = f"SELECT tx, '{watch.kind}', NULL::bigint WHERE EXISTS (SELECT 1 FROM {{rows}})"
    updated = "new_rows r"
    if watch.columns:
        differs = " OR ".join(f"o.{c} IS DISTINCT FROM r.{c}" for c in watch.columns)
        updated = f"new_rows r JOIN old_rows o ON o.id = r.id WHERE {differs}"
    return f"""
CREATE OR REPLACE FUNCTION graph_log_{watch.table}() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
  tx bigint;
BEGIN
  IF current_setting('lineage.bulk_load', true) = 'on' THEN
    RETURN NULL;
  END IF;
  tx := pg_current_xact_id()::text::bigint;
  IF TG_OP = 'TRUNCATE' THEN
    INSERT INTO graph_change (xid, kind, obj_id, at) VALUES (tx, '{Kind.RESET}', NULL, now());
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO graph_change (xid, kind, obj_id, at)
      SELECT q.*, now() FROM ({rows.format(rows="old_rows r")}) q;
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO graph_change (xid, kind, obj_id, at)
      SELECT q.*, now() FROM ({rows.format(rows=updated)}) q;
  ELSE
    INSERT INTO graph_change (xid, kind, obj_id, at)
      SELECT q.*, now() FROM ({rows.format(rows="new_rows r")}) q;
  END IF;
  RETURN NULL;
END
$f$;
"""


_PG_BUMP = f"""
CREATE OR REPLACE FUNCTION graph_bump_revision() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
  tx bigint := pg_current_xact_id()::text::bigint;
  rev bigint;
  tok text;
BEGIN
  -- Once per transaction: the first deferred event bumps, the rest return at once.
  IF current_setting('lineage.bumped_xid', true) = tx::text THEN
    RETURN NULL;
  END IF;
  tok := md5(random()::text || clock_timestamp()::text || tx::text);
  INSERT INTO graph_revision (id, value, token) VALUES (1, 1, tok)
    ON CONFLICT (id) DO UPDATE SET value = graph_revision.value + 1, token = EXCLUDED.token
    RETURNING value INTO rev;
  -- A revision number comes back only after the tables were emptied (a test flush).
  INSERT INTO graph_revision_log (revision, xid, token, at) VALUES (rev, tx, tok, now())
    ON CONFLICT (revision) DO UPDATE SET xid = EXCLUDED.xid, token = EXCLUDED.token,
      at = EXCLUDED.at;
  PERFORM set_config('lineage.bumped_xid', tx::text, true);
  RETURN NULL;
END
$f$;

COMMENT ON FUNCTION graph_bump_revision() IS 'lineage revision triggers {VERSION}';

DROP TRIGGER IF EXISTS graph_change_bump ON graph_change;
CREATE CONSTRAINT TRIGGER graph_change_bump AFTER INSERT ON graph_change
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION graph_bump_revision();
"""


def _pg_table_triggers(watch: Watch) -> str:
    t = watch.table
    sql = [f"DROP TRIGGER IF EXISTS {t}_log_{e} ON {t};" for e in ("ins", "upd", "del", "trunc")]
    updated = (
        "OLD TABLE AS old_rows NEW TABLE AS new_rows" if watch.columns else "NEW TABLE AS new_rows"
    )
    for event, short, ref in (
        ("INSERT", "ins", "NEW TABLE AS new_rows"),
        ("UPDATE", "upd", updated),
        ("DELETE", "del", "OLD TABLE AS old_rows"),
    ):
        if event in watch.events:
            sql.append(
                f"CREATE TRIGGER {t}_log_{short} AFTER {event} ON {t} REFERENCING {ref} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION graph_log_{t}();"
            )
    sql.append(
        f"CREATE TRIGGER {t}_log_trunc AFTER TRUNCATE ON {t} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION graph_log_{t}();"
    )
    return "\n".join(sql)


_SQLITE_BUMP = """
  INSERT OR IGNORE INTO graph_revision (id, value, token) VALUES (1, 0, '');
  UPDATE graph_revision SET value = value + 1, token = lower(hex(randomblob(8))) WHERE id = 1;
  INSERT OR REPLACE INTO graph_revision_log (revision, xid, token, at)
    SELECT value, value, token, strftime('%Y-%m-%d %H:%M:%f', 'now') FROM graph_revision
    WHERE id = 1;
"""


def _sqlite_triggers(watch: Watch) -> list[str]:
    statements = []
    for event in watch.events:
        row = "OLD" if event == "DELETE" else "NEW"
        ref = watch.ref.replace("r.", f"{row}.")
        name = f"graph_{VERSION}_{watch.table}_{event.lower()}"
        when = ""
        if event == "UPDATE" and watch.columns:
            when = " WHEN " + " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in watch.columns)
        statements.append(
            f"""CREATE TRIGGER IF NOT EXISTS {name} AFTER {event} ON {watch.table}{when}
BEGIN
{_SQLITE_BUMP}
  INSERT INTO graph_change (xid, kind, obj_id, at)
    SELECT value, '{watch.kind}', {ref}, strftime('%Y-%m-%d %H:%M:%f', 'now')
    FROM graph_revision WHERE id = 1;
END"""
        )
    return statements


def install_triggers(connection: BaseDatabaseWrapper) -> None:
    """Create (or refresh) the revision triggers; idempotent and cheap when current."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT obj_description(p.oid, 'pg_proc') FROM pg_proc p "
                "WHERE p.proname = 'graph_bump_revision'"
            )
            row = cursor.fetchone()
            if row is None or row[0] != f"lineage revision triggers {VERSION}":
                # At once: a write between a new function and its new trigger would fail.
                with transaction.atomic(using=connection.alias):
                    for watch in WATCHED:
                        cursor.execute(_pg_log_function(watch))
                        cursor.execute(_pg_table_triggers(watch))
                    cursor.execute("DROP FUNCTION IF EXISTS graph_log_change() CASCADE")
                    cursor.execute(_PG_BUMP)
        elif connection.vendor == "sqlite":
            # Tables rebuilt by schema changes lose their triggers: recreate what is missing.
            cursor.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'graph_v%'"
            )
            for (name,) in cursor.fetchall():
                if not name.startswith(f"graph_{VERSION}_"):
                    cursor.execute(f'DROP TRIGGER IF EXISTS "{name}"')
            for watch in WATCHED:
                for statement in _sqlite_triggers(watch):
                    cursor.execute(statement)
        cursor.execute(
            "INSERT INTO graph_revision (id, value, token) SELECT 1, 0, 'init' "
            "WHERE NOT EXISTS (SELECT 1 FROM graph_revision WHERE id = 1)"
        )


def uninstall_triggers(connection: BaseDatabaseWrapper) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            for watch in WATCHED:
                cursor.execute(f"DROP FUNCTION IF EXISTS graph_log_{watch.table}() CASCADE")
            cursor.execute("DROP FUNCTION IF EXISTS graph_bump_revision() CASCADE")
        elif connection.vendor == "sqlite":
            cursor.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'graph_v%'"
            )
            for (name,) in cursor.fetchall():
                cursor.execute(f'DROP TRIGGER IF EXISTS "{name}"')


def install_triggers_after_migrate(using: str = "default", **kwargs: Any) -> None:
    """post_migrate handler: the triggers exist on every database the app migrates."""
    from django.db.migrations.recorder import MigrationRecorder

    connection = connections[using]
    recorder = MigrationRecorder(connection)
    if not recorder.has_table():
        return
    applied = {name for app, name in recorder.applied_migrations() if app == "graph"}
    if "0003_graph_revision" not in applied:
        return
    install_triggers(connection)


def _fire_pending(connection: BaseDatabaseWrapper) -> None:
    """Inside a transaction, make this transaction's own edge writes bump the revision now.

    Deferred triggers otherwise run at commit; a reader in the writing
    transaction (a test, a task that writes then reads) must see its writes.
    """
    if connection.vendor != "postgresql" or not connection.in_atomic_block:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('lineage.bumped_xid', '', true); "
            "SET CONSTRAINTS graph_change_bump IMMEDIATE; "
            "SET CONSTRAINTS graph_change_bump DEFERRED"
        )


_pinned: ContextVar[list[Revision] | None] = ContextVar("lineage_revision", default=None)


@contextmanager
def pinned() -> Iterator[None]:
    """Within the block, every :func:`current` returns the revision first read in it.

    One read per request: the table snapshot, the column snapshot and the node
    cache then agree on one revision instead of each reading it. Within another, it is
    that one.
    """
    if _pinned.get() is not None:
        yield
        return
    token = _pinned.set([])
    try:
        yield
    finally:
        _pinned.reset(token)


def current() -> Revision:
    """The committed revision, in one indexed read (plus a flush of pending triggers in a
    transaction); inside :func:`pinned`, the one read first."""
    holder = _pinned.get()
    if holder is None:
        return read()
    if not holder:
        holder.append(read())
    return holder[0]


def read() -> Revision:
    """The committed revision now, whatever :func:`pinned` holds."""
    connection = connections["default"]
    _fire_pending(connection)
    # Every request runs this: on the driver's cursor, without Django's wrapping.
    scope = bound_cursor(connection) if connection.vendor == "postgresql" else connection.cursor()
    with scope as cursor:
        cursor.execute("SELECT value, token FROM graph_revision WHERE id = 1")
        row = cursor.fetchone()
    if row is None:
        return Revision(0, "")
    return Revision(int(row[0]), str(row[1]))


def on_timeline(revision: Revision) -> bool:
    """Whether ``revision`` is an ancestor of the current one (not rolled back, not pruned)."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT token FROM graph_revision_log WHERE revision = %s", [revision.value])
        rows = cursor.fetchall()
    return any(token == revision.token for (token,) in rows)


def changes_since(
    after: Revision, upto: Revision, kinds: tuple[str, ...], limit: int
) -> dict[tuple[str, int], int] | None:
    """The revision of each (kind, id) of ``kinds`` changed after ``after`` up to ``upto``;
    None when the log cannot tell them one by one: ``after`` is not on the timeline up to
    ``upto``, more than ``limit`` changed, or a change was of everything (RESET, ALL_DATA).
    A change with no id otherwise (a row whose dataset was deleted with it) is left out:
    the deletion that took it is logged with its id."""
    if after.value > upto.value or not on_timeline(after):
        return None
    marks = ", ".join(["%s"] * (len(kinds) + 1))
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT c.kind, c.obj_id, max(r.revision) FROM graph_revision_log r "
            "JOIN graph_change c ON c.xid = r.xid "
            f"WHERE r.revision > %s AND r.revision <= %s AND c.kind IN ({marks}) "
            "GROUP BY c.kind, c.obj_id LIMIT %s",
            [after.value, upto.value, *kinds, Kind.RESET, limit + 1],
        )
        rows = cursor.fetchall()
    if len(rows) > limit or any(kind in (Kind.RESET, Kind.ALL_DATA) for kind, _, _ in rows):
        return None
    return {(str(kind), int(obj)): int(at) for kind, obj, at in rows if obj is not None}


def mark_reset() -> None:
    """Record that everything changed (after a bulk load that skipped the triggers)."""
    connection = connections["default"]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "INSERT INTO graph_change (xid, kind, obj_id, at) "
                "VALUES (pg_current_xact_id()::text::bigint, %s, NULL, now())",
                [Kind.RESET],
            )
        else:
            # What every trigger runs (a statement at a time, with no parameters: '%' as is).
            for statement in _SQLITE_BUMP.split(";")[:-1]:
                cursor.execute(statement)
            cursor.execute(
                "INSERT INTO graph_change (xid, kind, obj_id, at) "
                "SELECT value, %s, NULL, strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now') "
                "FROM graph_revision WHERE id = 1",
                [Kind.RESET],
            )


@contextmanager
def bulk_load() -> Iterator[None]:
    """Skip per-row change logging while loading many edges; one reset is recorded after.

    PostgreSQL only skips (a session setting read by the triggers); on SQLite
    the triggers keep logging, which is fine at the sizes SQLite is used for.
    """
    connection = connections["default"]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('lineage.bulk_load', 'on', false)")
    try:
        yield
    finally:
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('lineage.bulk_load', 'off', false)")
        mark_reset()
