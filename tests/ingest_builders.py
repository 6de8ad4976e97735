"""Builders of OpenLineage events for ingest tests (plain dicts, as producers send them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPEC = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/"
PRODUCER = "https://github.com/lineage-explorer/tests"
PG = "postgres://shop-db:5432"
FIXTURES = Path(__file__).parent / "fixtures" / "openlineage"


def at(day: int = 1, hour: int = 0, minute: int = 0, second: int = 0) -> str:
    return f"2026-03-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"


def schema(*fields: str | tuple[str, str]) -> dict[str, Any]:
    out = []
    for f in fields:
        name, kind = (f, "string") if isinstance(f, str) else f
        out.append({"name": name, "type": kind})
    return {"fields": out}


def columns(
    mapping: dict[str, list[tuple[str, str]]], ns: str = PG, **extra: Any
) -> dict[str, Any]:
    """columnLineage facet: {output field: [(input dataset, input field), …]} (DIRECT IDENTITY)."""
    return {
        "fields": {
            out: {
                "inputFields": [
                    {
                        "namespace": ns,
                        "name": name,
                        "field": field,
                        "transformations": [{"type": "DIRECT", "subtype": "IDENTITY"}],
                    }
                    for name, field in inputs
                ]
            }
            for out, inputs in mapping.items()
        },
        **extra,
    }


def dataset(name: str, ns: str = PG, **facets: Any) -> dict[str, Any]:
    return {"namespace": ns, "name": name, "facets": facets}


def run_event(
    event_type: str,
    run_id: str,
    when: str,
    job: str = "etl.orders",
    job_ns: str = "spark",
    inputs: list[dict[str, Any]] | None = None,
    outputs: list[dict[str, Any]] | None = None,
    run_facets: dict[str, Any] | None = None,
    job_facets: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "eventTime": when,
        "producer": PRODUCER,
        "schemaURL": SPEC + "RunEvent",
        "eventType": event_type,
        "run": {"runId": run_id, "facets": run_facets or {}},
        "job": {"namespace": job_ns, "name": job, "facets": job_facets or {}},
        "inputs": inputs or [],
        "outputs": outputs or [],
    }


def dataset_event(when: str, ds: dict[str, Any]) -> dict[str, Any]:
    return {
        "eventTime": when,
        "producer": PRODUCER,
        "schemaURL": SPEC + "DatasetEvent",
        "dataset": ds,
    }


def drop(name: str, when: str, ns: str = PG) -> dict[str, Any]:
    return dataset_event(
        when, dataset(name, ns, lifecycleStateChange={"lifecycleStateChange": "DROP"})
    )


def run_id(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def fixture_events(name: str) -> list[dict[str, Any]]:
    """Events of a checked-in fixture file (JSON list or NDJSON)."""
    text = (FIXTURES / name).read_text(encoding="utf-8")
    if name.endswith(".ndjson"):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    value = json.loads(text)
    return value if isinstance(value, list) else [value]


def all_fixture_events() -> list[dict[str, Any]]:
    return [e for path in sorted(FIXTURES.iterdir()) for e in fixture_events(path.name)]
