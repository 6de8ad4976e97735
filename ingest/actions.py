"""Writes of the ingest app: the outbox, claiming and normalising events, replay, sweep, bulk load.

The life of an event: ``store_events`` inserts it (once per fingerprint) in
the caller's transaction and queues a task when that commits; the task
``process_events`` claims it with a conditional update (pending → processing),
normalises it and marks it done *in the same transaction*, so a worker that
dies mid-way leaves it processing and nothing applied; ``sweep`` puts such
events (and pending ones whose task was lost) back on the queue. An event
that keeps failing is marked failed with its error — the dead-letter list —
until someone replays it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import F, Field, Q
from django.utils import timezone

from catalog import bulk, pgsql
from catalog.models import Namespace
from graph.models import Job, Run
from ingest import queries
from ingest.events import EventError, ParsedEvent, parse_event
from ingest.models import EventState, RawEvent
from ingest.normalizer import NormalizeResult, RetryBatch, collector_paused, normalize
from lineage_site import dispatch
from ops import metrics

logger = logging.getLogger(__name__)

TRANSIENT_ERRORS = (OperationalError, IntegrityError, RetryBatch)
IN_PROCESS_RETRIES = 3


def setting(name: str, default: int) -> int:
    return int(getattr(settings, name, default))


# -- the outbox ---------------------------------------------------------------------------


@dataclass
class StoreResult:
    """Outcome of storing events: ids of new rows, and fingerprints already stored."""

    stored: dict[str, int] = field(default_factory=dict)  # fingerprint -> id
    duplicates: dict[str, int] = field(default_factory=dict)

    def status(self, fingerprint: str) -> str:
        return "duplicate" if fingerprint in self.duplicates else "stored"


def raw_event_for(
    event: ParsedEvent, source: str, now: datetime, processed: bool = False
) -> tuple[Any, ...]:
    """The RawEvent row of an event, as values of ``INSERT_FIELDS``."""
    finished = now if processed else None
    return (
        event.fingerprint,
        event.kind,
        event.canonical or json.dumps(event.body, ensure_ascii=False, separators=(",", ":")),
        event.event_type,
        event.event_time,
        event.run_uuid,
        event.job_namespace or (event.dataset.namespace if event.dataset else ""),
        event.job_name or (event.dataset.name if event.dataset else ""),
        source[:16],
        str(EventState.DONE if processed else EventState.PENDING),
        1 if processed else 0,
        "",
        now,
        now,
        finished,
        finished,
        json.dumps(event.warnings, ensure_ascii=False) if event.warnings else "",
    )


def store_events(
    events: list[ParsedEvent],
    source: str,
    enqueue: bool = True,
    processed: bool = False,
    refuse_reused_runs: bool = False,
) -> StoreResult:
    """Store events verbatim (each fingerprint once) and queue their processing on commit.

    ``processed`` stores them as done: for a caller normalising them in the same
    transaction (nothing to claim, nothing to queue). ``refuse_reused_runs`` raises the
    first event's error of ``reused_run_ids`` instead of storing anything; for one event
    on PostgreSQL the check is part of the insert's statement (one round trip a POST).
    """
    result = StoreResult()
    if not events:
        return result
    unique = list({e.fingerprint: e for e in events}.values())
    postgres = connection.vendor == "postgresql"
    checked_on_insert = refuse_reused_runs and postgres and len(unique) == 1
    if refuse_reused_runs and not checked_on_insert:
        for error in reused_run_ids(unique).values():
            raise error
    now = timezone.now()
    # One INSERT is atomic by itself: no transaction round trips around it.
    single = postgres and len(unique) <= COPY_MIN_ROWS
    with contextlib.nullcontext() if single else transaction.atomic():
        rows = [raw_event_for(e, source, now, processed) for e in unique]
        if checked_on_insert:
            result.stored = _insert_unless_run_reused(rows[0], unique[0])
        elif postgres:
            result.stored = _insert_new(rows)
        else:
            result.stored = _insert_new_portably(rows)
        missing = [e.fingerprint for e in unique if e.fingerprint not in result.stored]
        if missing:
            result.duplicates = dict(
                RawEvent.objects.filter(fingerprint__in=missing).values_list("fingerprint", "pk")
            )
        if enqueue and result.stored:
            ids = sorted(result.stored.values())
            transaction.on_commit(lambda: enqueue_processing(ids))
        if result.stored:
            accepted = len(result.stored)
            transaction.on_commit(lambda: metrics.EVENTS_ACCEPTED.labels(source[:16]).inc(accepted))
    return result


def reused_run_ids(events: list[ParsedEvent]) -> dict[int, EventError]:
    """Errors (409) by position for events whose run id belongs to another job: a stored
    run's, or an earlier event's of the same list. OpenLineage run ids are unique, so such
    an event is refused rather than stored and then failed."""
    owners = queries.jobs_of_runs({e.run_uuid for e in events if e.run_uuid is not None})
    errors: dict[int, EventError] = {}
    for index, event in enumerate(events):
        if event.run_uuid is None or not event.job_name:
            continue
        job = (event.job_namespace, event.job_name)
        owner = owners.setdefault(event.run_uuid, job)
        if owner != job:
            errors[index] = _reused_run(event, owner)
    return errors


def _reused_run(event: ParsedEvent, owner: tuple[str, str]) -> EventError:
    return EventError(
        f"run.runId {event.run_uuid} belongs to job {owner[0]}:{owner[1]}, "
        f"not {event.job_namespace}:{event.job_name}",
        "run.runId",
        409,
    )


# Above this many events a store goes through COPY.
COPY_MIN_ROWS = 20
INSERT_FIELDS = (
    "fingerprint",
    "kind",
    "body",
    "event_type",
    "event_time",
    "run_uuid",
    "job_namespace",
    "job_name",
    "source",
    "state",
    "attempts",
    "error",
    "received_at",
    "queued_at",
    "claimed_at",
    "processed_at",
    "warnings",
)


def _column(name: str) -> str:
    found = RawEvent._meta.get_field(name)
    assert isinstance(found, Field)
    return found.column


_INSERT_COLUMNS = ", ".join(_column(name) for name in INSERT_FIELDS)


def _insert_new(rows: list[tuple[Any, ...]]) -> dict[str, int]:
    """INSERT … ON CONFLICT DO NOTHING RETURNING: the first writer wins.

    A few rows (the single-event API) go as one statement, atomic by itself; many
    go through COPY (catalog.bulk), which needs a transaction but skips the
    per-value preparation that dominated large batches.
    """
    if len(rows) > COPY_MIN_ROWS:
        return dict(bulk.insert_new(RawEvent, INSERT_FIELDS, rows, ("fingerprint", "id")))
    # The row's values are what the driver adapts (str, datetime, UUID, int), bound on the
    # server: one event's 2 KB body is not quoted into the text, and the statement has
    # one text per number of rows, prepared (its backend's time per event halves).
    row_marks = "(" + ", ".join(["%s"] * len(INSERT_FIELDS)) + ")"
    with pgsql.bound_cursor() as cursor:
        pgsql.execute_prepared(
            cursor,
            f"INSERT INTO {RawEvent._meta.db_table} ({_INSERT_COLUMNS}) "
            f"VALUES {', '.join([row_marks] * len(rows))} "
            "ON CONFLICT (fingerprint) DO NOTHING RETURNING fingerprint, id",
            [value for row in rows for value in row],
        )
        return {fingerprint: pk for fingerprint, pk in cursor.fetchall()}


def _insert_unless_run_reused(row: tuple[Any, ...], event: ParsedEvent) -> dict[str, int]:
    """``_insert_new`` of one event, in the statement that reads who owns its run: the row
    is inserted only if no other job does, else the owner's EventError (409) is raised."""
    if event.run_uuid is None or not event.job_name:
        return _insert_new([row])
    with pgsql.bound_cursor() as cursor:
        # Prepared: planning its joins took its backend 0.8 ms an event unprepared, 0.15.
        pgsql.execute_prepared(
            cursor,
            _INSERT_UNLESS_RUN_REUSED,
            [event.run_uuid, *row, event.job_namespace, event.job_name],
        )
        stored = {}
        for fingerprint, pk, namespace, job in cursor.fetchall():
            if fingerprint is not None:
                stored[fingerprint] = pk
            elif (namespace, job) != (event.job_namespace, event.job_name):
                raise _reused_run(event, (namespace, job))
        return stored


