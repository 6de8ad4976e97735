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
  steward's edit stands until the producer declares different owners, and
  never with a facet older than the owners' last change (an edit that came
  first stands against an event that arrives late);
* lifecycleStateChange DROP closes the dataset's edges at the event time and
  marks it DROPPED; RENAME does the same to the previous name (RENAMED, with
  ``alias_of`` pointing at the new name); OVERWRITE, TRUNCATE, CREATE and
  ALTER leave edges alone and are kept in the dataset's history; a dataset
  seen again after its drop is active again; a renamed table's columns keep
  what stewards declared of them under the old name;
* runs, run io and edge validity: see graph.actions.

Locks are taken in one global order — namespaces, jobs and datasets are
inserted sorted, then job rows and then dataset rows are locked in id order —
so two workers on events of the same job or dataset wait, never deadlock.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import threading
import uuid
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, ForeignObjectRel, Max, OuterRef, Q, QuerySet, Subquery
from django.dispatch import receiver
from django.utils import timezone

from catalog import actions as catalog_actions
from catalog import bulk
from catalog.flags import FLAG_ATTRIBUTES
from catalog.lookups import in_windows
from catalog.models import (
    NEWEST_VERSION_FIRST,
    ChangeRecord,
    ChangeSource,
    Dataset,
    DatasetAlias,
    DatasetField,
    DatasetOwnership,
    DatasetVersion,
    FieldGap,
    FlagSource,
    LifecycleState,
    Namespace,
    OwnerKind,
    PropagatedFlag,
    SubjectKind,
)
from catalog.naming import PATH_PLATFORMS, canonical, canonical_namespace, platform
from catalog.queries import CLOSED_STATES, DATASET_ATTRIBUTES, last_sightings, value_as_of
from catalog.signals import flags_changed
from graph import actions as graph_actions
from graph import models as graph_models
from graph import propagation
from graph.models import Direction, Job, RunDataset
from graph.nodeids import dataset_node_id
from ingest.events import ColumnMapping, DatasetRef, ParsedEvent, SchemaField
from ingest.models import NO_RUN, DatasetRead, FacetObservation, SchemaObservation
from lineage_site import dispatch
from ops.models import Subscription

logger = logging.getLogger(__name__)
LINEAGE_ACTOR = catalog_actions.Actor(name="openlineage", source=ChangeSource.LINEAGE)
# What people said of a description, which lineage's own description does not overrule: a
# steward's edit, or a catalog file's.
PEOPLES_SAY = (ChangeSource.STEWARD, ChangeSource.IMPORT)
# The dataset attribute each kept facet sets.
FACET_ATTRIBUTES = {"documentation": "description", "ownership": "owners"}
JOB_EVENT_RUNS = uuid.UUID("5b1d3a52-7f0e-4c1a-9d43-0c6b3f1e2a77")
VERSION_IDS = uuid.UUID("0c1f6a4e-93b2-4f7e-8a55-4d2b9e61c0d8")
# Conditions OR-ed in one query: SQLite builds a tree one level deep per OR, at most 1,000.
OR_TERMS_PER_QUERY = 400


class RetryBatch(Exception):
    """Another transaction added edges this batch must close: run the batch again."""


@dataclass
class NormalizeResult:
    """What a batch touched, for cache invalidation and reporting."""

    jobs: set[int] = field(default_factory=set)
    datasets: set[int] = field(default_factory=set)

    def merge(self, other: NormalizeResult) -> None:
        self.jobs |= other.jobs
        self.datasets |= other.datasets


def field_gaps(
    versions: list[tuple[datetime, list[str]]],
) -> dict[str, list[tuple[datetime, datetime]]]:
    """Per field name, the stretches between its first and last schema version when a
    version did not hold it: from the version that left it out to the one that brought it
    back. ``versions`` are (effective from, field names), oldest first."""
    gaps: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    last: dict[str, int] = {}
    for index, (at, names) in enumerate(versions):
        for name in names:
            before = last.get(name)
            if before is not None and before + 1 < index and versions[before + 1][0] < at:
                gaps[name].append((versions[before + 1][0], at))
            last[name] = index
    return dict(gaps)


def normalize(events: list[ParsedEvent]) -> NormalizeResult:
    """Apply parsed events to the catalog and the graph in one transaction."""
    if not events:
        return NormalizeResult()
    with collector_paused(), transaction.atomic():
        batch = _Batch(sorted(events, key=lambda e: e.sort_key))
        batch.prepare()
        for event in batch.events:
            batch.apply(event)
        return batch.finish()


