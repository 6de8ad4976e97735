"""JSON Schemas of the ingest API's answers, for the OpenAPI document (see catalog.schema)."""

from __future__ import annotations

from catalog.schema import (
    DATASET_ID,
    FREE,
    INSTANT,
    INT,
    NINT,
    NSTR,
    NTIME,
    NUM,
    STR,
    TIME,
    Schema,
    arr,
    null,
    obj,
    page_of,
)

# Facets left out of a stored event: where each was and what was wrong with it.
WARNINGS = arr(obj({"field": STR, "error": STR}))
STORED = obj(
    {
        "status": {"type": "string", "enum": ["stored", "duplicate"]},
        "fingerprint": STR,
        "warnings": WARNINGS,
    }
)
BATCH = obj(
    {
        "stored": INT,
        "duplicates": INT,
        "rejected": INT,
        "events": arr(
            obj(
                {
                    "index": INT,
                    "status": {"type": "string", "enum": ["stored", "duplicate", "rejected"]},
                    "fingerprint": STR,
                    "error": STR,
                    "field": STR,
                    "warnings": WARNINGS,
                },
                optional=("fingerprint", "error", "field", "warnings"),
            )
        ),
    }
)
DATASET_VERSION_ID = obj({"namespace": STR, "name": STR, "version": NSTR})
RUN = obj(
    {
        "id": STR,
        "createdAt": NTIME,
        "updatedAt": NTIME,
        "nominalStartTime": NTIME,
        "nominalEndTime": NTIME,
        "state": STR,
        "startedAt": NTIME,
        "endedAt": NTIME,
        "durationMs": NINT,
        "args": FREE,
        "jobVersion": obj({"namespace": STR, "name": STR, "version": NSTR}),
        "inputDatasetVersions": arr(obj({"datasetVersionId": DATASET_VERSION_ID, "facets": FREE})),
        "outputDatasetVersions": arr(obj({"datasetVersionId": DATASET_VERSION_ID, "facets": FREE})),
        "context": FREE,
        "facets": FREE,
        "parentRunId": NSTR,
        "errorMessage": NSTR,
        "jobNodeId": STR,
    }
)
JOB = obj(
    {
        "id": DATASET_ID,
        "type": STR,
        "name": STR,
        "simpleName": STR,
        "parentJobName": NSTR,
        "createdAt": NTIME,
        "updatedAt": NTIME,
        "namespace": STR,
        "inputs": arr(DATASET_ID),
        "outputs": arr(DATASET_ID),
        "location": NSTR,
        "description": NSTR,
        "latestRun": null(RUN),
        "facets": FREE,
        "currentVersion": NSTR,
        "labels": arr(STR),
        "tags": arr(STR),
        "nodeId": STR,
        "jobType": NSTR,
        "integration": NSTR,
        "sql": NSTR,
    }
)
VERSION = obj(
    {
        "id": obj({"namespace": STR, "name": STR, "version": STR}),
        "type": STR,
        "name": STR,
        "physicalName": STR,
        "createdAt": NTIME,
        "version": STR,
        "namespace": STR,
        "sourceName": STR,
        "fields": arr(obj({"name": NSTR, "type": NSTR, "tags": arr(STR), "description": NSTR})),
        "tags": arr(STR),
        "lifecycleState": NSTR,
        "description": NSTR,
        "createdByRun": null(RUN),
        "createdByRunId": NSTR,
        "schemaHash": NSTR,
        "facets": FREE,
    }
)
# An event as the ingestion status lists it (a failure, or one with facets left out).
LISTED_EVENT: dict[str, Schema] = {
    "id": INT,
    "fingerprint": STR,
    "kind": STR,
    "eventType": NSTR,
    "eventTime": NTIME,
    "job": NSTR,
    "receivedAt": TIME,
}
STATUS = obj(
    {
        "counts": obj({"pending": INT, "processing": INT, "done": INT, "failed": INT}),
        "oldestPendingAt": NTIME,
        "lagSeconds": null(NUM),
        "processedLastMinute": INT,
        "processedLastHour": INT,
        "failures": arr(obj({**LISTED_EVENT, "attempts": INT, "error": STR})),
        "eventsWithFacetsLeftOut": INT,
        "facetsLeftOut": arr(obj({**LISTED_EVENT, "warnings": WARNINGS})),
    }
)
REPLAYED = obj({"replayed": INT})
SQL_LOG = obj(
    {
        "id": INT,
        "state": STR,
        "namespace": STR,
        "dialect": STR,
        "format": STR,
        "defaultDatabase": NSTR,
        "defaultSchema": NSTR,
        "name": STR,
        "sizeBytes": INT,
        "source": STR,
        "createdAt": TIME,
        "startedAt": NTIME,
        "finishedAt": NTIME,
        "progress": NUM,
        "bytesRead": INT,
        "counts": obj(
            {
                name: INT
                for name in (
                    "records",
                    "statements",
                    "events",
                    "reads",
                    "skippedFailed",
                    "lineErrors",
                    "parseErrors",
                    "cacheHits",
                )
            }
        ),
        "error": NSTR,
        "columnsUnknown": arr(obj({"namespace": STR, "name": STR})),
        "problems": arr(
            obj(
                {
                    "line": INT,
                    "statement": NINT,
                    "field": NSTR,
                    "message": STR,
                    "excerpt": NSTR,
                }
            )
        ),
    }
)
SQL_LOG_ACCEPTED: Schema = {
    **SQL_LOG,
    "properties": {**SQL_LOG["properties"], "statusUrl": STR},
    "required": [*SQL_LOG["required"], "statusUrl"],
}
JOBS = page_of("jobs", JOB)
SEARCH = obj(
    {
        "totalCount": INT,
        "results": arr(
            obj(
                {
                    "type": {"type": "string", "enum": ["DATASET", "JOB"]},
                    "name": STR,
                    "updatedAt": TIME,
                    "namespace": STR,
                    "nodeId": STR,
                }
            )
        ),
    }
)
RUNS = page_of("runs", RUN)
VERSIONS = page_of("versions", VERSION)
EVENTS = page_of("events", FREE)
SQL_LOGS = obj({"sqlLogs": arr(SQL_LOG)})