_INSERT_UNLESS_RUN_REUSED = f"""
WITH owner AS (
    SELECT namespace.name AS namespace, job.name AS job
    FROM {Run._meta.db_table} run
    JOIN {Job._meta.db_table} job ON job.id = run.job_id
    JOIN {Namespace._meta.db_table} namespace ON namespace.id = job.namespace_id
    WHERE run.run_uuid = %s
), stored AS (
    INSERT INTO {RawEvent._meta.db_table} ({_INSERT_COLUMNS})
    SELECT {", ".join(["%s"] * len(INSERT_FIELDS))}
    WHERE NOT EXISTS (SELECT FROM owner WHERE (owner.namespace, owner.job) <> (%s, %s))
    ON CONFLICT (fingerprint) DO NOTHING RETURNING fingerprint, id
)
SELECT fingerprint, id, NULL, NULL FROM stored
UNION ALL SELECT NULL, NULL, namespace, job FROM owner
"""


def _insert_new_portably(rows: list[tuple[Any, ...]]) -> dict[str, int]:
    known = set(
        RawEvent.objects.filter(fingerprint__in=[r[0] for r in rows]).values_list(
            "fingerprint", flat=True
        )
    )
    fresh = [
        RawEvent(**dict(zip(INSERT_FIELDS, row, strict=True)))
        for row in rows
        if row[0] not in known
    ]
    if not fresh:
        return {}
    try:
        with transaction.atomic():
            created = RawEvent.objects.bulk_create(fresh)
        return {row.fingerprint: row.pk for row in created}
    except IntegrityError:
        # Another writer stored some of them meanwhile: the first one wins.
        received = fresh[0].received_at
        RawEvent.objects.bulk_create(fresh, ignore_conflicts=True)
        return dict(
            RawEvent.objects.filter(
                fingerprint__in=[r.fingerprint for r in fresh], received_at=received
            ).values_list("fingerprint", "pk")
        )