_collector_lock = threading.Lock()
_collector_pauses = 0
_collector_resume = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector out of work that builds many short-lived objects.

    A normalising batch holds tens of thousands of rows and model instances
    until it ends, and a batch POST the decoded JSON of hundreds of events; the
    collector would walk them again and again (and promote them, triggering
    full passes) without finding garbage. Reference counting still frees
    everything; the collector runs again once the last pause in the process is
    over (threads of a server may overlap their pauses).
    """
    global _collector_pauses, _collector_resume
    with _collector_lock:
        if _collector_pauses == 0:
            _collector_resume = gc.isenabled()
            gc.disable()
        _collector_pauses += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pauses -= 1
            if _collector_pauses == 0 and _collector_resume:
                gc.enable()


def schema_hash(fields: list[dict[str, str]], lifecycle: str, at: datetime | None = None) -> str:
    """Identity of a schema (and lifecycle change; a closing's own instant when given)."""
    parts: list[Any] = [[f["name"], f["type"], f["description"]] for f in fields]
    parts.append(lifecycle)
    if at is not None:
        parts.append(graph_actions.time_key(at))
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def location_of(namespace: str, name: str) -> str:
    """The physical location URI of file-like datasets, else ''."""
    if platform(namespace) not in PATH_PLATFORMS:
        return ""
    if namespace == "file":
        return f"file://{name}"[:2048]
    return f"{namespace.rstrip('/')}/{name.lstrip('/')}"[:2048]


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
        self.alias_keys: set[tuple[str, str]] = set()
        self.datasets: dict[int, Dataset] = {}
        self.unsighted: list[int] = []
        self.fields: dict[tuple[int, str], DatasetField] = {}
        # The earliest sighting of each (dataset, schema digest) in the batch.
        self.schema_seen: dict[tuple[int, str], datetime] = {}
        self.dirty_fields: set[tuple[int, str]] = set()
        # The gaps of the fields of the datasets whose fields were synced, by name.
        self.gaps: dict[int, dict[str, list[tuple[datetime, datetime]]]] = {}
        self.fields_loaded: set[int] = set()
        self.latest: dict[int, DatasetVersion | None] = {}
        self.sightings: dict[int, set[tuple[datetime, str, uuid.UUID]]] = defaultdict(set)
        self.specs: dict[tuple[int, str], tuple[list[dict[str, str]], str]] = {}
        # Events repeat the same schemas: each one's field rows and digest, made once.
        self.schemas: dict[tuple[SchemaField, ...], tuple[list[dict[str, str]], str]] = {}
        # Datasets whose versions changed, with the [from, to) span (to None: no end) of
        # event times whose run io may now point at another version.
        self.versions_changed: dict[int, tuple[datetime, datetime | None]] = {}
        self.all_versions: dict[int, list[DatasetVersion]] = {}
        self.dataset_names: dict[int, tuple[str, str]] = {}
        self.dataset_states: dict[int, tuple[Any, ...]] = {}
        self.closures: list[tuple[int, datetime]] = []
        self.renames: set[tuple[datetime, int, int]] = set()  # (instant, old, new)
        self.pending_runs: list[_PendingRun] = []
        self.steward_descriptions: set[tuple[int, str]] | None = None
        self.touched_jobs: set[int] = set()
        self.job_states: dict[int, tuple[Any, ...]] = {}
        # Documentation and ownership facets seen, and those older than one seen before.
        self.facets_seen: list[FacetObservation] = []
        self.late_facets: set[tuple[int, str, datetime]] = set()
        self.history_said: dict[int, dict[str, tuple[datetime, bool]]] | None = None

    # -- preparation: insert what is missing, then lock in a fixed order ---------------------

    def prepare(self) -> None:
        ns_names: set[str] = set()
        job_keys: dict[tuple[str, str], datetime] = {}
        dataset_keys: dict[tuple[str, str], datetime] = {}
        closing_keys: list[tuple[tuple[str, str], datetime]] = []
        symlinks: dict[tuple[str, str], tuple[str, str]] = {}  # alias -> the dataset it names

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
                    ns_names.add(alias[0])
                    symlinks.setdefault(alias, ref.key)
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
        self.dataset_ids = self._resolve_datasets(dataset_keys, symlinks)
        closures = [(self.dataset_ids[key], at) for key, at in closing_keys]
        closing_jobs = graph_actions.jobs_with_edges_open_at(closures)
        own_jobs = {self.job_ids[(e.job_namespace, e.job_name)] for e in self.events if e.job_name}
        # Parent jobs are locked only when this batch moves their creation time back.
        parent_times: dict[int, datetime] = {}
        for e in self.events:
            if e.parent_job:
                pk = self.job_ids[e.parent_job]
                parent_times[pk] = min(e.event_time, parent_times.get(pk, e.event_time))
        stale = {
            pk
            for pk, created in Job.objects.filter(
                pk__any_of=set(parent_times) - own_jobs
            ).values_list("pk", "created_at")
            if parent_times[pk] < created
        }
        self.jobs = graph_actions.lock_jobs(own_jobs | closing_jobs | stale)
        self.job_states = {pk: _job_state(job) for pk, job in self.jobs.items()}
        for pk in stale:
            job = self.jobs[pk]
            if parent_times[pk] < job.created_at:
                job.created_at = parent_times[pk]
                self.touched_jobs.add(pk)
        self.datasets = lock_datasets(self.dataset_ids.values())
        self.dataset_states = {pk: _dataset_state(ds) for pk, ds in self.datasets.items()}
        # Datasets written before sightings were kept: read from their history if dropped.
        self.unsighted = [
            pk for pk, ds in self.datasets.items() if "sighted" not in ds.lineage_facets
        ]
        if closures and not graph_actions.jobs_with_edges_open_at(closures) <= set(self.jobs):
            raise RetryBatch("edges were added to a closing dataset meanwhile")
        self._load_fields()
        self._load_latest_versions()

    def _resolve_datasets(
        self,
        wanted: dict[tuple[str, str], datetime],
        symlinks: dict[tuple[str, str], tuple[str, str]],
    ) -> dict[tuple[str, str], int]:
        """Ids of the datasets these names name: a known alias names its dataset, a new one
        (from a symlinks facet) the dataset whose facet lists it; the others are created if
        missing. A dataset stored under a name that became an alias merges into the dataset
        the alias names, after this batch commits."""
        known = dataset_aliases([*wanted, *symlinks], self.namespaces)
        new: dict[tuple[str, str], tuple[str, str]] = {}
        for alias, key in symlinks.items():
            if alias in known:
                continue  # the first dataset to claim a name keeps it
            seen = {alias}
            while key in new and key not in seen:
                seen.add(key)
                key = new[key]
            if key not in seen:  # else each names the other: the first claim stands
                new[alias] = key
        for alias, key in new.items():  # an alias of an alias names the last one
            while key in new:
                key = new[key]
            new[alias] = key
        creating = {key: at for key, at in wanted.items() if key not in known and key not in new}
        ids = ensure_datasets(creating, self.namespaces)
        ids.update(known)
        targets = {alias: ids[key] for alias, key in new.items()}
        if targets:
            DatasetAlias.objects.bulk_create(
                [
                    DatasetAlias(namespace_id=self.namespaces[ns], name=name, dataset_id=pk)
                    for (ns, name), pk in sorted(targets.items())
                ],
                ignore_conflicts=True,
            )
            ids.update(dataset_aliases(targets, self.namespaces))
        # Datasets still stored under names that are aliases now.
        aliases = {key: pk for key, pk in ids.items() if key in known or key in targets}
        self.alias_keys = set(aliases)
        stored = _dataset_ids(aliases, self.namespaces)
        twins = [(pk, aliases[key]) for key, pk in stored.items() if pk != aliases[key]]
        if twins:
            transaction.on_commit(lambda: merge_twins(twins))
        return ids

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
            for row in DatasetField.objects.filter(dataset_id__any_of=wanted).order_by():
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
            .order_by(*NEWEST_VERSION_FIRST)
            .values("pk")[:1]
        )
        pairs = dict(
            Dataset.objects.filter(pk__any_of=wanted)
            .order_by()
            .annotate(latest=Subquery(latest))
            .values_list("pk", "latest")
        )
        # Their instants and digests only: the field lists (JSON) are read where needed.
        rows = {
            v.pk: v
            for v in DatasetVersion.objects.filter(pk__any_of=[p for p in pairs.values() if p])
            .only("dataset_id", "created_at", "schema_hash", "lifecycle_state")
            .order_by()
        }
        for dataset_id in wanted:
            version_pk = pairs.get(dataset_id)
            self.latest[dataset_id] = rows[version_pk] if version_pk else None

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
            run_uuid = uuid.uuid5(
                JOB_EVENT_RUNS, f"{event.job_namespace}|{event.job_name}|{event.fingerprint}"
            )
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
                    _sighted(self.datasets[source], event.event_time)
        self.pending_runs.append(_PendingRun(observation, inputs, outputs, columns))

    def _observe_dataset(self, ref: DatasetRef, event: ParsedEvent) -> None:
        ds = self.datasets[self.dataset_ids[ref.key]]
        at = event.event_time
        ds.last_seen = max(ds.last_seen, at)
        ds.first_seen = min(ds.first_seen, at)
        # A run that reads or writes it, its schema or a lifecycle other than a drop says the
        # dataset is there; metadata alone (documentation, ownership) does not bring a
        # dropped one back. catalog.queries.closing_versions reads the same as of any instant.
        if ref.lifecycle != "DROP" and (
            event.kind != "dataset" or ref.schema is not None or ref.lifecycle
        ):
            _sighted(ds, at)
        run_uuid = event.run_uuid
        if ref.lifecycle == "DROP":
            self._close(ds, at, "DROP", run_uuid)
        elif ref.schema is not None:
            known = self.schemas.get(key := tuple(ref.schema))
            if known is None:
                fields = [
                    {"name": f.name, "type": f.type, "description": f.description}
                    for f in ref.schema
                ]
                known = self.schemas[key] = (fields, schema_hash(fields, ""))
            self._observe_schema(ds, at, known[0], "", run_uuid, known[1])
        if ref.lifecycle and ref.lifecycle != "DROP":
            detail = ref.lifecycle
            if ref.lifecycle == "RENAME" and ref.previous is not None:
                old = self.datasets[self.dataset_ids[ref.previous]]
                old.last_seen = max(old.last_seen, at)
                old.first_seen = min(old.first_seen, at)
                self._close(old, at, "RENAMED", run_uuid)
                self.renames.add((at, old.pk, ds.pk))
                # Renamed more than once (created again in between): the newest rename says
                # where the name went, whichever arrived last.
                if self._newest(old, "renamedTo", ds.pk, at, event.fingerprint):
                    old.alias_of_id = ds.pk
                self._newest(ds, "renamedFrom", old.pk, at, event.fingerprint)
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
                    ds.platform = platform(value["uri"]) or ds.platform
        if "storage" in facets:
            value = {"fileFormat": facets["storage"].get("fileFormat") or ""}
            if self._newest(ds, "storage", value, at, event.fingerprint):
                ds.storage_format = value["fileFormat"][:32]

    def _newest(self, ds: Dataset, facet: str, value: Any, at: datetime, tiebreak: str) -> bool:
        """Record a facet value if this event is the newest carrying it; True if the value changed."""
        key = graph_actions.time_key(at, tiebreak)
        kept = ds.lineage_facets.get(facet) or {}
        if key < kept.get("at", ""):
            return False
        ds.lineage_facets[facet] = {"at": key, "value": value}
        return bool(kept.get("value") != value)

    def _seen(self, ds: Dataset, facet: str, value: Any, at: datetime, tiebreak: str) -> bool:
        """Keep what this event's facet said; True if the history already says something
        after its time (a newer facet, a person's edit, that came first). It is then put in
        the history at its time in ``finish``, as arrival in time order would have, and
        today's value follows the history."""
        key = graph_actions.time_key(at, tiebreak)
        self.facets_seen.append(
            FacetObservation(dataset_id=ds.pk, facet=facet, key=key, at=at, value=value)
        )
        last_said, _ = self._said(ds).get(FACET_ATTRIBUTES[facet], (None, False))
        late = key < str((ds.lineage_facets.get(facet) or {}).get("at", "")) or (
            last_said is not None and last_said > at
        )
        if late:
            self.late_facets.add((ds.pk, facet, at))
        return late

    def _said(self, ds: Dataset) -> dict[str, tuple[datetime, bool]]:
        """Per attribute a facet sets: the last instant of the dataset's history before this
        batch, and whether a person ever gave it a value. Read once per batch, for all its
        datasets: in a batch only its facets write these attributes before ``finish``, and a
        facet newer than the newest one kept is newer than what they wrote."""
        if self.history_said is None:
            self.history_said = defaultdict(dict)
            for row in (
                ChangeRecord.objects.filter(
                    dataset_id__any_of=list(self.datasets),
                    field_name="",
                    attribute__in=FACET_ATTRIBUTES.values(),
                )
                .values("dataset_id", "attribute")
                .annotate(last=Max("at"), people=Count("id", filter=Q(source__in=PEOPLES_SAY)))
                .order_by()
            ):
                said = (row["last"], bool(row["people"]))
                self.history_said[row["dataset_id"]][row["attribute"]] = said
        return self.history_said[ds.pk]

    def _documentation(self, ds: Dataset, facet: dict[str, Any], at: datetime, fp: str) -> None:
        value = str(facet.get("description") or "")
        late = self._seen(ds, "documentation", value, at, fp)
        again = self._again(ds, "documentation", at)
        changed = self._newest(ds, "documentation", value, at, fp)
        if late or not changed or ds.description == value:
            return
        if not self._said(ds).get("description", (None, False))[1]:
            records = catalog_actions.update_dataset(
                ds, {"description": value}, LINEAGE_ACTOR, at=at
            )
            ds.description = value
            if again:
                _one_record_an_instant(records[0])

    def _ownership(self, ds: Dataset, facet: dict[str, Any], at: datetime, fp: str) -> None:
        owners = sorted(
            {(str(o["name"]), str(o.get("type") or "")) for o in facet.get("owners") or []}
        )
        value = [{"name": name, "type": kind} for name, kind in owners]
        late = self._seen(ds, "ownership", value, at, fp)
        again = self._again(ds, "ownership", at)
        if not self._newest(ds, "ownership", [list(o) for o in owners], at, fp) or late:
            return
        records = catalog_actions.update_dataset(
            ds, {"owners": _owner_specs(value)}, LINEAGE_ACTOR, at=at
        )
        if again and records:
            _one_record_an_instant(records[0])

    def _again(self, ds: Dataset, facet: str, at: datetime) -> bool:
        """Whether the newest facet kept so far is of this instant: another event's, before
        this one by key when this one is the newest (only then is the answer used)."""
        kept = str((ds.lineage_facets.get(facet) or {}).get("at", ""))
        return kept.startswith(graph_actions.time_key(at))

    def _late_facets(
        self, ds: Dataset, facet: str, late_at: set[datetime], histories: _Histories
    ) -> None:
        """Put in the history what facets that came late said at their times, as arrival in
        time order would have: each facet sets its value when it differs from the one before
        it in time, so the history changes at those and at the ones after. Today's value is
        then the history's last."""
        attribute = FACET_ATTRIBUTES[facet]
        # One value per instant, of the late ones and their neighbours (``_facets_around``):
        # what is rewritten is a late instant and the one after it, and what that reads is
        # the value at the instant before it. Every late instant but the history's first has
        # the one before it here, so one at index 0 is a change whatever its value.
        seen = sorted(histories.observed[(ds.pk, facet)].items(), key=lambda item: item[0])
        late = [i for i, (at, _) in enumerate(seen) if at in late_at]
        rewritten = {*late, *(i + 1 for i in late if i + 1 < len(seen))}
        for i in sorted(rewritten):
            at, value = seen[i]
            # The records from the next facet's time on are its own to put right, if it is
            # rewritten too.
            until = seen[i + 1][0] if i + 1 in rewritten else None
            changed = i == 0 or seen[i - 1][1] != value
            self._lineage_said(ds, attribute, at, value, changed, until, histories)
        records = histories.of(ds.pk, attribute)
        if not records:
            return
        if _follow_history(ds, attribute, records[-1].new, histories.owners[ds.pk]):
            histories.owners[ds.pk] = catalog_actions.owners_value(ds)

    def _lineage_said(
        self,
        ds: Dataset,
        attribute: str,
        at: datetime,
        value: Any,
        changed: bool,
        until: datetime | None,
        histories: _Histories,
    ) -> None:
        """Make the history say that lineage set ``value`` at ``at`` (``changed``) or said
        nothing new then, and the record after it start from the value then (kept if it is
        at or after ``until``)."""
        records = list(histories.of(ds.pk, attribute))
        if attribute == "description" and any(
            r.source in PEOPLES_SAY and r.at <= at for r in records
        ):
            return  # from a person's description on, lineage's is not the dataset's
        # Its own records, if it wrote any: lineage's at the instant, but at a rename's a
        # carried value (``_carry_attributes``) says something else and stays.
        renamed = at in histories.renamed_at(ds.pk)
        own = [
            r
            for r in records
            if r.at == at and r.source == ChangeSource.LINEAGE and (r.new == value or not renamed)
        ]
        if own:
            # It keeps its place: a person's record at the instant after it stays after it.
            first = records.index(own[0])
            before = records[:first]
            after = [r for r in records[first + 1 :] if r not in own]
        else:
            before = [r for r in records if r.at <= at]
            after = [r for r in records if r.at > at]
        if before:
            then = before[-1].new
        elif (ds.pk, attribute) in histories.start:
            then = histories.start[(ds.pk, attribute)]
        else:
            then = ds.description if attribute == "description" else histories.owners[ds.pk]
        for record in own[1:]:
            histories.delete(record)
        if changed and value != then:
            if own:
                histories.rewrite(own[0], then, value)
            else:
                histories.add(
                    catalog_actions.change_record(LINEAGE_ACTOR, ds, attribute, then, value, at)
                )
            then = value
        elif own:
            histories.delete(own[0])
        if after:
            # A record at or after the next late instant is that instant's to rewrite: it
            # only learns the value before it, and stays even if it now says nothing new.
            keep = until is not None and after[0].at >= until
            histories.start_from(after[0], then, keep=keep)

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

    def _observe_schema(
        self,
        ds: Dataset,
        at: datetime,
        fields: list[dict[str, str]],
        lifecycle: str,
        run_uuid: uuid.UUID | None,
        digest: str = "",
    ) -> None:
        """Record a sighting of the dataset's schema (``digest``: its schema_hash, when
        known); versions are derived in ``finish``."""
        # A closing is a fact of its own instant: two drops never merge into one version.
        if not digest:
            digest = schema_hash(fields, lifecycle, at if lifecycle in CLOSED_STATES else None)
        self.sightings[ds.pk].add((at, digest, run_uuid or NO_RUN))
        self.specs[(ds.pk, digest)] = (fields, lifecycle)
        key = (ds.pk, digest)
        self.schema_seen[key] = min(at, self.schema_seen.get(key, at))

    def _replay_versions(self) -> None:
        """Store the sightings and re-derive each dataset's versions around the new ones.

        A version starts at every sighting (in event-time order) whose schema
        differs from the sighting before it: the run-length encoding of the
        sightings, so any arrival order gives the same versions. New sightings
        between ``since`` and ``until`` can change whether a sighting starts a
        version only up to the first sighting after ``until``: the sightings
        read and the versions rewritten are that window's, however much history
        lies after it. A version whose start merely moves keeps its row, so the
        run io already pointing at it stays as it is.
        """
        if not self.sightings:
            return
        bulk.insert_values(
            SchemaObservation,
            ("dataset_id", "at", "schema_hash", "run_uuid"),
            [
                (d, *sighting)
                for d in sorted(self.sightings)
                for sighting in sorted(self.sightings[d])
            ],
            ignore_conflicts=True,
        )
        repeating = self._repeating()
        since = {
            d: min(at for at, _, _ in found)
            for d, found in self.sightings.items()
            if d not in repeating
        }
        ids = sorted(since)
        if not ids:
            return
        # The first sighting after each dataset's window (None: the window reaches the end).
        seen_last = {d: max(at for at, _, _ in self.sightings[d]) for d in ids}
        upto: dict[int, datetime | None] = _nearest(SchemaObservation, "at", seen_last, after=True)
        start = min(since.values())
        window: dict[int, list[tuple[datetime, str, uuid.UUID]]] = defaultdict(list)
        windows = {d: (since[d], upto[d]) for d in ids}
        for d, at, h, run in SchemaObservation.objects.filter(
            in_windows(SchemaObservation, "dataset", "at", windows)
        ).values_list("dataset_id", "at", "schema_hash", "run_uuid"):
            end = upto[d]
            if at >= since[d] and (end is None or at <= end):
                window[d].append((at, h, run))
        existing: dict[int, list[DatasetVersion]] = defaultdict(list)
        # Versions after the window: only the first one is wanted (where the window's last
        # version ends).
        after: dict[int, datetime] = {}
        for v in DatasetVersion.objects.filter(dataset_id__any_of=ids, created_at__gte=start):
            d, at, end = v.dataset_id, v.created_at, upto[v.dataset_id]
            if at < since[d]:
                continue
            if end is None or at <= end:
                existing[d].append(v)
            elif d not in after or at < after[d]:
                after[d] = at
        create: list[DatasetVersion] = []
        moved: list[DatasetVersion] = []
        gone: list[int] = []
        befores = self._versions_before(since)
        for d in ids:
            before = befores[d]
            last = before.schema_hash if before is not None else None
            wanted: dict[tuple[datetime, str], uuid.UUID | None] = {}
            for at, h, run in sorted(window[d]):
                if h != last:
                    wanted[(at, h)] = None if run == NO_RUN else run
                last = h
            for v in existing[d]:
                self.specs.setdefault((d, v.schema_hash), (list(v.fields or []), v.lifecycle_state))
            # Where run io must point again: [from, to) spans, to None for the end.
            spans: list[tuple[datetime, datetime | None]] = []
            kept: list[DatasetVersion] = []
            unwanted: dict[str, list[DatasetVersion]] = defaultdict(list)
            for v in sorted(existing[d], key=lambda v: v.created_at):
                if (v.created_at, v.schema_hash) in wanted:
                    starter = wanted.pop((v.created_at, v.schema_hash))
                    kept.append(v)
                    if v.run_uuid != starter:
                        v.run_uuid = starter
                        moved.append(v)
                else:
                    unwanted[v.schema_hash].append(v)
            starts = sorted([at for at, _ in wanted] + [v.created_at for v in kept])
            if d in after:
                starts.append(after[d])

            for (at, h), starter in sorted(wanted.items()):
                spare = unwanted.get(h)
                if spare:
                    # The same schema now starts elsewhere: the row moves with it.
                    v = spare.pop(0)
                    old = v.created_at
                    spans.append((min(old, at), max(old, at)))
                    v.created_at, v.run_uuid = at, starter
                    v.version = self._version_id(d, h, at)
                    moved.append(v)
                    kept.append(v)
                    continue
                fields, lifecycle = self._spec(d, h)
                row = DatasetVersion(
                    dataset_id=d,
                    version=self._version_id(d, h, at),
                    created_at=at,
                    run_uuid=starter,
                    schema_hash=h,
                    fields=fields,
                    lifecycle_state=lifecycle,
                )
                create.append(row)
                kept.append(row)
                spans.append((at, _next_after(starts, at)))
            for rows in unwanted.values():
                for v in rows:
                    gone.append(v.pk)
                    spans.append((v.created_at, _next_after(starts, v.created_at)))
            if spans:
                ends = [end for _, end in spans]
                self.versions_changed[d] = (
                    min(begin for begin, _ in spans),
                    None if None in ends else max(e for e in ends if e is not None),
                )
            if d in after:
                continue  # the newest version lies after the window: as loaded, unchanged
            newest = max(kept, key=lambda v: v.created_at, default=None)
            self.latest[d] = newest or before
        if gone:
            DatasetVersion.objects.filter(pk__any_of=gone).delete()
        bulk.update(DatasetVersion, moved, ["created_at", "version", "run_uuid"])
        if create:
            bulk.insert(DatasetVersion, create)
            # Owners downstream are told of columns a new schema removes or retypes.
            started = [str(row.version) for row in create]
            transaction.on_commit(
                lambda: dispatch.send("ops.notify_schema", [started]), robust=True
            )
        self.all_versions.clear()

    def _repeating(self) -> set[int]:
        """The datasets whose every new sighting has the schema of the sightings at the latest
        instant before it, and shares its own instant with no other schema.

        Such a sighting neither starts a version nor ends one: the sighting after it follows
        the same schema as before. So these datasets' versions stand as stored, and their
        replay is skipped: a late or repeated sighting of an unchanged schema costs one
        index probe, not a read of every sighting after it. One statement on PostgreSQL;
        elsewhere every dataset is replayed.
        """
        if connection.vendor != "postgresql":
            return set()
        sightings = [(d, at, h) for d, found in self.sightings.items() for at, h, _ in found]
        table = connection.ops.quote_name(SchemaObservation._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT s.d FROM (SELECT n.d, coalesce(("
                f"SELECT bool_and(o.schema_hash = n.h) FROM {table} o WHERE o.dataset_id = n.d "
                f"AND o.at = (SELECT max(p.at) FROM {table} p "
                "WHERE p.dataset_id = n.d AND p.at < n.at)), false) "
                f"AND NOT EXISTS (SELECT FROM {table} o WHERE o.dataset_id = n.d "
                "AND o.at = n.at AND o.schema_hash <> n.h) AS repeats "
                "FROM unnest(%s::bigint[], %s::timestamptz[], %s::text[]) AS n(d, at, h)) s "
                "GROUP BY s.d HAVING bool_and(s.repeats)",
                [
                    [d for d, _, _ in sightings],
                    [at for _, at, _ in sightings],
                    [h for *_, h in sightings],
                ],
            )
            return {d for (d,) in cursor.fetchall()}

    def _version_id(self, dataset_id: int, digest: str, at: datetime) -> uuid.UUID:
        """A version id that depends only on the dataset's name, schema and start."""
        names = self.dataset_names.get(dataset_id)
        if names is None:
            self.dataset_names = {
                pk: key for key, pk in self.dataset_ids.items() if key not in self.alias_keys
            }
            names = self.dataset_names[dataset_id]
        ident = f"{names[0]}|{names[1]}|{digest}|{graph_actions.time_key(at)}"
        return uuid.uuid5(VERSION_IDS, ident)

    def _versions_before(self, instants: dict[int, datetime]) -> dict[int, DatasetVersion | None]:
        """Each dataset's version in force just before the given instant."""
        found: dict[int, DatasetVersion | None] = {}
        ask: dict[int, datetime] = {}
        for d, at in instants.items():
            latest = self.latest.get(d)
            if latest is not None and latest.created_at < at:
                found[d] = latest
            elif d in self.latest and latest is None:
                found[d] = None  # it had no versions before this batch
            else:
                ask[d] = at
        pks = _nearest(DatasetVersion, "id", ask, after=False)
        rows = DatasetVersion.objects.in_bulk([pk for pk in pks.values() if pk is not None])
        for d in ask:
            pk = pks[d]
            found[d] = None if pk is None else rows[pk]
        return found

    def _spec(self, dataset_id: int, digest: str) -> tuple[list[dict[str, str]], str]:
        found = self.specs.get((dataset_id, digest))
        if found is None:
            row = DatasetVersion.objects.filter(dataset_id=dataset_id, schema_hash=digest).first()
            found = (list(row.fields or []), row.lifecycle_state) if row else ([], "")
            self.specs[(dataset_id, digest)] = found
        return found

    def _preload_versions(self, ids: Iterable[int]) -> None:
        """Load the version lists of many datasets in one query."""
        missing = [d for d in ids if d not in self.all_versions]
        if not missing:
            return
        for d in missing:
            self.all_versions[d] = []
        for version in DatasetVersion.objects.filter(dataset_id__any_of=missing).order_by(
            "dataset_id", "created_at", "schema_hash"
        ):
            self.all_versions[version.dataset_id].append(version)

    def _versions_of(self, dataset_id: int) -> list[DatasetVersion]:
        if dataset_id not in self.all_versions:
            self.all_versions[dataset_id] = list(
                DatasetVersion.objects.filter(dataset_id=dataset_id).order_by(
                    "created_at", "schema_hash"
                )
            )
        return self.all_versions[dataset_id]

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
                    dataset_id__any_of=set(self.versions_changed),
                    attribute="description",
                    source__in=PEOPLES_SAY,
                )
                .exclude(field_name="")
                .values_list("dataset_id", "field_name")
            )
        return (dataset_id, name) in self.steward_descriptions

    def _sync_fields(self) -> None:
        """Make field rows a function of the dataset's schema versions, whatever their order.

        Each field takes type and position from the newest version holding it, and
        its description from the newest one giving it one (an empty one gives none),
        is removed from the version after its last appearance, and
        was first seen at its earliest appearance. Fields known only from column
        lineage stay current unless the dataset's newest version closed it.
        """
        created = {key[0] for key, row in self.fields.items() if row.pk is None}
        syncing = sorted(set(self.versions_changed) | created)
        self._preload_versions(syncing)
        rows_of: dict[int, list[DatasetField]] = defaultdict(list)
        for (ds_id, _), row in self.fields.items():
            rows_of[ds_id].append(row)
        for dataset_id in syncing:
            versions = self._versions_of(dataset_id)
            newest: dict[str, tuple[int, int, dict[str, str]]] = {}
            earliest: dict[str, datetime] = {}
            described: dict[str, str] = {}  # the newest description given (none: not given)
            for index, version in enumerate(versions):
                for ordinal, spec in enumerate(version.fields):
                    newest[spec["name"]] = (index, ordinal, spec)
                    earliest.setdefault(spec["name"], version.created_at)
                    if spec["description"]:
                        described[spec["name"]] = spec["description"]
            if len(versions) > 2:  # a gap needs a version before, one without and one after
                self.gaps[dataset_id] = field_gaps(
                    [(v.created_at, [spec["name"] for spec in v.fields]) for v in versions]
                )
            for name, (index, ordinal, spec) in newest.items():
                row = self._field(dataset_id, name, earliest[name])
                removed_at = versions[index + 1].created_at if index + 1 < len(versions) else None
                description = row.description
                given = described.get(name, "")
                if given and description != given and not self._steward_edited(dataset_id, name):
                    description = given
                first_seen = min(row.first_seen, earliest[name])
                self._set_field(row, spec["type"], ordinal, description, removed_at, first_seen)
            closing = (
                versions[-1] if versions and versions[-1].lifecycle_state in CLOSED_STATES else None
            )
            # Rows created by _field above for this dataset are all in ``newest``.
            for row in rows_of[dataset_id]:
                if row.name not in newest:
                    removed_at = closing.created_at if closing is not None else None
                    self._set_field(
                        row, row.type, row.ordinal, row.description, removed_at, row.first_seen
                    )
        # A field was first seen with the earliest sighting of a schema that has it.
        for (dataset_id, digest), seen in self.schema_seen.items():
            for f in self.specs[(dataset_id, digest)][0]:
                found = self.fields.get((dataset_id, f["name"]))
                if found is not None and seen < found.first_seen:
                    found.first_seen = seen
                    self.dirty_fields.add((dataset_id, f["name"]))

    def _set_field(
        self,
        row: DatasetField,
        kind: str,
        ordinal: int,
        description: str,
        removed_at: datetime | None,
        first_seen: datetime,
    ) -> None:
        before = (row.type, row.ordinal, row.description, row.removed_at, row.first_seen)
        after = (kind[:255], ordinal, description, removed_at, first_seen)
        if before != after:
            row.type, row.ordinal, row.description, row.removed_at, row.first_seen = after
            self.dirty_fields.add((row.dataset_id, row.name))

    def _version_at(self, dataset_id: int, at: datetime) -> int | None:
        """Id of the dataset's version in force at ``at``."""
        latest = self.latest.get(dataset_id)
        if latest is not None and latest.created_at <= at:
            return latest.pk
        if dataset_id in self.latest and latest is None:
            return None
        found = None
        for version in self._versions_of(dataset_id):
            if version.created_at > at:
                break
            found = version
        return found.pk if found is not None else None

    def _repoint_run_io(self) -> None:
        """Run io rows point at the version in force at their event time: re-point the rows
        in the spans where this batch changed a dataset's versions."""
        if not self.versions_changed:
            return
        stale = []
        changed = list(self.versions_changed.items())
        # A few hundred conditions a query: SQLite refuses an expression deeper than 1,000.
        for start in range(0, len(changed), OR_TERMS_PER_QUERY):
            query = Q()
            for dataset_id, (begin, end) in changed[start : start + OR_TERMS_PER_QUERY]:
                bound = {} if end is None else {"event_time__lt": end}
                # Both directions named: the (dataset, direction, time) index serves the range.
                query |= Q(
                    dataset_id=dataset_id,
                    direction__in=(Direction.INPUT, Direction.OUTPUT),
                    event_time__gte=begin,
                    **bound,
                )
            for row in RunDataset.objects.filter(query).only(
                "pk", "dataset_id", "event_time", "dataset_version_id"
            ):
                wanted = self._version_at(row.dataset_id, row.event_time)
                if row.dataset_version_id != wanted:
                    row.dataset_version_id = wanted
                    stale.append(row)
        if stale:
            bulk.update(RunDataset, stale, ["dataset_version"])

    # -- writing it all down -----------------------------------------------------------------

    def finish(self) -> NormalizeResult:
        self._replay_versions()
        self._sync_fields()
        self._flush_fields()
        self._repoint_run_io()
        self._flush_datasets()
        FacetObservation.objects.bulk_create(self.facets_seen, ignore_conflicts=True)
        late: dict[tuple[int, str], set[datetime]] = defaultdict(set)
        for dataset_id, facet, seen_at in self.late_facets:
            late[(dataset_id, facet)].add(seen_at)
        if late:
            histories = _Histories(late)
            for (dataset_id, facet), instants in sorted(late.items()):
                self._late_facets(self.datasets[dataset_id], facet, instants, histories)
            histories.save()
        renamed_from = {
            pk: ds.lineage_facets["renamedFrom"]["value"]
            for pk, ds in self.datasets.items()
            if "renamedFrom" in ds.lineage_facets
        }
        _carry_declarations(
            self.datasets, {dataset_id for dataset_id, _ in late}, self.renames, renamed_from
        )
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
        since = graph_actions.record_runs(observations, self.jobs)
        # A closing ends the edges open at its instant: those jobs replay from there (they
        # were locked in prepare). Edges this batch opens later see the closing in the replay.
        for dataset_id, at in self.closures:
            for job_id in graph_actions.jobs_with_edges_open_at([(dataset_id, at)]):
                if job_id in self.jobs:
                    graph_actions.widen(since, job_id, at, at)
        graph_actions.recompute_jobs(since, self.jobs)
        self._flush_jobs()
        return NormalizeResult(jobs=set(self.jobs) | set(since), datasets=set(self.datasets))

    def _flush_fields(self) -> None:
        new = [row for row in self.fields.values() if row.pk is None]
        if new:
            bulk.insert(DatasetField, new)
        created = {id(row) for row in new}
        changed = [
            self.fields[key] for key in self.dirty_fields if id(self.fields[key]) not in created
        ]
        bulk.update(
            DatasetField, changed, ["type", "ordinal", "description", "removed_at", "first_seen"]
        )
        if self.gaps:
            wanted = {
                (self.fields[(dataset_id, name)].pk, start, end)
                for dataset_id, by_name in self.gaps.items()
                for name, spans in by_name.items()
                for start, end in spans
            }
            held = {
                (field, start, end): pk
                for pk, field, start, end in FieldGap.objects.filter(
                    field__dataset_id__any_of=list(self.gaps)
                ).values_list("pk", "field_id", "removed_at", "returned_at")
            }
            stale = [pk for key, pk in held.items() if key not in wanted]
            if stale:
                FieldGap.objects.filter(pk__any_of=stale).delete()
            FieldGap.objects.bulk_create(
                FieldGap(field_id=field, removed_at=start, returned_at=end)
                for field, start, end in wanted - held.keys()
            )

    def _flush_datasets(self) -> None:
        changed = []
        dropped = [pk for pk in self.unsighted if self.datasets[pk].dropped_at is not None]
        found = last_sightings(dropped) if dropped else {}
        for pk in dropped:
            # Its history is read once: none found is kept as none.
            self.datasets[pk].lineage_facets.setdefault("sighted", {"at": ""})
            if pk in found:
                _sighted(self.datasets[pk], found[pk])
        for ds in self.datasets.values():
            ds.lifecycle_state = _lifecycle(ds)
            if _dataset_state(ds) != self.dataset_states.get(ds.pk):
                ds.updated_at = self.now
                changed.append(ds)
        bulk.update(Dataset, changed, [*DATASET_FIELDS, "updated_at"])

    def _flush_jobs(self) -> None:
        """Write the jobs this batch changed: facets, and the latest run and timeline end
        that ``record_runs`` and ``recompute_jobs`` set on them."""
        changed = [
            job
            for pk, job in self.jobs.items()
            if pk not in self.touched_jobs and _job_state(job) != self.job_states[pk]
        ]
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
            bulk.update(
                Job,
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
                    "latest_run",
                    "timeline_end",
                    "timeline_digest",
                    "created_at",
                    "updated_at",
                ],
            )


