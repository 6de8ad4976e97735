"""Writes to jobs, runs, run io and lineage edges with their validity intervals.

Edge validity is a pure function of facts that arrive in any order, so any
permutation of the same events gives the same edges:

* a job's *timeline* is its completed runs that reported any inputs or
  outputs, ordered by the event time of their completion, plus the closing
  (DROP / RENAME) of the datasets they touch;
* each completed run replaces the job's set of table edges (dataset → job,
  job → dataset) with the set it reported — edges that vanished close at the
  run's completion time, new ones open there; the column edges into an output
  are replaced the same way when the run carried a columnLineage facet for it
  (an output without one keeps its column edges), and all column edges into
  an output the run no longer writes close;
* closing a dataset closes every edge touching it at that instant; a later
  run that touches it again opens new edges.

Failed and aborted runs do not move edges: what the job last completed stands
(their inputs and outputs stay on the run, for root-cause views). A run only
becomes part of the timeline once it completes.

``recompute_jobs`` replays a job's timeline around the instants where it
changed, over the stored intervals, and stops where its open edges are the
stored ones again: a late event of an old run costs the steps up to the next
run that restores the state, not the history after it, and an in-order event
costs only its own step. Callers hold the job rows locked (``lock_jobs``)
while recomputing.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.db.models import Q
from django.utils import timezone

from catalog import bulk
from catalog.lookups import in_windows
from catalog.models import DatasetField, DatasetVersion
from catalog.params import instant_from_iso
from catalog.queries import CLOSED_STATES
from graph import propagation
from graph.models import (
    TERMINAL_RUN_STATES,
    ColumnEdge,
    Direction,
    Job,
    Run,
    RunDataset,
    RunState,
    TableEdge,
)

# Dataset lifecycle changes (DatasetVersion.lifecycle_state) that end a dataset's edges.

EVENT_STATES = {
    "START": RunState.RUNNING,
    "RUNNING": RunState.RUNNING,
    "COMPLETE": RunState.COMPLETED,
    "FAIL": RunState.FAILED,
    "ABORT": RunState.ABORTED,
}
STATE_RANK = {
    RunState.NEW: 0,
    RunState.RUNNING: 1,
    RunState.COMPLETED: 2,
    RunState.ABORTED: 3,
    RunState.FAILED: 4,
}

# (source_field_id, target_dataset_id, target_field_id | None, type, subtype)
ColumnKey = tuple[int, int, int | None, str, str]
# (masking, description)
ColumnAttrs = tuple[bool, str]
TableKey = tuple[int, str]  # (dataset_id, direction)
# The first and last instant at which a job's timeline changed.
Span = tuple[datetime, datetime]


NEVER = datetime.min.replace(tzinfo=UTC)


def state_key(state: str, at: datetime | None) -> tuple[bool, datetime, int]:
    """Order of run states: a terminal state beats any other, then event time, then rank.

    The final state is the maximum over a run's events, so the order they
    arrive in does not matter.
    """
    return (state in TERMINAL_RUN_STATES, at or NEVER, STATE_RANK.get(RunState(state), 0))


def time_key(at: datetime, tiebreak: str = "") -> str:
    """A string that sorts like (event time, tiebreak): fixed-width ISO-8601 in UTC."""
    return f"{at.astimezone(UTC).isoformat(timespec='microseconds')}|{tiebreak}"


def key_time(key: str) -> datetime:
    """The event time a ``time_key`` holds."""
    return datetime.fromisoformat(key.split("|")[0])


def merge_facets(
    facets: dict[str, Any],
    times: dict[str, str],
    new: Mapping[str, Any],
    at: datetime,
    tiebreak: str,
) -> bool:
    """Merge ``new`` facets in place, each facet kept from its newest event; True if changed."""
    key = time_key(at, tiebreak)
    changed = False
    for name, value in new.items():
        if key >= times.get(name, ""):
            if times.get(name) != key:
                times[name] = key
                changed = True
            if facets.get(name) != value:
                facets[name] = value
                changed = True
    return changed


# -- jobs ---------------------------------------------------------------------------------


def ensure_jobs(
    wanted: Mapping[tuple[int, str], datetime],
) -> dict[tuple[int, str], int]:
    """Ids of jobs by (namespace id, name), creating missing ones (created at the given time)."""
    if not wanted:
        return {}
    found = _job_ids(wanted)
    missing = sorted(set(wanted) - set(found))
    if missing:
        now = timezone.now()
        Job.objects.bulk_create(
            [
                Job(namespace_id=ns_id, name=name, created_at=wanted[(ns_id, name)], updated_at=now)
                for ns_id, name in missing
            ],
            ignore_conflicts=True,
        )
        found.update(_job_ids({key: wanted[key] for key in missing}))
    return found


def _job_ids(keys: Iterable[tuple[int, str]]) -> dict[tuple[int, str], int]:
    by_ns: dict[int, list[str]] = defaultdict(list)
    for ns_id, name in keys:
        by_ns[ns_id].append(name)
    query = Q()
    for ns_id, names in by_ns.items():
        query |= Q(namespace_id=ns_id, name__any_of=names)
    rows = Job.objects.filter(query).order_by().values_list("namespace_id", "name", "id")
    return {(ns_id, name): pk for ns_id, name, pk in rows}


def lock_jobs(ids: Iterable[int]) -> dict[int, Job]:
    """Lock job rows in id order (a fixed order: concurrent workers cannot deadlock on them)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    jobs = Job.objects.select_for_update().filter(pk__any_of=wanted).order_by("pk")
    return {job.pk: job for job in jobs}


