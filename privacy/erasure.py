"""Domain rules for verification and erasure: what Spark can read, and in which order to erase.

Plain functions over search results; no database access and no request.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from catalog.exports import csv_text
from catalog.models import PiiCategory, RetentionAction
from privacy.queries import AGGREGATE, RELATION_RANK, DatasetHit, DatasetLink, SubjectSearch

_FORMAT_ALIASES = {
    "parquet": "parquet",
    "csv": "csv",
    "json": "json",
    "jsonl": "json",
    "ndjson": "json",
}
_OBJECT_STORE_PREFIXES = ("s3://", "s3a://", "gs://", "abfss://", "wasbs://", "hdfs://")

DELETE = "delete"
ANONYMISE = "anonymise"
RECOMPUTE = "recompute"

SPARK = "spark"  # dry run and apply on Spark
SPARK_DRY_RUN = "spark_dry_run"  # counted on Spark, applied by the owners
MANUAL = "manual"


@dataclass(frozen=True)
class StorageTarget:
    """Where and how Spark can read a dataset, or why it cannot."""

    location: str
    format: str
    scannable: bool
    local: bool
    reason: str = ""


def physical_location(namespace: str, name: str, location: str) -> str:
    """Return the dataset's location URI: the catalog's, else the one its OpenLineage name implies."""
    if location:
        return location
    if namespace == "file":
        return name
    if namespace.startswith(_OBJECT_STORE_PREFIXES):
        return f"{namespace.rstrip('/')}/{name.lstrip('/')}"
    return ""


def storage_target(hit: DatasetHit) -> StorageTarget:
    """Return how Spark can read the dataset's files (Parquet, CSV or JSON), if it can."""
    location = physical_location(hit.namespace, hit.name, hit.location)
    if not location:
        return StorageTarget("", "", False, False, "no physical location known")
    local = location.startswith(("/", "file:"))
    declared = hit.storage_format.strip().lower()
    if declared:
        fmt = _FORMAT_ALIASES.get(declared, "")
        if not fmt:
            return StorageTarget(location, declared, False, local, f"{declared} is not scannable")
    else:
        suffix = location.rstrip("/").rsplit(".", 1)[-1].lower() if "." in location else ""
        fmt = _FORMAT_ALIASES.get(suffix, "auto")
    return StorageTarget(location, fmt, True, local)


def key_columns(hit: DatasetHit) -> list[dict[str, Any]]:
    """Return the columns holding the subject's identifiers, with how to match them:
    ``masked`` where a path into the column masks, so its rows may hold a pseudonym (the
    scan matches the value's digests as well as the value)."""
    return [
        {
            "name": f.name,
            "identifiers": list(f.identifiers),
            "masked": f.hashed,
            "caseInsensitive": f.pii_category == PiiCategory.EMAIL,
        }
        for f in hit.fields
        if f.relation != AGGREGATE and f.identifiers
    ]


def operation_for(hit: DatasetHit) -> tuple[str, str]:
    """Return (operation, why) for one dataset, from its relation and retention policy."""
    if hit.relation == AGGREGATE:
        return RECOMPUTE, "aggregate: re-run the producing jobs once their inputs are erased"
    policy = hit.retention
    if policy is None or policy.action is None:
        return DELETE, "no retention policy: rows are deleted"
    if policy.action == RetentionAction.ANONYMISE:
        return ANONYMISE, f"retention policy {policy.name} anonymises"
    if policy.action == RetentionAction.ARCHIVE:
        return DELETE, f"retention policy {policy.name} archives, but an erasure request deletes"
    return DELETE, f"retention policy {policy.name} deletes"


