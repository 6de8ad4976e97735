"""Reads for the ingest app: outbox status, raw events, and jobs/runs/versions for the API."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import connection
from django.db.models import Count, Min, Prefetch, Q, QuerySet
from django.db.models.functions import Collate
from django.utils import timezone

from catalog.models import NEWEST_VERSION_FIRST, Dataset, DatasetVersion
from graph.models import Job, Run, RunDataset, TableEdge
from ingest.models import EventState, RawEvent


def jobs_of_runs(run_uuids: set[UUID]) -> dict[UUID, tuple[str, str]]:
    """The (namespace, name) of the job each of these stored runs belongs to."""
    if not run_uuids:
        return {}
    rows = Run.objects.filter(run_uuid__any_of=list(run_uuids)).values_list(
        "run_uuid", "job__namespace__name", "job__name"
    )
    return {run_uuid: (namespace, name) for run_uuid, namespace, name in rows}


@dataclass
class IngestionStatus:
    """Counts by state, lag, throughput, the newest failures and events with facets left out."""

    counts: dict[str, int]
    oldest_pending_at: datetime | None
    lag_seconds: float | None
    processed_last_minute: int
    processed_last_hour: int
    failures: list[RawEvent] = field(default_factory=list)
    # Events stored with facets left out (RawEvent.warnings): how many, and the newest.
    warned_count: int = 0
    warned: list[RawEvent] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def per_second_last_minute(self) -> float:
        return self.processed_last_minute / 60

    @property
    def per_second_last_hour(self) -> float:
        return self.processed_last_hour / 3600


def ingestion_status(now: datetime | None = None, failures: int = 50) -> IngestionStatus:
    """The outbox at a glance; lag is the age of the oldest event still waiting."""
    now = now or timezone.now()
    counts = {state: 0 for state in EventState.values}
    for row in RawEvent.objects.values("state").annotate(n=Count("id")).order_by():
        counts[row["state"]] = row["n"]
    waiting = RawEvent.objects.filter(
        state__in=[EventState.PENDING, EventState.PROCESSING]
    ).aggregate(oldest=Min("received_at"))["oldest"]
    warned = RawEvent.objects.exclude(warnings="")
    recent = RawEvent.objects.filter(
        state=EventState.DONE, processed_at__gte=now - timedelta(hours=1)
    ).aggregate(
        hour=Count("id"),
        minute=Count("id", filter=Q(processed_at__gte=now - timedelta(minutes=1))),
    )
    return IngestionStatus(
        counts=counts,
        oldest_pending_at=waiting,
        lag_seconds=(now - waiting).total_seconds() if waiting else None,
        processed_last_minute=recent["minute"],
        processed_last_hour=recent["hour"],
        failures=list(
            RawEvent.objects.filter(state=EventState.FAILED)
            .defer("body")
            .order_by("-processed_at", "-id")[:failures]
        ),
        warned_count=warned.count(),
        warned=list(warned.defer("body").order_by("-received_at", "-id")[:failures]),
    )


def raw_events(
    before: datetime | None = None, after: datetime | None = None, ascending: bool = False
) -> QuerySet[RawEvent]:
    """Stored events by event time, optionally within (after, before)."""
    qs = RawEvent.objects.all()
    if before is not None:
        qs = qs.filter(event_time__lt=before)
    if after is not None:
        qs = qs.filter(event_time__gt=after)
    order = ("event_time", "id") if ascending else ("-event_time", "-id")
    return qs.order_by(*order)


def _run_io() -> Prefetch[Any]:
    return Prefetch(
        "io",
        queryset=RunDataset.objects.select_related(
            "dataset__namespace", "dataset_version"
        ).order_by("direction", "dataset__namespace__name", "dataset__name"),
    )


def runs_with_details() -> QuerySet[Run]:
    return Run.objects.select_related("job__namespace").prefetch_related(_run_io())


def jobs_with_details() -> QuerySet[Job]:
    """Jobs with their current edges and latest run, in a fixed number of queries."""
    return Job.objects.select_related("namespace", "parent").prefetch_related(
        Prefetch(
            "edges",
            queryset=TableEdge.objects.filter(valid_to__isnull=True)
            .select_related("dataset__namespace")
            .order_by("dataset__namespace__name", "dataset__name"),
            to_attr="open_edges",
        ),
        Prefetch("latest_run", queryset=runs_with_details()),
    )


def get_job(namespace: str, name: str) -> Job | None:
    return jobs_with_details().filter(namespace__name=namespace, name=name).first()


def jobs_of_namespace(namespace: str) -> QuerySet[Job]:
    return jobs_with_details().filter(namespace__name=namespace).order_by("name")


def runs_of_job(job: Job) -> QuerySet[Run]:
    """A job's runs, newest first by their own times (not arrival)."""
    return runs_with_details().filter(job=job).order_by("-created_at", "-id")


def get_run(run_uuid: UUID) -> Run | None:
    return runs_with_details().filter(run_uuid=run_uuid).first()


def dataset_versions(dataset: Dataset) -> QuerySet[DatasetVersion]:
    return DatasetVersion.objects.filter(dataset=dataset).order_by(*NEWEST_VERSION_FIRST)


def runs_by_uuid(uuids: set[UUID]) -> dict[UUID, Run]:
    if not uuids:
        return {}
    return {r.run_uuid: r for r in runs_with_details().filter(run_uuid__in=uuids)}


def search_names(
    q: str,
    kinds: tuple[str, ...],
    by_name: bool,
    limit: int,
    namespace: str | None = None,
    before: datetime | None = None,
    after: datetime | None = None,
) -> list[tuple[str, str, str, datetime]]:
    """(kind, namespace, name, updated at) of the first ``limit`` datasets (DATASET) and jobs
    (JOB) whose names hold ``q`` in any case, by name or the most recently updated first.
    Datasets are found by their aliases' names too, as on the pages; hidden ones are left
    out."""
    scope = Q()
    if namespace is not None:
        scope &= Q(namespace__name=namespace)
    if before is not None:
        scope &= Q(updated_at__lt=before)
    if after is not None:
        scope &= Q(updated_at__gte=after)
    named = Q(name__icontains=q)
    # Names compare by code point in the database as here (PostgreSQL's collation may not),
    # so that each kind's first rows merge into the first rows of all.
    name_order = Collate("name", "C" if connection.vendor == "postgresql" else "BINARY")
    order = (name_order.asc(), "pk") if by_name else ("-updated_at", "pk")
    found: dict[tuple[str, str, str], datetime] = {}

    def first(label: str, rows: QuerySet[Any]) -> None:
        for ns, name, updated in rows.order_by(*order).values_list(
            "namespace__name", "name", "updated_at"
        )[:limit]:
            found[(label, ns, name)] = updated

    if "DATASET" in kinds:
        visible = Dataset.objects.filter(scope, is_hidden=False)
        first("DATASET", visible.filter(named))
        first("DATASET", visible.filter(aliases__name__icontains=q))
    if "JOB" in kinds:
        first("JOB", Job.objects.filter(scope, named))
    if by_name:
        ranked = sorted(found.items(), key=lambda row: (row[0][2], row[0][0], row[0][1]))
    else:
        ranked = sorted(found.items(), key=lambda row: (-row[1].timestamp(), row[0][2]))
    return [(label, ns, name, updated) for (label, ns, name), updated in ranked[:limit]]
