"""Service level indicators of the lineage itself: how much of the catalog has lineage, how
fresh it is against each job's own cadence, how complete the stewardship of personal data
is, how fast events become lineage, and how many wait in the dead-letter list.

Each indicator has a value, a target and the things that miss it (datasets, or events
for the two ingestion figures), counted in full and listed a page at a time. A scope
narrows the datasets (a namespace, an owner, personal data only; the ingestion figures
follow the namespace through their jobs).
"""

from __future__ import annotations

import itertools
import statistics
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
from django.conf import settings
from django.contrib.postgres.aggregates import ArrayAgg
from django.db import connection
from django.db.models import (
    BooleanField,
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
)
from django.db.models.expressions import Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from catalog import naming
from catalog.flags import CHUNK
from catalog.models import (
    PERSONAL_DATA,
    Dataset,
    DatasetField,
    DatasetOwnership,
    LifecycleState,
    Namespace,
)
from graph import queries as graph_queries
from graph import revision as rev
from graph.models import Run, RunState
from ingest.models import EventState, RawEvent
from ops.models import SliSample

NAMES = ("coverage", "freshness", "completeness", "ingestionLag", "deadLetters")
# Runs of a job whose gaps give its usual interval; a stale dataset waited longer than
# FRESHNESS_FACTOR of them (and FRESHNESS_GRACE) since its last run ended.
CADENCE_RUNS = 6
FRESHNESS_FACTOR = 2.0
FRESHNESS_GRACE = timedelta(minutes=15)
LAG_WINDOW = timedelta(hours=24)


@dataclass(frozen=True)
class Scope:
    namespace: str | None = None
    owner: str | None = None
    personal: bool = False

    def datasets(self) -> QuerySet[Dataset]:
        # Conditions on other tables are EXISTS and IN subqueries: one row per dataset,
        # so counts need no DISTINCT.
        found = Dataset.objects.filter(
            alias_of__isnull=True, lifecycle_state=LifecycleState.ACTIVE, is_hidden=False
        )
        if self.namespace:
            found = found.filter(namespace__name=naming.canonical_namespace(self.namespace))
        if self.owner:
            found = found.filter(
                Exists(
                    DatasetOwnership.objects.filter(dataset=OuterRef("pk"), owner__name=self.owner)
                )
            )
        if self.personal:
            found = found.filter(pk__in=personal_datasets())
        return found

    def events(self) -> QuerySet[RawEvent]:
        found = RawEvent.objects.all()
        if self.namespace:
            found = found.filter(job_namespace=self.namespace)
        return found


def personal_datasets() -> QuerySet[DatasetField, Any]:
    """The datasets holding personal data: a live field flagged, declared or propagated."""
    return (
        DatasetField.objects.filter(removed_at__isnull=True)
        .filter(PERSONAL_DATA)
        .values("dataset_id")
    )


@dataclass
class Indicator:
    name: str
    value: float | None
    target: float
    # Whether a higher value is better (coverage) or a lower one (lag).
    higher_is_better: bool
    unit: str
    description: str
    # Of what the value counts: how many were judged, how many miss.
    judged: int
    missing: int
    misses: list[dict[str, Any]] = field(default_factory=list)

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        return self.value >= self.target if self.higher_is_better else self.value <= self.target

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "target": self.target,
            "unit": self.unit,
            "met": self.met,
            "description": self.description,
            "judged": self.judged,
            "missCount": self.missing,
            "misses": self.misses,
        }


def dataset_row(dataset: Dataset, **extra: Any) -> dict[str, Any]:
    return {
        "id": dataset.node_id,
        "namespace": dataset.namespace.name,
        "name": dataset.name,
        **extra,
    }


def _share(good: int, judged: int) -> float | None:
    return None if judged == 0 else round(good / judged, 4)


IntArray = npt.NDArray[np.int64]


def lacking_stewardship() -> Q:
    """Holding personal data without an owner, a retention policy or a PII review."""
    unowned = ~Exists(DatasetOwnership.objects.filter(dataset=OuterRef("pk")))
    return Q(pk__in=personal_datasets()) & (
        Q(retention_policy__isnull=True) | Q(sensitivity="") | Q(unowned)
    )


