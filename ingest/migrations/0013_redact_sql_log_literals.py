"""Jobs and events that SQL logs made before their statements were redacted: each shows its
statement with every literal as ``?`` and without comments, as those made since do (a
literal may be personal data, and viewers read jobs and stored events).

A stored event's body becomes the text the redacting code writes for the same record, so its
fingerprint is that text's: a later import of the same log finds it. Where that import has
happened already, the redacted copy is kept and the old one goes.
"""

from __future__ import annotations

from json.encoder import encode_basestring
from typing import Any

import orjson
from django.db import migrations

CHUNK = 2000


def _redacted(query: str, dialect: str) -> str:
    from ingest.sql.dialects import UnknownDialectError, resolve_dialect
    from ingest.sql.fingerprint import redact

    try:
        spec = resolve_dialect(dialect)
    except UnknownDialectError:
        spec = resolve_dialect("postgres")
    return redact(query, spec)


def redact_sql_logs(apps: Any, schema_editor: Any) -> None:
    from ingest.events import fingerprint_of_text
    from ingest.sql.events import PRODUCER
    from ingest.sql_actions import EVENT_SOURCE

    RawEvent = apps.get_model("ingest", "RawEvent")
    Job = apps.get_model("graph", "Job")
    events = RawEvent.objects.filter(source=EVENT_SOURCE, compacted_at__isnull=True)
    last = 0
    while True:
        rows = list(events.filter(pk__gt=last).order_by("pk").values_list("pk", "body")[:CHUNK])
        if not rows:
            break
        last = rows[-1][0]
        for pk, body in rows:
            sql = ((orjson.loads(body).get("job") or {}).get("facets") or {}).get("sql") or {}
            query = sql.get("query")
            if not isinstance(query, str):
                continue
            redacted = _redacted(query, str(sql.get("dialect") or ""))
            if redacted == query:
                continue
            text = body.replace(
                f'"query":{encode_basestring(query)}', f'"query":{encode_basestring(redacted)}', 1
            )
            fingerprint = fingerprint_of_text(text)
            if RawEvent.objects.filter(fingerprint=fingerprint).exists():
                RawEvent.objects.filter(pk=pk).delete()
            else:
                RawEvent.objects.filter(pk=pk).update(body=text, fingerprint=fingerprint)
    for job in Job.objects.filter(facets__sql___producer=PRODUCER).iterator(chunk_size=CHUNK):
        sql = job.facets["sql"]
        query = sql.get("query")
        if not isinstance(query, str):
            continue
        redacted = _redacted(query, str(sql.get("dialect") or ""))
        if redacted != query or job.sql != redacted:
            job.facets["sql"] = {**sql, "query": redacted}
            Job.objects.filter(pk=job.pk).update(facets=job.facets, sql=redacted)


class Migration(migrations.Migration):
    dependencies = [
        ("ingest", "0012_field_gaps"),
        ("graph", "0014_run_state_time_index"),
    ]

    operations = [migrations.RunPython(redact_sql_logs, migrations.RunPython.noop)]