DATASET_FIELDS = [
    "first_seen",
    "last_seen",
    "dropped_at",
    "lifecycle_state",
    "lineage_facets",
    "source_name",
    "platform",
    "storage_format",
    "alias_of",
]


class _Histories:
    """The dataset histories a batch's late facets rewrite, read in a few queries whatever
    their number (facets around the late instants in three, records and owners in one
    each), rewritten in memory, written back in three. What a rename carries is put right
    after (``_carry_facet``). Records keep the
    history's order (by time, then as written): a new one goes after those of its instant,
    and new ones are written in the order they were made."""

    def __init__(self, late: dict[tuple[int, str], set[datetime]]) -> None:
        dataset_ids = list({dataset_id for dataset_id, _ in late})
        self.observed = _facets_around(late)
        self.records: dict[tuple[int, str], list[ChangeRecord]] = defaultdict(list)
        for record in ChangeRecord.objects.filter(
            dataset_id__any_of=dataset_ids,
            field_name="",
            attribute__in=[*FACET_ATTRIBUTES.values(), "lifecycle"],
        ).order_by("at", "id"):
            self.records[(record.dataset_id, record.attribute)].append(record)
        # What the history starts from (records before this batch's rewrite never change it).
        self.start = {key: records[0].old for key, records in self.records.items()}
        # Each dataset's owners now, in the form the history keeps them (``owners_value``).
        self.owners: dict[int, list[dict[str, str]]] = defaultdict(list)
        for dataset_id, name, kind in (
            DatasetOwnership.objects.filter(dataset_id__any_of=dataset_ids)
            .order_by("dataset_id", "owner__name", "ownership_type")
            .values_list("dataset_id", "owner__name", "ownership_type")
        ):
            self.owners[dataset_id].append({"name": name, "type": kind})
        self.deleted: list[ChangeRecord] = []
        self.added: list[ChangeRecord] = []
        self.changed: list[ChangeRecord] = []

    def of(self, dataset_id: int, attribute: str) -> list[ChangeRecord]:
        return self.records[(dataset_id, attribute)]

    def renamed_at(self, dataset_id: int) -> set[datetime]:
        return {
            r.at for r in self.of(dataset_id, "lifecycle") if str(r.new).startswith("RENAME from")
        }

    def add(self, record: ChangeRecord) -> None:
        records = self.of(record.dataset_id, record.attribute)
        records.insert(bisect_right(records, record.at, key=lambda r: r.at), record)
        self.added.append(record)

    def delete(self, record: ChangeRecord) -> None:
        self.of(record.dataset_id, record.attribute).remove(record)
        if record.pk is not None:
            self.deleted.append(record)

    def rewrite(self, record: ChangeRecord, old: Any, new: Any) -> None:
        record.old, record.new = old, new
        self.changed.append(record)

    def start_from(self, record: ChangeRecord, value: Any, keep: bool = False) -> None:
        """Make a history record start from ``value``: gone if it then says what was so
        already (arrival in time order had not written it), unless ``keep``."""
        if record.old == value:
            return
        if record.new == value and not keep:
            self.delete(record)
        else:
            record.old = value
            self.changed.append(record)

    def save(self) -> None:
        gone = {id(r) for r in self.deleted}
        changed = {id(r): r for r in self.changed if r.pk is not None and id(r) not in gone}
        ChangeRecord.objects.filter(pk__any_of=[r.pk for r in self.deleted]).delete()
        ChangeRecord.objects.bulk_update(list(changed.values()), ["old", "new"])
        # In the order they were made, as writing each at once would have numbered them.
        kept = {id(r) for records in self.records.values() for r in records if r.pk is None}
        ChangeRecord.objects.bulk_create([r for r in self.added if id(r) in kept])