@dataclass(frozen=True)
class DatasetFacts:
    """One scan of the scope's datasets for coverage and completeness: their ids, how many
    hold personal data, and per namespace how many of those lack stewardship."""

    judged: IntArray
    personal: int
    lacking: Counter[int]


def dataset_facts(scope: Scope) -> DatasetFacts:
    personal, lacking = Q(pk__in=personal_datasets()), lacking_stewardship()
    datasets = scope.datasets().order_by()
    if connection.vendor == "postgresql":
        # Arrays in one row: 100,000 rows through Python took 40 ms more.
        found = datasets.aggregate(
            judged=ArrayAgg("pk", default=[]),
            personal=Count("pk", filter=personal),
            lacking=ArrayAgg("namespace_id", filter=lacking, default=[]),
        )
        return DatasetFacts(
            np.array(found["judged"], dtype=np.int64), found["personal"], Counter(found["lacking"])
        )
    rows = list(
        datasets.values_list(
            "pk",
            "namespace_id",
            ExpressionWrapper(personal, output_field=BooleanField()),
            ExpressionWrapper(lacking, output_field=BooleanField()),
        )
    )
    return DatasetFacts(
        np.array([row[0] for row in rows], dtype=np.int64),
        sum(1 for row in rows if row[2]),
        Counter(namespace for _, namespace, _, short in rows if short),
    )


def page_by_name(found: QuerySet[Dataset], counts: Counter[int], page: slice) -> list[Dataset]:
    """The ``page`` of ``found`` in (namespace name, name) order, given how many of them each
    namespace holds: read namespace by namespace along the (namespace, name) index, so a
    page costs what it shows (sorting 23,000 misses to show fifty took 50 ms)."""
    rows: list[Dataset] = []
    seen = 0
    for namespace in (
        Namespace.objects.filter(pk__in=counts).order_by("name").values_list("pk", flat=True)
    ):
        if seen >= page.stop:
            break
        held = counts[namespace]
        if seen + held > page.start:
            first = max(page.start - seen, 0)
            last = min(page.stop - seen, held)
            rows.extend(found.filter(namespace_id=namespace).order_by("name")[first:last])
        seen += held
    return rows


def page_of(ids: IntArray, page: slice) -> list[Dataset]:
    """The ``page`` of the datasets ``ids`` in (namespace name, name) order."""
    datasets = Dataset.objects.select_related("namespace")
    if connection.vendor == "postgresql":
        return list(
            datasets.filter(pk__any_of=ids.tolist()).order_by("namespace__name", "name")[page]
        )
    keys: list[tuple[str, str, int]] = []
    for start in range(0, ids.size, CHUNK):
        chunk = ids[start : start + CHUNK].tolist()
        keys += Dataset.objects.filter(pk__in=chunk).values_list("namespace__name", "name", "pk")
    chosen = [pk for _, _, pk in sorted(keys)[page]]
    found = datasets.in_bulk(chosen)
    return [found[pk] for pk in chosen if pk in found]


def coverage(scope: Scope, page: slice, facts: DatasetFacts | None = None) -> Indicator:
    """The datasets of the scope a job reads or writes now, told by the lineage snapshot
    (an anti-join of 100,000 datasets with their edges took 130-290 ms)."""
    judged = (facts or dataset_facts(scope)).judged
    without = np.setdiff1d(judged, graph_queries.in_use_now(), assume_unique=True)
    total, missing = int(judged.size), int(without.size)
    rows = page_of(without, page)
    return Indicator(
        "coverage",
        _share(total - missing, total),
        settings.SLI_COVERAGE_TARGET,
        True,
        "share",
        "Active datasets in current lineage (a job's latest run reads or writes them)",
        total,
        missing,
        [dataset_row(d) for d in rows],
    )


def finished_runs() -> QuerySet[Run]:
    return Run.objects.filter(state=RunState.COMPLETED, ended_at__isnull=False)


