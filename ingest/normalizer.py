"""OpenLineage events into catalog and graph rows: plain functions, no request objects.

``normalize(events)`` applies a batch of parsed events in one transaction.
Every rule is order-free so that events arriving in any order, or twice, end
in the same state:

* datasets: ``first_seen``/``last_seen`` are the min/max event time; a schema
  facet is a schema observation and a new DatasetVersion starts wherever the
  schema differs from the one in force at that event time (an earlier
  observation of the next version's schema moves that version back);
* facets that set an attribute (documentation, ownership, dataSource,
  storage; job and run facets) keep the value of the newest event carrying
  them — the event time of each is kept next to it;
* documentation sets a dataset's description only while no steward has
  edited it: once a person wrote a description, lineage leaves it alone;
* ownership replaces the owners only when the facet's value changes, so a
  steward's edit stands until the producer declares different owners;
* lifecycleStateChange DROP closes the dataset's edges at the event time and
  marks it DROPPED; RENAME does the same to the previous name (RENAMED, with
  ``alias_of`` pointing at the new name); OVERWRITE, TRUNCATE, CREATE and
  ALTER leave edges alone and are kept in the dataset's history; a dataset
  seen again after its drop is active again;
* runs, run io and edge validity: see graph.actions.

Locks are taken in one global order — namespaces, jobs and datasets are
inserted sorted, then job rows and then dataset rows are locked in id order —
so two workers on events of the same job or dataset wait, never deadlock.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.db import transaction
from django.db.models import OuterRef, Q, Subquery
from django.utils import timezone

from catalog import actions as catalog_actions
from catalog.models import (
    ChangeRecord,
    ChangeSource,
    Dataset,
    DatasetField,
    DatasetVersion,
    LifecycleState,
    Namespace,
    OwnerKind,
)
from graph import actions as graph_actions
from graph.models import Job
from ingest.events import ColumnMapping, DatasetRef, ParsedEvent

LINEAGE_ACTOR = catalog_actions.Actor(name="openlineage", source=ChangeSource.LINEAGE)
CLOSING_KINDS = {"DROP": LifecycleState.DROPPED, "RENAMED": LifecycleState.RENAMED}
FILE_SCHEMES = {"file", "s3", "s3a", "gs", "gcs", "hdfs", "abfss", "wasbs", "dbfs"}
JOB_EVENT_RUNS = uuid.UUID("5b1d3a52-7f0e-4c1a-9d43-0c6b3f1e2a77")


class RetryBatch(Exception):
    """Another transaction added edges this batch must close: run the batch again."""


@dataclass
class NormalizeResult:
    """What a batch touched, for cache invalidation and reporting."""

    jobs: set[int] = field(default_factory=set)
    datasets: set[int] = field(default_factory=set)
    edges: graph_actions.EdgeChanges = field(default_factory=graph_actions.EdgeChanges)


def normalize(events: list[ParsedEvent]) -> NormalizeResult:
    """Apply parsed events to the catalog and the graph in one transaction."""
    if not events:
        return NormalizeResult()
    with transaction.atomic():
        batch = _Batch(sorted(events, key=lambda e: e.sort_key))
        batch.prepare()
        for event in batch.events:
            batch.apply(event)
        return batch.finish()


def schema_hash(fields: list[dict[str, str]], lifecycle: str) -> str:
    text = json.dumps([[f["name"], f["type"], f["description"]] for f in fields] + [lifecycle])
    return hashlib.sha256(text.encode()).hexdigest()


def platform_of(namespace: str) -> str:
    """The platform a namespace names (``postgres://db:5432`` → postgres), or ''."""
    scheme = urlsplit(namespace).scheme if "://" in namespace else namespace.split(":", 1)[0]
    return scheme.lower()[:64] if scheme.isascii() else ""


def location_of(namespace: str, name: str) -> str:
    """The physical location URI of file-like datasets, else ''."""
    if platform_of(namespace) not in FILE_SCHEMES:
        return ""
    if namespace == "file":
        return f"file://{name}"[:2048]
    return f"{namespace.rstrip('/')}/{name.lstrip('/')}"[:2048]


@dataclass
class _Version:
    created_at: datetime
    schema_hash: str
    fields: list[dict[str, str]]
    lifecycle: str
    run_uuid: uuid.UUID | None
    row: DatasetVersion | None = None
    dirty: bool = False


@dataclass
class _PendingRun:
    observation: graph_actions.RunObservation
    inputs: list[int]
    outputs: list[int]
    columns: list[tuple[int, ColumnMapping]]  # (target dataset id, mapping)


class _Batch:
    """One transaction's worth of events, with the rows they touch cached and locked."""

    def __init__(self, events: list[ParsedEvent]) -> None:
        self.events = events
        self.now = timezone.now()
        self.namespaces: dict[str, int] = {}
        self.job_ids: dict[tuple[str, str], int] = {}
        self.jobs: dict[int, Job] = {}
        self.dataset_ids: dict[tuple[str, str], int] = {}
        self.datasets: dict[int, Dataset] = {}
        self.fields: dict[tuple[int, str], DatasetField] = {}
        self.field_seen: dict[tuple[int, str], datetime] = {}
        self.dirty_fields: set[tuple[int, str]] = set()
        self.fields_loaded: set[int] = set()
        self.versions: dict[int, list[_Version]] = {}
        self.versions_full: set[int] = set()
        self.versions_changed: set[int] = set()
        self.closures: list[tuple[int, datetime]] = []
        self.pending_runs: list[_PendingRun] = []
        self.steward_descriptions: set[tuple[int, str]] | None = None
        self.touched_jobs: set[int] = set()

    # -- preparation: insert what is missing, then lock in a fixed order ---------------------

    def prepare(self) -> None:
        ns_names: set[str] = set()
        job_keys: dict[tuple[str, str], datetime] = {}
        dataset_keys: dict[tuple[str, str], datetime] = {}
        closing_keys: list[tuple[tuple[str, str], datetime]] = []

        def want_dataset(key: tuple[str, str], at: datetime) -> None:
            ns_names.add(key[0])
            dataset_keys[key] = min(at, dataset_keys.get(key, at))

        for event in self.events:
            at = event.event_time
            if event.job_name:
                key = (event.job_namespace, event.job_name)
                ns_names.add(key[0])
                job_keys[key] = min(at, job_keys.get(key, at))
            if event.parent_job:
                ns_names.add(event.parent_job[0])
                job_keys[event.parent_job] = min(at, job_keys.get(event.parent_job, at))
            for ref in event.datasets:
                want_dataset(ref.key, at)
                for alias in ref.symlinks:
                    want_dataset(alias, at)
                for mapping in ref.columns or []:
                    want_dataset((mapping.source_namespace, mapping.source_name), at)
                if ref.previous is not None:
                    want_dataset(ref.previous, at)
                if ref.lifecycle == "DROP":
                    closing_keys.append((ref.key, at))
                if ref.lifecycle == "RENAME" and ref.previous is not None:
                    closing_keys.append((ref.previous, at))

        self.namespaces = ensure_namespaces(ns_names)
        ids = graph_actions.ensure_jobs(
            {(self.namespaces[ns], name): at for (ns, name), at in job_keys.items()}
        )
        self.job_ids = {(ns, name): ids[(self.namespaces[ns], name)] for ns, name in job_keys}
        self.dataset_ids = ensure_datasets(
            {(ns, name): at for (ns, name), at in dataset_keys.items()}, self.namespaces
        )
        closures = [(self.dataset_ids[key], at) for key, at in closing_keys]
        closing_jobs = graph_actions.jobs_with_edges_open_at(closures)
        own_jobs = {self.job_ids[(e.job_namespace, e.job_name)] for e in self.events if e.job_name}
        self.jobs = graph_actions.lock_jobs(own_jobs | closing_jobs)
        self.datasets = lock_datasets(self.dataset_ids.values())
        if closures and not graph_actions.jobs_with_edges_open_at(closures) <= set(self.jobs):
            raise RetryBatch("edges were added to a closing dataset meanwhile")
        self._load_fields()
        self._load_latest_versions()

    def _load_fields(self) -> None:
        wanted: set[int] = set()
        for event in self.events:
            for ref in event.datasets:
                if ref.schema is not None or ref.lifecycle in ("DROP", "RENAME"):
                    wanted.add(self.dataset_ids[ref.key])
                if ref.previous is not None:
                    wanted.add(self.dataset_ids[ref.previous])
                if ref.columns:
                    wanted.add(self.dataset_ids[ref.key])
                    for mapping in ref.columns:
                        wanted.add(
                            self.dataset_ids[(mapping.source_namespace, mapping.source_name)]
                        )
        self.fields_loaded = wanted
        if wanted:
            for row in DatasetField.objects.filter(dataset_id__in=wanted):
                self.fields[(row.dataset_id, row.name)] = row

    def _load_latest_versions(self) -> None:
        wanted = {
            self.dataset_ids[ref.key]
            for event in self.events
            for ref in event.datasets
            if ref.schema is not None or ref.lifecycle or ref.previous is not None
        }
        for event in self.events:
            for ref in event.datasets:
                if ref.previous is not None:
                    wanted.add(self.dataset_ids[ref.previous])
        # Inputs and outputs point at the version they saw: load those datasets' latest too.
        wanted |= {self.dataset_ids[ref.key] for e in self.events for ref in e.datasets}
        if not wanted:
            return
        latest = (
            DatasetVersion.objects.filter(dataset_id=OuterRef("pk"))
            .order_by("-created_at", "-pk")
            .values("pk")[:1]
        )
        pairs = dict(
            Dataset.objects.filter(pk__in=wanted)
            .annotate(latest=Subquery(latest))
            .values_list("pk", "latest")
        )
        rows = {
            v.pk: v for v in DatasetVersion.objects.filter(pk__in=[p for p in pairs.values() if p])
        }
        for dataset_id in wanted:
            version_pk = pairs.get(dataset_id)
            if version_pk is None:
                self.versions[dataset_id] = []
                self.versions_full.add(dataset_id)
            else:
                self.versions[dataset_id] = [_version_of(rows[version_pk])]

    # -- applying one event ------------------------------------------------------------------

    def apply(self, event: ParsedEvent) -> None:
        for ref in event.datasets:
            self._observe_dataset(ref, event)
        if not event.job_name:
            return
        job = self.jobs[self.job_ids[(event.job_namespace, event.job_name)]]
        self._observe_job(job, event)
        if event.kind == "dataset":
            return
        run_uuid = event.run_uuid
        event_type = event.event_type
        if event.kind == "job":
            # A JobEvent declares the job's inputs and outputs at its time: it takes part
            # in the timeline as a completed run of its own.
            run_uuid = uuid.uuid5(JOB_EVENT_RUNS, f"{job.pk}|{event.fingerprint}")
            event_type = "COMPLETE"
        assert run_uuid is not None
        observation = graph_actions.RunObservation(
            run_uuid=run_uuid,
            job_id=job.pk,
            event_type=event_type,
            event_time=event.event_time,
            fingerprint=event.fingerprint,
            facets=event.run_facets,
        )
        inputs = [self.dataset_ids[r.key] for r in event.inputs]
        outputs = [self.dataset_ids[r.key] for r in event.outputs]
        columns: list[tuple[int, ColumnMapping]] = []
        for ref in event.outputs:
            if ref.columns is None:
                continue
            target = self.dataset_ids[ref.key]
            observation.covered.add(target)
            for mapping in ref.columns:
                source = self.dataset_ids[(mapping.source_namespace, mapping.source_name)]
                self._field(source, mapping.source_field, event.event_time)
                if mapping.target_field is not None:
                    self._field(target, mapping.target_field, event.event_time)
                columns.append((target, mapping))
                # A column read is a dataset read, even when the producer did not list it.
                if source not in inputs:
                    inputs.append(source)
        self.pending_runs.append(_PendingRun(observation, inputs, outputs, columns))

    def _observe_dataset(self, ref: DatasetRef, event: ParsedEvent) -> None:
        ds = self.datasets[self.dataset_ids[ref.key]]
        at = event.event_time
        ds.last_seen = max(ds.last_seen, at)
        ds.first_seen = min(ds.first_seen, at)
        run_uuid = event.run_uuid
        if ref.lifecycle == "DROP":
            self._close(ds, at, "DROP", run_uuid)
        elif ref.schema is not None:
            fields = [
                {"name": f.name, "type": f.type, "description": f.description} for f in ref.schema
            ]
            self._observe_schema(ds, at, fields, "", run_uuid)
        if ref.lifecycle and ref.lifecycle != "DROP":
            detail = ref.lifecycle
            if ref.lifecycle == "RENAME" and ref.previous is not None:
                old = self.datasets[self.dataset_ids[ref.previous]]
                old.last_seen = max(old.last_seen, at)
                old.first_seen = min(old.first_seen, at)
                self._close(old, at, "RENAMED", run_uuid)
                old.alias_of_id = ds.pk
                detail = f"RENAME from {ref.previous[0]}:{ref.previous[1]}"
            self._lifecycle_record(ds, at, detail)
        facets = ref.facets
        if "documentation" in facets:
            self._documentation(ds, facets["documentation"], at, event.fingerprint)
        if "ownership" in facets:
            self._ownership(ds, facets["ownership"], at, event.fingerprint)
        if "dataSource" in facets:
            source = facets["dataSource"]
            value = {"name": source.get("name") or "", "uri": source.get("uri") or ""}
            if self._newest(ds, "dataSource", value, at, event.fingerprint):
                ds.source_name = value["name"][:255]
                if value["uri"]:
                    ds.platform = platform_of(value["uri"]) or ds.platform
        if "storage" in facets:
            value = {"fileFormat": facets["storage"].get("fileFormat") or ""}
            if self._newest(ds, "storage", value, at, event.fingerprint):
                ds.storage_format = value["fileFormat"][:32]
        for alias_key in ref.symlinks:
            alias = self.datasets[self.dataset_ids[alias_key]]
            if alias.alias_of_id is None and alias.pk != ds.pk and ds.alias_of_id != alias.pk:
                alias.alias_of_id = ds.pk

    def _newest(self, ds: Dataset, facet: str, value: Any, at: datetime, tiebreak: str) -> bool:
        """Record a facet value if this event is the newest carrying it; True if the value changed."""
        key = graph_actions.time_key(at, tiebreak)
        kept = ds.lineage_facets.get(facet) or {}
        if key < kept.get("at", ""):
            return False
        ds.lineage_facets[facet] = {"at": key, "value": value}
        return bool(kept.get("value") != value)

    def _documentation(self, ds: Dataset, facet: dict[str, Any], at: datetime, fp: str) -> None:
        value = str(facet.get("description") or "")
        if not self._newest(ds, "documentation", value, at, fp) or ds.description == value:
            return
        edited = ChangeRecord.objects.filter(
            dataset_id=ds.pk, field_name="", attribute="description", source=ChangeSource.STEWARD
        ).exists()
        if not edited:
            catalog_actions.update_dataset(ds, {"description": value}, LINEAGE_ACTOR, at=at)
            ds.description = value

    def _ownership(self, ds: Dataset, facet: dict[str, Any], at: datetime, fp: str) -> None:
        owners = sorted(
            {(str(o["name"]), str(o.get("type") or "")) for o in facet.get("owners") or []}
        )
        if not self._newest(ds, "ownership", [list(o) for o in owners], at, fp):
            return
        specs = [
            catalog_actions.OwnerSpec(
                name=name,
                type=kind,
                kind=OwnerKind.PERSON if name.startswith("user:") else OwnerKind.TEAM,
            )
            for name, kind in owners
        ]
        catalog_actions.update_dataset(ds, {"owners": specs}, LINEAGE_ACTOR, at=at)

    def _lifecycle_record(self, ds: Dataset, at: datetime, detail: str) -> None:
        exists = ChangeRecord.objects.filter(
            dataset_id=ds.pk, attribute="lifecycle", at=at, source=ChangeSource.LINEAGE
        ).filter(new=detail)
        if not exists.exists():
            ChangeRecord.objects.create(
                at=at,
                actor_name=LINEAGE_ACTOR.display,
                source=ChangeSource.LINEAGE,
                dataset_id=ds.pk,
                attribute="lifecycle",
                old=None,
                new=detail,
            )

    def _close(self, ds: Dataset, at: datetime, kind: str, run_uuid: uuid.UUID | None) -> None:
        self._observe_schema(ds, at, [], kind, run_uuid)
        self.closures.append((ds.pk, at))
        if ds.dropped_at is None or at >= ds.dropped_at:
            ds.dropped_at = at
            ds.lineage_facets["closing"] = {"at": graph_actions.time_key(at), "value": kind}
        self._lifecycle_record(ds, at, kind)

    def _observe_job(self, job: Job, event: ParsedEvent) -> None:
        at = event.event_time
        changed = graph_actions.merge_facets(
            job.facets, job.facet_times, event.job_facets, at, event.fingerprint
        )
        if at < job.created_at:
            job.created_at = at
            changed = True
        if event.parent_job:
            key = graph_actions.time_key(at, event.fingerprint)
            parent_id = self.job_ids[event.parent_job]
            if key >= job.facet_times.get("_parent", "") and parent_id != job.pk:
                job.facet_times["_parent"] = key
                if job.parent_id != parent_id:
                    job.parent_id = parent_id
                changed = True
        if changed:
            self.touched_jobs.add(job.pk)

    # -- schema versions and fields ----------------------------------------------------------

    def _version_list(self, dataset_id: int, at: datetime) -> list[_Version]:
        """The dataset's versions, complete at least from ``at`` on (loading history if needed)."""
        versions = self.versions.get(dataset_id)
        if versions is not None and (
            dataset_id in self.versions_full or (versions and at >= versions[0].created_at)
        ):
            return versions
        kept = {v.row.pk: v for v in versions or [] if v.row is not None}
        merged = [
            kept.get(row.pk) or _version_of(row)
            for row in DatasetVersion.objects.filter(dataset_id=dataset_id).order_by(
                "created_at", "pk"
            )
        ]
        merged.extend(v for v in versions or [] if v.row is None)
        merged.sort(key=lambda v: v.created_at)
        self.versions[dataset_id] = merged
        self.versions_full.add(dataset_id)
        return merged

    def _observe_schema(
        self,
        ds: Dataset,
        at: datetime,
        fields: list[dict[str, str]],
        lifecycle: str,
        run_uuid: uuid.UUID | None,
    ) -> None:
        for f in fields:
            key = (ds.pk, f["name"])
            self.field_seen[key] = min(at, self.field_seen.get(key, at))
        digest = schema_hash(fields, lifecycle)
        versions = self._version_list(ds.pk, at)
        prev = next((v for v in reversed(versions) if v.created_at <= at), None)
        nxt = next((v for v in versions if v.created_at > at), None)
        if prev is not None and prev.schema_hash == digest:
            return
        if nxt is not None and nxt.schema_hash == digest:
            nxt.created_at = at
            nxt.run_uuid = run_uuid
            nxt.dirty = True
        else:
            versions.append(_Version(at, digest, fields, lifecycle, run_uuid, dirty=True))
        versions.sort(key=lambda v: v.created_at)
        self.versions_changed.add(ds.pk)

    def _field(self, dataset_id: int, name: str, at: datetime) -> DatasetField:
        key = (dataset_id, name)
        row = self.fields.get(key)
        if row is None:
            row = DatasetField(dataset_id=dataset_id, name=name, first_seen=at)
            self.fields[key] = row
        elif at < row.first_seen:
            row.first_seen = at
            self.dirty_fields.add(key)
        return row

    def _steward_edited(self, dataset_id: int, name: str) -> bool:
        if self.steward_descriptions is None:
            self.steward_descriptions = set(
                ChangeRecord.objects.filter(
                    dataset_id__in=self.versions_changed,
                    attribute="description",
                    source=ChangeSource.STEWARD,
                )
                .exclude(field_name="")
                .values_list("dataset_id", "field_name")
            )
        return (dataset_id, name) in self.steward_descriptions

    def _sync_fields(self) -> None:
        """Make each changed dataset's field rows follow its latest schema version."""
        for dataset_id in sorted(self.versions_changed):
            latest = self.versions[dataset_id][-1]
            in_schema: set[str] = set()
            for ordinal, spec in enumerate(latest.fields):
                name = spec["name"]
                in_schema.add(name)
                row = self._field(dataset_id, name, latest.created_at)
                before = (row.type, row.ordinal, row.description, row.removed_at)
                row.type = spec["type"]
                row.ordinal = ordinal
                if row.removed_at is not None:
                    row.removed_at = None
                if (
                    spec["description"]
                    and row.description != spec["description"]
                    and not self._steward_edited(dataset_id, name)
                ):
                    row.description = spec["description"]
                if before != (row.type, row.ordinal, row.description, row.removed_at):
                    self.dirty_fields.add((dataset_id, name))
            for (ds_id, name), row in self.fields.items():
                if ds_id == dataset_id and name not in in_schema and row.removed_at is None:
                    row.removed_at = latest.created_at
                    self.dirty_fields.add((ds_id, name))
        for key, seen in self.field_seen.items():
            found = self.fields.get(key)
            if found is not None and seen < found.first_seen:
                found.first_seen = seen
                self.dirty_fields.add(key)

    def _version_at(self, dataset_id: int, at: datetime) -> int | None:
        versions = self.versions.get(dataset_id) or []
        found = next((v for v in reversed(versions) if v.created_at <= at), None)
        return found.row.pk if found is not None and found.row is not None else None

    # -- writing it all down -----------------------------------------------------------------

    def finish(self) -> NormalizeResult:
        self._sync_fields()
        self._flush_fields()
        self._flush_versions()
        self._flush_datasets()
        self._flush_jobs()
        observations = []
        for pending in self.pending_runs:
            obs = pending.observation
            at = obs.event_time
            obs.inputs = [(d, self._version_at(d, at)) for d in dict.fromkeys(pending.inputs)]
            obs.outputs = [(d, self._version_at(d, at)) for d in dict.fromkeys(pending.outputs)]
            for target, mapping in pending.columns:
                source = self.dataset_ids[(mapping.source_namespace, mapping.source_name)]
                source_field = self.fields[(source, mapping.source_field)].pk
                target_field = (
                    self.fields[(target, mapping.target_field)].pk
                    if mapping.target_field is not None
                    else None
                )
                t = mapping.transformation
                key = (source_field, target, target_field, t.type, t.subtype)
                attrs = (t.masking, t.description)
                obs.columns[key] = max(attrs, obs.columns.get(key, attrs))
            observations.append(obs)
        since = graph_actions.record_runs(observations)
        # A closing ends the edges open at its instant: those jobs replay from there (they
        # were locked in prepare). Edges this batch opens later see the closing in the replay.
        for dataset_id, at in self.closures:
            for job_id in graph_actions.jobs_with_edges_open_at([(dataset_id, at)]):
                if job_id in self.jobs:
                    since[job_id] = min(at, since.get(job_id, at))
        edges = graph_actions.recompute_jobs(since)
        return NormalizeResult(
            jobs=set(self.jobs) | set(since), datasets=set(self.datasets), edges=edges
        )

    def _flush_fields(self) -> None:
        new = [row for row in self.fields.values() if row.pk is None]
        if new:
            DatasetField.objects.bulk_create(new)
        created = {id(row) for row in new}
        changed = [
            self.fields[key] for key in self.dirty_fields if id(self.fields[key]) not in created
        ]
        if changed:
            DatasetField.objects.bulk_update(
                changed, ["type", "ordinal", "description", "removed_at", "first_seen"]
            )

    def _flush_versions(self) -> None:
        create: list[DatasetVersion] = []
        update: list[DatasetVersion] = []
        for dataset_id in self.versions_changed:
            ds = self.datasets[dataset_id]
            for v in self.versions[dataset_id]:
                if not v.dirty:
                    continue
                ident = uuid.uuid5(
                    JOB_EVENT_RUNS,
                    f"{ds.pk}|{v.schema_hash}|{graph_actions.time_key(v.created_at)}",
                )
                if v.row is None:
                    v.row = DatasetVersion(
                        dataset_id=dataset_id,
                        version=ident,
                        created_at=v.created_at,
                        run_uuid=v.run_uuid,
                        schema_hash=v.schema_hash,
                        fields=v.fields,
                        lifecycle_state=v.lifecycle,
                    )
                    create.append(v.row)
                else:
                    v.row.version = ident
                    v.row.created_at = v.created_at
                    v.row.run_uuid = v.run_uuid
                    update.append(v.row)
                v.dirty = False
        if update:
            DatasetVersion.objects.bulk_update(update, ["version", "created_at", "run_uuid"])
        if create:
            DatasetVersion.objects.bulk_create(create)

    def _flush_datasets(self) -> None:
        for ds in self.datasets.values():
            closing = (ds.lineage_facets.get("closing") or {}).get("value", "")
            if ds.dropped_at is not None and ds.dropped_at >= ds.last_seen and closing:
                ds.lifecycle_state = CLOSING_KINDS[closing]
            else:
                ds.lifecycle_state = LifecycleState.ACTIVE
            ds.updated_at = self.now
        if self.datasets:
            Dataset.objects.bulk_update(
                list(self.datasets.values()),
                [
                    "first_seen",
                    "last_seen",
                    "dropped_at",
                    "lifecycle_state",
                    "lineage_facets",
                    "source_name",
                    "platform",
                    "storage_format",
                    "alias_of",
                    "updated_at",
                ],
            )

    def _flush_jobs(self) -> None:
        changed = []
        for job_id in self.touched_jobs:
            job = self.jobs[job_id]
            facets = job.facets
            job.sql = str((facets.get("sql") or {}).get("query") or "")
            job_type = facets.get("jobType") or {}
            job.processing_type = str(job_type.get("processingType") or "")[:32]
            job.job_type = str(job_type.get("jobType") or "")[:64]
            job.integration = str(job_type.get("integration") or "")[:64]
            job.description = str((facets.get("documentation") or {}).get("description") or "")
            job.location = str((facets.get("sourceCodeLocation") or {}).get("url") or "")[:2048]
            job.updated_at = self.now
            changed.append(job)
        if changed:
            Job.objects.bulk_update(
                changed,
                [
                    "facets",
                    "facet_times",
                    "sql",
                    "processing_type",
                    "job_type",
                    "integration",
                    "description",
                    "location",
                    "parent",
                    "created_at",
                    "updated_at",
                ],
            )


def _version_of(row: DatasetVersion) -> _Version:
    return _Version(
        created_at=row.created_at,
        schema_hash=row.schema_hash,
        fields=list(row.fields or []),
        lifecycle=row.lifecycle_state,
        run_uuid=row.run_uuid,
        row=row,
    )


def ensure_namespaces(names: Iterable[str]) -> dict[str, int]:
    """Ids of namespaces by name, creating missing ones (inserted in name order)."""
    wanted = set(names)
    if not wanted:
        return {}
    found = dict(Namespace.objects.filter(name__in=wanted).values_list("name", "id"))
    missing = sorted(wanted - set(found))
    if missing:
        Namespace.objects.bulk_create([Namespace(name=n) for n in missing], ignore_conflicts=True)
        found.update(Namespace.objects.filter(name__in=missing).values_list("name", "id"))
    return found


def ensure_datasets(
    wanted: dict[tuple[str, str], datetime], namespaces: dict[str, int]
) -> dict[tuple[str, str], int]:
    """Ids of datasets by (namespace, name), creating missing ones first seen at the given time."""
    if not wanted:
        return {}
    found = _dataset_ids(wanted, namespaces)
    missing = sorted(set(wanted) - set(found))
    if missing:
        now = timezone.now()
        Dataset.objects.bulk_create(
            [
                Dataset(
                    namespace_id=namespaces[ns],
                    name=name,
                    platform=platform_of(ns),
                    location=location_of(ns, name),
                    first_seen=wanted[(ns, name)],
                    last_seen=wanted[(ns, name)],
                    created_at=wanted[(ns, name)],
                    updated_at=now,
                )
                for ns, name in missing
            ],
            ignore_conflicts=True,
        )
        found.update(_dataset_ids(missing, namespaces))
    return found


def _dataset_ids(
    keys: Iterable[tuple[str, str]], namespaces: dict[str, int]
) -> dict[tuple[str, str], int]:
    by_ns: dict[int, list[str]] = defaultdict(list)
    for ns, name in keys:
        by_ns[namespaces[ns]].append(name)
    query = Q()
    for ns_id, names in by_ns.items():
        query |= Q(namespace_id=ns_id, name__in=names)
    names_by_id = {v: k for k, v in namespaces.items()}
    return {
        (names_by_id[ns_id], name): pk
        for ns_id, name, pk in Dataset.objects.filter(query).values_list(
            "namespace_id", "name", "id"
        )
    }


def lock_datasets(ids: Iterable[int]) -> dict[int, Dataset]:
    """Lock dataset rows in id order (after the job rows: the global lock order)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    rows = Dataset.objects.select_for_update(no_key=True).filter(pk__in=wanted).order_by("pk")
    return {ds.pk: ds for ds in rows}