def _facets_around(
    late: dict[tuple[int, str], set[datetime]],
) -> dict[tuple[int, str], dict[datetime, Any]]:
    """For each dataset and facet, the value said at each late instant, at the instant
    before it and at the one after (of the facets at one instant, the last by key, as
    ``_newest``): what rewriting the history around them reads. Each is found through the
    (dataset, facet, key) index, so these reads do not grow with the history (the change
    records ``_Histories`` reads still do, by about one a day a facet changes)."""
    step = timedelta(microseconds=1)
    # Before an instant: the last facet of the one before it. Before the next microsecond:
    # its own last, and from there on the first of the next instant, whose last follows.
    around = _facets_by_key(
        {(d, f, at + s) for (d, f), ats in late.items() for at in ats for s in (timedelta(0), step)}
    )
    nexts = {
        (d, f, graph_actions.key_time(first) + step)
        for (d, f, bound), (_, first) in around.items()
        if first is not None and bound - step in late[(d, f)]
    }
    around.update(_facets_by_key(nexts))
    found: dict[tuple[int, str], dict[datetime, Any]] = defaultdict(dict)
    for dataset_id, facet, at, value in FacetObservation.objects.filter(
        pk__any_of=[last for last, _ in around.values() if last is not None]
    ).values_list("dataset_id", "facet", "at", "value"):
        found[(dataset_id, facet)][at] = value
    return found


