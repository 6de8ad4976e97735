"""The Prometheus metrics of Lineage Explorer, kept with prometheus-client.

Counters and histograms live in the process that counts: web workers count requests,
whatever normalises events counts events, Celery workers count Spark jobs. With the
environment variable ``PROMETHEUS_MULTIPROC_DIR`` set to one directory per host (empty
at start, shared by gunicorn and the Celery workers), each process writes its figures
there and every scrape adds up all of them: prometheus-client's multiprocess mode.
Without it (``make run``: one process) the scrape shows this process's figures.

What the database knows (the queue of events, the dead letters, the lineage revision and
each snapshot's age) is read when scraped, by whichever process answers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime

from django.db import DatabaseError
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from privacy.models import RunKind, RunState

REQUESTS = Counter(
    "lineage_http_requests", "HTTP requests answered, per view", ["view", "method", "status"]
)
REQUEST_SECONDS = Histogram(
    "lineage_http_request_duration_seconds",
    "Time to answer an HTTP request, per view",
    ["view", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1.0, 2.5, 5.0, 10.0),
)
EVENTS_ACCEPTED = Counter(
    "lineage_events_accepted", "OpenLineage events stored (duplicates not counted)", ["source"]
)
EVENTS_NORMALIZED = Counter(
    "lineage_events_normalized", "Events normalised into the catalog and the lineage graph"
)
EVENTS_FAILED = Counter(
    "lineage_events_failed", "Attempts to normalise an event that failed (retried or not)"
)
EVENTS_DEAD_LETTERED = Counter(
    "lineage_events_dead_lettered", "Events given up on: failed for good, waiting for a replay"
)
INGESTION_LAG = Histogram(
    "lineage_ingestion_lag_seconds",
    "Time from an event's arrival to its normalisation",
    buckets=(0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0),
)
SPARK_JOBS = Counter(
    "lineage_spark_jobs", "Spark jobs (subject scans, erasures) finished", ["kind", "outcome"]
)
# Every series from 0, so that a rate or increase sees the first job of each kind end.
for _kind in RunKind:
    for _outcome in (RunState.DONE, RunState.FAILED):
        SPARK_JOBS.labels(_kind.value, _outcome.value)
SPARK_SECONDS = Histogram(
    "lineage_spark_job_duration_seconds",
    "Time a Spark job ran, from its start to its end",
    ["kind"],
    buckets=(1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0),
)


def normalized(received: list[datetime]) -> None:
    """Count events normalised now that arrived at ``received``."""
    EVENTS_NORMALIZED.inc(len(received))
    now = timezone.now()
    for at in received:
        INGESTION_LAG.observe(max((now - at).total_seconds(), 0.0))


class DatabaseFigures(Collector):
    """Gauges read from the database at each scrape."""

    def collect(self) -> Iterator[Metric]:
        from graph import revision, snapshot
        from graph.models import GraphRevisionLog
        from ingest.models import EventState, RawEvent
        from ops.models import SliSample

        up = GaugeMetricFamily("lineage_database_up", "Whether the scrape could read the database")
        try:
            states = dict(
                RawEvent.objects.filter(
                    state__in=[EventState.PENDING, EventState.PROCESSING, EventState.FAILED]
                )
                .values_list("state")
                .annotate(n=Count("pk"))
                .values_list("state", "n")
            )
            oldest = RawEvent.objects.filter(state=EventState.PENDING).aggregate(
                at=Min("received_at")
            )["at"]
            current = revision.current()
            latest = SliSample.objects.order_by("-day").values_list("day", flat=True).first()
            measured = list(SliSample.objects.filter(day=latest)) if latest else []
            held = snapshot.held_revisions()
            committed = dict(
                GraphRevisionLog.objects.filter(revision__in=set(held.values())).values_list(
                    "revision", "at"
                )
            )
        except DatabaseError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        depth = GaugeMetricFamily(
            "lineage_ingestion_queue_depth", "Events waiting to be normalised", labels=["state"]
        )
        for state in (EventState.PENDING, EventState.PROCESSING):
            depth.add_metric([str(state)], states.get(state, 0))
        yield depth
        yield GaugeMetricFamily(
            "lineage_dead_letters",
            "Events that failed for good, waiting for a replay",
            value=states.get(EventState.FAILED, 0),
        )
        now = timezone.now()
        yield GaugeMetricFamily(
            "lineage_ingestion_oldest_waiting_seconds",
            "How long the oldest waiting event has waited (0 when none waits)",
            value=0.0 if oldest is None else max((now - oldest).total_seconds(), 0.0),
        )
        yield GaugeMetricFamily(
            "lineage_revision", "The committed lineage revision", value=current.value
        )
        revisions = GaugeMetricFamily(
            "lineage_snapshot_revision",
            "The lineage revision this process's snapshot reflects",
            labels=["snapshot"],
        )
        ages = GaugeMetricFamily(
            "lineage_snapshot_age_seconds",
            "Time since the lineage change this process's snapshot reflects was committed",
            labels=["snapshot"],
        )
        for name, value in sorted(held.items()):
            revisions.add_metric([name], value)
            if value in committed:
                ages.add_metric([name], max((now - committed[value]).total_seconds(), 0.0))
        yield revisions
        yield ages
        values = GaugeMetricFamily(
            "lineage_sli",
            "The lineage's service level indicators, as last measured (see /api/v1/slis)",
            labels=["indicator"],
        )
        targets = GaugeMetricFamily(
            "lineage_sli_target", "Each indicator's target", labels=["indicator"]
        )
        for sample in measured:
            if sample.value is not None:  # nothing judged: no value
                values.add_metric([sample.name], sample.value)
            targets.add_metric([sample.name], sample.target)
        yield values
        yield targets
        if measured:
            yield GaugeMetricFamily(
                "lineage_sli_measured_timestamp_seconds",
                "When the indicators were last measured (Unix time)",
                value=max(s.measured_at for s in measured).timestamp(),
            )


_database = CollectorRegistry()
_database.register(DatabaseFigures())


def exposition() -> bytes:
    """The metrics in Prometheus's text format: every process's counters (or this one's)
    and the database's figures."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        processes = CollectorRegistry()
        multiprocess.MultiProcessCollector(processes)  # type: ignore[no-untyped-call]
        counted = generate_latest(processes)
    else:
        counted = generate_latest(REGISTRY)
    return counted + generate_latest(_database)
