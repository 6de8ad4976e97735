"""The one renderer of lineage answers.

Table and column lineage come out of graph.queries as one shape, a LineageGraph;
this module draws it for every reader: Marquez's ``{"graph": [...]}`` JSON for
the API (:func:`lineage_json`), CSV and Mermaid text (also of impact answers),
and the explorer's drawing data (:func:`explorer_drawing`).

The JSON is joined from bytes once: a dataset's or job's node ``data`` comes
pre-rendered from the node store (graph/nodedata.py) and is spliced in, so a
2,000-node answer costs a few joins per node rather than a JSON encoding of
20,000 nested objects.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from catalog.exports import csv_text
from catalog.models import LifecycleState
from graph import nodedata
from graph.details import DatasetInfo
from graph.nodeids import dataset_node_id
from graph.queries import Cut, GraphEdge, Impact, LineageGraph

# What json.dumps(default=str) gave: datetimes and dataclasses as their str(), int keys as text.
_AS_BEFORE = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME
_AS_BEFORE |= orjson.OPT_PASSTHROUGH_DATACLASS


def dumps(value: Any) -> str:
    """Compact JSON (what every lineage answer is written in)."""
    return orjson.dumps(value, default=str, option=_AS_BEFORE).decode()


def quoted(text: str) -> bytes:
    """``text`` as a JSON string (UTF-8)."""
    return orjson.dumps(text)


def cut_json(cut: Cut) -> dict[str, int]:
    return {"datasets": cut.datasets, "jobs": cut.jobs, "fields": cut.fields}


def _cut(text: str, truncated: bool, cut: Cut, comment: str) -> str:
    """A text export of a capped answer, with a last line (a ``comment``) saying so."""
    if not truncated:
        return text
    left = f"{cut.datasets} datasets, {cut.jobs} jobs and {cut.fields} fields"
    end = "\r\n" if text.endswith("\r\n") else "\n"
    return f"{text}{comment} truncated: {left} left out (ask for more with maxNodes){end}"


# --- JSON ---------------------------------------------------------------------------------


def lineage_json(graph: LineageGraph) -> bytes:
    """Marquez's ``{"graph": [...]}`` for ``graph``, as UTF-8: each node with its
    ``data``, in and out edges, distance, side and hidden-edge counts, then the
    answer's parameters."""
    ids = {n.node_id: quoted(n.node_id) for n in graph.nodes}
    ins: dict[str, list[bytes]] = defaultdict(list)
    outs: dict[str, list[bytes]] = defaultdict(list)
    for edge in graph.edges:
        pair = b'{"origin":%s,"destination":%s}' % (ids[edge.origin], ids[edge.destination])
        outs[edge.origin].append(pair)
        ins[edge.destination].append(pair)
    meta: dict[str, Any] = {"root": graph.root}
    if graph.level == "table":
        data = _table_data(graph)
        meta |= {"direction": graph.direction, "depth": graph.depth}
    else:
        data = _column_data(graph)
        meta |= {"depth": graph.depth, "withDownstream": graph.direction != "upstream"}
    meta |= {
        "asOf": nodedata.iso(graph.as_of),
        "maxNodes": graph.max_nodes,
        "truncated": graph.truncated,
        "cut": cut_json(graph.cut),
    }
    none: list[bytes] = []
    parts = [b'{"graph":[']
    opening = b'{"id":'
    for node in graph.nodes:
        key = node.node_id
        parts += (
            opening,
            ids[key],
            b',"type":"%s","data":' % node.kind.encode(),
            data.get(key, b"null"),
            b',"inEdges":[',
            b",".join(ins.get(key, none)),
            b'],"outEdges":[',
            b",".join(outs.get(key, none)),
            b'],"distance":%d,"side":"%s","hiddenInEdges":%d,"hiddenOutEdges":%d}'
            % (node.distance, node.side.encode(), node.hidden_upstream, node.hidden_downstream),
        )
        opening = b',{"id":'
    parts += (b"],", dumps(meta)[1:].encode())
    return b"".join(parts)