def _facets_by_key(
    bounds: set[tuple[int, str, datetime]],
) -> dict[tuple[int, str, datetime], tuple[int | None, str | None]]:
    """For each (dataset, facet, instant): the id of its last facet before the instant, and
    the key of its first from the instant on. Keys sort by time (``graph.actions.time_key``:
    the time's text first), so an instant's text bounds them. A query takes three
    parameters a bound: 1,200 a chunk, under SQLite's limit since 3.32 (32,766)."""
    table = connection.ops.quote_name(FacetObservation._meta.db_table)
    match = f"FROM {table} o WHERE o.dataset_id = w.d AND o.facet = w.f AND o.key"
    texts = {
        (d, f, at.astimezone(UTC).isoformat(timespec="microseconds")): (d, f, at)
        for d, f, at in bounds
    }
    found = {}
    windows = sorted(texts)
    for start in range(0, len(windows), OR_TERMS_PER_QUERY):
        chunk = windows[start : start + OR_TERMS_PER_QUERY]
        with connection.cursor() as cursor:
            cursor.execute(
                f"WITH w(d, f, t) AS (VALUES {', '.join(['(%s, %s, %s)'] * len(chunk))}) "
                f"SELECT w.d, w.f, w.t, (SELECT o.id {match} < w.t ORDER BY o.key DESC LIMIT 1), "
                f"(SELECT o.key {match} >= w.t ORDER BY o.key LIMIT 1) FROM w",
                [value for window in chunk for value in window],
            )
            for d, f, text, last, first in cursor.fetchall():
                found[texts[(d, f, text)]] = (last, first)
    return found


def _job_state(job: Job) -> tuple[Any, ...]:
    return (job.latest_run_id, job.timeline_end, job.timeline_digest)


def _dataset_state(ds: Dataset) -> tuple[Any, ...]:
    """What the normaliser may change on a dataset, comparable before and after a batch."""
    return tuple(
        json.dumps(ds.lineage_facets, sort_keys=True)
        if name == "lineage_facets"
        else getattr(ds, "alias_of_id" if name == "alias_of" else name)
        for name in DATASET_FIELDS
    )


def _next_after(starts: list[datetime], at: datetime) -> datetime | None:
    return next((s for s in starts if s > at), None)


def _nearest(
    model: Any, value: str, instants: dict[int, datetime], *, after: bool
) -> dict[int, Any]:
    """For each dataset, ``value`` of its ``model`` row nearest the given instant, strictly
    after or before it (by the row's time ``at`` or ``created_at``, then schema digest)."""
    time = "at" if model is SchemaObservation else "created_at"
    found: dict[int, Any] = dict.fromkeys(instants)
    if not instants:
        return found
    sign, order = (">", "") if after else ("<", " DESC")
    if connection.vendor != "postgresql":
        for d, at in instants.items():
            found[d] = (
                model.objects.filter(dataset_id=d, **{f"{time}__{'gt' if after else 'lt'}": at})
                .order_by(*(f"{'' if after else '-'}{c}" for c in (time, "schema_hash")))
                .values_list(value, flat=True)
                .first()
            )
        return found
    # One statement, one index probe per dataset.
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT d.id, (SELECT r.{value} FROM {model._meta.db_table} r "
            f"WHERE r.dataset_id = d.id AND r.{time} {sign} d.at "
            f"ORDER BY r.{time}{order}, r.schema_hash{order} LIMIT 1) "
            "FROM unnest(%s::bigint[], %s::timestamptz[]) AS d(id, at)",
            [list(instants), list(instants.values())],
        )
        found.update(cursor.fetchall())
    return found


def ensure_namespaces(names: Iterable[str]) -> dict[str, int]:
    """Ids of namespaces by name, creating missing ones (inserted in name order)."""
    wanted = set(names)
    if not wanted:
        return {}
    found = dict(Namespace.objects.filter(name__any_of=wanted).values_list("name", "id"))
    missing = sorted(wanted - set(found))
    if missing:
        Namespace.objects.bulk_create([Namespace(name=n) for n in missing], ignore_conflicts=True)
        found.update(Namespace.objects.filter(name__any_of=missing).values_list("name", "id"))
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
                    platform=platform(ns),
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
    return _named(Dataset, "id", keys, namespaces)


def dataset_aliases(
    keys: Iterable[tuple[str, str]], namespaces: dict[str, int]
) -> dict[tuple[str, str], int]:
    """The dataset each of these names is an alias of (names that are no alias left out)."""
    return _named(DatasetAlias, "dataset_id", keys, namespaces)


def _named(
    model: Any, column: str, keys: Iterable[tuple[str, str]], namespaces: dict[str, int]
) -> dict[tuple[str, str], int]:
    """``column`` of the rows of ``model`` named by these (namespace, name) keys."""
    by_ns: dict[int, list[str]] = defaultdict(list)
    for ns, name in keys:
        if ns in namespaces:
            by_ns[namespaces[ns]].append(name)
    if not by_ns:
        return {}
    query = Q()
    for ns_id, names in by_ns.items():
        query |= Q(namespace_id=ns_id, name__any_of=names)
    names_by_id = {v: k for k, v in namespaces.items()}
    return {
        (names_by_id[ns_id], name): pk
        for ns_id, name, pk in model.objects.filter(query)
        .order_by()
        .values_list("namespace_id", "name", column)
    }


def lock_datasets(ids: Iterable[int]) -> dict[int, Dataset]:
    """Lock dataset rows in id order (after the job rows: the global lock order)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    rows = Dataset.objects.select_for_update(no_key=True).filter(pk__any_of=wanted).order_by("pk")
    return {ds.pk: ds for ds in rows}


# -- one name per dataset: renames and merges of twins ----------------------------------------

NAMING_ACTOR = catalog_actions.Actor(name="catalog.naming", source=ChangeSource.LINEAGE)
BEGINNING = datetime(1, 1, 2, tzinfo=UTC)


@dataclass
class NamingReport:
    renamed: list[tuple[str, str]] = field(default_factory=list)  # (old node id, new)
    merged: list[tuple[str, str]] = field(default_factory=list)  # (twin's node id, survivor's)
    aliased: list[tuple[str, str]] = field(default_factory=list)  # (alias's node id, dataset's)


def canonicalise_names() -> NamingReport:
    """Give every dataset its canonical name (catalog.naming); a dataset whose name becomes
    another's is merged into it (``merge_datasets``). Idempotent."""
    report = NamingReport(aliased=_alias_symlinked())
    existing: dict[tuple[str, str], int] = {}
    moving: dict[tuple[str, str], list[int]] = defaultdict(list)
    names: dict[int, tuple[str, str]] = {}
    for pk, namespace, name in Dataset.objects.order_by("pk").values_list(
        "pk", "namespace__name", "name"
    ):
        key = canonical(namespace, name)
        if key == (namespace, name):
            existing[key] = pk
        else:
            moving[key].append(pk)
            names[pk] = (namespace, name)
    # The oldest spelling takes the canonical name when no dataset has it; the others merge.
    renames = [(twins[0], key) for key, twins in sorted(moving.items()) if key not in existing]
    report.renamed = _rename(renames, names)
    existing.update((key, pk) for pk, key in renames)
    for key, twins in sorted(moving.items()):
        for twin in twins:
            if twin != existing[key]:
                report.merged.append(merge_datasets(twin, existing[key]))
    _canonical_reads()
    _canonical_aliases(existing)
    return report


def _canonical_aliases(datasets: dict[tuple[str, str], int]) -> None:
    """Aliases under their canonical names (an alias that became a dataset's own name, or
    another alias's, goes), and what else pointed at a namespace whose datasets moved to
    its canonical spelling (a subscription, say) points there too. Jobs keep theirs."""
    taken = set(datasets)
    for pk, namespace, name in DatasetAlias.objects.order_by("pk").values_list(
        "pk", "namespace__name", "name"
    ):
        key = canonical(namespace, name)
        if key == (namespace, name):
            taken.add(key)
        elif key in taken:
            DatasetAlias.objects.filter(pk=pk).delete()
        else:
            target, _ = Namespace.objects.get_or_create(name=key[0])
            DatasetAlias.objects.filter(pk=pk).update(namespace=target, name=key[1])
            taken.add(key)
    kept = {Dataset._meta.label, graph_models.Job._meta.label}
    for old in Namespace.objects.all():
        spelled = Namespace.objects.filter(name=canonical_namespace(old.name)).exclude(pk=old.pk)
        moved_to = spelled.first()
        if moved_to is None:
            continue
        for relation in Namespace._meta.get_fields(include_hidden=True):
            model = relation.related_model
            if isinstance(relation, ForeignObjectRel) and not isinstance(model, str | None):
                if model._meta.label in kept:
                    continue
                field = relation.field.name
                model._default_manager.filter(**{field: old}).update(**{field: moved_to})
        if not old.datasets.exists() and not old.jobs.exists():
            old.delete()  # nothing is named under this spelling any more


def _alias_symlinked() -> list[tuple[str, str]]:
    """Datasets stored as another's alias (from its symlinks facet, before aliases were
    names) become names of it: merged in, their names kept as its aliases."""
    found = []
    pointing = dict(
        Dataset.objects.filter(alias_of__isnull=False)
        .exclude(lifecycle_state=LifecycleState.RENAMED)
        .values_list("pk", "alias_of_id")
    )
    for twin in sorted(pointing):
        survivor, seen = pointing[twin], {twin}
        while survivor in pointing and survivor not in seen:
            seen.add(survivor)
            survivor = pointing[survivor]
        if survivor in seen:
            continue  # each names the other: the first stays a dataset
        with transaction.atomic():
            ns_id, name = Dataset.objects.filter(pk=twin).values_list("namespace_id", "name")[0]
            found.append(merge_datasets(twin, survivor))
            DatasetAlias.objects.get_or_create(
                namespace_id=ns_id, name=name, defaults={"dataset_id": survivor}
            )
        pointing.pop(twin)
    return found


def _canonical_reads() -> None:
    """Query-log reads under canonical names, the counts of two spellings added up."""
    kept: dict[tuple[Any, ...], DatasetRead] = {}
    changed: dict[int, DatasetRead] = {}
    doubled: list[int] = []
    for read in DatasetRead.objects.order_by("pk").iterator():
        key = canonical(read.namespace, read.name)
        if key != (read.namespace, read.name):
            read.namespace, read.name = key
            changed[read.pk] = read
        first = kept.setdefault(
            (read.upload_id, *key, read.reader, read.fingerprint, read.day), read
        )
        if first is not read:
            first.count += read.count
            first.first_at = min(first.first_at, read.first_at)
            first.last_at = max(first.last_at, read.last_at)
            changed[first.pk] = first
            changed.pop(read.pk, None)
            doubled.append(read.pk)
    with transaction.atomic():
        DatasetRead.objects.filter(pk__in=doubled).delete()
        DatasetRead.objects.bulk_update(
            list(changed.values()), ["namespace", "name", "count", "first_at", "last_at"], 500
        )


def _rename(
    renames: list[tuple[int, tuple[str, str]]], names: dict[int, tuple[str, str]]
) -> list[tuple[str, str]]:
    """Give these datasets these names (free ones), a few thousand a statement, each
    rename in the dataset's history; returns (old node id, new) pairs."""
    done = []
    for start in range(0, len(renames), 5000):
        chunk = renames[start : start + 5000]
        with transaction.atomic():
            namespaces = ensure_namespaces({key[0] for _, key in chunk})
            rows = lock_datasets(pk for pk, _ in chunk)
            records = []
            for pk, (namespace, name) in chunk:
                ds = rows[pk]
                ds.namespace_id, ds.name = namespaces[namespace], name
                pair = (dataset_node_id(*names[pk]), dataset_node_id(namespace, name))
                records.append(_naming_record(ds, "name", *pair))
                done.append(pair)
            bulk.update(Dataset, list(rows.values()), ["namespace", "name"])
            ChangeRecord.objects.bulk_create(records)
    return done