def topological_order(
    hits: Iterable[DatasetHit], links: Iterable[tuple[int, int]]
) -> tuple[list[DatasetHit], set[int]]:
    """Return the datasets sources first (Kahn), and the ids left over on a cycle.

    Among datasets ready at the same time, direct ones come first, then
    derived, then aggregates, then by name, so the order is stable.
    """
    by_id = {h.id: h for h in hits}
    downstream: dict[int, set[int]] = defaultdict(set)
    indegree = dict.fromkeys(by_id, 0)
    for source, target in set(links):
        if source in by_id and target in by_id and source != target:
            downstream[source].add(target)
            indegree[target] += 1

    def key(dataset_id: int) -> tuple[int, str, str, int]:
        hit = by_id[dataset_id]
        return (RELATION_RANK[hit.relation], hit.namespace, hit.name, dataset_id)

    ready = [key(i) for i, degree in indegree.items() if degree == 0]
    heapq.heapify(ready)
    ordered: list[DatasetHit] = []
    while ready:
        dataset_id = heapq.heappop(ready)[3]
        ordered.append(by_id[dataset_id])
        for target in downstream[dataset_id]:
            indegree[target] -= 1
            if indegree[target] == 0:
                heapq.heappush(ready, key(target))
    on_cycle = {i for i, degree in indegree.items() if degree > 0}
    ordered.extend(by_id[i] for i in sorted(on_cycle, key=key))
    return ordered, on_cycle


def plan_steps(search: SubjectSearch, links: Sequence[DatasetLink]) -> list[dict[str, Any]]:
    """Return the ordered erasure steps for a search's datasets (JSON-safe dicts)."""
    hits = search.all_hits
    pairs = [(link.source_id, link.target_id) for link in links]
    ordered, on_cycle = topological_order(hits, pairs)
    node_of = {h.id: h.node_id for h in hits}
    upstream: dict[int, set[str]] = defaultdict(set)
    producers: dict[int, set[str]] = defaultdict(set)
    for link in links:
        if link.source_id in node_of and link.target_id in node_of:
            upstream[link.target_id].add(node_of[link.source_id])
            if link.job:
                producers[link.target_id].add(link.job)
    steps: list[dict[str, Any]] = []
    for order, hit in enumerate(ordered, start=1):
        operation, why = operation_for(hit)
        target = storage_target(hit)
        if operation == RECOMPUTE or not target.scannable:
            execution = MANUAL
        else:
            execution = SPARK if target.local else SPARK_DRY_RUN
        keys = key_columns(hit)
        anonymise = sorted({c["name"] for c in keys} | {name for name, _ in hit.personal_fields})
        notes = [why]
        if not target.scannable and operation != RECOMPUTE:
            notes.append(f"not scannable: {target.reason}")
        if execution == SPARK_DRY_RUN:
            notes.append("not on a local file system: counted on Spark, erased by the owners")
        if hit.id in on_cycle:
            notes.append("on a lineage cycle: order among its members is arbitrary")
        steps.append(
            {
                "order": order,
                "namespace": hit.namespace,
                "name": hit.name,
                "nodeId": hit.node_id,
                "relation": hit.relation,
                "operation": operation,
                "execution": execution,
                "retentionPolicy": hit.retention.name if hit.retention else None,
                "keyColumns": keys,
                "anonymiseColumns": anonymise if operation == ANONYMISE else [],
                "recomputeJobs": sorted(producers[hit.id]),
                "after": sorted(upstream[hit.id]),
                "location": target.location or None,
                "format": target.format or None,
                "owners": hit.owners,
                "notes": notes,
            }
        )
    return steps


def owners_to_notify(steps: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return each owner once, with the datasets (by step order) they must act on."""
    found: dict[str, list[int]] = defaultdict(list)
    for step in steps:
        for owner in step["owners"]:
            found[owner["name"]].append(step["order"])
    return [{"name": name, "steps": orders} for name, orders in sorted(found.items())]


PLAN_CSV_COLUMNS = (
    "order",
    "namespace",
    "name",
    "relation",
    "operation",
    "execution",
    "retentionPolicy",
    "keyColumns",
    "anonymiseColumns",
    "recomputeJobs",
    "after",
    "location",
    "format",
    "owners",
    "notes",
)


def plan_csv(steps: Iterable[dict[str, Any]]) -> str:
    """The plan as CSV, a row per step; list cells are joined with ``; ``."""
    rows = []
    for step in steps:
        row: list[str] = []
        for column in PLAN_CSV_COLUMNS:
            value = step.get(column)
            if column == "keyColumns":
                value = [c["name"] for c in value or []]
            elif column == "owners":
                value = [o["name"] for o in value or []]
            if isinstance(value, list):
                row.append("; ".join(str(v) for v in value))
            else:
                row.append("" if value is None else str(value))
        rows.append(row)
    return csv_text(PLAN_CSV_COLUMNS, rows)
