"""The ``data`` payload of each node in the Marquez-shaped lineage response, as JSON text.

A capped lineage answer can hold 2,000 nodes and 20,000 fields. On
PostgreSQL the payloads are rendered by the database (``json_build_object``
per node, fields aggregated in the same query), so the web process only
splices strings; building the same objects in Python costs several times
more. Elsewhere — and for datasets whose steward-edited attributes must be
rewound to ``as_of`` — the same shape is built in Python from
graph/details.py. tests/integration/test_graph_postgres.py checks that both
renderings agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.db import connection

from graph.details import (
    CHUNK,
    DATASET_ATTRIBUTES,
    FIELD_ATTRIBUTES,
    DatasetInfo,
    JobInfo,
    load_datasets,
    load_jobs,
)


def iso(moment: datetime | None) -> str | None:
    """UTC ISO-8601 with microseconds and a Z, as the database renders it too."""
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def dataset_data(info: DatasetInfo) -> dict[str, Any]:
    """Marquez's DatasetData shape, plus owners, PII, retention and sensitivity."""
    return {
        "id": {"namespace": info.namespace, "name": info.name},
        "type": "DB_TABLE",
        "name": info.name,
        "physicalName": info.name,
        "createdAt": iso(info.created_at),
        "updatedAt": iso(info.updated_at),
        "namespace": info.namespace,
        "sourceName": info.source_name or info.namespace,
        "fields": [
            {
                "name": f.name,
                "type": f.type or None,
                "tags": list(f.tags),
                "description": f.description or None,
                "pii": f.pii_category or None,
                "subjectKind": f.subject_kind,
            }
            for f in info.fields
        ],
        "tags": list(info.tags),
        "lastModifiedAt": iso(info.last_seen),
        "lastLifecycleState": info.lifecycle_state,
        "description": info.description or None,
        "facets": {},
        "deleted": info.lifecycle_state == "DROPPED",
        "nodeId": info.node_id,
        "platform": info.platform or None,
        "location": info.location or None,
        "sensitivity": info.sensitivity or None,
        "isHidden": info.is_hidden,
        "owners": [
            {"name": o.name, "type": o.type or None, "kind": o.kind or None} for o in info.owners
        ],
        "retentionPolicy": None
        if info.retention is None
        else {
            "name": info.retention.name,
            "durationDays": info.retention.duration_days,
            "action": info.retention.action or None,
            "legalBasis": info.retention.legal_basis or None,
        },
        "hasPii": info.has_pii,
        "firstSeen": iso(info.first_seen),
        "lastSeen": iso(info.last_seen),
    }


def job_data(info: JobInfo) -> dict[str, Any]:
    """Marquez's JobData shape (without inputs/outputs, added by the caller)."""
    run = info.latest_run
    return {
        "id": {"namespace": info.namespace, "name": info.name},
        "type": info.processing_type or "BATCH",
        "name": info.name,
        "simpleName": info.name.rsplit(".", 1)[-1],
        "parentJobName": info.parent_name,
        "createdAt": iso(info.created_at),
        "updatedAt": iso(info.updated_at),
        "namespace": info.namespace,
        "location": info.location or None,
        "description": info.description or None,
        "latestRun": None
        if run is None
        else {
            "id": run.run_uuid,
            "state": run.state,
            "startedAt": iso(run.started_at),
            "endedAt": iso(run.ended_at),
            "durationMs": run.duration_ms,
            "errorMessage": run.error_message or None,
        },
        "nodeId": info.node_id,
        "jobType": info.job_type or None,
        "integration": info.integration or None,
    }


def _ts(column: str) -> str:
    return f"to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"