def _naming_record(
    ds: Dataset, attribute: str, old: Any, new: Any, field_name: str = ""
) -> ChangeRecord:
    return ChangeRecord(
        at=timezone.now(),
        actor_name=NAMING_ACTOR.display,
        source=NAMING_ACTOR.source,
        dataset_id=ds.pk,
        field_name=field_name,
        attribute=attribute,
        old=old,
        new=new,
    )


def _chain_history(
    ds: Dataset, attribute: str, before: Any, merged: Any, field_name: str = ""
) -> None:
    """Where the history of two merged names, now one, says otherwise than the value the
    merge kept, a record of the merge: an answer as of any instant after it reads what the
    dataset shows (``before``: the survivor's value before the merge, for a history without
    records). The propagation's records are derived, not history (catalog.flags)."""
    records = (
        ChangeRecord.objects.filter(dataset_id=ds.pk, field_name=field_name, attribute=attribute)
        .exclude(source=ChangeSource.PROPAGATION)
        .order_by("at", "id")
    )
    said = value_as_of(list(records), timezone.now(), before)
    if said != merged:
        _naming_record(ds, attribute, said, merged, field_name).save()


def _field_said(f: DatasetField) -> dict[str, Any]:
    """A field's attributes as its history records them (catalog.actions.update_field)."""
    declared = f.flag_source == FlagSource.DECLARED
    return {
        "pii_category": f.pii_category if declared else "",
        "subject_kind": f.subject_kind.name if declared and f.subject_kind else None,
        "propagation_blocked": f.propagation_blocked,
        "sensitivity": f.sensitivity,
        "description": f.description,
        "tags": catalog_actions.tags_value(f),
    }


def _dataset_said(ds: Dataset) -> dict[str, Any]:
    """A dataset's attributes as its history records them (catalog.actions.update_dataset)."""
    return {
        "description": ds.description,
        "sensitivity": ds.sensitivity,
        "retention_policy": ds.retention_policy.name if ds.retention_policy else None,
        "owners": catalog_actions.owners_value(ds),
        "tags": catalog_actions.tags_value(ds),
    }


def merge_datasets(twin_id: int, survivor_id: int) -> tuple[str, str]:
    """Fold dataset ``twin_id`` into ``survivor_id``: the same table under another name.

    What people said moves over (owners, tags, descriptions, flags, taints, history,
    subscriptions, and a field's declaration where the survivor's field has none); what
    lineage derived is derived again for the survivor from the facts both had (run io,
    schema sightings, the runs' column lineage): versions, fields, edge intervals and
    propagated flags. The merge is recorded in the survivor's history. Returns (twin's node
    id, survivor's).
    """
    with transaction.atomic():
        # Jobs before datasets: the global lock order. Events naming the twin land on the
        # survivor by now (it is an alias or not canonical), so no job comes to touch it.
        twin_fields = list(
            DatasetField.objects.filter(dataset_id=twin_id).values_list("pk", flat=True)
        )
        jobs = graph_actions.lock_jobs(_jobs_touching(twin_id, twin_fields))
        locked = lock_datasets([twin_id, survivor_id])
        twin, survivor = locked[twin_id], locked[survivor_id]
        names = (twin.node_id, survivor.node_id)
        with_kinds = DatasetField.objects.select_related("subject_kind")
        theirs = {f.name: f for f in with_kinds.filter(dataset_id=twin_id)}
        ours = {f.name: f for f in with_kinds.filter(dataset_id=survivor_id)}
        twins = {f.pk: ours[name] for name, f in theirs.items() if name in ours}
        field_map = {pk: f.pk for pk, f in twins.items()}
        held = {mine.pk: _field_said(mine) for mine in twins.values()}
        for mine in twins.values():
            _merge_field(theirs[mine.name], mine)
        moving = [f.pk for name, f in theirs.items() if name not in ours]
        DatasetField.objects.filter(pk__in=moving).update(dataset_id=survivor_id)
        # Copies the twin's doubled fields flagged lose those rows with them: shown again below.
        copies = set(
            PropagatedFlag.objects.filter(source_id__in=list(field_map)).values_list(
                "field_id", flat=True
            )
        )
        _rewrite_runs(twin_id, survivor_id, field_map, set(jobs))
        _move_facts(twin, survivor)
        for mine in twins.values():
            merged = _field_said(mine)
            for attribute, before in held[mine.pk].items():
                _chain_history(survivor, attribute, before, merged[attribute], mine.name)
        _move_rows(RunDataset, twin_id, survivor_id, ("run_id", "direction"))
        _move_rows(SchemaObservation, twin_id, survivor_id, ("at", "schema_hash", "run_uuid"))
        _move_rows(FacetObservation, twin_id, survivor_id, ("facet", "key"))
        RunDataset.objects.filter(dataset_id=survivor_id).update(dataset_version=None)
        graph_models.TableEdge.objects.filter(dataset_id=twin_id).delete()
        graph_models.ColumnEdge.objects.filter(
            Q(target_dataset_id=twin_id)
            | Q(source_field_id__in=list(field_map))
            | Q(target_field_id__in=list(field_map))
        ).delete()
        # The twin's versions move over for their field lists; derived again below.
        DatasetVersion.objects.filter(dataset_id=twin_id).update(dataset_id=survivor_id)
        Dataset.objects.filter(pk=twin_id).delete()
        _naming_record(survivor, "merged", names[0], names[1]).save()
        _derive_again(survivor, jobs)
        fields = list(
            DatasetField.objects.filter(dataset_id=survivor_id).values_list("pk", flat=True)
        )
        propagation.refresh(
            propagation.sources_touching(fields) | propagation.sources_through(fields),
            reclassified=True,
        )
        propagation.sync_fields(copies)
    return names


def _merge_field(theirs: DatasetField, mine: DatasetField) -> None:
    """What people said of the twin's field, where the survivor's own field says nothing."""
    declared = FlagSource.DECLARED
    if (
        theirs.flag_source == declared
        and (theirs.pii_category or theirs.subject_kind_id)
        and not (mine.flag_source == declared and (mine.pii_category or mine.subject_kind_id))
    ):
        mine.pii_category, mine.subject_kind_id = theirs.pii_category, theirs.subject_kind_id
        mine.flag_source, mine.flag_masked = declared, False
    mine.propagation_blocked = mine.propagation_blocked or theirs.propagation_blocked
    mine.description = mine.description or theirs.description
    mine.sensitivity = mine.sensitivity or theirs.sensitivity
    mine.first_seen = min(mine.first_seen, theirs.first_seen)
    mine.save()
    mine.tags.add(*theirs.tags.all())


def _jobs_touching(twin_id: int, twin_fields: list[int]) -> set[int]:
    """The jobs whose runs or edges touch the dataset or its fields."""
    touching = Q(target_dataset_id=twin_id) | Q(source_field_id__in=twin_fields)
    jobs = set(
        graph_models.TableEdge.objects.filter(dataset_id=twin_id).values_list("job_id", flat=True)
    )
    jobs |= {
        pk
        for pk in graph_models.ColumnEdge.objects.filter(touching).values_list("job_id", flat=True)
        if pk is not None
    }
    jobs |= set(
        graph_models.Run.objects.filter(
            pk__in=RunDataset.objects.filter(dataset_id=twin_id).values("run_id")
        ).values_list("job_id", flat=True)
    )
    return jobs


def _rewrite_runs(
    twin_id: int, survivor_id: int, field_map: dict[int, int], jobs: set[int]
) -> None:
    """Point the column lineage of these jobs' runs at the survivor's fields."""
    dataset = {twin_id: survivor_id}
    changed = []
    for run in graph_models.Run.objects.filter(job_id__in=sorted(jobs)).only(
        "pk", "job_id", "column_lineage"
    ):
        lineage = run.column_lineage or {}
        edges: dict[graph_actions.ColumnKey, graph_actions.ColumnAttrs] = {}
        for (source, target, target_field, kind, subtype), attrs in graph_actions.lineage_edges(
            lineage
        ).items():
            key = (
                field_map.get(source, source),
                dataset.get(target, target),
                None if target_field is None else field_map.get(target_field, target_field),
                kind,
                subtype,
            )
            edges[key] = max(attrs, edges.get(key, attrs))
        covered = (dataset.get(d, d) for d in lineage.get("covered", []))
        merged = graph_actions.lineage_value(covered, edges)
        if lineage and merged != lineage:
            run.column_lineage = merged
            changed.append(run)
    bulk.update(graph_models.Run, changed, ["column_lineage"])


# A column's attributes a rename carries to its namesake, besides its flag.
COLUMN_ATTRIBUTES = ("description", "sensitivity", "tags")


def _column_value(f: DatasetField, attribute: str) -> Any:
    return sorted(t.name for t in f.tags.all()) if attribute == "tags" else getattr(f, attribute)


def _carry_declarations(
    dataset_ids: Iterable[int],
    late: set[int],
    renames: Iterable[tuple[datetime, int, int]] = (),
    renamed_from: dict[int, int] | None = None,
) -> None:
    """A renamed table keeps what stewards declared of it and of its columns, from the rename
    on: an attribute the new name never had (description, sensitivity, retention policy,
    owners, tags) takes the old name's; a column of the new name whose flag was never set
    takes the one its namesake had declared under the old name (as a declaration, so that it
    propagates like any other), and so does each of its description, sensitivity and tags
    that was never set. What facets said is carried again where the rename, the old name,
    or late facets of the new name (``late``) are among these datasets.

    ``renames``: those of this batch (instant, old, new); ``renamed_from``: the name each of
    these datasets had before its newest rename (its ``renamedFrom`` facet). With the
    renames of and to these datasets that came before, and those of the names they became,
    they are carried oldest first, so a chain of renames carries to its end in any arrival
    order, whatever became of the old names since.
    """
    ids = sorted(dataset_ids)
    batch = set(ids)
    # Renames to these datasets, and of them: a late facet of an old name before its rename
    # changes what the rename carries.
    renamed = Dataset.objects.filter(
        Q(alias_of_id__any_of=ids) | Q(pk__any_of=ids, alias_of__isnull=False),
        lifecycle_state=LifecycleState.RENAMED,
    ).values_list("pk", "alias_of_id", "dropped_at")
    found = set(renames)
    for new, old in (renamed_from or {}).items():
        found.update(_renamed_into(old, new))
    for old, new, dropped in renamed:
        # Where the name went is its newest rename's (``alias_of``).
        newest = [r for r in _rename_instants(old, newest=True) if r[2] == new]
        found.update(newest or ([(dropped, old, new)] if dropped is not None else []))
    with _carrying_on():
        for at, old, new in _following(found):
            wrote = _people_wrote(old, new)
            _carry_attributes(old, new, at, wrote, old in batch or new in late)
            _carry_columns(old, new, at, wrote)


def _rename_instants(
    old_id: int, since: datetime | None = None, newest: bool = False
) -> list[tuple[datetime, int, int]]:
    """The renames of ``old_id`` (at ``since`` or later; only its newest) as its history
    records them: (instant, old, new). Bounded so that a table swapped in by rename every
    day does not cost its whole history."""
    lifecycle = ChangeRecord.objects.filter(field_name="", attribute="lifecycle")
    instants = lifecycle.filter(dataset_id=old_id, new="RENAMED")
    if since is not None:
        instants = instants.filter(at__gte=since)
    times = list(instants.order_by("-at").values_list("at", flat=True)[: 1 if newest else None])
    if not times:
        return []
    old = Dataset.objects.select_related("namespace").get(pk=old_id)
    detail = f"RENAME from {old.namespace.name}:{old.name}"
    to = lifecycle.filter(at__in=times, new=detail).values_list("dataset_id", "at")
    return [(at, old_id, new) for new, at in to]