def _table_data(graph: LineageGraph) -> dict[str, bytes]:
    """Each node's ``data`` by node id: the store's DatasetData and JobData, a job's
    with the ``{"namespace", "name"}`` of its inputs and outputs among the nodes shown."""
    datasets = [n for n in graph.nodes if n.kind == "DATASET"]
    jobs = [n for n in graph.nodes if n.kind == "JOB"]
    ds_data, job_data = nodedata.lineage_data(
        [n.pk for n in datasets], [n.pk for n in jobs], graph.as_of
    )
    data = {n.node_id: ds_data[n.pk] for n in datasets if n.pk in ds_data}
    if not jobs:
        return data
    namespaces = {ns: quoted(ns) for ns in {n.namespace for n in datasets}}
    named = {
        n.node_id: b'{"namespace":%s,"name":%s}' % (namespaces[n.namespace], quoted(n.name))
        for n in datasets
    }
    inputs: dict[str, list[bytes]] = defaultdict(list)
    outputs: dict[str, list[bytes]] = defaultdict(list)
    for edge in graph.edges:
        if edge.origin in named:
            inputs[edge.destination].append(named[edge.origin])
        else:
            outputs[edge.origin].append(named[edge.destination])
    for n in jobs:
        text = job_data.get(n.pk)
        if text is not None:
            data[n.node_id] = b'%s,"inputs":[%s],"outputs":[%s]}' % (
                text[:-1],
                b",".join(inputs.get(n.node_id, ())),
                b",".join(outputs.get(n.node_id, ())),
            )
    return data


def _column_data(graph: LineageGraph) -> dict[str, bytes]:
    """Each field's ``data``: its dataset, type and subject kind, and the fields it is
    made from, with how."""
    by_id = {n.node_id: n for n in graph.nodes}
    made_from: dict[str, list[GraphEdge]] = defaultdict(list)
    for edge in graph.edges:
        made_from[edge.destination].append(edge)
    data = {}
    for node in graph.nodes:
        own = made_from.get(node.node_id, [])
        first = own[0] if own else None
        data[node.node_id] = dumps(
            {
                "namespace": node.namespace,
                "dataset": node.name,
                "field": node.field,
                "fieldType": node.field_type or None,
                "transformationDescription": (first.description or None) if first else None,
                "transformationType": first.transformation_type if first else None,
                "inputFields": [
                    {
                        "namespace": by_id[link.origin].namespace,
                        "dataset": by_id[link.origin].name,
                        "field": by_id[link.origin].field,
                        "transformationDescription": link.description or None,
                        "transformationType": link.transformation_type,
                        "transformationSubtype": link.transformation_subtype or None,
                        "masking": link.masking,
                        "job": link.job,
                    }
                    for link in own
                ],
                "subjectKind": node.subject_kind,
            }
        ).encode()
    return data


# --- CSV and Mermaid ------------------------------------------------------------------------

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
EDGE_COLUMNS = ("origin", "origin_type", "destination", "destination_type")
# Column-level answers also say through which job, and how, a field is made from another.
FIELD_EDGE_COLUMNS = (
    *EDGE_COLUMNS,
    "job",
    "transformation_type",
    "transformation_subtype",
    "masking",
    "description",
)


def impact_csv(impact: Impact) -> str:
    """One row per impacted dataset, nearest first, with who to notify."""
    text = csv_text(
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
    return _cut(text, impact.truncated, impact.cut, "#")


def lineage_csv(graph: LineageGraph) -> str:
    """The edge list: origin, destination and the kind of each end (and, between
    fields, the job and the transformation)."""
    kinds = {n.node_id: n.kind for n in graph.nodes}
    rows: list[tuple[object, ...]] = []
    for edge in graph.edges:
        row: tuple[object, ...] = (
            edge.origin,
            kinds.get(edge.origin, ""),
            edge.destination,
            kinds.get(edge.destination, ""),
        )
        if graph.level == "column":
            row += (
                edge.job or "",
                edge.transformation_type,
                edge.transformation_subtype,
                "true" if edge.masking else "false",
                edge.description,
            )
        rows.append(row)
    text = csv_text(FIELD_EDGE_COLUMNS if graph.level == "column" else EDGE_COLUMNS, rows)
    return _cut(text, graph.truncated, graph.cut, "#")


# Label characters Mermaid shows as they are; every other one is written as Mermaid's
# entity code ``#<decimal>;`` (its documented escape), so that no name can close a label,
# start a line (a ``%%{init}%%`` directive, a new node) or carry markup.
_MERMAID_PLAIN = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-./:,@=+()$!?*'"
)


def mermaid_label(label: str) -> str:
    """``label`` as the text of a quoted Mermaid label."""
    return "".join(c if c in _MERMAID_PLAIN else f"#{ord(c)};" for c in label)


