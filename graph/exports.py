"""Lineage answers as CSV and Mermaid text (shared by the API and the pages)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

from graph.queries import GraphEdge, Impact, LineageGraph, TaintImpact

IMPACT_COLUMNS = (
    "distance",
    "node_id",
    "namespace",
    "name",
    "owners",
    "pii_fields",
    "retention_policy",
    "retention_days",
    "retention_action",
    "impacted_fields",
    "via_jobs",
)


def _csv(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if v is None else _safe(v) for v in row])
    return buffer.getvalue()


def _safe(value: object) -> str:
    # Spreadsheets run cells starting with these as formulas: quote them.
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def impact_csv(impact: Impact) -> str:
    """One row per impacted dataset, nearest first, with who to notify."""
    return _csv(
        IMPACT_COLUMNS,
        (
            (
                item.distance,
                item.node_id,
                item.dataset.namespace,
                item.dataset.name,
                "; ".join(o.name for o in item.dataset.owners),
                "; ".join(
                    f"{f.name} ({f.pii_category or f.subject_kind})"
                    for f in item.dataset.pii_fields
                ),
                item.dataset.retention.name if item.dataset.retention else "",
                item.dataset.retention.duration_days if item.dataset.retention else "",
                item.dataset.retention.action if item.dataset.retention else "",
                "; ".join(item.fields),
                "; ".join(item.via_jobs),
            )
            for item in impact.datasets
        ),
    )


def lineage_csv(graph: LineageGraph) -> str:
    """The edge list: origin, destination and the kind and distance of each end."""
    nodes = {n.node_id: n for n in graph.nodes}
    rows = []
    for edge in graph.edges:
        origin, destination = nodes.get(edge.origin), nodes.get(edge.destination)
        rows.append(
            (
                edge.origin,
                origin.kind if origin else "",
                edge.destination,
                destination.kind if destination else "",
            )
        )
    return _csv(("origin", "origin_type", "destination", "destination_type"), rows)


def taint_csv(impact: TaintImpact) -> str:
    rows = [
        ("dataset", d.node_id, d.distance, "", "; ".join(o.name for o in d.dataset.owners))
        for d in impact.datasets
    ] + [("rerun", j.node_id, j.distance, j.order, "") for j in impact.jobs_to_rerun]
    return _csv(("kind", "node_id", "distance", "rerun_order", "owners"), rows)


def _escape(label: str) -> str:
    return label.replace('"', "#quot;")


def mermaid(nodes: Iterable[tuple[str, str, str]], edges: Iterable[GraphEdge]) -> str:
    """A left-to-right Mermaid flowchart: datasets as cylinders, jobs rounded, fields boxed.

    ``nodes`` are (node id, kind, label) with kind DATASET, JOB or DATASET_FIELD.
    """
    lines = ["flowchart LR"]
    keys: dict[str, str] = {}
    for node_id, kind, label in nodes:
        if node_id in keys:
            continue
        key = f"n{len(keys)}"
        keys[node_id] = key
        text = _escape(label)
        if kind == "JOB":
            lines.append(f'  {key}("{text}")')
        elif kind == "DATASET":
            lines.append(f'  {key}[("{text}")]')
        else:
            lines.append(f'  {key}["{text}"]')
    for edge in edges:
        if edge.origin in keys and edge.destination in keys:
            lines.append(f"  {keys[edge.origin]} --> {keys[edge.destination]}")
    return "\n".join(lines) + "\n"


def _fallback(node_id: str) -> tuple[str, str, str]:
    kind, _, rest = node_id.partition(":")
    kinds = {"job": "JOB", "datasetField": "DATASET_FIELD"}
    return node_id, kinds.get(kind, "DATASET"), rest


def lineage_mermaid(graph: LineageGraph) -> str:
    return mermaid(((n.node_id, n.kind, n.name) for n in graph.nodes), graph.edges)


def impact_mermaid(impact: Impact) -> str:
    known = {d.node_id: (d.node_id, "DATASET", d.dataset.name) for d in impact.datasets}
    known.update({j.node_id: (j.node_id, "JOB", j.job.name) for j in impact.jobs})
    ids = [impact.root]
    for edge in impact.edges:
        ids += [edge.origin, edge.destination]
    ids += list(known)
    return mermaid((known.get(i) or _fallback(i) for i in ids), impact.edges)