def jobs_with_edges_open_at(closures: Iterable[tuple[int, datetime]]) -> set[int]:
    """Jobs having a table or column edge on one of the datasets open at its closing instant."""
    jobs: set[int] = set()
    for dataset_id, at in closures:
        open_at = Q(valid_from__lte=at) & (Q(valid_to__isnull=True) | Q(valid_to__gt=at))
        jobs.update(
            TableEdge.objects.filter(open_at, dataset_id=dataset_id).values_list(
                "job_id", flat=True
            )
        )
        jobs.update(
            j
            for j in ColumnEdge.objects.filter(
                open_at,
                Q(target_dataset_id=dataset_id) | Q(source_field__dataset_id=dataset_id),
            ).values_list("job_id", flat=True)
            if j is not None
        )
    return jobs


# -- runs ---------------------------------------------------------------------------------


@dataclass
class RunObservation:
    """What one event says about one run, with datasets and fields already resolved to ids."""

    run_uuid: uuid.UUID
    job_id: int
    event_type: str
    event_time: datetime
    fingerprint: str
    facets: dict[str, Any] = field(default_factory=dict)
    inputs: list[tuple[int, int | None]] = field(default_factory=list)  # (dataset, version)
    outputs: list[tuple[int, int | None]] = field(default_factory=list)
    covered: set[int] = field(default_factory=set)
    columns: dict[ColumnKey, ColumnAttrs] = field(default_factory=dict)


@dataclass
class _Step:
    """A run's place in its job's timeline: None when it is not part of it."""

    ended_at: datetime | None
    io: frozenset[TableKey]
    columns: tuple[Any, ...]

    @property
    def digest(self) -> str:
        return step_digest(self.io, self.columns)


def _step_of(run: Run, io: set[TableKey]) -> _Step | None:
    if run.state != RunState.COMPLETED or not io or run.ended_at is None:
        return None
    return _Step(run.ended_at, frozenset(io), _lineage_key(run.column_lineage))


def _lineage_key(lineage: dict[str, Any] | None) -> tuple[Any, ...]:
    lineage = lineage or {}
    return (tuple(lineage.get("covered", [])), tuple(map(tuple, lineage.get("edges", []))))


def step_digest(io: Iterable[TableKey], columns: tuple[Any, ...]) -> str:
    """A stable digest of what one timeline step opens: datasets and column mappings."""
    text = repr((sorted((int(d), str(direction)) for d, direction in io), columns))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


_NEVER = datetime.max.replace(tzinfo=UTC)
IO_FIELDS = ("run_id", "dataset_id", "direction", "event_time", "dataset_version_id")