def cadences(job_ids: list[int] | None) -> dict[int, tuple[datetime, timedelta]]:
    """Per job of ``job_ids`` (every job when None) with at least two finished runs: when
    its last one ended, and its usual interval (the median gap between the starts of its
    last CADENCE_RUNS runs)."""
    runs = finished_runs()
    if job_ids is not None:
        runs = runs.filter(job_id__any_of=job_ids)
    ranked = (
        runs.annotate(
            rank=Window(RowNumber(), partition_by=F("job_id"), order_by=F("created_at").desc())
        )
        .filter(rank__lte=CADENCE_RUNS)
        .values_list("job_id", "created_at", "ended_at", "rank")
    )
    found: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)
    for job_id, created, ended, rank in ranked:
        if rank <= CADENCE_RUNS and ended is not None:
            found[job_id].append((created, ended))
    out = {}
    for job_id, last in found.items():
        if len(last) < 2:
            continue
        starts = sorted(created for created, _ in last)
        gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(starts)]
        out[job_id] = (max(ended for _, ended in last), timedelta(seconds=statistics.median(gaps)))
    return out


FloatArray = npt.NDArray[np.float64]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
# More jobs changed than this since the last look: every job's cadence is read again.
CADENCE_SYNC_LIMIT = 20_000


@dataclass
class Cadences:
    """Every job's cadence, indexed by job pk, as of one revision of the change log: when
    its last finished run ended (microseconds since the epoch) and its usual interval in
    seconds (NaN for a job with fewer than two finished runs).

    The change log records every run written, with its job, so a look reads again only
    the jobs changed since the last one: reading every job's runs took 1.5 s at 50,000
    jobs with ten runs each (paid at a process's first look, after a reset, and when more
    than CADENCE_SYNC_LIMIT jobs changed). The arrays are replaced, never written in
    place, so an answer keeps the pair it was given."""

    revision: rev.Revision | None = None
    last_end: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    interval: FloatArray = field(default_factory=lambda: np.zeros(0))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sync(self) -> tuple[IntArray, FloatArray]:
        with self.lock:
            current, known = rev.current(), self.revision
            if known == current or self._newer(known, current):
                return self.last_end, self.interval
            changed = self._changed_since(known, current)
            if changed is None:
                self._replace(current, [], cadences(None), start=True)
            elif changed:
                self._replace(current, changed, cadences(changed))
            else:
                self.revision = current
            return self.last_end, self.interval

    @staticmethod
    def _newer(known: rev.Revision | None, current: rev.Revision) -> bool:
        """Whether ``known`` is a later revision of the same timeline than ``current`` (a
        request that pinned its revision before another one's look): kept as it is."""
        return known is not None and current.value < known.value and rev.on_timeline(known)

    @staticmethod
    def _changed_since(known: rev.Revision | None, current: rev.Revision) -> list[int] | None:
        """The jobs whose runs changed from ``known`` to ``current``; None when the change
        log cannot say."""
        if known is None:
            return None
        changes = rev.changes_since(known, current, (rev.Kind.JOB,), CADENCE_SYNC_LIMIT)
        return None if changes is None else sorted(job for _, job in changes)

    def _replace(
        self,
        current: rev.Revision,
        changed: list[int],
        found: dict[int, tuple[datetime, timedelta]],
        start: bool = False,
    ) -> None:
        """New arrays and their revision, together: a read that fails leaves both as they
        were."""
        kept = 0 if start else self.interval.size
        size = max([kept - 1, *changed, *found]) + 1
        last_end = np.zeros(size, dtype=np.int64)
        interval = np.full(size, np.nan)
        last_end[:kept] = self.last_end[:kept]
        interval[:kept] = self.interval[:kept]
        last_end[changed], interval[changed] = 0, np.nan
        for job, (ended, usual) in found.items():
            last_end[job] = (ended - EPOCH) // MICROSECOND
            interval[job] = usual.total_seconds()
        self.last_end, self.interval, self.revision = last_end, interval, current


_cadences = Cadences()


