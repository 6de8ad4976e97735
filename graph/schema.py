"""JSON Schemas of the graph API's answers, for the OpenAPI document (see catalog.schema)."""

from __future__ import annotations

from catalog.schema import (
    BOOL,
    DATASET_BASE,
    DATASET_ID,
    INT,
    NINT,
    NSTR,
    NTIME,
    STR,
    TIME,
    arr,
    null,
    obj,
    page_of,
)

EDGE = obj({"origin": STR, "destination": STR})
CUT = obj({"datasets": INT, "jobs": INT, "fields": INT})
OWNER = obj({"name": STR, "type": NSTR, "kind": NSTR, "email": NSTR})
SIDE = {"type": "string", "enum": ["root", "upstream", "downstream"]}
NODE_RUN = obj(
    {
        "id": STR,
        "state": STR,
        "startedAt": NTIME,
        "endedAt": NTIME,
        "durationMs": NINT,
        "errorMessage": NSTR,
    },
    optional=("failed",),
)
# A lineage node's data is the catalog's dataset without its aliases (the catalog lists them).
DATASET_DATA = obj(
    {
        **{key: value for key, value in DATASET_BASE.items() if key != "aliases"},
        "fields": arr(
            obj(
                {
                    "name": STR,
                    "type": NSTR,
                    "tags": arr(STR),
                    "description": NSTR,
                    "pii": NSTR,
                    "subjectKind": NSTR,
                }
            )
        ),
        "isHidden": BOOL,
        "owners": arr(obj({"name": STR, "type": NSTR, "kind": NSTR})),
        "retentionPolicy": null(
            obj({"name": STR, "durationDays": NINT, "action": NSTR, "legalBasis": NSTR})
        ),
        "hasPii": BOOL,
    }
)
JOB_DATA = obj(
    {
        "id": DATASET_ID,
        "type": STR,
        "name": STR,
        "simpleName": STR,
        "parentJobName": NSTR,
        "createdAt": NTIME,
        "updatedAt": NTIME,
        "namespace": STR,
        "location": NSTR,
        "description": NSTR,
        "nodeId": STR,
        "jobType": NSTR,
        "integration": NSTR,
        "latestRun": null(NODE_RUN),
        "inputs": arr(DATASET_ID),
        "outputs": arr(DATASET_ID),
    }
)


def _node(kind: str, data: dict[str, object]) -> dict[str, object]:
    return obj(
        {
            "id": STR,
            "type": {"type": "string", "enum": [kind]},
            "data": null(data),
            "inEdges": arr(EDGE),
            "outEdges": arr(EDGE),
            "distance": INT,
            "side": SIDE,
            "hiddenInEdges": INT,
            "hiddenOutEdges": INT,
        }
    )


