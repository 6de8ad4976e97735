"""The OpenAPI document's shared parts: the bearer-token scheme, the shapes of answers, and
the error shape under every error status."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter

from catalog.params import STRICT_INPUTS


class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "catalog.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "API token (manage.py issue_token)",
        }


# -- response shapes ---------------------------------------------------------------------------
# The API's answers are built as dicts (``*_json`` functions); these JSON Schemas describe
# them for the OpenAPI document, precisely enough that the fuzzing tier (schemathesis)
# catches a wrong shape. Every key a builder writes is required; ``null`` is allowed where
# the builder writes None.

Schema = dict[str, Any]

STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
TIME: Schema = {"type": "string", "format": "date-time"}
FREE: Schema = {"type": "object", "additionalProperties": True}


def null(schema: Schema) -> Schema:
    """``schema`` or null."""
    return {**schema, "nullable": True}


def arr(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def obj(properties: dict[str, Schema], optional: tuple[str, ...] = ()) -> Schema:
    """An object with these properties, each required unless named in ``optional``."""
    required = [name for name in properties if name not in optional]
    return {"type": "object", "properties": properties, "required": required}


NSTR, NINT, NTIME = null(STR), null(INT), null(TIME)
DATASET_ID = obj({"namespace": STR, "name": STR})
NAMESPACE = obj(
    {
        "name": STR,
        "createdAt": NTIME,
        "updatedAt": NTIME,
        "ownerName": NSTR,
        "description": NSTR,
        "isHidden": BOOL,
    }
)
RETENTION = obj({"name": STR, "durationDays": NINT, "action": NSTR, "legalBasis": NSTR})
FLAG: dict[str, Schema] = {
    "pii": NSTR,
    "subjectKind": NSTR,
    "flagSource": {"type": "string", "enum": ["declared", "propagated"]},
    "masked": BOOL,
    "propagatedFrom": arr(STR),
    "propagationBlocked": BOOL,
}
FIELD = obj(
    {
        "name": STR,
        "type": NSTR,
        "tags": arr(STR),
        "description": NSTR,
        **FLAG,
        "sensitivity": NSTR,
        "removed": BOOL,
    }
)
DATASET_BASE: dict[str, Schema] = {
    "id": DATASET_ID,
    "type": STR,
    "name": STR,
    "physicalName": STR,
    "createdAt": NTIME,
    "updatedAt": NTIME,
    "namespace": STR,
    "sourceName": STR,
    "tags": arr(STR),
    "lastModifiedAt": NTIME,
    "lastLifecycleState": STR,
    "description": NSTR,
    "facets": FREE,
    "deleted": BOOL,
    "nodeId": STR,
    "platform": NSTR,
    "location": NSTR,
    "sensitivity": NSTR,
    "firstSeen": NTIME,
    "lastSeen": NTIME,
    "aliases": arr(DATASET_ID),
}
DATASET = obj(
    {
        **DATASET_BASE,
        "fields": arr(FIELD),
        "owners": arr(
            obj({"name": STR, "type": NSTR, "kind": STR, "displayName": NSTR, "email": NSTR})
        ),
        "retentionPolicy": null(RETENTION),
    }
)
DATASET_AS_OF = obj(
    {
        **DATASET_BASE,
        "asOf": TIME,
        "existed": BOOL,
        "fields": arr(
            obj(
                {
                    "name": STR,
                    "type": NSTR,
                    "tags": arr(STR),
                    "description": NSTR,
                    **FLAG,
                    "sensitivity": NSTR,
                }
            )
        ),
        "owners": arr(obj({"name": STR, "type": NSTR})),
        "retentionPolicy": null(obj({"name": STR}, optional=("durationDays", "action"))),
    }
)
CHANGE = obj(
    {
        "at": TIME,
        "actor": STR,
        "source": STR,
        "field": NSTR,
        "attribute": STR,
        "old": {},
        "new": {},
    }
)
TOKEN = obj(
    {
        "id": INT,
        "name": STR,
        "prefix": STR,
        "createdAt": TIME,
        "lastUsedAt": NTIME,
        "revokedAt": NTIME,
    }
)
ERROR = obj({"error": STR, "field": NSTR, "detail": FREE}, optional=("detail",))


def page_of(key: str, items: Schema) -> Schema:
    return obj({"totalCount": INT, key: arr(items)})


# Statuses every operation may answer with the error shape, and those of writes only.
ERROR_STATUSES = {
    "400": "Bad input: the field or parameter at fault is named",
    "401": "No credentials, or a revoked token",
    "403": "Your role does not allow this",
    "404": "Not found",
}
WRITE_ERROR_STATUSES = {
    "409": "Conflicts with what is stored",
    "411": "A chunked body this server cannot read",
    "413": "Body over the size limit",
    "415": "Unknown Content-Encoding",
    "422": "Valid JSON, but not what this endpoint takes",
}


# Set by ``extend_schema(extensions=…)`` on views whose request body is a raw schema, which
# drf-spectacular never marks required.
BODY_REQUIRED = "x-body-required"


def add_error_responses(result: Schema, generator: Any, request: Any, public: bool) -> Schema:
    """drf-spectacular postprocessing hook: the error shape under each error status; request
    bodies marked required."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for operations in result["paths"].values():
        for method, operation in operations.items():
            if operation.pop(BODY_REQUIRED, False):
                operation["requestBody"]["required"] = True
            statuses = dict(ERROR_STATUSES)
            if method in ("post", "patch", "put", "delete"):
                statuses.update(WRITE_ERROR_STATUSES)
            for status, description in statuses.items():
                operation["responses"].setdefault(
                    status, {"description": description, "content": ref}
                )
    return result


