"""Lineage answers as CSV and Mermaid text (shared by the API and the pages)."""

from __future__ import annotations

from collections.abc import Iterable

from catalog.exports import csv_text
from graph.queries import GraphEdge, Impact, LineageGraph

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


def impact_csv(impact: Impact) -> str:
    """One row per impacted dataset, nearest first, with who to notify."""
    return csv_text(
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
    return csv_text(("origin", "origin_type", "destination", "destination_type"), rows)


# Label characters Mermaid shows as they are; every other one is written as Mermaid's
# entity code ``#<decimal>;`` (its documented escape), so that no name can close a label,
# start a line (a ``%%{init}%%`` directive, a new node) or carry markup.
_MERMAID_PLAIN = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-./:,@=+()$!?*'"
)


def mermaid_label(label: str) -> str:
    """``label`` as the text of a quoted Mermaid label."""
    return "".join(c if c in _MERMAID_PLAIN else f"#{ord(c)};" for c in label)


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
        text = mermaid_label(label)
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
