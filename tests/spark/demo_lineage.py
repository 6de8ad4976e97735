"""A readable, comparable view of the lineage in the demo's OpenLineage events."""

from __future__ import annotations

from typing import Any

from tests.spark.conftest import relative


def _edge(root: str, input_field: dict[str, Any], transformation: dict[str, Any]) -> str:
    name = relative(input_field["name"], root)
    if input_field["namespace"] != "file":
        name = f"{input_field['namespace']}:{name}"
    text = f"{name}.{input_field['field']} {transformation['type']} {transformation['subtype']}"
    return text + (" masked" if transformation.get("masking") else "")


def job_lineage(event: dict[str, Any], root: str) -> dict[str, Any]:
    """Return a job's datasets and column lineage as plain sorted lists of strings.

    ``{"inputs": [...], "outputs": {path: {"fields": {col: [edge…]}, "dataset": [edge…],
    "lifecycle": "OVERWRITE"}}}`` with edges like ``raw/orders.amount DIRECT AGGREGATION``.
    """
    outputs: dict[str, Any] = {}
    for output in event.get("outputs", []):
        facets = output.get("facets", {})
        lineage = facets.get("columnLineage", {})
        entry: dict[str, Any] = {
            "fields": {
                column: sorted(
                    _edge(root, f, t) for f in spec["inputFields"] for t in f["transformations"]
                )
                for column, spec in sorted(lineage.get("fields", {}).items())
            },
            "dataset": sorted(
                _edge(root, f, t) for f in lineage.get("dataset", []) for t in f["transformations"]
            ),
        }
        if "lifecycleStateChange" in facets:
            entry["lifecycle"] = facets["lifecycleStateChange"]["lifecycleStateChange"]
        outputs[relative(output["name"], root)] = entry
    return {
        "inputs": sorted(relative(i["name"], root) for i in event.get("inputs", [])),
        "outputs": outputs,
    }


def completed_by_job(events: list[dict[str, Any]], day: str) -> dict[str, dict[str, Any]]:
    """Return the COMPLETE event of every job that ran on a simulated day (``2026-03-02``)."""
    return {
        e["job"]["name"]: e
        for e in events
        if e["eventType"] == "COMPLETE" and e["eventTime"].startswith(day)
    }