LINEAGE = obj(
    {
        "graph": arr({"oneOf": [_node("DATASET", DATASET_DATA), _node("JOB", JOB_DATA)]}),
        "root": STR,
        "direction": STR,
        "depth": INT,
        "asOf": NTIME,
        "maxNodes": INT,
        "truncated": BOOL,
        "cut": CUT,
    }
)
INPUT_FIELD = obj(
    {
        "namespace": STR,
        "dataset": STR,
        "field": STR,
        "transformationDescription": NSTR,
        "transformationType": STR,
        "transformationSubtype": NSTR,
        "masking": BOOL,
        "job": NSTR,
    }
)
COLUMN_LINEAGE = obj(
    {
        "graph": arr(
            _node(
                "DATASET_FIELD",
                obj(
                    {
                        "namespace": STR,
                        "dataset": STR,
                        "field": STR,
                        "fieldType": NSTR,
                        "transformationDescription": NSTR,
                        "transformationType": NSTR,
                        "inputFields": arr(INPUT_FIELD),
                        "subjectKind": NSTR,
                    }
                ),
            )
        ),
        "root": STR,
        "depth": INT,
        "withDownstream": BOOL,
        "asOf": NTIME,
        "maxNodes": INT,
        "truncated": BOOL,
        "cut": CUT,
    }
)
RETENTION = obj({"name": STR, "durationDays": NINT, "action": NSTR})
IMPACT = obj(
    {
        "root": STR,
        "level": STR,
        "depth": INT,
        "asOf": NTIME,
        "truncated": BOOL,
        "cut": CUT,
        "datasets": arr(
            obj(
                {
                    "nodeId": STR,
                    "namespace": STR,
                    "name": STR,
                    "distance": INT,
                    "owners": arr(OWNER),
                    "pii": BOOL,
                    "piiFields": arr(obj({"name": STR, "pii": NSTR, "subjectKind": NSTR})),
                    "retentionPolicy": null(RETENTION),
                    "fields": arr(STR),
                    "viaJobs": arr(STR),
                }
            )
        ),
        "jobs": arr(obj({"nodeId": STR, "distance": INT, "latestRun": null(NODE_RUN)})),
        "owners": arr(OWNER),
        "edges": arr(EDGE),
        "counts": obj({"datasets": INT, "jobs": INT, "piiDatasets": INT, "owners": INT}),
    }
)
ROOT_CAUSE = obj(
    {
        "root": STR,
        "depth": INT,
        "asOf": NTIME,
        "jobs": arr(
            obj(
                {
                    "nodeId": STR,
                    "distance": INT,
                    "failed": BOOL,
                    "latestRun": null(NODE_RUN),
                    "outputs": arr(STR),
                }
            )
        ),
        "failures": arr(STR),
        "suspects": arr(STR),
        "truncated": BOOL,
        "cut": CUT,
        "nodes": arr(obj({"id": STR, "type": STR, "distance": INT})),
        "edges": arr(EDGE),
    }
)
PATH = obj(
    {
        "from": STR,
        "to": STR,
        "asOf": NTIME,
        "found": BOOL,
        "level": STR,
        "direction": STR,
        "jobs": INT,
        "nodes": arr(STR),
        "edges": arr(EDGE),
    },
    optional=("level", "direction", "jobs", "nodes", "edges"),
)
COLUMN_EDGE = obj({"origin": STR, "destination": STR, "job": NSTR})
DIFF = obj(
    {
        "t1": TIME,
        "t2": TIME,
        "root": NSTR,
        "edgesAdded": arr(EDGE),
        "edgesRemoved": arr(EDGE),
        "columnEdgesAdded": arr(COLUMN_EDGE),
        "columnEdgesRemoved": arr(COLUMN_EDGE),
        "datasetsAdded": arr(STR),
        "datasetsRemoved": arr(STR),
        "fieldsAdded": arr(STR),
        "fieldsRemoved": arr(STR),
        "counts": {"type": "object", "additionalProperties": INT},
        "truncated": BOOL,
    }
)
CHANGES = obj({"instants": arr(TIME)})
DATASET_PAGE = page_of(
    "datasets",
    obj(
        {
            "nodeId": STR,
            "namespace": STR,
            "name": STR,
            "lastSeen": NTIME,
            "producers": INT,
            "consumers": INT,
        }
    ),
)
TAINT = obj(
    {
        "id": INT,
        "dataset": STR,
        "reason": STR,
        "windowStart": NTIME,
        "windowEnd": NTIME,
        "createdAt": TIME,
        "createdBy": NSTR,
        "clearedAt": NTIME,
        "clearedBy": NSTR,
        "active": BOOL,
    }
)
AT_RISK = obj(
    {
        "datasets": arr(
            obj({"nodeId": STR, "distance": INT, "taints": arr(INT), "owners": arr(OWNER)})
        ),
        "jobsToRerun": arr(obj({"nodeId": STR, "order": INT, "distance": INT, "inCycle": BOOL})),
        "owners": arr(OWNER),
        "truncated": BOOL,
        "cut": CUT,
    }
)
TAINTS = obj({"taints": arr(TAINT), "atRisk": AT_RISK})
TAINT_WITH_RISK = obj({"taint": TAINT, "atRisk": AT_RISK})
CLEARED = obj({"taint": TAINT}, optional=("atRisk",))