_DATASET_SQL = f"""
WITH ftags AS MATERIALIZED (
  SELECT ft.datasetfield_id AS fid, json_agg(t.name ORDER BY t.name) AS tags
  FROM catalog_datasetfield_tags ft
  JOIN catalog_tag t ON t.id = ft.tag_id
  JOIN catalog_datasetfield f0 ON f0.id = ft.datasetfield_id
  WHERE f0.dataset_id = ANY(%(ids)s)
  GROUP BY ft.datasetfield_id
)
SELECT d.id, json_build_object(
  'id', json_build_object('namespace', n.name, 'name', d.name),
  'type', 'DB_TABLE',
  'name', d.name,
  'physicalName', d.name,
  'createdAt', {_ts("d.created_at")},
  'updatedAt', {_ts("d.updated_at")},
  'namespace', n.name,
  'sourceName', COALESCE(NULLIF(d.source_name, ''), n.name),
  'fields', COALESCE(fl.fields, '[]'::json),
  'tags', COALESCE(tg.tags, '[]'::json),
  'lastModifiedAt', {_ts("d.last_seen")},
  'lastLifecycleState', d.lifecycle_state,
  'description', NULLIF(d.description, ''),
  'facets', '{{}}'::json,
  'deleted', d.lifecycle_state = 'DROPPED',
  'nodeId', 'dataset:' || n.name || ':' || d.name,
  'platform', NULLIF(d.platform, ''),
  'location', NULLIF(d.location, ''),
  'sensitivity', NULLIF(d.sensitivity, ''),
  'isHidden', d.is_hidden,
  'owners', COALESCE(ow.owners, '[]'::json),
  'retentionPolicy', CASE WHEN rp.id IS NULL THEN NULL ELSE json_build_object(
      'name', rp.name,
      'durationDays', floor(extract(epoch FROM rp.duration) / 86400)::int,
      'action', NULLIF(rp.action, ''),
      'legalBasis', NULLIF(rp.legal_basis, '')) END,
  'hasPii', COALESCE(fl.has_pii, false),
  'firstSeen', {_ts("d.first_seen")},
  'lastSeen', {_ts("d.last_seen")}
)::text
FROM catalog_dataset d
JOIN catalog_namespace n ON n.id = d.namespace_id
LEFT JOIN catalog_retentionpolicy rp ON rp.id = d.retention_policy_id
LEFT JOIN LATERAL (
  SELECT json_agg(json_build_object(
      'name', f.name,
      'type', NULLIF(f.type, ''),
      'tags', COALESCE(ftags.tags, '[]'::json),
      'description', NULLIF(f.description, ''),
      'pii', NULLIF(f.pii_category, ''),
      'subjectKind', sk.name) ORDER BY f.ordinal, f.name) AS fields,
    bool_or(f.pii_category <> '' OR f.subject_kind_id IS NOT NULL) AS has_pii
  FROM catalog_datasetfield f
  LEFT JOIN catalog_subjectkind sk ON sk.id = f.subject_kind_id
  LEFT JOIN ftags ON ftags.fid = f.id
  WHERE f.dataset_id = d.id AND {{alive}}
) fl ON true
LEFT JOIN LATERAL (
  SELECT json_agg(t.name ORDER BY t.name) AS tags
  FROM catalog_dataset_tags dt JOIN catalog_tag t ON t.id = dt.tag_id
  WHERE dt.dataset_id = d.id
) tg ON true
LEFT JOIN LATERAL (
  SELECT json_agg(json_build_object(
      'name', w.name, 'type', NULLIF(o.ownership_type, ''), 'kind', NULLIF(w.kind, ''))
      ORDER BY w.name, o.ownership_type) AS owners
  FROM catalog_datasetownership o JOIN catalog_owner w ON w.id = o.owner_id
  WHERE o.dataset_id = d.id
) ow ON true
WHERE d.id = ANY(%(ids)s)
"""

_TERMINAL = "('COMPLETED', 'FAILED', 'ABORTED')"