def record_runs(observations: list[RunObservation], jobs: Mapping[int, Job]) -> dict[int, Span]:
    """Apply run observations; gives the jobs whose timeline changed, each with the first and
    last instant at which it changed.

    Idempotent and order-free: states merge by ``state_key``, start is the
    earliest START/RUNNING, facets keep their newest value, inputs/outputs and
    column mappings are unions over the run's events. ``jobs`` are the locked rows
    of the observations' jobs: their latest run and timeline end are set on them
    in memory, for the caller to write with its other changes to them.
    """
    if not observations:
        return {}
    uuids = {o.run_uuid for o in observations}
    runs = {r.run_uuid: r for r in Run.objects.filter(run_uuid__any_of=uuids).order_by()}
    io_rows: dict[tuple[int, int, str], RunDataset] = {}
    if runs:
        for row in RunDataset.objects.filter(run_id__any_of=[r.pk for r in runs.values()]):
            io_rows[(row.run_id, row.dataset_id, row.direction)] = row
    io_by_run: dict[int, set[TableKey]] = defaultdict(set)
    for run_id, dataset_id, direction in io_rows:
        io_by_run[run_id].add((dataset_id, direction))
    before: dict[uuid.UUID, _Step | None] = {
        run.run_uuid: _step_of(run, io_by_run[run.pk]) for run in runs.values()
    }
    now = timezone.now()
    new_runs: dict[uuid.UUID, Run] = {}
    dirty: set[uuid.UUID] = set()
    io_wanted: dict[uuid.UUID, dict[TableKey, tuple[datetime, int | None]]] = defaultdict(dict)

    for obs in sorted(observations, key=lambda o: (o.event_time, o.fingerprint)):
        run = runs.get(obs.run_uuid)
        if run is None:
            run = Run(
                run_uuid=obs.run_uuid,
                job_id=obs.job_id,
                state=RunState.NEW,
                created_at=obs.event_time,
                updated_at=now,
                facets={},
                facet_times={},
                column_lineage={},
            )
            runs[obs.run_uuid] = run
            new_runs[obs.run_uuid] = run
            before[obs.run_uuid] = None
        elif run.job_id != obs.job_id:
            raise ValueError(
                f"run {obs.run_uuid} belongs to another job (id {run.job_id}), not id {obs.job_id}"
            )
        if _merge_run(run, obs):
            dirty.add(obs.run_uuid)
        wanted = io_wanted[obs.run_uuid]
        for direction, items in ((Direction.INPUT, obs.inputs), (Direction.OUTPUT, obs.outputs)):
            for dataset_id, version_id in items:
                key = (dataset_id, str(direction))
                seen = wanted.get(key)
                if seen is None or obs.event_time < seen[0]:
                    wanted[key] = (obs.event_time, version_id)

    if new_runs:
        for run_uuid, run in new_runs.items():
            run.edges_applied = _step_of(run, set(io_wanted[run_uuid])) is not None
        bulk.insert(Run, list(new_runs.values()))
        _link_parents_and_children(list(new_runs.values()))
    _link_parents([runs[u] for u in dirty if u not in new_runs])
    changed_runs = [runs[u] for u in dirty if u not in new_runs]
    for run in changed_runs:
        run.updated_at = now

    # Run io: one row per (run, dataset, direction), at the earliest event that named it.
    io_create: list[tuple[Any, ...]] = []
    io_of_new_runs: list[tuple[Any, ...]] = []  # no row of a run made just now can be there
    io_update: list[RunDataset] = []
    io_after: dict[uuid.UUID, set[TableKey]] = defaultdict(set)
    for run in runs.values():
        if run.pk in io_by_run:
            io_after[run.run_uuid] |= io_by_run[run.pk]
    for run_uuid, wanted in io_wanted.items():
        run = runs[run_uuid]
        for (dataset_id, direction), (at, version_id) in wanted.items():
            existing = io_rows.get((run.pk, dataset_id, direction))
            io_after[run_uuid].add((dataset_id, direction))
            if existing is None:
                rows = io_of_new_runs if run_uuid in new_runs else io_create
                rows.append((run.pk, dataset_id, direction, at, version_id))
            elif at < existing.event_time:
                existing.event_time = at
                existing.dataset_version_id = version_id or existing.dataset_version_id
                io_update.append(existing)
    bulk.insert_values(RunDataset, IO_FIELDS, io_of_new_runs)
    bulk.insert_values(RunDataset, IO_FIELDS, io_create, ignore_conflicts=True)
    bulk.update(RunDataset, io_update, ["event_time", "dataset_version"])

    since: dict[int, Span] = {}
    moved: list[tuple[Run, _Step | None, _Step | None]] = []
    for run_uuid in io_wanted.keys() | dirty:
        run = runs[run_uuid]
        after = _step_of(run, io_after[run_uuid])
        applied = after is not None
        if run.edges_applied != applied:
            run.edges_applied = applied
            if run_uuid not in new_runs:
                dirty.add(run_uuid)
                if run not in changed_runs:
                    changed_runs.append(run)
        old = before.get(run_uuid)
        if old != after:
            moved.append((run, old, after))
    _replay_points(moved, since, jobs)
    if changed_runs:
        bulk.update(
            Run,
            changed_runs,
            [
                "state",
                "state_event_time",
                "started_at",
                "ended_at",
                "nominal_start_time",
                "nominal_end_time",
                "parent_run_uuid",
                "parent",
                "error_message",
                "error_stack",
                "facets",
                "facet_times",
                "column_lineage",
                "edges_applied",
                "created_at",
                "updated_at",
            ],
        )
    _update_latest_runs(list(runs[u] for u in io_wanted.keys() | dirty), jobs)
    return since


def _replay_points(
    moved: list[tuple[Run, _Step | None, _Step | None]],
    since: dict[int, Span],
    jobs: Mapping[int, Job],
) -> None:
    """Add to ``since`` the instants between which each job's timeline changed.

    A run that newly joins its job's timeline after the timeline's last step, with the
    same datasets and column mappings as that step, leaves every edge as it was (a
    step applied twice is applied once): the job's timeline end just moves forward. So
    it does after an earlier change (a late run): the replay of that change either
    settles before the end, where the timeline is as stored, or reaches the new step.
    """

    def earliest(old: _Step | None, after: _Step | None) -> datetime | None:
        times = [s.ended_at for s in (old, after) if s is not None and s.ended_at is not None]
        return min(times) if times else None

    moved.sort(key=lambda item: (earliest(item[1], item[2]) or _NEVER, str(item[0].run_uuid)))
    inside = _changing_nothing(
        [
            (run, after)
            for run, old, after in moved
            if old is None
            and after is not None
            and after.ended_at is not None
            and (end := jobs[run.job_id].timeline_end) is not None
            and after.ended_at < end
        ]
    )
    for run, old, after in moved:
        if run.pk in inside:
            continue
        job = jobs[run.job_id]
        if (
            old is None
            and after is not None
            and after.ended_at is not None
            and job.timeline_digest
            and job.timeline_end is not None
            and (run.job_id not in since or since[run.job_id][1] < job.timeline_end)
            and after.ended_at > job.timeline_end
            and after.digest == job.timeline_digest
        ):
            job.timeline_end = after.ended_at
            continue
        at = earliest(old, after)
        if at is not None:
            latest = max(s.ended_at for s in (old, after) if s is not None and s.ended_at)
            widen(since, run.job_id, at, latest)