def mermaid(
    nodes: Iterable[tuple[str, str, str]],
    edges: Iterable[GraphEdge],
    boxes: dict[str, str] | None = None,
) -> str:
    """A left-to-right Mermaid flowchart: datasets as cylinders, jobs rounded, fields boxed.

    ``nodes`` are (node id, kind, label) with kind DATASET, JOB or DATASET_FIELD;
    ``boxes`` puts nodes in titled subgraphs (a field in its dataset's), by node id.
    """
    shapes = {"JOB": '("{}")', "DATASET": '[("{}")]', "DATASET_FIELD": '["{}"]'}
    lines = ["flowchart LR"]
    keys: dict[str, str] = {}
    boxed: dict[str, list[str]] = {}
    for node_id, kind, label in nodes:
        if node_id in keys:
            continue
        keys[node_id] = f"n{len(keys)}"
        line = f"{keys[node_id]}{shapes[kind].format(mermaid_label(label))}"
        title = boxes.get(node_id) if boxes else None
        if title is None:
            lines.append(f"  {line}")
        else:
            boxed.setdefault(title, []).append(line)
    for i, (title, members) in enumerate(boxed.items()):
        lines.append(f'  subgraph b{i} ["{mermaid_label(title)}"]')
        lines += [f"    {line}" for line in members]
        lines.append("  end")
    drawn = set()
    for edge in edges:
        pair = (keys.get(edge.origin), keys.get(edge.destination))
        if None not in pair and pair not in drawn:
            drawn.add(pair)
            lines.append(f"  {pair[0]} --> {pair[1]}")
    return "\n".join(lines) + "\n"


def _named(
    nodes: Iterable[tuple[str, str, str, str]], root: str = ""
) -> list[tuple[str, str, str]]:
    """(node id, kind, label) of (node id, kind, namespace, name): the name, written
    ``namespace:name`` where two datasets (or two jobs) of a drawing share it, or where
    the drawing's ``root`` (drawn as ``namespace:name``) ends with it."""
    listed = list(nodes)
    shared = Counter((kind, name) for _, kind, _, name in listed)
    return [
        (i, k, f"{ns}:{n}" if shared[(k, n)] > 1 or root.endswith(f":{n}") else n)
        for i, k, ns, n in listed
    ]


def lineage_mermaid(graph: LineageGraph) -> str:
    """Datasets and jobs, or fields inside a box per dataset (titled ``namespace:name``)."""
    if graph.level == "table":
        nodes = _named((n.node_id, n.kind, n.namespace, n.name) for n in graph.nodes)
        text = mermaid(nodes, graph.edges)
    else:
        text = mermaid(
            ((n.node_id, n.kind, n.field) for n in graph.nodes),
            graph.edges,
            {n.node_id: f"{n.namespace}:{n.name}" for n in graph.nodes},
        )
    return _cut(text, graph.truncated, graph.cut, "%%")


def _fallback(node_id: str) -> tuple[str, str, str]:
    kind, _, rest = node_id.partition(":")
    kinds = {"job": "JOB", "datasetField": "DATASET_FIELD"}
    return node_id, kinds.get(kind, "DATASET"), rest


def impact_mermaid(impact: Impact) -> str:
    named = _named(
        [(d.node_id, "DATASET", d.dataset.namespace, d.dataset.name) for d in impact.datasets]
        + [(j.node_id, "JOB", j.job.namespace, j.job.name) for j in impact.jobs],
        _fallback(impact.root)[2],
    )
    known = {node[0]: node for node in named}
    ids = [impact.root]
    for edge in impact.edges:
        ids += [edge.origin, edge.destination]
    ids += list(known)
    text = mermaid((known.get(i) or _fallback(i) for i in ids), impact.edges)
    return _cut(text, impact.truncated, impact.cut, "%%")


# --- the explorer's drawing -----------------------------------------------------------------


@dataclass(frozen=True)
class Risk:
    """Datasets marked bad and the datasets and jobs downstream of them, by primary key."""

    tainted: frozenset[int] = frozenset()
    datasets: frozenset[int] = frozenset()
    jobs: frozenset[int] = frozenset()

    def of_dataset(self, pk: int) -> dict[str, bool]:
        return {"tainted": pk in self.tainted, "atRisk": pk in self.datasets}


Drawn = dict[str, dict[str, Any]]


def _degrees(edges: Sequence[GraphEdge]) -> tuple[dict[str, int], dict[str, int]]:
    """Edges drawn into and out of each node (one per pair of nodes)."""
    ins: dict[str, int] = defaultdict(int)
    outs: dict[str, int] = defaultdict(int)
    for source, target in {(e.origin, e.destination) for e in edges}:
        outs[source] += 1
        ins[target] += 1
    return ins, outs