@dataclass(frozen=True)
class Freshness:
    """The scope's datasets written now by a job with a usual interval, each with its
    last write (microseconds since the epoch), how long ago that was and the smallest
    usual interval of its writers (seconds)."""

    datasets: IntArray
    last: IntArray
    age: FloatArray
    interval: FloatArray

    @property
    def stale(self) -> npt.NDArray[np.bool_]:
        limit = FRESHNESS_FACTOR * self.interval + FRESHNESS_GRACE.total_seconds()
        return self.age > limit


def judged_freshness(judged: IntArray, now: datetime) -> Freshness:
    """Freshness of the datasets ``judged`` written now by a job that ran at least twice."""
    datasets, jobs = graph_queries.written_now()
    last_end, interval = _cadences.sync()
    keep = np.isin(datasets, judged) & (jobs < interval.size)
    datasets, jobs = datasets[keep], jobs[keep]
    timed = ~np.isnan(interval[jobs])
    datasets, jobs = datasets[timed], jobs[timed]
    order = np.argsort(datasets, kind="stable")
    datasets, jobs = datasets[order], jobs[order]
    shown, first = np.unique(datasets, return_index=True)
    if not shown.size:
        return Freshness(shown, shown, np.zeros(0), np.zeros(0))
    last = np.maximum.reduceat(last_end[jobs], first)
    usual = np.minimum.reduceat(interval[jobs], first)
    age = ((now - EPOCH) // MICROSECOND - last) / 1e6
    return Freshness(shown, last, age, usual)


def _when(microseconds: int) -> datetime:
    return EPOCH + timedelta(microseconds=int(microseconds))


def stale_datasets(scope: Scope, now: datetime) -> dict[int, tuple[timedelta, timedelta, datetime]]:
    """Per stale dataset of the scope: how long since it was last written, its writers'
    usual interval, and when it was last written."""
    judged = np.array(scope.datasets().values_list("pk", flat=True), dtype=np.int64)
    found = judged_freshness(judged, now)
    return {
        int(found.datasets[i]): (
            timedelta(seconds=float(found.age[i])),
            timedelta(seconds=float(found.interval[i])),
            _when(found.last[i]),
        )
        for i in np.flatnonzero(found.stale)
    }


def freshness(
    scope: Scope, page: slice, now: datetime, facts: DatasetFacts | None = None
) -> Indicator:
    found = judged_freshness((facts or dataset_facts(scope)).judged, now)
    stale = np.flatnonzero(found.stale)
    with np.errstate(divide="ignore", invalid="ignore"):
        overdue = found.age[stale] / found.interval[stale]
    chosen = stale[np.lexsort((found.datasets[stale], -overdue))][page]
    shown = Dataset.objects.select_related("namespace").in_bulk(found.datasets[chosen].tolist())
    return Indicator(
        "freshness",
        _share(int(found.datasets.size - stale.size), int(found.datasets.size)),
        settings.SLI_FRESHNESS_TARGET,
        True,
        "share",
        "Datasets written within twice their job's usual interval (datasets whose jobs "
        "ran at least twice)",
        int(found.datasets.size),
        int(stale.size),
        [
            dataset_row(
                shown[int(found.datasets[i])],
                ageSeconds=round(float(found.age[i])),
                usualIntervalSeconds=round(float(found.interval[i])),
            )
            for i in chosen
            if int(found.datasets[i]) in shown
        ],
    )


def completeness(scope: Scope, page: slice, facts: DatasetFacts | None = None) -> Indicator:
    facts = facts or dataset_facts(scope)
    judged, missing = facts.personal, sum(facts.lacking.values())
    found = (
        scope.datasets()
        .filter(lacking_stewardship())
        .select_related("namespace")
        .prefetch_related("ownerships")
    )
    rows = page_by_name(found, facts.lacking, page)

    def absent(d: Dataset) -> list[str]:
        gaps = []
        if not d.ownerships.all():
            gaps.append("owner")
        if d.retention_policy_id is None:
            gaps.append("retention")
        if not d.sensitivity:
            gaps.append("pii review")
        return gaps

    return Indicator(
        "completeness",
        _share(judged - missing, judged),
        settings.SLI_COMPLETENESS_TARGET,
        True,
        "share",
        "Datasets holding personal data with an owner, a retention policy and a reviewed "
        "sensitivity",
        judged,
        missing,
        [dataset_row(d, missingAttributes=absent(d)) for d in rows],
    )


def ingestion_lag(scope: Scope, page: slice, now: datetime) -> Indicator:
    lag = ExpressionWrapper(F("processed_at") - F("received_at"), output_field=DurationField())
    recent = (
        scope.events()
        .filter(state=EventState.DONE, processed_at__gte=now - LAG_WINDOW)
        .annotate(lag=lag)
    )
    judged = recent.count()
    target = timedelta(seconds=settings.SLI_INGESTION_LAG_TARGET_SECONDS)
    value = None
    if judged:
        p95 = recent.order_by("lag").values_list("lag", flat=True)[int(0.95 * (judged - 1))]
        value = round(p95.total_seconds(), 3)
    late = recent.filter(lag__gt=target)
    rows = late.order_by("-lag", "pk").values_list(
        "pk", "job_namespace", "job_name", "received_at", "lag"
    )[page]
    return Indicator(
        "ingestionLag",
        value,
        float(settings.SLI_INGESTION_LAG_TARGET_SECONDS),
        False,
        "seconds",
        "95th percentile of the time from an event's arrival to its normalisation, over "
        "the last 24 hours",
        judged,
        late.count(),
        [
            {
                "event": pk,
                "job": f"{ns}:{name}" if name else "",
                "receivedAt": received.isoformat(),
                "lagSeconds": round(took.total_seconds(), 3),
            }
            for pk, ns, name, received, took in rows
        ],
    )


def dead_letters(scope: Scope, page: slice) -> Indicator:
    failed = scope.events().filter(state=EventState.FAILED)
    count = failed.count()
    rows = failed.order_by("-received_at", "-pk").values_list(
        "pk", "job_namespace", "job_name", "received_at", "error"
    )[page]
    return Indicator(
        "deadLetters",
        float(count),
        0.0,
        False,
        "events",
        "Events that failed for good and wait for a replay",
        count,
        count,
        [
            {
                "event": pk,
                "job": f"{ns}:{name}" if name else "",
                "receivedAt": received.isoformat(),
                "error": (error or "").splitlines()[0][:300] if error else "",
            }
            for pk, ns, name, received, error in rows
        ],
    )


def indicators(
    scope: Scope, offset: int = 0, limit: int = 50, now: datetime | None = None
) -> list[Indicator]:
    now = now or timezone.now()
    page = slice(offset, offset + limit)
    facts = dataset_facts(scope)
    build: dict[str, Callable[[], Indicator]] = {
        "coverage": lambda: coverage(scope, page, facts),
        "freshness": lambda: freshness(scope, page, now, facts),
        "completeness": lambda: completeness(scope, page, facts),
        "ingestionLag": lambda: ingestion_lag(scope, page, now),
        "deadLetters": lambda: dead_letters(scope, page),
    }
    return [build[name]() for name in NAMES]


TREND_DAYS = 30


def record_today(now: datetime | None = None) -> list[SliSample]:
    """Store today's value of each indicator over the whole catalog (again: replaced; the
    scheduled task measures every hour, so the day keeps its last measure)."""
    now = now or timezone.now()
    day = timezone.localdate(now)
    kept = []
    for indicator in indicators(Scope(), limit=0, now=now):
        sample, _ = SliSample.objects.update_or_create(
            day=day,
            name=indicator.name,
            defaults={"value": indicator.value, "target": indicator.target, "measured_at": now},
        )
        kept.append(sample)
    return kept


def trends(now: datetime | None = None) -> dict[str, list[SliSample]]:
    """The samples of the last TREND_DAYS days, by indicator, oldest first."""
    since = timezone.localdate(now or timezone.now()) - timedelta(days=TREND_DAYS - 1)
    out: dict[str, list[SliSample]] = {name: [] for name in NAMES}
    for sample in SliSample.objects.filter(day__gte=since).order_by("day"):
        out.setdefault(sample.name, []).append(sample)
    return out