def _changing_nothing(runs: list[tuple[Run, _Step]]) -> set[int]:
    """The runs, each joining its job's timeline before its end, whose step changes no edge.

    The stored intervals are the replay of the timeline. A step at instant t closes the open
    edges it does not name and opens those it names that are not open (a run's mappings
    target its outputs). Where none of the job's stored intervals begins at t, the edges
    open across t are the ones open just before it; if they are exactly the step's datasets
    and column mappings, the step opens nothing and closes only what an interval ending at
    t shows closed there already. Every interval stands as stored (a run inserted between
    runs like it, as a late run of a scheduled job is): its job needs no replay.
    """
    if not runs:
        return set()
    job_ids = {run.job_id for run, _ in runs}
    first = min(step.ended_at for _, step in runs if step.ended_at is not None)
    last = max(step.ended_at for _, step in runs if step.ended_at is not None)
    reaching = (Q(valid_to__isnull=True) | Q(valid_to__gte=first)) & Q(valid_from__lte=last)
    tables: dict[int, list[tuple[TableKey, datetime, datetime | None]]] = defaultdict(list)
    for job_id, dataset_id, direction, valid_from, valid_to in TableEdge.objects.filter(
        reaching, job_id__any_of=job_ids
    ).values_list("job_id", "dataset_id", "direction", "valid_from", "valid_to"):
        tables[job_id].append(((dataset_id, str(direction)), valid_from, valid_to))
    columns: dict[int, list[tuple[ColumnKey, datetime, datetime | None]]] = defaultdict(list)
    for job_id, *key, valid_from, valid_to in ColumnEdge.objects.filter(
        reaching, job_id__any_of=job_ids
    ).values_list(*COLUMN_EDGE_FIELDS[:6], "valid_from", "valid_to"):  # the key's fields
        columns[job_id].append((tuple(key), valid_from, valid_to))

    def open_at(rows: list[tuple[Any, datetime, datetime | None]], at: datetime) -> set[Any] | None:
        """The keys open across ``at``; None where an interval begins there."""
        keys = set()
        for key, valid_from, valid_to in rows:
            if valid_from == at:
                return None
            if valid_from < at and (valid_to is None or valid_to > at):
                keys.add(key)
        return keys

    unchanged = set()
    for run, step in runs:
        at = step.ended_at
        assert at is not None
        io = {(int(d), str(direction)) for d, direction in step.io}
        open_tables = open_at(tables[run.job_id], at)
        open_columns = open_at(columns[run.job_id], at)
        if (
            open_tables == io
            and open_columns is not None
            and open_columns == set(lineage_edges(run.column_lineage or {}))
        ):
            unchanged.add(run.pk)
    return unchanged


def widen(spans: dict[int, Span], job_id: int, first: datetime, last: datetime) -> None:
    """Make the job's span of changed instants cover [first, last]."""
    known = spans.get(job_id)
    spans[job_id] = (first, last) if known is None else (min(known[0], first), max(known[1], last))


def _merge_run(run: Run, obs: RunObservation) -> bool:
    """Fold one observation into a run in memory; True if anything changed."""
    changed = False
    at = obs.event_time
    if at < run.created_at:
        run.created_at = at
        changed = True
    new_state = EVENT_STATES.get(obs.event_type)
    if new_state is not None and state_key(new_state, at) > state_key(
        run.state, run.state_event_time
    ):
        run.state = new_state
        run.state_event_time = at
        run.ended_at = at if new_state in TERMINAL_RUN_STATES else None
        changed = True
    if obs.event_type in ("START", "RUNNING") and (run.started_at is None or at < run.started_at):
        run.started_at = at
        changed = True
    if merge_facets(run.facets, run.facet_times, obs.facets, at, obs.fingerprint):
        changed = True
        # Read again only from facets the event sent and the run holds: once a run is
        # compacted (graph/retention.py) its facets are a summary, and the error, parent and
        # nominal times read from them before stay as they were.
        facets = {k: v for k, v in run.facets.items() if k in obs.facets}
        if "nominalTime" in facets:
            nominal = facets["nominalTime"] or {}
            run.nominal_start_time = _time_or_none(nominal.get("nominalStartTime"))
            run.nominal_end_time = _time_or_none(nominal.get("nominalEndTime"))
        if "errorMessage" in facets:
            error = facets["errorMessage"] or {}
            run.error_message = str(error.get("message") or "")
            run.error_stack = str(error.get("stackTrace") or "")
        if "parent" in facets:
            parent = (facets["parent"] or {}).get("run") or {}
            parent_uuid = _uuid_or_none(parent.get("runId"))
            if parent_uuid != run.parent_run_uuid:
                run.parent_run_uuid = parent_uuid
                run.parent = None
    if obs.columns or obs.covered:
        lineage = run.column_lineage or {}
        covered = set(lineage.get("covered", [])) | obs.covered
        edges = lineage_edges(lineage)
        for key, attrs in obs.columns.items():
            edges[key] = max(attrs, edges.get(key, attrs))
        merged = lineage_value(covered, edges)
        if merged != lineage:
            run.column_lineage = merged
            changed = True
    return changed