# -- request parameters ------------------------------------------------------------------------
# Each says what the view accepts, so that a request the schema calls valid is never
# refused (schemathesis checks that too).

# An instant as the project reads it (catalog.params.instant_from_iso): year 0 is no year.
INSTANT: Schema = {"type": "string", "format": "date-time", "pattern": "^(?!0000)"}
NODE_ID_PATTERNS = {
    "dataset": r"^dataset:[^:\u0000]+:[^\u0000]+$",
    "job": r"^job:[^:\u0000]+:[^\u0000]+$",
    "datasetField": r"^datasetField:[^:\u0000]+:[^:\u0000]+:[^\u0000]+$",
}


def node_id_parameter(
    name: str = "nodeId",
    kinds: tuple[str, ...] = ("dataset", "job"),
    required: bool = True,
    description: str = "",
) -> OpenApiParameter:
    """A node id parameter: ``dataset:{namespace}:{name}``, ``job:…`` or ``datasetField:…``."""
    pattern = "|".join(f"({NODE_ID_PATTERNS[kind]})" for kind in kinds)
    return OpenApiParameter(
        name,
        {"type": "string", "pattern": pattern},
        required=required,
        description=description or " or ".join(f"{kind}:…" for kind in kinds),
    )


def int_parameter(name: str, minimum: int, maximum: int, description: str = "") -> OpenApiParameter:
    schema = {"type": "integer", "minimum": minimum, "maximum": maximum}
    return OpenApiParameter(name, schema, description=description or f"{minimum} to {maximum}")


def instant_parameter(name: str, required: bool = False, description: str = "") -> OpenApiParameter:
    return OpenApiParameter(name, INSTANT, required=required, description=description)


def paging_parameters(maximum: int = 1000, default: int = 100) -> list[OpenApiParameter]:
    return [
        int_parameter("limit", 1, maximum, f"1 to {maximum}, default {default}"),
        int_parameter("offset", 0, 10**9),
    ]


# Text no database stores is refused (catalog.params.text_problem): said once for every
# string a request sends without a pattern, format or enum of its own.
TEXT_PATTERN = "^[^\\u0000]*$"


def document_text_rule(result: Schema, generator: Any, request: Any, public: bool) -> Schema:
    """drf-spectacular postprocessing hook: request strings hold no NUL, optional query
    parameters may be sent empty, and strict inputs (catalog.params.StrictInput) take no
    keys of their own."""

    def visit(schema: Any) -> None:
        if isinstance(schema, dict):
            if schema.get("type") == "string" and not ({"pattern", "format", "enum"} & set(schema)):
                schema["pattern"] = TEXT_PATTERN
            for value in list(schema.values()):
                visit(value)
        elif isinstance(schema, list):
            for value in schema:
                visit(value)

    for operations in result["paths"].values():
        for operation in operations.values():
            if isinstance(operation, dict):
                for parameter in operation.get("parameters", []):
                    visit(parameter.get("schema"))
                    if parameter["in"] == "query" and not parameter.get("required"):
                        # An optional parameter sent empty is taken as not sent.
                        parameter["allowEmptyValue"] = True
                visit(operation.get("requestBody"))
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request"):
            visit(component)
            if name.removeprefix("Patched").removesuffix("Request") in STRICT_INPUTS:
                component["additionalProperties"] = False
    return result