_broker_down_until = 0.0


def enqueue_processing(ids: list[int]) -> bool:
    """Queue tasks for these events; False if the broker is unreachable (the sweep catches up).

    With a real broker the ids go to a background publisher, so a request does
    not wait on the broker and events accepted together share a task; in-process
    (eager) tasks run here and now.
    """
    if not ids:
        return True
    if settings.CELERY_TASK_ALWAYS_EAGER:
        sent = send_tasks(ids)
        _sweep_when_due()
        return sent
    if not setting("INGEST_PUBLISH_IN_BACKGROUND", 1):
        return send_tasks(ids)
    _publisher.submit(ids)
    return True


_next_sweep = 0.0


def _sweep_when_due() -> None:
    """With in-process tasks there is no scheduler: the process that stores events sweeps
    every INGEST_SWEEP_INTERVAL_SECONDS, so events left pending by a process that stopped
    are normalised once events arrive again."""
    global _next_sweep
    now = time.monotonic()
    if now >= _next_sweep:
        _next_sweep = now + setting("INGEST_SWEEP_INTERVAL_SECONDS", 30)
        sweep()


def send_tasks(ids: list[int]) -> bool:
    """Send ``process_batch`` tasks for these ids now; False if the broker is unreachable.

    After a failure the broker is not tried again for a few seconds, so an
    outage does not slow everything down; the events wait in the outbox.
    """
    global _broker_down_until
    if time.monotonic() < _broker_down_until:
        return False
    chunk = setting("INGEST_TASK_BATCH", 100)
    try:
        for start in range(0, len(ids), chunk):
            # Round-trip through JSON even when tasks run in-process, as a broker would.
            args = json.loads(json.dumps([ids[start : start + chunk]]))
            dispatch.send(
                "ingest.tasks.process_batch",
                args,
                retry=True,
                retry_policy={
                    "max_retries": 1,
                    "interval_start": 0,
                    "interval_step": 0.2,
                    "interval_max": 0.2,
                },
            )
    except Exception:  # the broker's errors vary by transport; the events are safe in the DB
        _broker_down_until = time.monotonic() + setting("INGEST_BROKER_BACKOFF_SECONDS", 5)
        logger.warning("could not queue %d events; the sweep will retry", len(ids), exc_info=True)
        return False
    return True