def lineage_edges(lineage: dict[str, Any]) -> dict[ColumnKey, ColumnAttrs]:
    """The column edges a run's ``column_lineage`` value holds."""
    return {
        (e[0], e[1], e[2], e[3], e[4]): (bool(e[5]), str(e[6])) for e in lineage.get("edges", [])
    }


def lineage_value(covered: Iterable[int], edges: dict[ColumnKey, ColumnAttrs]) -> dict[str, Any]:
    """A run's ``column_lineage`` value, in its one order (a mapping seen twice with other
    attributes keeps the larger, whatever the order: callers merge with ``max``)."""
    return {
        "covered": sorted(set(covered)),
        "edges": sorted(
            ([*key, *attrs] for key, attrs in edges.items()),
            key=lambda e: (e[0], e[1], e[2] or 0, e[3], e[4]),
        ),
    }


def _time_or_none(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return instant_from_iso(value)
    except ValueError:
        return None


def _uuid_or_none(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None


def _link_parents(runs: list[Run]) -> None:
    wanted = {r.parent_run_uuid for r in runs if r.parent_run_uuid and r.parent_id is None}
    if not wanted:
        return
    found = dict(
        Run.objects.filter(run_uuid__any_of=wanted).order_by().values_list("run_uuid", "pk")
    )
    for run in runs:
        if run.parent_run_uuid in found and run.parent_id is None:
            run.parent_id = found[run.parent_run_uuid]


def _link_parents_and_children(new_runs: list[Run]) -> None:
    """Point new runs at parents already stored, and runs already stored at new parents."""
    _link_parents(new_runs)
    bulk.update(Run, [r for r in new_runs if r.parent_id is not None], ["parent"])
    by_uuid = {r.run_uuid: r.pk for r in new_runs}
    children = list(
        # Spelled as the partial index "run_waiting_for_parent" is, so it is used whatever
        # the planner's statistics say (a bulk load outruns them).
        Run.objects.filter(
            parent_run_uuid__any_of=list(by_uuid),
            parent__isnull=True,
            parent_run_uuid__isnull=False,
        )
        .order_by()
        .only("pk", "parent_run_uuid")
    )
    for child in children:
        assert child.parent_run_uuid is not None
        child.parent_id = by_uuid[child.parent_run_uuid]
    bulk.update(Run, children, ["parent"])


def _run_time_key(run: Run) -> tuple[datetime, str]:
    return (run.state_event_time or run.created_at, str(run.run_uuid))


def _update_latest_runs(runs: list[Run], jobs: Mapping[int, Job]) -> None:
    """Each job's latest run is its run with the newest state event (event time, not arrival)."""
    by_job: dict[int, Run] = {}
    for run in runs:
        best = by_job.get(run.job_id)
        if best is None or _run_time_key(run) > _run_time_key(best):
            by_job[run.job_id] = run
    current_ids = {jobs[pk].latest_run_id for pk in by_job} - {None}
    current = {
        r.pk: r
        for r in Run.objects.filter(pk__any_of=current_ids).only(
            "pk", "run_uuid", "state_event_time", "created_at"
        )
    }
    for job_id, run in by_job.items():
        job = jobs[job_id]
        latest = current.get(job.latest_run_id or 0)
        if latest is None or (latest.pk != run.pk and _run_time_key(run) > _run_time_key(latest)):
            job.latest_run_id = run.pk


# -- edge validity ------------------------------------------------------------------------


@dataclass
class _RunStep:
    at: datetime
    run_uuid: str
    io: set[TableKey]
    outputs: set[int]
    covered: set[int]
    columns: dict[ColumnKey, ColumnAttrs]
    digest: str


# How far past a job's last change its replay first reads; each further pass reads 16 times
# as far (scheduled jobs settle at their next run: one pass).
FIRST_REACH = timedelta(hours=2)


def recompute_jobs(
    spans: Mapping[int, tuple[datetime, datetime | None]], jobs: Mapping[int, Job]
) -> None:
    """Replay each job's timeline around the instants where it changed, and store the
    resulting edge intervals.

    ``spans`` gives each job's first and last changed instant (last None: replay to the
    end). After the last change, a job's timeline is the one its stored intervals
    describe: once the replay's open edges are the stored ones open at that instant,
    everything after it stands, but for moving an open interval's start. So the replay
    reads a window past the last change and stops there, and reads further only when it
    has not settled; a late event costs what it changes, not the history after it.
    ``jobs`` are the locked rows of the jobs: their timeline end is set on them in memory.
    """
    plan = _WritePlan()
    reach = FIRST_REACH
    pending = dict(spans)
    while pending:
        windows: dict[int, tuple[datetime, datetime | None, datetime | None]] = {}
        for job_id, (since, until) in pending.items():
            last = jobs[job_id].timeline_end
            end = None
            if until is not None and last is not None and until + reach < last:
                end = until + reach
            windows[job_id] = (since, until, end)
        for job_id in _replay_windows(windows, jobs, plan):
            del pending[job_id]
        reach *= 16
    plan.apply()


def _replay_windows(
    windows: Mapping[int, tuple[datetime, datetime | None, datetime | None]],
    jobs: Mapping[int, Job],
    plan: _WritePlan,
) -> set[int]:
    """Replay each job over [since, end] (end None: to its timeline's end); gives the jobs
    whose replay settled after ``until`` or reached the end (their writes are in ``plan``)."""
    job_ids = sorted(windows)
    earliest = min(since for since, _, _ in windows.values())
    ends = [end for _, _, end in windows.values()]
    latest = None if None in ends else max(e for e in ends if e is not None)
    runs = []
    spans = {job_id: (since, end) for job_id, (since, _, end) in windows.items()}
    for row in Run.objects.filter(
        in_windows(Run, "job", "ended_at", spans, flag="edges_applied")
    ).values_list("pk", "job_id", "run_uuid", "ended_at", "column_lineage"):
        since, _, end = windows[row[1]]
        if row[3] is not None and row[3] >= since and (end is None or row[3] <= end):
            runs.append(row)
    io: dict[int, set[TableKey]] = defaultdict(set)
    if runs:
        for run_id, dataset_id, direction in RunDataset.objects.filter(
            run_id__any_of=[r[0] for r in runs]
        ).values_list("run_id", "dataset_id", "direction"):
            io[run_id].add((dataset_id, direction))
    steps: dict[int, list[_RunStep]] = defaultdict(list)
    for run_id, job_id, run_uuid, ended_at, lineage in runs:
        assert ended_at is not None
        lineage = lineage or {}
        run_io = io[run_id]
        steps[job_id].append(
            _RunStep(
                at=ended_at,
                run_uuid=str(run_uuid),
                io=run_io,
                outputs={d for d, direction in run_io if direction == Direction.OUTPUT},
                covered=set(lineage.get("covered", [])),
                columns=lineage_edges(lineage),
                digest=step_digest(run_io, _lineage_key(lineage)),
            )
        )

    def within(job_id: int, valid_from: datetime, valid_to: datetime | None) -> bool:
        since, _, end = windows[job_id]
        return (valid_to is None or valid_to >= since) and (end is None or valid_from <= end)

    reaching = Q(valid_to__isnull=True) | Q(valid_to__gte=earliest)
    if latest is not None:
        reaching &= Q(valid_from__lte=latest)
    table_rows: dict[int, list[TableEdge]] = defaultdict(list)
    for edge in TableEdge.objects.filter(reaching, job_id__any_of=job_ids):
        if within(edge.job_id, edge.valid_from, edge.valid_to):
            table_rows[edge.job_id].append(edge)
    column_rows: dict[int, list[ColumnEdge]] = defaultdict(list)
    for cedge in ColumnEdge.objects.filter(reaching, job_id__any_of=job_ids):
        assert cedge.job_id is not None
        if within(cedge.job_id, cedge.valid_from, cedge.valid_to):
            column_rows[cedge.job_id].append(cedge)

    source_fields: set[int] = {c.source_field_id for rows in column_rows.values() for c in rows}
    for job_steps in steps.values():
        for step in job_steps:
            source_fields.update(key[0] for key in step.columns)
    field_dataset = dict(
        DatasetField.objects.filter(pk__any_of=source_fields).values_list("pk", "dataset_id")
    )
    datasets: set[int] = set(field_dataset.values())
    for table_edges in table_rows.values():
        datasets.update(e.dataset_id for e in table_edges)
    for column_edges in column_rows.values():
        datasets.update(c.target_dataset_id for c in column_edges)
    for job_steps in steps.values():
        for step in job_steps:
            datasets.update(d for d, _ in step.io)
            datasets.update(key[1] for key in step.columns)
    closings: dict[int, list[datetime]] = defaultdict(list)
    if datasets:
        for dataset_id, at in DatasetVersion.objects.filter(
            dataset_id__any_of=datasets,
            lifecycle_state__in=list(CLOSED_STATES),
            created_at__gte=earliest,
            **({} if latest is None else {"created_at__lte": latest}),
        ).values_list("dataset_id", "created_at"):
            closings[dataset_id].append(at)

    done: set[int] = set()
    for job_id in job_ids:
        since, until, end = windows[job_id]
        job_closings = sorted(
            {
                (at, dataset_id)
                for dataset_id, times in closings.items()
                for at in times
                if at >= since and (end is None or at <= end)
            }
        )
        timeline: list[tuple[datetime, int, str, _RunStep | int]] = [
            (s.at, 0, s.run_uuid, s)
            for s in sorted(steps[job_id], key=lambda s: (s.at, s.run_uuid))
        ]
        timeline.extend((at, 1, str(d), d) for at, d in job_closings)
        timeline.sort(key=lambda item: (item[0], item[1], item[2]))
        # A window short of the timeline's end counts only once both replays settle in it.
        settle = None if end is None else until
        tables = _replay(since, timeline, table_rows[job_id], settle, TABLE_EDGES)
        if tables is None:
            continue
        columns = _replay(
            since, timeline, column_rows[job_id], settle, _column_edges(field_dataset)
        )
        if columns is None:
            continue
        _write_tables(job_id, table_rows[job_id], *tables, plan)
        _write_columns(job_id, column_rows[job_id], *columns, plan)
        done.add(job_id)
        if end is not None:
            continue  # the timeline's end lies past the window, as it was
        job, last = jobs[job_id], timeline[-1][3] if timeline else None
        if isinstance(last, _RunStep):
            job.timeline_end, job.timeline_digest = last.at, last.digest
        else:  # ends in a closing, or nothing left to go by: the next run replays
            job.timeline_end, job.timeline_digest = None, ""
    return done


def _settled(
    timeline: list[tuple[datetime, int, str, _RunStep | int]], index: int, after: datetime | None
) -> bool:
    """Whether the replay may compare with the stored intervals after item ``index``: past
    ``after``, and every item of that instant applied."""
    at = timeline[index][0]
    if after is None or at <= after:
        return False
    return index + 1 == len(timeline) or timeline[index + 1][0] > at


TABLE_EDGE_FIELDS = ("job_id", "dataset_id", "direction", "valid_from", "valid_to")
COLUMN_EDGE_FIELDS = (
    "job_id",
    "source_field_id",
    "target_dataset_id",
    "target_field_id",
    "transformation_type",
    "transformation_subtype",
    "masking",
    "description",
    "valid_from",
    "valid_to",
)


@dataclass
class _WritePlan:
    table_delete: list[int] = field(default_factory=list)
    table_update: list[TableEdge] = field(default_factory=list)
    table_insert: list[tuple[Any, ...]] = field(default_factory=list)  # TABLE_EDGE_FIELDS
    column_delete: list[int] = field(default_factory=list)
    column_update: list[ColumnEdge] = field(default_factory=list)
    column_insert: list[tuple[Any, ...]] = field(default_factory=list)  # COLUMN_EDGE_FIELDS
    # Fields out of which an edge that carries personal-data flags opened, closed or moved,
    # and the earliest instant such a change took effect.
    carrying_sources: set[int] = field(default_factory=set)
    carrying_since: datetime | None = None

    def touch(self, key: ColumnKey, *moments: datetime | None) -> None:
        if key[2] is not None and propagation.carries(key[3], key[4]):
            self.carrying_sources.add(key[0])
            known = [m for m in moments if m is not None]
            if self.carrying_since is not None:
                known.append(self.carrying_since)
            self.carrying_since = min(known)

    def apply(self) -> None:
        # Deletes, then closings, then re-openings, then inserts: the at-most-one-open-edge
        # constraints hold after every statement.
        if self.table_delete:
            TableEdge.objects.filter(pk__any_of=self.table_delete).delete()
        if self.column_delete:
            ColumnEdge.objects.filter(pk__any_of=self.column_delete).delete()
        for closing in (True, False):
            rows = [e for e in self.table_update if (e.valid_to is not None) == closing]
            bulk.update(TableEdge, rows, ["valid_to"])
            crows = [e for e in self.column_update if (e.valid_to is not None) == closing]
            bulk.update(ColumnEdge, crows, ["valid_to", "masking", "description"])
        bulk.insert_values(TableEdge, TABLE_EDGE_FIELDS, self.table_insert)
        bulk.insert_values(ColumnEdge, COLUMN_EDGE_FIELDS, self.column_insert)
        if self.carrying_sources:
            propagation.edges_changed(self.carrying_sources, self.carrying_since)


class _Edges(NamedTuple):
    """One kind of edge (table or column) as the replay sees it."""

    key: Callable[[Any], Any]  # of a stored row
    attrs: Callable[[Any], tuple[Any, ...]]  # of a stored row: must match for it to settle
    closes: Callable[[Any, _RunStep], bool]  # whether a run closes an open key
    opens: Callable[[_RunStep], Mapping[Any, tuple[Any, ...]]]  # a run's keys, attributes
    closed_by: Callable[[Any, int], bool]  # whether a dataset's closing closes a key


TABLE_EDGES = _Edges(
    key=lambda e: (e.dataset_id, e.direction),
    attrs=lambda e: (),
    closes=lambda key, step: key not in step.io,
    opens=lambda step: dict.fromkeys(step.io, ()),
    closed_by=lambda key, dataset: key[0] == dataset,
)


def _column_edges(field_dataset: dict[int, int]) -> _Edges:
    """Column edges: a run closes those into a dataset it did not write, and those into
    an output its facet covers that it does not report; a closing closes those into or
    out of the dataset."""
    return _Edges(
        key=_column_key,
        attrs=lambda e: (e.masking, e.description),
        closes=lambda key, step: (
            key[1] not in step.outputs or (key[1] in step.covered and key not in step.columns)
        ),
        opens=lambda step: step.columns,
        closed_by=lambda key, dataset: key[1] == dataset or field_dataset.get(key[0]) == dataset,
    )


Intervals = dict[tuple[Any, datetime], tuple[datetime | None, tuple[Any, ...]]]


def _replay(
    since: datetime,
    timeline: list[tuple[datetime, int, str, _RunStep | int]],
    rows: list[Any],
    settle: datetime | None,
    edges: _Edges,
) -> tuple[Intervals, datetime | None] | None:
    """Replay one kind of the job's edges (``rows``: those stored that reach the window)
    from ``since``: the intervals, by (key, start), with their end and attributes, and
    where it settled. With ``settle``, it stops at the first instant after it where the
    open edges are the stored ones, attributes included (None: none in the window)."""
    open_: dict[Any, tuple[datetime, tuple[Any, ...]]] = {}
    for edge in rows:
        if edge.valid_from < since:
            key = edges.key(edge)
            if key not in open_ or edge.valid_from < open_[key][0]:
                open_[key] = (edge.valid_from, edges.attrs(edge))
    intervals: Intervals = {}

    def close(key: Any, at: datetime) -> None:
        start, attrs = open_.pop(key)
        if start < at:
            intervals[(key, start)] = (at, attrs)

    settled_at = None
    for index, (at, _, _, item) in enumerate(timeline):
        if isinstance(item, _RunStep):
            for key in [k for k in open_ if edges.closes(k, item)]:
                close(key, at)
            for key, attrs in edges.opens(item).items():
                if key not in open_:
                    open_[key] = (at, attrs)
        else:
            for key in [k for k in open_ if edges.closed_by(k, item)]:
                close(key, at)
        if _settled(timeline, index, settle):
            alive = {
                edges.key(e): e
                for e in rows
                if e.valid_from <= at and (e.valid_to is None or e.valid_to > at)
            }
            if alive.keys() == open_.keys() and all(
                edges.attrs(alive[key]) == attrs for key, (_, attrs) in open_.items()
            ):
                # From here on the stored intervals stand; an open one may start earlier.
                for key, (start, attrs) in open_.items():
                    intervals[(key, start)] = (alive[key].valid_to, attrs)
                open_.clear()
                settled_at = at
                break
    if settle is not None and settled_at is None:
        return None
    for key, (start, attrs) in open_.items():
        intervals[(key, start)] = (None, attrs)
    return intervals, settled_at


def _write_tables(
    job_id: int,
    rows: list[TableEdge],
    intervals: Intervals,
    settled_at: datetime | None,
    plan: _WritePlan,
) -> None:
    """Plan the writes that make the job's stored table edges the replayed intervals."""
    for edge in rows:
        if settled_at is not None and edge.valid_from > settled_at:
            continue  # after the replay settled: as stored
        ident = ((edge.dataset_id, edge.direction), edge.valid_from)
        if ident in intervals:
            wanted, _ = intervals.pop(ident)
            if edge.valid_to != wanted:
                edge.valid_to = wanted
                plan.table_update.append(edge)
        else:
            plan.table_delete.append(edge.pk)
    for ((dataset_id, direction), start), (end, _) in intervals.items():
        plan.table_insert.append((job_id, dataset_id, direction, start, end))


def _write_columns(
    job_id: int,
    rows: list[ColumnEdge],
    intervals: Intervals,
    settled_at: datetime | None,
    plan: _WritePlan,
) -> None:
    """As :func:`_write_tables`, for column edges, noting those that carry flags."""
    for edge in rows:
        if settled_at is not None and edge.valid_from > settled_at:
            continue
        ident = (_column_key(edge), edge.valid_from)
        if ident in intervals:
            end, (masking, description) = intervals.pop(ident)
            if (edge.valid_to, edge.masking, edge.description) != (end, masking, description):
                # The change takes effect at the earlier end (or, masking changed, at once).
                moment = (
                    edge.valid_from if edge.masking != masking else _earlier(edge.valid_to, end)
                )
                edge.valid_to, edge.masking, edge.description = end, masking, description
                plan.column_update.append(edge)
                plan.touch(ident[0], moment or edge.valid_from)
        else:
            plan.column_delete.append(edge.pk)
            plan.touch(ident[0], edge.valid_from)
    for (key, start), (end, (masking, description)) in intervals.items():
        plan.column_insert.append((job_id, *key, masking, description, start, end))
        plan.touch(key, start)


def _earlier(a: datetime | None, b: datetime | None) -> datetime | None:
    """The earlier of two interval ends (None: open, the latest of all)."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _column_key(edge: ColumnEdge) -> ColumnKey:
    return (
        edge.source_field_id,
        edge.target_dataset_id,
        edge.target_field_id,
        edge.transformation_type,
        edge.transformation_subtype,
    )
