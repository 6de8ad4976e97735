"""Jobs and events that SQL logs made before their statements were redacted: each shows its
statement with every literal as ``?`` and without comments, as those made since do (a
literal may be personal data, and viewers read jobs and stored events).

A stored event's body becomes the text the redacting code writes for the same record, so its
fingerprint is that text's: a later import of the same log finds it. Where that import has
happened already, the redacted copy is kept and the old one goes. Each chunk is its own
transaction (a large store is not held in one), and a run again changes nothing.
"""

from __future__ import annotations

from json.encoder import encode_basestring
from typing import Any

import orjson
from django.db import migrations, transaction

CHUNK = 2000


def _redacted(query: str, dialect: str) -> str:
    from ingest.sql.dialects import UnknownDialectError, resolve_dialect
    from ingest.sql.fingerprint import redact

    try:
        spec = resolve_dialect(dialect)
    except UnknownDialectError:
        spec = resolve_dialect("postgres")
    return redact(query, spec)


def _sql_facet(body: str) -> dict[str, Any]:
    """The SQL job facet of an event's body ({} when it has none, or is not one)."""
    found: Any = orjson.loads(body)
    for key in ("job", "facets", "sql"):
        found = found.get(key) if isinstance(found, dict) else None
    return found if isinstance(found, dict) else {}


def _redact_events(events: Any, rows: list[tuple[int, str]]) -> None:
    """Redact these rows of ``events`` (RawEvent's manager on the migrated database)."""
    from ingest.events import fingerprint_of_text

    changed: dict[int, tuple[str, str]] = {}
    for pk, body in rows:
        sql = _sql_facet(body)
        query = sql.get("query")
        if not isinstance(query, str):
            continue
        redacted = _redacted(query, str(sql.get("dialect") or ""))
        old, new = f'"query":{encode_basestring(query)}', f'"query":{encode_basestring(redacted)}'
        if redacted == query or old not in body:
            continue  # already redacted, or not the text the SQL-log reader writes
        text = body.replace(old, new, 1)
        changed[pk] = (text, fingerprint_of_text(text))
    if not changed:
        return
    stored = set(
        events.filter(
            fingerprint__in=[fingerprint for _, fingerprint in changed.values()]
        ).values_list("fingerprint", flat=True)
    )
    kept, gone = [], []
    for pk, (text, fingerprint) in changed.items():
        if fingerprint in stored:  # stored already: by an import, or by a row just before
            gone.append(pk)
        else:
            stored.add(fingerprint)
            kept.append(events.model(pk=pk, body=text, fingerprint=fingerprint))
    events.filter(pk__in=gone).delete()
    events.bulk_update(kept, ["body", "fingerprint"])


def redact_sql_logs(apps: Any, schema_editor: Any) -> None:
    from ingest.sql.events import PRODUCER
    from ingest.sql_actions import EVENT_SOURCE

    db = schema_editor.connection.alias if schema_editor is not None else "default"
    RawEvent = apps.get_model("ingest", "RawEvent")
    Job = apps.get_model("graph", "Job")
    events = RawEvent.objects.using(db)
    logged = events.filter(
        source=EVENT_SOURCE, compacted_at__isnull=True, body__contains='"query":'
    )
    last = 0
    while rows := list(
        logged.filter(pk__gt=last).order_by("pk").values_list("pk", "body")[:CHUNK]
    ):
        last = rows[-1][0]
        with transaction.atomic(using=db):
            _redact_events(events, rows)
    jobs = Job.objects.using(db).filter(facets__sql___producer=PRODUCER).order_by("pk")
    last = 0
    while chunk := list(jobs.filter(pk__gt=last).only("pk", "facets", "sql")[:CHUNK]):
        last = chunk[-1].pk
        changed = []
        for job in chunk:
            sql = job.facets["sql"]
            query = sql.get("query")
            if not isinstance(query, str):
                continue
            redacted = _redacted(query, str(sql.get("dialect") or ""))
            if redacted != query or job.sql != redacted:
                job.facets = {**job.facets, "sql": {**sql, "query": redacted}}
                job.sql = redacted
                changed.append(job)
        with transaction.atomic(using=db):
            Job.objects.using(db).bulk_update(changed, ["facets", "sql"])


class Migration(migrations.Migration):
    atomic = False  # a transaction per chunk

    dependencies = [
        ("ingest", "0012_field_gaps"),
        ("graph", "0014_run_state_time_index"),
    ]

    operations = [migrations.RunPython(redact_sql_logs, migrations.RunPython.noop)]
