"""JSON Schemas of the privacy API's answers, for the OpenAPI document (see catalog.schema)."""

from __future__ import annotations

from catalog.schema import (
    BOOL,
    FREE,
    INT,
    NINT,
    NSTR,
    NTIME,
    STR,
    TIME,
    arr,
    null,
    obj,
)

RETENTION = obj({"name": STR, "durationDays": NINT, "action": NSTR, "legalBasis": NSTR})
EVIDENCE = obj(
    {
        "seed": NSTR,
        "steps": arr(
            obj(
                {
                    "job": NSTR,
                    "from": STR,
                    "to": STR,
                    "transformation": obj({"type": NSTR, "subtype": NSTR, "masking": BOOL}),
                    "validFrom": NTIME,
                    "validTo": NTIME,
                }
            )
        ),
        "note": NSTR,
    }
)
HIT = obj(
    {
        "namespace": STR,
        "name": STR,
        "nodeId": STR,
        "relation": STR,
        "distance": INT,
        "fields": arr(
            obj(
                {
                    "name": STR,
                    "nodeId": STR,
                    "relation": STR,
                    "type": NSTR,
                    "pii": NSTR,
                    "subjectKind": NSTR,
                    "masked": BOOL,
                    "identifiers": arr(INT),
                    "from": NSTR,
                    "job": NSTR,
                }
            )
        ),
        "personalFields": arr(obj({"name": STR, "pii": NSTR})),
        "owners": arr(obj({"name": STR, "type": NSTR})),
        "retentionPolicy": null(RETENTION),
        "location": NSTR,
        "storageFormat": NSTR,
        "scannable": BOOL,
        "notScannableReason": NSTR,
        "lifecycleState": STR,
        "evidence": EVIDENCE,
        "scan": null(obj({"rows": INT, "at": TIME})),
        "scanProblem": null({"type": "string", "enum": ["unmatchable", "error"]}),
    }
)
SEARCH = obj(
    {
        "subjectKind": STR,
        "asOf": NTIME,
        "auditId": NINT,
        "identifiers": arr(
            obj(
                {
                    "index": INT,
                    "kind": NSTR,
                    "field": NSTR,
                    "seedFields": arr(STR),
                    "seedFieldCount": INT,
                    "matched": BOOL,
                }
            )
        ),
        "counts": {"type": "object", "additionalProperties": INT},
        "page": obj(
            {
                "offset": INT,
                "limit": INT,
                "datasetsTotal": INT,
                "aggregatesTotal": INT,
                "complete": BOOL,
            }
        ),
        "datasets": arr(HIT),
        "aggregates": arr(HIT),
        "scannedAt": NTIME,
    }
)
RUN = obj(
    {
        "id": STR,
        "kind": STR,
        "state": STR,
        "plan": NSTR,
        "subjectKind": STR,
        "asOf": NTIME,
        "createdAt": TIME,
        "createdBy": STR,
        "startedAt": NTIME,
        "finishedAt": NTIME,
        "progress": obj({"done": INT, "total": INT}),
        "error": NSTR,
        "datasets": arr(
            obj(
                {
                    "namespace": STR,
                    "name": STR,
                    "nodeId": STR,
                    "relation": STR,
                    "location": NSTR,
                    "format": NSTR,
                    "columns": arr(STR),
                    "operation": NSTR,
                    "runnable": BOOL,
                    "reason": NSTR,
                    "owners": arr(FREE),
                    "result": null(FREE),
                }
            )
        ),
    }
)
RUN_ACCEPTED = {**RUN, "properties": {**RUN["properties"], "statusUrl": STR}}
RUN_ACCEPTED["required"] = [*RUN["required"], "statusUrl"]
STEP = obj(
    {
        "order": INT,
        "namespace": STR,
        "name": STR,
        "nodeId": STR,
        "relation": STR,
        "operation": STR,
        "execution": STR,
        "retentionPolicy": NSTR,
        "keyColumns": arr(
            obj({"name": STR, "identifiers": arr(INT), "masked": BOOL, "caseInsensitive": BOOL})
        ),
        "anonymiseColumns": arr(STR),
        "recomputeJobs": arr(STR),
        "after": arr(STR),
        "location": NSTR,
        "format": NSTR,
        "owners": arr(obj({"name": STR, "type": NSTR})),
        "notes": arr(STR),
    }
)
PLAN = obj(
    {
        "id": STR,
        "subjectKind": STR,
        "createdAt": TIME,
        "createdBy": STR,
        "identifiers": arr(obj({"index": INT, "kind": NSTR, "field": NSTR})),
        "state": STR,
        "error": NSTR,
        "summary": FREE,
        "ownersToNotify": arr(obj({"name": STR, "steps": arr(INT)})),
        "steps": arr(STEP),
        "runs": arr(obj({"id": STR, "kind": STR, "state": STR, "createdAt": TIME})),
    }
)
PLAN_ACCEPTED = {**PLAN, "properties": {**PLAN["properties"], "statusUrl": STR}}
AUDIT = obj(
    {
        "totalCount": INT,
        "entries": arr(
            obj(
                {
                    "id": INT,
                    "at": TIME,
                    "actor": STR,
                    "action": STR,
                    "outcome": STR,
                    "subjectKind": NSTR,
                    "valueHashes": arr(STR),
                    "asOf": NTIME,
                    "resultCount": NINT,
                    "reference": NSTR,
                    "detail": FREE,
                }
            )
        ),
    }
)
SUBJECT_KIND = obj({"name": STR, "description": NSTR, "fields": INT})
SUBJECT_KINDS = obj({"subjectKinds": arr(SUBJECT_KIND), "identifierKinds": arr(STR)})