class Publisher:
    """A daemon thread that sends queued ids to the broker, as many per task as have gathered.

    Ids handed over but not yet sent when the process dies are not lost: their
    events are in the outbox, and the sweep re-queues them.
    """

    def __init__(self, send: Callable[[list[int]], bool]) -> None:
        self._send = send
        self._pid = 0
        self._start()

    def _start(self) -> None:
        self._pid = os.getpid()
        self._ids: list[int] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._sending = False
        self._last_sent = 0.0
        self._thread: threading.Thread | None = None

    def submit(self, ids: list[int]) -> None:
        if self._pid != os.getpid():  # forked (a server's worker process): start afresh
            self._start()
        with self._lock:
            self._ids.extend(ids)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="ingest-publisher", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything submitted has been handed to the broker (for tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._ids and not self._sending:
                    return True
            time.sleep(0.01)
        return False

    def _run(self) -> None:
        while True:
            self._wake.wait()
            # At most one publish per interval: under load, the ids of the requests that
            # arrive meanwhile share a task (a publish costs about a millisecond of CPU,
            # a sixth of the server's time per event when every request had its own);
            # a lone event after a quiet spell goes at once.
            interval = setting("INGEST_PUBLISH_INTERVAL_MS", 0) / 1000
            pause = self._last_sent + interval - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            with self._lock:
                ids, self._ids = self._ids, []
                self._wake.clear()
                self._sending = bool(ids)
            try:
                if ids:
                    self._last_sent = time.monotonic()
                    self._send(sorted(set(ids)))
            except Exception:  # never let the thread die; the sweep re-queues
                logger.exception("publishing %d events failed", len(ids))
            finally:
                with self._lock:
                    self._sending = False


_publisher = Publisher(lambda ids: send_tasks(ids))


# -- claiming and processing --------------------------------------------------------------


@dataclass
class ProcessResult:
    done: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    retry: list[int] = field(default_factory=list)
    normalized: NormalizeResult | None = None


@dataclass(frozen=True)
class Claimed:
    """A claimed event: what normalising it needs (no model instance per event)."""

    pk: int
    fingerprint: str
    body: str
    attempts: int
    warnings: str  # "" when no facet was left out when it was accepted
    received_at: datetime


def claim(ids: Iterable[int], extra: int = 0) -> list[Claimed]:
    """Claim pending events (these ids, plus up to ``extra`` other pending ones, oldest first).

    The claim is a conditional update, so an event already claimed, done or
    failed is left alone and a duplicate task does nothing.
    """
    wanted = sorted(set(ids))
    now = timezone.now()
    if connection.vendor == "postgresql":
        return _claim_in_one_statement(wanted, extra, now)
    with transaction.atomic():
        pending = RawEvent.objects.select_for_update(skip_locked=True).filter(
            state=EventState.PENDING
        )
        chosen = list(pending.filter(pk__in=wanted).values_list("pk", flat=True)) if wanted else []
        if extra > 0:
            chosen += list(
                pending.exclude(pk__in=chosen)
                .order_by("received_at", "pk")
                .values_list("pk", flat=True)[:extra]
            )
        if not chosen:
            return []
        RawEvent.objects.filter(pk__in=chosen, state=EventState.PENDING).update(
            state=EventState.PROCESSING, claimed_at=now, attempts=F("attempts") + 1
        )
    rows = RawEvent.objects.filter(pk__in=chosen, state=EventState.PROCESSING, claimed_at=now)
    return [
        Claimed(*row)
        for row in rows.values_list(
            "pk", "fingerprint", "body", "attempts", "warnings", "received_at"
        )
    ]


CLAIM_SQL = """
WITH wanted AS (
    SELECT id FROM ingest_rawevent WHERE state = %(pending)s AND id = ANY(%(ids)s)
    FOR UPDATE SKIP LOCKED
), others AS (
    SELECT id FROM ingest_rawevent WHERE state = %(pending)s AND NOT (id = ANY(%(ids)s))
    ORDER BY received_at, id LIMIT %(extra)s
    FOR UPDATE SKIP LOCKED
)
UPDATE ingest_rawevent AS r
SET state = %(processing)s, claimed_at = %(now)s, attempts = r.attempts + 1
FROM (SELECT id FROM wanted UNION SELECT id FROM others) AS chosen
WHERE r.id = chosen.id
RETURNING r.id, r.fingerprint, r.body, r.attempts, r.warnings, r.received_at
"""


def _claim_in_one_statement(wanted: list[int], extra: int, now: datetime) -> list[Claimed]:
    """The claim as one statement: lock what is pending and free, mark it, read it back.

    Its commit does not wait for the disk: a claim lost in a crash leaves the
    events pending, to be claimed again.
    """
    params: dict[str, Any] = {
        "pending": EventState.PENDING,
        "processing": EventState.PROCESSING,
        "ids": wanted,
        "extra": max(extra, 0),
        "now": now,
    }
    with transaction.atomic():
        pgsql.relax_commit()
        with connection.cursor() as cursor:
            cursor.execute(CLAIM_SQL, params)
            return [Claimed(*row) for row in sorted(cursor.fetchall())]


def process_events(
    ids: Iterable[int], extra: int = 0, known: dict[str, ParsedEvent] | None = None
) -> ProcessResult:
    """Claim and normalise events; each ends done, failed, or pending again to be retried.

    ``known`` holds events already parsed (by fingerprint), to skip reading them back.
    """
    return normalize_claimed(claim(ids, extra), known)


def process_until_settled(ids: Iterable[int]) -> ProcessResult:
    """``process_events`` until each event is done or failed: with in-process tasks nothing
    else would try again an event put back to pending. Each claim counts an attempt, so
    INGEST_MAX_ATTEMPTS bounds the rounds."""
    total = ProcessResult()
    pending = list(ids)
    while pending:
        result = process_events(pending)
        total.done += result.done
        total.failed += result.failed
        pending = result.retry
    return total


def normalize_claimed(
    events: list[Claimed], known: dict[str, ParsedEvent] | None = None
) -> ProcessResult:
    """Normalise claimed events together; if the batch fails, each on its own."""
    with collector_paused():
        return _normalize_claimed(events, known)


def _normalize_claimed(
    events: list[Claimed], known: dict[str, ParsedEvent] | None
) -> ProcessResult:
    result = ProcessResult()
    parsed: list[tuple[Claimed, ParsedEvent]] = []
    for raw in events:
        try:
            event = (known or {}).get(raw.fingerprint)
            if event is None:
                body = json.loads(raw.body)
                event = parse_event(
                    body, raw.fingerprint, checked=not raw.warnings, received=raw.received_at
                )
            parsed.append((raw, event))
        except (EventError, ValueError) as exc:
            _record_failure([raw], exc, permanent=True)
            result.failed.append(raw.pk)
    if parsed:
        _normalize_isolating(parsed, result)
    return result


def _normalize_isolating(parsed: list[tuple[Claimed, ParsedEvent]], result: ProcessResult) -> None:
    """Normalise the events together; if that fails, each half on its own, down to the
    event that fails: a bad event costs about two batches per halving, not one per event."""
    try:
        outcome = _normalize_with_retries(parsed)
    except Exception as exc:
        if len(parsed) == 1:
            raw = parsed[0][0]
            state = _record_failure([raw], exc)
            (result.retry if state == EventState.PENDING else result.failed).append(raw.pk)
            return
        logger.info("batch of %d events failed (%s); trying each half", len(parsed), exc)
        half = len(parsed) // 2
        _normalize_isolating(parsed[:half], result)
        _normalize_isolating(parsed[half:], result)
        return
    result.done.extend(raw.pk for raw, _ in parsed)
    received = [raw.received_at for raw, _ in parsed]
    transaction.on_commit(lambda: metrics.normalized(received))
    if result.normalized is None:
        result.normalized = outcome
    else:
        result.normalized.merge(outcome)


def _normalize_with_retries(parsed: list[tuple[Claimed, ParsedEvent]]) -> NormalizeResult:
    for attempt in range(IN_PROCESS_RETRIES):
        try:
            with transaction.atomic():
                pgsql.relax_commit()  # a lost commit leaves them claimed: the sweep frees them
                outcome = normalize([event for _, event in parsed])
                RawEvent.objects.filter(
                    pk__any_of=[raw.pk for raw, _ in parsed],
                    state__in=[EventState.PROCESSING, EventState.PENDING],
                ).update(state=EventState.DONE, processed_at=timezone.now(), error="")
            return outcome
        except TRANSIENT_ERRORS:
            # Deadlock victims, unique-key races and closings that raced: try again.
            if attempt == IN_PROCESS_RETRIES - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def _record_failure(events: list[Claimed], exc: BaseException, permanent: bool = False) -> str:
    """Keep the error; transient errors go back to pending until attempts run out."""
    message = f"{type(exc).__name__}: {exc}"
    detail = "".join(traceback.format_exception(exc)[-6:])
    max_attempts = setting("INGEST_MAX_ATTEMPTS", 5)
    transient = isinstance(exc, TRANSIENT_ERRORS) and not permanent
    state = EventState.FAILED
    dead: list[int] = []
    for raw in events:
        if transient and raw.attempts < max_attempts:
            state = EventState.PENDING
        metrics.EVENTS_FAILED.inc()
        if state == EventState.FAILED:
            metrics.EVENTS_DEAD_LETTERED.inc()
            dead.append(raw.pk)
        logger.warning("event %s failed (attempt %d): %s", raw.pk, raw.attempts, message)
        RawEvent.objects.filter(pk=raw.pk).exclude(state=EventState.DONE).update(
            state=state,
            error=f"{message}\n\n{detail}"[:8000],
            processed_at=timezone.now() if state == EventState.FAILED else None,
        )
    if dead:
        # Whoever subscribed to the datasets or namespaces these events name is told.
        transaction.on_commit(lambda: dispatch.send("ops.notify_dead_letters", [dead]), robust=True)
    return state


# -- replay and sweep ---------------------------------------------------------------------


def replay(ids: Iterable[int] | None = None, state: str | None = EventState.FAILED) -> int:
    """Put events back in the queue (these ids, or every event in ``state``); returns how many.

    Compacted events (their body is a summary now) cannot be normalised again: skipped.
    """
    query = RawEvent.objects.filter(compacted_at__isnull=True)
    if ids is not None:
        query = query.filter(pk__in=list(ids))
    if state is not None:
        query = query.filter(state=state)
    else:
        query = query.exclude(state=EventState.PROCESSING)
    now = timezone.now()
    with transaction.atomic():
        chosen = sorted(query.values_list("pk", flat=True))
        # A statement's parameters are bounded (SQLite's 250,000): a long dead-letter list
        # is put back a few thousand at a time.
        for start in range(0, len(chosen), 10_000):
            RawEvent.objects.filter(pk__any_of=chosen[start : start + 10_000]).update(
                state=EventState.PENDING, attempts=0, queued_at=now, claimed_at=None
            )
        if chosen:
            transaction.on_commit(lambda: enqueue_processing(chosen))
    return len(chosen)


@dataclass
class SweepResult:
    requeued: int = 0
    unstuck: int = 0
    gave_up: int = 0


def sweep(now: datetime | None = None) -> SweepResult:
    """Re-queue pending events whose task was lost, and free events stuck in processing.

    An event stays ``processing`` only while its worker holds it; past the
    stuck timeout its worker is presumed dead (its transaction rolled back).
    """
    now = now or timezone.now()
    result = SweepResult()
    requeue_before = now - timedelta(seconds=setting("INGEST_REQUEUE_AFTER_SECONDS", 120))
    stuck_before = now - timedelta(seconds=setting("INGEST_STUCK_AFTER_SECONDS", 600))
    limit = setting("INGEST_SWEEP_LIMIT", 10000)
    max_attempts = setting("INGEST_MAX_ATTEMPTS", 5)
    with transaction.atomic():
        stuck = RawEvent.objects.filter(state=EventState.PROCESSING, claimed_at__lt=stuck_before)
        giving_up = stuck.filter(attempts__gte=max_attempts).select_for_update(skip_locked=True)
        dead = list(giving_up.values_list("pk", flat=True))
        result.gave_up = stuck.filter(pk__in=dead).update(
            state=EventState.FAILED,
            processed_at=now,
            error=f"Gave up after {max_attempts} attempts: its worker stopped each time",
        )
        if dead:
            transaction.on_commit(
                lambda: dispatch.send("ops.notify_dead_letters", [dead]), robust=True
            )
        result.unstuck = stuck.update(state=EventState.PENDING, claimed_at=None)
        gave_up = result.gave_up
        transaction.on_commit(lambda: metrics.EVENTS_DEAD_LETTERED.inc(gave_up))
        lost = list(
            RawEvent.objects.filter(state=EventState.PENDING)
            .filter(Q(queued_at__isnull=True) | Q(queued_at__lt=requeue_before))
            .order_by("received_at", "pk")
            .values_list("pk", flat=True)[:limit]
        )
        if lost:
            RawEvent.objects.filter(pk__in=lost).update(queued_at=now)
            transaction.on_commit(lambda: enqueue_processing(lost))
        result.requeued = len(lost)
    if result.requeued or result.unstuck or result.gave_up:
        logger.info(
            "sweep: requeued %d, freed %d stuck, gave up on %d",
            result.requeued,
            result.unstuck,
            result.gave_up,
        )
    return result


# -- ingesting event dicts in-process -----------------------------------------------------


@dataclass
class Rejected:
    index: int
    error: str
    field: str | None


@dataclass
class IngestReport:
    """What happened to a stream of event dicts."""

    stored: int = 0
    duplicates: int = 0
    processed: int = 0
    failed: int = 0
    rejected: list[Rejected] = field(default_factory=list)
    event_ids: list[int] = field(default_factory=list)

    def add(self, other: IngestReport) -> None:
        self.stored += other.stored
        self.duplicates += other.duplicates
        self.processed += other.processed
        self.failed += other.failed
        self.rejected.extend(other.rejected)
        self.event_ids.extend(other.event_ids)


def parse_all(events: Iterable[Any], report: IngestReport, start: int = 0) -> Iterator[ParsedEvent]:
    """Parsed events; the ones that are not valid go to ``report.rejected`` with their index."""
    for index, body in enumerate(events, start):
        if isinstance(body, ParsedEvent):  # built and checked by this project's own producers
            yield body
            continue
        try:
            yield parse_event(body)
        except EventError as exc:
            report.rejected.append(Rejected(index, exc.message, exc.field))


def chunked(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def ingest_event_dicts(
    events: Iterable[dict[str, Any] | ParsedEvent],
    source: str = "api",
    inline: bool | None = None,
    batch_size: int = 500,
) -> IngestReport:
    """Store OpenLineage event dicts and normalise them: in-process when ``inline`` (default:
    when tasks run eagerly), else queued for workers. Invalid events are rejected, not stored;
    events given already parsed are taken as they are."""
    if inline is None:
        inline = bool(getattr(settings, "CELERY_TASK_ALWAYS_EAGER", True))
    report = IngestReport()
    for chunk in chunked(parse_all(events, report), batch_size):
        if inline:
            report.add(_store_and_process(chunk, source))
        else:
            stored = store_events(chunk, source)
            report.stored += len(stored.stored)
            report.duplicates += len(stored.duplicates)
            report.event_ids.extend(stored.stored.values())
    return report


def bulk_load(
    events: Iterable[dict[str, Any] | ParsedEvent],
    source: str = "backfill",
    batch_size: int = 5000,
    progress: Callable[[int], None] | None = None,
    quiet_graph: bool = False,
) -> IngestReport:
    """Store and normalise many events in-process, ``batch_size`` per transaction.

    Takes event dicts (validated here; invalid ones are rejected) or already
    parsed events. Resumable: events stored by an earlier, interrupted load are
    recognised by fingerprint, and those not yet normalised are normalised now.
    ``quiet_graph`` skips the graph's per-row change log during the load (one
    reset at the end makes readers rebuild their snapshot): for big backfills.
    """
    if quiet_graph:
        from graph import revision

        with revision.bulk_load():
            return bulk_load(events, source, batch_size, progress)
    report = IngestReport()

    def parsed_stream() -> Iterator[ParsedEvent]:
        for index, item in enumerate(events):
            if isinstance(item, ParsedEvent):
                yield item
                continue
            try:
                yield parse_event(item)
            except EventError as exc:
                report.rejected.append(Rejected(index, exc.message, exc.field))

    for chunk in chunked(parsed_stream(), batch_size):
        with collector_paused():
            report.add(_store_and_process(chunk, source))
        if progress is not None:
            progress(len(chunk))
    pgsql.flush_commits()
    return report


def _store_and_process(chunk: list[ParsedEvent], source: str) -> IngestReport:
    """Store and normalise in one transaction: events go in as done, with no claim or
    state updates. If that fails (a bad event, a lost race), the chunk takes the outbox's
    way — stored pending, claimed, normalised, failures isolated by halving."""
    try:
        with transaction.atomic():
            # Durable once the load ends (``flush_commits``); a crash before that loses whole
            # chunks, which a re-run of the load stores again.
            pgsql.relax_commit()
            stored = store_events(chunk, source, enqueue=False, processed=True)
            fresh = {fp: e for e in chunk if (fp := e.fingerprint) in stored.stored}
            received = [timezone.now()] * len(fresh)
            _normalize_with_retries_inline(list(fresh.values()))
            transaction.on_commit(lambda: metrics.normalized(received))
    except Exception as exc:  # the outbox path below records what failed, event by event
        logger.info("chunk of %d events takes the outbox path (%s)", len(chunk), exc)
        return _store_then_process(chunk, source)
    report = IngestReport(
        stored=len(stored.stored),
        duplicates=len(stored.duplicates),
        processed=len(stored.stored),
        event_ids=list(stored.stored.values()),
    )
    # Duplicates left pending by an interrupted earlier load are normalised now.
    waiting = list(
        RawEvent.objects.filter(
            pk__in=list(stored.duplicates.values()), state=EventState.PENDING
        ).values_list("pk", flat=True)
    )
    if waiting:
        outcome = process_events(waiting, known={e.fingerprint: e for e in chunk})
        report.processed += len(outcome.done)
        report.failed += len(outcome.failed) + len(outcome.retry)
    return report


def _normalize_with_retries_inline(events: list[ParsedEvent]) -> None:
    """Normalise inside the caller's transaction: a transient error is tried again from a
    savepoint, anything else is raised."""
    for attempt in range(IN_PROCESS_RETRIES):
        try:
            with transaction.atomic():
                normalize(events)
            return
        except TRANSIENT_ERRORS:
            if attempt == IN_PROCESS_RETRIES - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def _store_then_process(chunk: list[ParsedEvent], source: str) -> IngestReport:
    report = IngestReport()
    stored = store_events(chunk, source, enqueue=False)
    report.stored = len(stored.stored)
    report.duplicates = len(stored.duplicates)
    ids = [*stored.stored.values(), *stored.duplicates.values()]
    report.event_ids = list(stored.stored.values())
    outcome = process_events(ids, known={e.fingerprint: e for e in chunk})
    report.processed = len(outcome.done)
    report.failed = len(outcome.failed) + len(outcome.retry)
    return report