def _renamed_into(old_id: int, new_id: int) -> list[tuple[datetime, int, int]]:
    """The newest rename of ``old_id`` to ``new_id`` as the new name's history records it."""
    old = Dataset.objects.select_related("namespace").filter(pk=old_id).first()
    if old is None:  # merged into another since
        return []
    detail = f"RENAME from {old.namespace.name}:{old.name}"
    lifecycle = ChangeRecord.objects.filter(dataset_id=new_id, field_name="", attribute="lifecycle")
    at = lifecycle.filter(new=detail).order_by("-at").values_list("at", flat=True).first()
    return [] if at is None else [(at, old_id, new_id)]


def _following(renames: set[tuple[datetime, int, int]]) -> list[tuple[datetime, int, int]]:
    """``renames`` and the renames of the names they gave (at or after the rename that gave
    them), and of theirs, oldest first."""
    found = set(renames)
    frontier = [(new, at) for at, _, new in found]
    since: dict[int, datetime] = {}
    while frontier:
        name, at = frontier.pop()
        if name in since and since[name] <= at:
            continue
        since[name] = at
        for rename in _rename_instants(name, since=at):  # a chain goes on in time
            found.add(rename)
            frontier.append((rename[2], rename[0]))
    return sorted(found)


DECLARED_FLAG = ("pii_category", "subject_kind")


def _carry_columns(
    old: int, new: int, at: datetime, wrote: dict[str, catalog_actions.Actor]
) -> None:
    """What was declared of the old name's columns, to the new name's columns of the same
    names that were there at the rename or came after.

    While the old name stays renamed, what is declared of it now is about the table that
    left under the rename: a flag is declared from the rename, or from when it was declared
    if that was later (an as-of answer never shows a declaration before a person made it).
    Once the name is in use again (made again, or dropped after being made again), its
    columns' flags are carried as they were at the rename: what came after is another
    table's.
    """
    fields = DatasetField.objects.select_related("subject_kind").prefetch_related("tags")
    flagged = Q(flag_source=FlagSource.DECLARED) & ~Q(pii_category="", subject_kind=None)
    said_something = flagged | ~Q(description="") | ~Q(sensitivity="") | Q(tags__isnull=False)
    still = Dataset.objects.filter(pk=old, lifecycle_state=LifecycleState.RENAMED).exists()
    history: dict[str, dict[str, list[ChangeRecord]]] = defaultdict(lambda: defaultdict(list))
    records = ChangeRecord.objects.filter(dataset_id=old, attribute__in=DECLARED_FLAG).exclude(
        source=ChangeSource.PROPAGATION
    )
    for record in records.order_by("at", "id"):
        history[record.field_name][record.attribute].append(record)
    then = said_something if still else said_something | Q(name__in=list(history))
    said = {f.name: f for f in fields.filter(then, dataset_id=old).distinct()}
    if not said:
        return
    ever = set(
        ChangeRecord.objects.filter(
            dataset_id=new, attribute__in=FLAG_ATTRIBUTES + COLUMN_ATTRIBUTES
        ).values_list("field_name", "attribute")
    )
    there = Q(removed_at__isnull=True) | Q(removed_at__gt=at)
    for f in fields.filter(there, dataset_id=new, name__in=list(said)):
        source, changes = said[f.name], {}
        _carry_description(catalog_actions.update_field, f, source.description, wrote, at)
        own = source.flag_source == FlagSource.DECLARED
        category = source.pii_category if own else ""
        kind = source.subject_kind.name if own and source.subject_kind else None
        since = at
        if still:
            times = [r.at for rs in history[f.name].values() for r in rs]
            since = max([at, *times])
        else:
            category = value_as_of(history[f.name]["pii_category"], at, category) or ""
            kind = value_as_of(history[f.name]["subject_kind"], at, kind)
        if (category or kind) and not any((f.name, a) in ever for a in FLAG_ATTRIBUTES):
            flags = {
                "pii_category": category,
                "subject_kind": SubjectKind.objects.filter(name=kind).first() if kind else None,
            }
            catalog_actions.update_field(f, flags, LINEAGE_ACTOR, at=since)
        for attribute in COLUMN_ATTRIBUTES:
            value = _column_value(source, attribute)
            if value and (f.name, attribute) not in ever and not _column_value(f, attribute):
                changes[attribute] = value
        if changes:
            catalog_actions.update_field(f, changes, LINEAGE_ACTOR, at=at)


@receiver(flags_changed)
def _carry_flags_changed(
    sender: Any, field_ids: Sequence[int], at: datetime | None = None, **kwargs: Any
) -> None:
    """A person changed declarations of columns of a name that was renamed: a column of
    where the name went (and on, along a chain of renames) that never had a flag takes
    them, as if said before the rename was applied; a change or withdrawal of a flag
    carried before is not carried. The carries' own changes are not carried twice."""
    if getattr(_carrying, "on", False):
        return
    # Only a name still renamed: one made again is another table, whose columns these are.
    olds = sorted(
        set(
            DatasetField.objects.filter(
                pk__in=list(field_ids), dataset__lifecycle_state=LifecycleState.RENAMED
            ).values_list("dataset_id", flat=True)
        )
    )
    if not olds:
        return
    renames: set[tuple[datetime, int, int]] = set()
    for old in olds:
        renames.update(_rename_instants(old, newest=True))
    with _carrying_on():
        for when, old, new in _following(renames):
            _carry_columns(old, new, when, {})


_carrying = threading.local()


@contextmanager
def _carrying_on() -> Iterator[None]:
    before = getattr(_carrying, "on", False)
    _carrying.on = True
    try:
        yield
    finally:
        _carrying.on = before


def _people_wrote(old_id: int, new_id: int) -> dict[str, catalog_actions.Actor]:
    """Who wrote the description the old name's history ends with, by field name ("" for
    the table's own), where a person did (PEOPLES_SAY) and no person wrote one under the new
    name."""
    last: dict[str, ChangeRecord] = {}
    written = ChangeRecord.objects.filter(dataset_id__in=[old_id, new_id], attribute="description")
    for record in written.select_related("actor").order_by("at", "id"):
        if record.dataset_id == old_id:
            last[record.field_name] = record
    taken = {
        r.field_name
        for r in written.filter(dataset_id=new_id, source__in=PEOPLES_SAY).only("field_name")
    }
    return {
        name: catalog_actions.Actor(r.actor, r.actor_name, r.source)
        for name, r in last.items()
        if r.source in PEOPLES_SAY and name not in taken
    }


def _carry_description(
    update: Callable[..., Any],
    target: Dataset | DatasetField,
    value: str,
    wrote: dict[str, catalog_actions.Actor],
    at: datetime | None,
) -> None:
    """A description a person wrote under the old name is theirs under the new one, from
    ``at`` on: lineage's own description gives way to it there, as it would have had they
    written it there. So what lineage's events recorded of it from ``at`` on goes (it
    would never have recorded it then), and the carry's record starts from the value the
    history gives just before ``at``, whichever event came first."""
    name = target.name if isinstance(target, DatasetField) else ""
    dataset_id = target.dataset_id if isinstance(target, DatasetField) else target.pk
    if name not in wrote or not value:
        return
    before = target.description
    if at is not None:
        records = ChangeRecord.objects.filter(
            dataset_id=dataset_id, field_name=name, attribute="description"
        )
        records.filter(
            at__gte=at, source=ChangeSource.LINEAGE, actor_name=LINEAGE_ACTOR.display
        ).delete()
        before = value_as_of(list(records.order_by("at", "id")), at, "")
    type(target).objects.filter(pk=target.pk).update(description=before)
    if not update(target, {"description": value}, wrote[name], at=at):
        # Lineage had said the same before: the record still says it is the person's now.
        dataset = target.dataset if isinstance(target, DatasetField) else target
        at = at or timezone.now()
        record = catalog_actions.change_record(
            wrote[name], dataset, "description", before, value, at, name
        )
        record.save()


def _carry_attributes(
    old_id: int,
    new_id: int,
    at: datetime | None,
    wrote: dict[str, catalog_actions.Actor],
    settle: bool,
) -> None:
    """The old name's attributes that the new name never had, to the new name at ``at``; a
    description a person wrote, unless a person wrote one under the new name. What facets
    said (description, owners) only when ``settle``: it may have changed since."""
    old = Dataset.objects.select_related("retention_policy").get(pk=old_id)
    new = Dataset.objects.get(pk=new_id)
    _carry_description(catalog_actions.update_dataset, new, old.description, wrote, at)
    if at is not None and settle:
        for facet, attribute in FACET_ATTRIBUTES.items():
            if not (attribute == "description" and "" in wrote):
                _carry_facet(old, new, facet, attribute, at)
    ever = ChangeRecord.objects.filter(
        dataset_id=new_id, field_name="", attribute__in=DATASET_ATTRIBUTES
    )
    # What facets set is carried as the old name said it at the rename (``_carry_facet``).
    carried = {*FACET_ATTRIBUTES.values()} - ({"description"} if "" in wrote else set())
    missing = set(DATASET_ATTRIBUTES) - set(ever.values_list("attribute", flat=True)) - carried
    said = _dataset_said(old)
    if not any(said[attribute] for attribute in missing):
        return
    have = _dataset_said(new)
    values = {
        "description": said["description"],
        "sensitivity": said["sensitivity"],
        "retention_policy": old.retention_policy,
        "owners": [catalog_actions.OwnerSpec(o["name"], o["type"]) for o in said["owners"]],
        "tags": said["tags"],
    }
    changes = {a: values[a] for a in sorted(missing) if said[a] and not have[a]}
    if changes:
        catalog_actions.update_dataset(new, changes, LINEAGE_ACTOR, at=at)


def _carry_facet(old: Dataset, new: Dataset, facet: str, attribute: str, at: datetime) -> None:
    """Make the new name's history carry what the old name's facets said at the rename's
    instant ``at``, as arrival in time order would have, whichever came first: the rename,
    the old name's facets before it, or the new name's after it. Nothing is carried when
    the new name had a value before the rename, or the rename's own event set it."""
    history = ChangeRecord.objects.filter(field_name="", attribute=attribute).order_by("at", "id")
    records = list(history.filter(dataset=new))
    seen = FacetObservation.objects.filter(dataset=new, facet=facet)
    if any(r.source in PEOPLES_SAY or (r.at == at and not _carried(r)) for r in records):
        return  # a person's word: theirs stands as it is
    nothing: Any = "" if attribute == "description" else []
    start = records[0].old if records else nothing
    said_then = seen.filter(at=at).exists()
    if any(r.at < at for r in records) or said_then:
        # Its own value: nothing carried (a carry from before a late facet of its own goes).
        carried = [r for r in records if r.at == at and not said_then]
        ChangeRecord.objects.filter(pk__in=[r.pk for r in carried]).delete()
        then = value_as_of([r for r in records if r not in carried], at, start)
    else:
        now = old.description if attribute == "description" else catalog_actions.owners_value(old)
        then = value_as_of(list(history.filter(dataset=old)), at, now) or nothing
        carried = [r for r in records if r.at == at]
        ChangeRecord.objects.filter(pk__in=[r.pk for r in carried[1:]]).delete()
        if carried and then == start:
            carried[0].delete()
        elif carried and carried[0].new != then:
            carried[0].new = then
            carried[0].save(update_fields=["new"])
        elif not carried and then != start:
            catalog_actions.change_record(LINEAGE_ACTOR, new, attribute, start, then, at).save()
    before = seen.filter(at__lte=at).order_by("key").last()
    after = [r for r in records if r.at > at]
    _said_after(new, attribute, seen.filter(at__gt=at), after, then, before)
    last = history.filter(dataset=new).last()
    owners = catalog_actions.owners_value(new) if attribute == "owners" else None
    _follow_history(new, attribute, last.new if last is not None else start, owners)


