"""The ``data`` payload of each node in the Marquez-shaped lineage response, as JSON text.

A capped answer can hold 2,000 nodes and 20,000 fields: rendering them costs
far more than the traversal, so rendered text is kept in the node cache
(graph/nodecache.py, evicted by the change log) and spliced into responses.
Runs change all the time, so a job's latest run is fetched per answer and
appended to its cached text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from catalog.flags import copied_flags_as_of
from graph import details, directory
from graph.details import (
    DatasetInfo,
    FieldRow,
    JobInfo,
    RunInfo,
    changed_since,
    dataset_info_from_json,
    job_info_from_json,
    latest_runs,
    load_datasets,
    load_jobs,
)
from graph.nodecache import DATASET, JOB, Entry, Render, cache


def iso(moment: datetime | None) -> str | None:
    """UTC ISO-8601 ending in Z."""
    if moment is None:
        return None
    if moment.utcoffset() != ZERO:
        moment = moment.astimezone(UTC)
    return moment.replace(tzinfo=None).isoformat() + "Z"


ZERO = timedelta(0)


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
        "nodeId": info.node_id,
        "jobType": info.job_type or None,
        "integration": info.integration or None,
        # Last, so a run as of another instant can be spliced over it.
        "latestRun": run_json(run),
    }


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def render_datasets(pks: list[int], as_of: datetime | None = None) -> dict[int, Entry]:
    out = {}
    for pk, info in load_datasets(pks, as_of).items():
        personal = replace(info, fields=info.pii_fields)
        out[pk] = Entry(info.namespace, info.name, _dumps(dataset_data(info)), personal)
    return out


def render_jobs(pks: list[int]) -> dict[int, Entry]:
    # Kept with the current latest run; run changes evict the job (graph_run is watched).
    return {
        pk: Entry(info.namespace, info.name, _dumps(job_data(info)), info)
        for pk, info in load_jobs(pks).items()
    }


def lineage_data(
    ds_pks: Iterable[int], job_pks: Iterable[int], as_of: datetime | None
) -> tuple[dict[int, bytes], dict[int, bytes]]:
    """Node data (UTF-8 JSON) of these datasets and jobs by pk, as of ``as_of``; nodes
    found nowhere are left out.

    They come from the host's document file, one look per kind, and are not kept: the
    file already holds them for every process. The rest (nodes changed since it was
    written) come from the node cache and, as of a past instant, the history.
    """
    return _dataset_json(sorted({int(pk) for pk in ds_pks}), as_of), job_json(job_pks, as_of)


def _current_data(kind: str, pks: list[int], render: Render) -> dict[int, bytes]:
    """Current node data by pk: from the host's document file, the rest from the node
    cache."""
    out = cache.file_column(kind, pks, "data")
    rest = [pk for pk in pks if pk not in out]
    if rest:
        entries = cache.entries(kind, rest, render)
        out.update({pk: entry.data.encode() for pk, entry in entries.items()})
    return out


def _dataset_json(wanted: list[int], as_of: datetime | None) -> dict[int, bytes]:
    """Node data of these datasets by pk: current data from the host's document file or the
    node cache. As of a past instant, datasets whose fields or steward-edited attributes
    changed since are rendered as they were; those whose propagated flags alone changed
    show their current data with the flags as they were."""
    if as_of is None:
        return _current_data(DATASET, wanted, render_datasets)
    changed, flagged = changed_datasets(wanted, as_of, flagged=True)
    rendered = changed - flagged.keys()
    out = _current_data(DATASET, [pk for pk in wanted if pk not in rendered], render_datasets)
    out.update(_flags_then({pk: out[pk] for pk in flagged if pk in out}, flagged, as_of))
    if rendered:
        out.update(
            {pk: e.data.encode() for pk, e in render_datasets(sorted(rendered), as_of).items()}
        )
    return out


def _flags_then(
    data: dict[int, bytes], fields: dict[int, list[tuple[int, str]]], as_of: datetime
) -> dict[int, bytes]:
    """These datasets' current data with the personal-data flags of their ``fields`` (pk,
    name) as they were at ``as_of``: for datasets whose only changes since are propagated
    flags, so that everything else shows as it is now (one or two queries, not a full
    rendering's seven)."""
    wanted = [pk for ds_pk in data for pk, _ in fields[ds_pk]]
    flags = copied_flags_as_of(wanted, as_of) if wanted else {}
    out = {}
    for ds_pk, text in data.items():
        then = {name: flags[pk] for pk, name in fields[ds_pk] if pk in flags}
        if not then:
            out[ds_pk] = text
            continue
        doc = orjson.loads(text)
        for shown in doc["fields"]:
            flag = then.get(shown["name"])
            if flag is not None:
                shown["pii"] = flag[0] or None
                shown["subjectKind"] = flag[1]
        doc["hasPii"] = any(f["pii"] or f["subjectKind"] is not None for f in doc["fields"])
        out[ds_pk] = _dumps(doc).encode()
    return out


def _summaries(kind: str, pks: list[int], render: Render) -> dict[int, Any]:
    """Current summaries (DatasetInfo with personal fields only, or JobInfo) by pk: from
    the host's document file, the rest from the node cache."""
    read = dataset_info_from_json if kind == DATASET else job_info_from_json
    out = {pk: read(text) for pk, text in cache.file_column(kind, pks, "info").items()}
    rest = [pk for pk in pks if pk not in out]
    if rest:
        out.update({pk: entry.info for pk, entry in cache.entries(kind, rest, render).items()})
    return out


def dataset_infos(pks: Iterable[int], as_of: datetime | None = None) -> dict[int, DatasetInfo]:
    """Datasets with their personal-data fields only (what impact and taint lists show),
    from the node store; as of a past instant, rewound where they changed since."""
    wanted = sorted({int(pk) for pk in pks})
    changed = set() if as_of is None else changed_datasets(wanted, as_of)[0]
    out = _summaries(DATASET, [pk for pk in wanted if pk not in changed], render_datasets)
    if changed:
        out.update(load_datasets(sorted(changed), as_of, "personal"))
    return out


def job_infos(pks: Iterable[int], as_of: datetime | None = None) -> dict[int, JobInfo]:
    """Jobs with their latest run (as of ``as_of``), from the node store."""
    wanted = sorted({int(pk) for pk in pks})
    current = _summaries(JOB, wanted, render_jobs)
    if as_of is None:
        return current
    shown, runs = runs_as_of(wanted, as_of)
    return {
        pk: info if pk in shown else replace(info, latest_run=runs.get(pk))
        for pk, info in current.items()
    }


def runs_as_of(pks: list[int], as_of: datetime) -> tuple[set[int], dict[int, RunInfo]]:
    """(jobs whose run as of ``as_of`` is their latest run exactly as shown now, the run as
    of then of the others that had one): from the node directory, the database for the
    rest."""
    found = directory.get()
    if found is None:
        return set(), latest_runs(pks, as_of)
    _, shown, unknown = found.runs_at(pks, as_of)
    return set(shown), latest_runs(unknown, as_of) if unknown else {}


def run_json(run: RunInfo | None) -> dict[str, Any] | None:
    if run is None:
        return None
    return {
        "id": run.run_uuid,
        "state": run.state,
        "startedAt": iso(run.started_at),
        "endedAt": iso(run.ended_at),
        "durationMs": run.duration_ms,
        "errorMessage": run.error_message or None,
    }


def job_json(pks: Iterable[int], as_of: datetime | None = None) -> dict[int, bytes]:
    """JSON text (UTF-8) of each job's node ``data`` with its latest run (as of ``as_of``;
    without inputs/outputs, which the caller adds), by pk."""
    wanted = sorted({int(pk) for pk in pks})
    current = _current_data(JOB, wanted, render_jobs)
    if as_of is None:
        return current
    # Seen from the past, the run may differ: splice the run as of then over the cached one.
    shown, runs = runs_as_of(wanted, as_of)
    out = {}
    for pk, text in current.items():
        if pk in shown:
            out[pk] = text
            continue
        cut = text.rfind(b',"latestRun":')
        head = text[:cut] if cut >= 0 else text[:-1]
        run = runs.get(pk)
        shown_run = b"null" if run is None else _dumps(run_json(run)).encode()
        out[pk] = b'%s,"latestRun":%s}' % (head, shown_run)
    return out


def changed_datasets(
    pks: list[int], as_of: datetime, flagged: bool = False
) -> tuple[set[int], dict[int, list[tuple[int, str]]]]:
    """(datasets whose shown data differed at ``as_of``; with ``flagged``, those of them
    whose propagated flags alone changed since, with their current fields that propagation
    ever flagged (pk, name)): from the node directory; the database tells the rest, all
    taken as changed in full."""
    found = directory.get()
    if found is None:
        return changed_since(pks, as_of), {}
    changed, reflagged, unknown = found.changed_since(pks, as_of)
    if unknown:
        changed |= changed_since(unknown, as_of)
    return changed, found.flagged_fields(sorted(reflagged)) if flagged and reflagged else {}


def _names(kind: str, pks: Iterable[int], render: Render) -> dict[int, tuple[str, str]]:
    """(namespace, name) by pk from the node directory; the rest from the node cache
    (misses are rendered in full: a lineage answer shows their data next)."""
    wanted = sorted({int(pk) for pk in pks})
    found = directory.get()
    out = found.node_names(kind, wanted) if found is not None else {}
    rest = [pk for pk in wanted if pk not in out]
    if rest:
        entries = cache.entries(kind, rest, render)
        out.update({pk: (e.namespace, e.name) for pk, e in entries.items()})
    return out


def dataset_names(pks: Iterable[int]) -> dict[int, tuple[str, str]]:
    return _names(DATASET, pks, render_datasets)


def field_rows(pks: Iterable[int]) -> dict[int, FieldRow]:
    """(dataset pk, namespace, dataset, field, type, subject kind) by field pk, from the
    node directory; the rest (of datasets changed since it was read) from the database."""
    wanted = sorted({int(pk) for pk in pks})
    found = directory.get()
    out = found.field_rows(wanted) if found is not None else {}
    rest = [pk for pk in wanted if pk not in out]
    if rest:
        out.update(details.field_rows(rest))
    return out


def job_names(pks: Iterable[int]) -> dict[int, tuple[str, str]]:
    return _names(JOB, pks, render_jobs)