# -- requests ----------------------------------------------------------------------------------
# What POST /api/v1/lineage takes: OpenLineage's RunEvent, DatasetEvent or JobEvent (the
# spec's core; facets are checked against their own schemas, ingest/facets.py).
NAME: Schema = {"type": "string", "minLength": 1, "maxLength": 1024, "pattern": r"\S"}
# Facets take any value: facets that are not an object, a facet that is not an object, or a
# standard facet that does not match its OpenLineage schema are left out and named in the
# answer's warnings; null is taken as absent.
OPTIONAL_FACETS: Schema = {
    "description": "An object of facets by name; any other value is left out with a warning",
}
DATASET_REF = obj(
    {"namespace": NAME, "name": NAME, "facets": OPTIONAL_FACETS}, optional=("facets",)
)
JOB_REF = obj({"namespace": NAME, "name": NAME, "facets": OPTIONAL_FACETS}, optional=("facets",))
_EVENT_CORE: dict[str, Schema] = {
    "eventTime": INSTANT,
    "producer": null({"type": "string", "maxLength": 2048}),
    "schemaURL": null({"type": "string", "maxLength": 2048}),
}
RUN_EVENT = obj(
    {
        **_EVENT_CORE,
        "eventType": {
            "type": "string",
            "enum": ["START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"],
        },
        "run": obj(
            {"runId": {"type": "string", "format": "uuid"}, "facets": OPTIONAL_FACETS}, ("facets",)
        ),
        "job": JOB_REF,
        "inputs": null(arr(DATASET_REF)),
        "outputs": null(arr(DATASET_REF)),
    },
    optional=("producer", "schemaURL", "eventType", "inputs", "outputs"),
)
DATASET_EVENT = obj({**_EVENT_CORE, "dataset": DATASET_REF}, optional=("producer", "schemaURL"))
JOB_EVENT = obj(
    {
        **_EVENT_CORE,
        "job": JOB_REF,
        "inputs": null(arr(DATASET_REF)),
        "outputs": null(arr(DATASET_REF)),
    },
    optional=("producer", "schemaURL", "inputs", "outputs"),
)
EVENT: Schema = {"anyOf": [RUN_EVENT, DATASET_EVENT, JOB_EVENT]}
EVENT_REQUEST = {"application/json": EVENT}
# Each event of a batch is checked on its own: the answer gives each its status, 207 when
# some were rejected (422 when all were).
BATCH_ITEMS: Schema = {"type": "array", "items": EVENT, "maxItems": 10000}
BATCH_REQUEST = {"application/json": {"oneOf": [BATCH_ITEMS, obj({"events": BATCH_ITEMS})]}}
REPLAY_REQUEST = {
    "application/json": {
        "type": "object",
        "properties": {
            "ids": {
                **arr({"type": "integer", "minimum": 1, "maximum": 2**63 - 1}),
                "maxItems": 10_000,
            },
            "state": {"type": "string", "enum": ["failed", "pending"]},
        },
        "additionalProperties": False,
    }
}