def _follow_history(ds: Dataset, attribute: str, value: Any, owners: Any) -> bool:
    """Make today's description or owners (``owners``: today's) the history's last value;
    True if the owners changed."""
    if attribute == "description" and ds.description != value:
        ds.description = str(value or "")
        Dataset.objects.filter(pk=ds.pk).update(description=ds.description)
    elif attribute == "owners" and owners != value:
        catalog_actions.set_owners(ds, _owner_specs(value if isinstance(value, list) else []))
        return True
    return False


def _said_after(
    ds: Dataset,
    attribute: str,
    seen: QuerySet[FacetObservation],
    records: list[ChangeRecord],
    value: Any,
    before: FacetObservation | None,
) -> None:
    """Make the records of the facets ``seen`` after a rename follow from ``value``, what
    the rename left, as in time order: each instant's facet sets the value where it says
    something else than the dataset's facet before it (``before``, the last up to the
    rename, if any), and writes a record where that changes the value. The records alone
    cannot tell this (a facet that said the value before it wrote none), so what the
    facets said is read, instant by instant, until the history agrees."""
    last_said = before.value if before is not None else _UNSAID
    for at, said in _instants(seen):
        if any(r.at < at for r in records):
            return  # a record no facet wrote: left as it is
        own = [r for r in records if r.at == at]
        records = [r for r in records if r.at > at]
        sets = last_said is _UNSAID or said != last_said
        last_said = said
        if not sets:
            said = value
        if own and (own[0].old, own[0].new) == (value, said):
            return
        if said == value:
            # No record here; one after it that starts from the value agrees from there on
            # (with none left, a later facet's may have gone with an earlier carry).
            ChangeRecord.objects.filter(pk__in=[r.pk for r in own]).delete()
            if records and records[0].old == value:
                return
            continue
        if own:
            own[0].old, own[0].new = value, said
            own[0].save(update_fields=["old", "new"])
        else:
            catalog_actions.change_record(LINEAGE_ACTOR, ds, attribute, value, said, at).save()
        value = said


_UNSAID = object()


def _instants(seen: QuerySet[FacetObservation]) -> Iterator[tuple[datetime, Any]]:
    """What these facets said at each instant (the last by key), in time order."""
    last: tuple[datetime, Any] | None = None
    for at, value in seen.order_by("key").values_list("at", "value").iterator(chunk_size=64):
        if last is not None and last[0] != at:
            yield last
        last = (at, value)
    if last is not None:
        yield last


def _carried(record: ChangeRecord) -> bool:
    """Whether lineage's facets wrote the record (a facet's value, or a rename's carry)."""
    return record.source == ChangeSource.LINEAGE and record.actor_name == LINEAGE_ACTOR.display


def _one_record_an_instant(record: ChangeRecord) -> None:
    """Facets of one instant say one value, the last by key (``_newest``): the record an
    earlier facet of the instant wrote, if it is the one just before this one, joins it, as
    a facet that comes late writes it (``_lineage_said``). A person's record in between
    stays, and so do the records around it."""
    previous = (
        ChangeRecord.objects.filter(
            dataset_id=record.dataset_id,
            field_name="",
            attribute=record.attribute,
            at=record.at,
            pk__lt=record.pk,
        )
        .order_by("-pk")
        .first()
    )
    if previous is None or not _carried(previous):
        return
    previous.delete()
    if record.new == previous.old:  # the instant ends where it started
        record.delete()
    else:
        record.old = previous.old
        record.save(update_fields=["old"])


def _owner_specs(owners: list[dict[str, str]]) -> list[catalog_actions.OwnerSpec]:
    return [
        catalog_actions.OwnerSpec(
            name=o["name"],
            type=o["type"],
            # A guess for a new owner only: a steward's word on an owner's kind stands.
            new_kind=OwnerKind.PERSON if o["name"].startswith("user:") else OwnerKind.TEAM,
        )
        for o in owners
    ]


def _move_rows(model: Any, twin_id: int, survivor_id: int, key: tuple[str, ...]) -> None:
    """Move the twin's rows of ``model`` to the survivor, but for those it has already."""
    taken = set(model.objects.filter(dataset_id=survivor_id).values_list(*key))
    doubled = [
        row[0]
        for row in model.objects.filter(dataset_id=twin_id).values_list("pk", *key)
        if tuple(row[1:]) in taken
    ]
    model.objects.filter(pk__in=doubled).delete()
    model.objects.filter(dataset_id=twin_id).update(dataset_id=survivor_id)


def _sighted(ds: Dataset, at: datetime) -> None:
    """Remember a sighting that says the dataset is there (a run reading or writing it, its
    schema, a lifecycle other than a drop): catalog.queries.closing_versions reads the same
    as of any instant."""
    key = graph_actions.time_key(at)
    if key > (ds.lineage_facets.get("sighted") or {}).get("at", ""):
        ds.lineage_facets["sighted"] = {"at": key}


def _lifecycle(ds: Dataset) -> LifecycleState:
    """Dropped (or renamed away) while its last closing is no older than its last sighting;
    active otherwise."""
    closing = (ds.lineage_facets.get("closing") or {}).get("value", "")
    sighted = (ds.lineage_facets.get("sighted") or {}).get("at", "")
    if closing and ds.dropped_at is not None and graph_actions.time_key(ds.dropped_at) >= sighted:
        return CLOSED_STATES[closing]
    return LifecycleState.ACTIVE


# The attributes a dataset facet sets whatever it says, and the facet.
FROM_FACET = {
    "description": "documentation",
    "source_name": "dataSource",
    "storage_format": "storage",
}


def _move_facts(twin: Dataset, survivor: Dataset) -> None:
    """The twin's owners, tags, taints, history, descriptions and subscriptions, to the
    survivor; where what the two histories now say differs from what the merge kept, a
    record of the merge."""
    held = _dataset_said(survivor)
    # Which of the two names a person described (lineage does not overrule them).
    described = set(
        ChangeRecord.objects.filter(
            dataset_id__in=[twin.pk, survivor.pk],
            field_name="",
            attribute="description",
            source__in=PEOPLES_SAY,
        ).values_list("dataset_id", flat=True)
    )
    ChangeRecord.objects.filter(dataset_id=twin.pk).update(dataset_id=survivor.pk)

    # Whoever was told of the twin is told of the table (the twin's row goes, and with it
    # would go the subscription and its notices), once: a copy of one it has is turned off.
    def told(sub: Subscription) -> tuple[str, str, list[str]]:
        return (sub.email, sub.webhook_url, sorted(sub.kinds or []))

    kept = [told(sub) for sub in Subscription.objects.filter(dataset=survivor, active=True)]
    for sub in Subscription.objects.filter(dataset_id=twin.pk):
        sub.dataset_id, sub.active = survivor.pk, sub.active and told(sub) not in kept
        sub.save(update_fields=["dataset", "active"])
    for owner_id, kind in DatasetOwnership.objects.filter(dataset_id=twin.pk).values_list(
        "owner_id", "ownership_type"
    ):
        DatasetOwnership.objects.get_or_create(
            dataset_id=survivor.pk, owner_id=owner_id, ownership_type=kind
        )
    survivor.tags.add(*twin.tags.all())
    graph_models.Taint.objects.filter(dataset_id=twin.pk).update(dataset_id=survivor.pk)
    Dataset.objects.filter(alias_of_id=twin.pk).update(alias_of_id=survivor.pk)
    DatasetAlias.objects.filter(dataset_id=twin.pk).update(dataset_id=survivor.pk)
    twin_newer = {
        facet
        for facet, value in twin.lineage_facets.items()
        if str(value.get("at", "")) > str((survivor.lineage_facets.get(facet) or {}).get("at", ""))
    }
    for attribute in (
        "description",
        "sensitivity",
        "platform",
        "location",
        "storage_format",
        "source_name",
        "retention_policy_id",
    ):
        # A description a person wrote is the survivor's, else the twin's. What lineage sets
        # from a facet is the newest facet's, as under one name; the rest is the survivor's
        # unless it has none.
        if attribute == "description" and described:
            theirs = survivor.pk not in described
        else:
            theirs = FROM_FACET.get(attribute) in twin_newer or not getattr(survivor, attribute)
        if theirs:
            setattr(survivor, attribute, getattr(twin, attribute))
    for facet, value in twin.lineage_facets.items():
        if facet == "renamedTo":  # where the twin's name went (its alias pointers, above)
            continue
        mine = survivor.lineage_facets.get(facet)
        if mine is None or str(value.get("at", "")) > str(mine.get("at", "")):
            survivor.lineage_facets[facet] = value
    if twin.dropped_at is not None and (
        survivor.dropped_at is None or twin.dropped_at > survivor.dropped_at
    ):
        survivor.dropped_at = twin.dropped_at
    if survivor.dropped_at is not None and not all(
        "sighted" in ds.lineage_facets for ds in (twin, survivor)
    ):  # written before sightings were kept: their history tells
        for at in last_sightings([twin.pk, survivor.pk]).values():
            _sighted(survivor, at)
    survivor.lifecycle_state = _lifecycle(survivor)  # the newest closing and sighting of both
    survivor.first_seen = min(survivor.first_seen, twin.first_seen)
    survivor.last_seen = max(survivor.last_seen, twin.last_seen)
    survivor.created_at = min(survivor.created_at, twin.created_at)
    survivor.is_hidden = survivor.is_hidden and twin.is_hidden
    if survivor.alias_of_id == twin.pk:
        survivor.alias_of_id = None
        survivor.lineage_facets.pop("renamedTo", None)
    survivor.save()
    merged = _dataset_said(survivor)
    for attribute, before in held.items():
        _chain_history(survivor, attribute, before, merged[attribute])


def merge_twins(twins: list[tuple[int, int]]) -> None:
    """Merge each (twin, survivor) pair in a transaction of its own; a failed merge is logged
    and tried again the next time a batch names the twin's name."""
    for twin, survivor in twins:
        try:
            if Dataset.objects.filter(pk__in=[twin, survivor]).count() == 2:
                merge_datasets(twin, survivor)
        except Exception:
            logger.exception("merging dataset %s into %s failed", twin, survivor)


def _derive_again(survivor: Dataset, jobs: dict[int, Job]) -> None:
    """The survivor's versions, fields and run io from all its sightings, and the edge
    intervals of these jobs from all their runs, as the normaliser derives them."""
    batch = _Batch([])
    key = (survivor.namespace.name, survivor.name)
    batch.dataset_ids = {key: survivor.pk}
    batch.dataset_names = {survivor.pk: key}
    batch.datasets = {survivor.pk: survivor}
    sightings = set(
        SchemaObservation.objects.filter(dataset_id=survivor.pk).values_list(
            "at", "schema_hash", "run_uuid"
        )
    )
    for row in DatasetField.objects.filter(dataset_id=survivor.pk):
        batch.fields[(survivor.pk, row.name)] = row
    batch.fields_loaded = {survivor.pk}
    if sightings:
        batch.sightings[survivor.pk] = sightings
        batch._replay_versions()
        batch.versions_changed[survivor.pk] = (min(at for at, _, _ in sightings), None)
        batch._sync_fields()
        batch._flush_fields()
        batch._repoint_run_io()
    batch.jobs = dict(jobs)
    batch.job_states = {pk: _job_state(job) for pk, job in batch.jobs.items()}
    graph_actions.recompute_jobs({pk: (BEGINNING, None) for pk in batch.jobs}, batch.jobs)
    batch._flush_jobs()