_JOB_SQL = f"""
SELECT j.id, json_build_object(
  'id', json_build_object('namespace', n.name, 'name', j.name),
  'type', COALESCE(NULLIF(j.processing_type, ''), 'BATCH'),
  'name', j.name,
  'simpleName', regexp_replace(j.name, '^.*\\.', ''),
  'parentJobName', p.name,
  'createdAt', {_ts("j.created_at")},
  'updatedAt', {_ts("j.updated_at")},
  'namespace', n.name,
  'location', NULLIF(j.location, ''),
  'description', NULLIF(j.description, ''),
  'latestRun', CASE WHEN r.id IS NULL THEN NULL ELSE json_build_object(
      'id', r.run_uuid::text,
      'state', r.state_then,
      'startedAt', {_ts("r.started_at")},
      'endedAt', {_ts("r.ended_then")},
      'durationMs', CASE WHEN r.started_at IS NULL OR r.ended_then IS NULL THEN NULL
          ELSE floor(extract(epoch FROM (r.ended_then - r.started_at)) * 1000)::bigint END,
      'errorMessage', NULLIF(r.error_then, '')) END,
  'nodeId', 'job:' || n.name || ':' || j.name,
  'jobType', NULLIF(j.job_type, ''),
  'integration', NULLIF(j.integration, '')
)::text
FROM graph_job j
JOIN catalog_namespace n ON n.id = j.namespace_id
LEFT JOIN graph_job p ON p.id = j.parent_id
LEFT JOIN LATERAL (
  SELECT r0.id, r0.run_uuid, r0.started_at,
    CASE WHEN %(as_of)s::timestamptz IS NOT NULL AND r0.state IN {_TERMINAL}
              AND r0.state_event_time > %(as_of)s::timestamptz
         THEN 'RUNNING' ELSE r0.state END AS state_then,
    CASE WHEN %(as_of)s::timestamptz IS NOT NULL AND r0.ended_at > %(as_of)s::timestamptz
         THEN NULL ELSE r0.ended_at END AS ended_then,
    CASE WHEN %(as_of)s::timestamptz IS NOT NULL AND r0.state IN {_TERMINAL}
              AND r0.state_event_time > %(as_of)s::timestamptz
         THEN '' ELSE r0.error_message END AS error_then
  FROM graph_run r0
  WHERE (%(as_of)s::timestamptz IS NULL AND r0.id = j.latest_run_id)
     OR (%(as_of)s::timestamptz IS NOT NULL AND r0.id = (
          SELECT r2.id FROM graph_run r2
          WHERE r2.job_id = j.id AND r2.created_at <= %(as_of)s::timestamptz
          ORDER BY r2.created_at DESC, r2.id DESC LIMIT 1))
) r ON true
WHERE j.id = ANY(%(ids)s)
"""


def _rewound(pks: list[int], as_of: datetime) -> set[int]:
    """Datasets with steward edits after ``as_of`` (their attributes must be rewound)."""
    attributes = list(DATASET_ATTRIBUTES + FIELD_ATTRIBUTES)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT dataset_id FROM catalog_changerecord "
            "WHERE dataset_id = ANY(%s) AND at > %s AND attribute = ANY(%s)",
            [pks, as_of, attributes],
        )
        return {row[0] for row in cursor.fetchall()}


def dataset_json(pks: Iterable[int], as_of: datetime | None = None) -> dict[int, str]:
    """JSON text of each dataset's node ``data``, by pk (missing pks are left out)."""
    wanted = sorted({int(pk) for pk in pks})
    if not wanted:
        return {}
    if connection.vendor != "postgresql":
        return {
            pk: json.dumps(dataset_data(info), separators=(",", ":"))
            for pk, info in load_datasets(wanted, as_of).items()
        }
    out: dict[int, str] = {}
    alive = (
        "f.removed_at IS NULL"
        if as_of is None
        else "f.first_seen <= %(as_of)s AND (f.removed_at IS NULL OR f.removed_at > %(as_of)s)"
    )
    sql = _DATASET_SQL.replace("{alive}", alive)
    for start in range(0, len(wanted), CHUNK):
        chunk = wanted[start : start + CHUNK]
        with connection.cursor() as cursor:
            cursor.execute(sql, {"ids": chunk, "as_of": as_of})
            out.update(cursor.fetchall())
    if as_of is not None:
        rewind = _rewound(wanted, as_of)
        if rewind:
            for pk, info in load_datasets(rewind, as_of).items():
                out[pk] = json.dumps(dataset_data(info), separators=(",", ":"))
    return out


def job_json(pks: Iterable[int], as_of: datetime | None = None) -> dict[int, str]:
    """JSON text of each job's node ``data`` (without inputs/outputs), by pk."""
    wanted = sorted({int(pk) for pk in pks})
    if not wanted:
        return {}
    if connection.vendor != "postgresql":
        return {
            pk: json.dumps(job_data(info), separators=(",", ":"))
            for pk, info in load_jobs(wanted, as_of).items()
        }
    out: dict[int, str] = {}
    for start in range(0, len(wanted), CHUNK):
        chunk = wanted[start : start + CHUNK]
        with connection.cursor() as cursor:
            cursor.execute(_JOB_SQL, {"ids": chunk, "as_of": as_of})
            out.update(cursor.fetchall())
    return out