def on_side(graph: LineageGraph, direction: str) -> LineageGraph:
    """``graph`` without what lies upstream of its root when only ``downstream`` is asked
    for (a column-level traversal goes upstream, or both ways)."""
    if direction != "downstream":
        return graph
    nodes = tuple(n for n in graph.nodes if n.side != "upstream")
    kept = {n.node_id for n in nodes}
    edges = tuple(e for e in graph.edges if e.origin in kept and e.destination in kept)
    return replace(graph, nodes=nodes, edges=edges)


@dataclass(frozen=True)
class Marks:
    """What the explorer marks on the nodes of an answer, read from the catalog as of the
    answer's instant: each dataset's personal-data, subject and dropped flags and each
    job's latest run state (table level), or the datasets of the fields shown, with their
    fields (column level)."""

    flags: dict[int, dict[str, bool]] = field(default_factory=dict)
    states: dict[int, str] = field(default_factory=dict)
    datasets: dict[int, DatasetInfo] = field(default_factory=dict)


def explorer_drawing(graph: LineageGraph, risk: Risk, marks: Marks) -> tuple[Drawn, Drawn]:
    """The explorer's nodes and edges by id: each node's signed distance (upstream
    negative), neighbours valid then (drawn plus hidden), personal-data, taint and run
    marks; at column level, fields inside their datasets."""
    nodes, edges = graph.nodes, graph.edges
    ins, outs = _degrees(edges)
    drawn: Drawn = {}
    datasets = marks.datasets
    if graph.level == "column":
        # Fields are drawn inside their datasets, with the flags they showed then.
        fields = {f.pk: f for info in datasets.values() for f in info.fields}
        for info in datasets.values():
            drawn[info.node_id] = {
                "id": info.node_id,
                "kind": "dataset",
                "compound": True,
                "label": info.name,
                "namespace": info.namespace,
                "name": info.name,
                **risk.of_dataset(info.pk),
                "pii": info.has_pii,
                "subject": any(f.subject_kind for f in info.fields),
                "dropped": info.lifecycle_state == LifecycleState.DROPPED,
            }
    for n in nodes:
        node: dict[str, Any] = {
            "id": n.node_id,
            "kind": {"DATASET": "dataset", "JOB": "job"}.get(n.kind, "field"),
            "label": n.field or n.name,
            "namespace": n.namespace,
            "name": n.name,
            "distance": -n.distance if n.side == "upstream" else n.distance,
            # Total neighbours valid then: those drawn plus those left out.
            "degIn": ins.get(n.node_id, 0) + n.hidden_upstream,
            "degOut": outs.get(n.node_id, 0) + n.hidden_downstream,
        }
        if n.kind == "DATASET_FIELD":
            f = fields.get(n.pk)
            node |= {
                "field": n.field,
                "parent": dataset_node_id(n.namespace, n.name),
                "pii": bool(f and f.pii_category),
                "piiCategory": f.pii_category if f else "",
                "subject": n.subject_kind,
                "propagated": bool(f and f.flag_source == "propagated"),
                **risk.of_dataset(n.dataset_pk),
            }
        elif n.kind == "DATASET":
            node |= {"pii": False, "subject": False, "dropped": False}
            node |= marks.flags.get(n.pk, {}) | risk.of_dataset(n.pk)
        else:
            node |= {"state": marks.states.get(n.pk, ""), "tainted": False}
            node["atRisk"] = n.pk in risk.jobs
        drawn[n.node_id] = node
    personal = {
        key for key, n in drawn.items() if n["kind"] == "field" and (n["pii"] or n["subject"])
    }
    lines: Drawn = {}
    for e in edges:
        edge_id = f"{e.origin}->{e.destination}"
        if edge_id in lines:
            continue
        lines[edge_id] = {"id": edge_id, "source": e.origin, "target": e.destination}
        if graph.level == "column":
            subtype = e.transformation_subtype
            lines[edge_id] |= {
                "transformation": f"{e.transformation_type}/{subtype}"
                if subtype
                else e.transformation_type,
                "masking": e.masking,
                "job": e.job,
                # Personal data flowed along it: from a personal field into another (not
                # into an aggregate, or a field a steward said holds none).
                "pii": e.origin in personal and e.destination in personal,
            }
    return drawn, lines
