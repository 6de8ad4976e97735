"""Notices to the owners of datasets when something breaks: a taint and what it puts at
risk downstream, a schema change removing or retyping a column that column lineage reads,
lineage gone stale, events that failed for good.

A subscription (ops.models.Subscription) covers the datasets of a dataset, a namespace
or an owner. When an event concerns datasets it covers, it gets one notice naming them,
how each is reached (the path from the cause) and a link to each page; the notice's key
names the event, so one event is never told twice to one subscription. Each notice is
delivered through the subscription's webhook (its JSON body) and e-mail (Django's mail
backend) by a Celery task that tries again with backoff, and every attempt is recorded
(the Notices page shows them).
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Collection, Iterable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

import requests
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from catalog import naming
from catalog.models import Dataset, DatasetOwnership, DatasetVersion, Namespace
from graph import queries
from graph.details import load_dataset_names, load_job_names
from graph.models import ColumnEdge, Direction, TableEdge, Taint
from graph.nodeids import dataset_node_id, job_node_id
from ingest.models import RawEvent
from lineage_site import dispatch
from ops.models import Delivery, DeliveryState, Notice, NoticeKind, Subscription

log = logging.getLogger(__name__)

# Datasets a notice lists (each with its path); the count says how many in all.
MAX_LISTED = 50
MAX_ATTEMPTS = 6
WEBHOOK_TIMEOUT_SECONDS = 10.0
# A delivery pending this long lost its task (its tries are minutes apart at most).
REQUEUE_AFTER = timedelta(minutes=20)


def backoff(attempts: int) -> int:
    """Seconds before the next try: 30 s, 1, 2, 4, 8 minutes."""
    return int(30 * 2 ** max(attempts - 1, 0))


# --- who is told -------------------------------------------------------------------------


def subscribers(
    kind: str, datasets: Collection[int], namespaces: Collection[int] = ()
) -> dict[Subscription, list[int]]:
    """Each active subscription that wants ``kind`` and covers some of ``datasets`` (or,
    for a namespace subscription, one of ``namespaces``), with the datasets it covers."""
    subscriptions = [s for s in Subscription.objects.filter(active=True) if s.wants(kind)]
    if not subscriptions or not (datasets or namespaces):
        return {}
    wanted = set(datasets)
    in_namespace: dict[int, set[int]] = defaultdict(set)
    if any(s.namespace_id for s in subscriptions):
        for pk, ns in Dataset.objects.filter(pk__any_of=wanted).values_list("pk", "namespace_id"):
            in_namespace[ns].add(pk)
    owned: dict[int, set[int]] = defaultdict(set)
    owners = {s.owner_id for s in subscriptions if s.owner_id}
    if owners:
        for owner, pk in DatasetOwnership.objects.filter(
            owner_id__in=owners, dataset_id__any_of=wanted
        ).values_list("owner_id", "dataset_id"):
            owned[owner].add(pk)
    out: dict[Subscription, list[int]] = {}
    for subscription in subscriptions:
        covered: set[int] = set()
        if subscription.dataset_id in wanted:
            covered.add(subscription.dataset_id)
        if subscription.namespace_id:
            covered |= in_namespace.get(subscription.namespace_id, set())
        if subscription.owner_id:
            covered |= owned.get(subscription.owner_id, set())
        if covered or (subscription.namespace_id and subscription.namespace_id in namespaces):
            out[subscription] = sorted(covered)
    return out


def page_url(dataset: Dataset) -> str:
    query = urlencode({"namespace": dataset.namespace.name, "name": dataset.name})
    return f"{settings.LINEAGE_BASE_URL}/datasets/show?{query}"


def publish(
    kind: str,
    key: str,
    title: str,
    datasets: dict[int, dict[str, Any]],
    *,
    link: str,
    namespaces: Collection[int] = (),
    extra: dict[str, Any] | None = None,
) -> list[Notice]:
    """One notice per subscriber of ``kind`` covering some of ``datasets`` (pk → what to
    say of it, e.g. its path), unless it was told of ``key`` already; its deliveries are
    queued when the transaction commits."""
    matched = subscribers(kind, datasets, namespaces)
    if not matched:
        return []
    listed = {pk for pks in matched.values() for pk in pks[:MAX_LISTED]}
    shown = Dataset.objects.select_related("namespace").in_bulk(sorted(listed))
    notices = []
    queued: list[int] = []
    with transaction.atomic():
        for subscription, pks in matched.items():
            body = {
                "kind": kind,
                "event": key,
                "title": title,
                "subscription": subscription.name,
                "link": link,
                "datasetCount": len(pks),
                "datasets": [
                    {
                        "id": shown[pk].node_id,
                        "namespace": shown[pk].namespace.name,
                        "name": shown[pk].name,
                        "url": page_url(shown[pk]),
                        **datasets.get(pk, {}),
                    }
                    for pk in pks[:MAX_LISTED]
                    if pk in shown
                ],
                **(extra or {}),
            }
            notice, created = Notice.objects.get_or_create(
                subscription=subscription,
                key=key,
                defaults={"kind": kind, "title": title[:255], "body": body},
            )
            if not created:
                continue  # told already: never twice
            notices.append(notice)
            for channel, target in (
                ("webhook", subscription.webhook_url),
                ("email", subscription.email),
            ):
                if target:
                    queued.append(
                        Delivery.objects.create(notice=notice, channel=channel, target=target).pk
                    )
        # A broker that is down leaves them pending: ops.requeue_deliveries sends them later.
        transaction.on_commit(lambda: _queue(queued), robust=True)
    return notices


def _queue(deliveries: list[int]) -> None:
    for pk in deliveries:
        dispatch.send("ops.deliver", [pk])


# --- the events ------------------------------------------------------------------------------


def taint_notices(taint_id: int) -> list[Notice]:
    """Tell the owners of a tainted dataset and of every dataset at risk downstream."""
    taint = Taint.objects.select_related("dataset__namespace").filter(pk=taint_id).first()
    if taint is None or taint.cleared_at is not None:
        return []
    reach = queries.taint_reach(taint)
    distance = dict(zip(reach.ds.tolist(), reach.ds_dist.tolist(), strict=True))
    if not subscribers(NoticeKind.TAINT, distance):
        return []
    paths = paths_from(taint.dataset_id, distance)
    root = taint.dataset
    return publish(
        NoticeKind.TAINT,
        f"taint:{taint.pk}",
        f"{root.name} is tainted: {taint.reason}"[:255],
        {
            pk: {
                "tainted": pk == root.pk,
                "distance": d,
                "path": paths.get(pk, []),
            }
            for pk, d in distance.items()
        },
        link=page_url(root),
        extra={"reason": taint.reason, "taintedDataset": root.node_id},
    )


def paths_from(root: int, reached: dict[int, int]) -> dict[int, list[str]]:
    """For each dataset reached, one shortest path of node ids from ``root`` through the
    jobs that read and write today."""
    edges = TableEdge.objects.filter(
        valid_to__isnull=True, dataset_id__any_of=set(reached)
    ).values_list("job_id", "dataset_id", "direction")
    reads: dict[int, list[int]] = defaultdict(list)
    writes: dict[int, list[int]] = defaultdict(list)
    for job, dataset, direction in edges:
        (reads if direction == Direction.INPUT else writes)[job].append(dataset)
    read_by: dict[int, list[int]] = defaultdict(list)
    for job, datasets in reads.items():
        for dataset in datasets:
            read_by[dataset].append(job)
    parent: dict[int, tuple[int, int]] = {}
    frontier, seen = [root], {root}
    while frontier:
        following = []
        for dataset in frontier:
            for job in sorted(read_by.get(dataset, ())):
                for written in sorted(writes.get(job, ())):
                    if written not in seen:
                        seen.add(written)
                        parent[written] = (job, dataset)
                        following.append(written)
        frontier = following
    names = _node_names(seen, {job for job, _ in parent.values()})
    out: dict[int, list[str]] = {}
    for dataset in reached:
        if dataset not in seen:
            continue
        path = [names[("d", dataset)]]
        at = dataset
        while at in parent:
            job, at = parent[at]
            path[:0] = [names[("d", at)], names[("j", job)]]
        out[dataset] = path
    return out


def _node_names(datasets: Iterable[int], jobs: Iterable[int]) -> dict[tuple[str, int], str]:
    names = {("d", pk): dataset_node_id(*n) for pk, n in load_dataset_names(datasets).items()}
    names.update({("j", pk): job_node_id(*n) for pk, n in load_job_names(jobs).items()})
    return names


# A schema version that arrives after a newer one (a retried or replayed event) is told if
# it began within this; an archive loaded after the present brings changes long past.
LATE_SCHEMA_WINDOW = timedelta(days=7)


def _schema_changes(before: DatasetVersion, after: DatasetVersion) -> dict[str, str]:
    """The columns of ``before`` that ``after`` removes or retypes."""
    old = {str(f.get("name")): str(f.get("type") or "") for f in before.fields or []}
    new = {str(f.get("name")): str(f.get("type") or "") for f in after.fields or []}
    return {
        name: "removed" if name not in new else f"retyped {kind or '?'} → {new[name]}"
        for name, kind in old.items()
        if name not in new or (kind and new[name] and new[name] != kind)
    }


def schema_notices(versions: list[str]) -> list[Notice]:
    """Tell the owners of a dataset whose new schema removes or retypes columns that column
    lineage reads, and the owners of the datasets reading them: once per schema version.

    A version that arrived late (a newer one was stored before it) is told with the time it
    held, if it began within LATE_SCHEMA_WINDOW; so is what the newer one changes after
    it that was not told before. Versions that arrive together are told in their order."""
    if not Subscription.objects.filter(active=True).exists():
        return []
    notices = []
    horizon = timezone.now() - LATE_SCHEMA_WINDOW
    arrived = {str(v) for v in versions}
    for version in (
        DatasetVersion.objects.filter(version__in=versions)
        .select_related("dataset__namespace")
        .order_by("created_at")
    ):
        same = DatasetVersion.objects.filter(dataset_id=version.dataset_id)
        previous = same.filter(created_at__lt=version.created_at).order_by("-created_at").first()
        following = same.filter(created_at__gt=version.created_at).order_by("created_at").first()
        late = following is not None and str(following.version) not in arrived
        if previous is None or (late and version.created_at < horizon):
            continue
        until = following.created_at if late and following is not None else None
        changed = _schema_changes(previous, version)
        if changed:
            notices += _schema_notice(version, changed, until=until)
        if late and following is not None:
            told = _schema_changes(previous, following)
            after = {
                name: how
                for name, how in _schema_changes(version, following).items()
                if told.get(name) != how
            }
            if after:
                following.dataset = version.dataset
                notices += _schema_notice(following, after, after_version=version)
    return notices


def _schema_notice(
    version: DatasetVersion,
    changed: dict[str, str],
    until: datetime | None = None,
    after_version: DatasetVersion | None = None,
) -> list[Notice]:
    """One notice of ``changed`` columns of ``version`` to the readers downstream; ``until``
    a late version's end (it held only then), ``after_version`` the late version that a
    newer one now follows."""
    dataset = version.dataset
    readers = ColumnEdge.objects.filter(
        source_field__dataset_id=dataset.pk,
        source_field__name__in=list(changed),
    ).filter(Q(valid_to__isnull=True) | Q(valid_to__gte=version.created_at))
    if until is not None:
        readers = readers.filter(valid_from__lt=until)
    reached: dict[int, dict[str, Any]] = {}
    for column, job_ns, job, target_id, target_ns, target, target_field in readers.values_list(
        "source_field__name",
        "job__namespace__name",
        "job__name",
        "target_dataset_id",
        "target_dataset__namespace__name",
        "target_dataset__name",
        "target_field__name",
    ):
        item = reached.setdefault(target_id, {"columns": [], "path": []})
        item["columns"].append(column)
        if not item["path"]:
            item["path"] = [
                f"datasetField:{dataset.namespace.name}:{dataset.name}:{column}",
                f"job:{job_ns}:{job}",
                f"datasetField:{target_ns}:{target}:{target_field}"
                if target_field
                else f"dataset:{target_ns}:{target}",
            ]
    if not reached:
        return []  # nothing downstream reads those columns
    what = ", ".join(f"{name} {how}" for name, how in sorted(changed.items()))
    key = f"schema:{version.version}"
    extra: dict[str, Any] = {"changedDataset": dataset.node_id, "changes": changed}
    if until is not None:
        what += f" (from {version.created_at:%Y-%m-%d %H:%M} until {until:%Y-%m-%d %H:%M} UTC, told late)"
        extra |= {"from": version.created_at.isoformat(), "until": until.isoformat()}
    if after_version is not None:
        key += f":after:{after_version.version}"
        what += f" (after a version of {after_version.created_at:%Y-%m-%d %H:%M} UTC told late)"
    return publish(
        NoticeKind.SCHEMA,
        key,
        f"{dataset.name}: {what}"[:255],
        {dataset.pk: {"changed": changed}, **reached},
        link=page_url(dataset),
        extra=extra,
    )


def dead_letter_notices(event_ids: list[int], now: datetime | None = None) -> list[Notice]:
    """Tell the subscribers of the datasets and namespaces that failed events name: once an
    hour at most, listing those events."""
    events = list(
        RawEvent.objects.filter(pk__in=event_ids).values_list(
            "pk", "job_namespace", "job_name", "body", "error"
        )
    )
    if not events:
        return []
    named: set[tuple[str, str]] = set()
    namespace_names: set[str] = set()
    for _, job_namespace, _, body, _ in events:
        if job_namespace:
            namespace_names.add(job_namespace)
        named |= _datasets_named(body)
    named = {naming.canonical(ns, name) for ns, name in named}  # as datasets are stored
    namespace_names |= {ns for ns, _ in named}
    namespaces = dict(Namespace.objects.filter(name__in=namespace_names).values_list("name", "pk"))
    datasets: set[int] = set()
    for ns, name in named:
        if ns in namespaces:
            datasets |= set(
                Dataset.objects.filter(namespace_id=namespaces[ns], name=name).values_list(
                    "pk", flat=True
                )
            )
    hour = (now or timezone.now()).strftime("%Y-%m-%dT%H")
    return publish(
        NoticeKind.DEAD_LETTERS,
        f"dead_letters:{hour}",
        f"{len(events)} event{'s' if len(events) != 1 else ''} failed for good",
        {pk: {} for pk in datasets},
        link=f"{settings.LINEAGE_BASE_URL}/ingestion/",
        namespaces=set(namespaces.values()),
        extra={
            "events": [
                {
                    "id": pk,
                    "job": f"{ns}:{name}" if name else "",
                    "error": (error or "").splitlines()[0][:300] if error else "",
                }
                for pk, ns, name, _, error in events[:MAX_LISTED]
            ]
        },
    )


def _datasets_named(body: str) -> set[tuple[str, str]]:
    """(namespace, name) of the inputs and outputs an event's body names, if it parses."""
    try:
        event = json.loads(body)
    except ValueError:
        return set()
    found = set()
    if isinstance(event, dict):
        for side in ("inputs", "outputs"):
            for item in event.get(side) or []:
                if (
                    isinstance(item, dict)
                    and isinstance(item.get("namespace"), str)
                    and isinstance(item.get("name"), str)
                ):
                    found.add((item["namespace"], item["name"]))
    return found


def stale_notices(now: datetime | None = None) -> list[Notice]:
    """Tell the subscribers of datasets whose lineage went stale (ops/slis.py's rule), once
    for each time a dataset goes stale."""
    from ops import slis

    stale = slis.stale_datasets(slis.Scope(), now or timezone.now())
    notices = []
    for dataset, (age, interval, last) in stale.items():
        notices += publish(
            NoticeKind.STALE,
            f"stale:{dataset}:{last.isoformat()}",
            "Lineage is stale: last written "
            f"{round(age.total_seconds() / 3600, 1)} h ago, usually every "
            f"{round(interval.total_seconds() / 3600, 1)} h",
            {
                dataset: {
                    "ageSeconds": round(age.total_seconds()),
                    "lastWrittenAt": last.isoformat(),
                }
            },
            link=f"{settings.LINEAGE_BASE_URL}/health/",
        )
    return notices


# --- delivering ------------------------------------------------------------------------------


def deliver(delivery_id: int) -> str:
    """Send one delivery unless it was sent already (never twice); gives its state, or
    "retry" when it failed and may be tried again."""
    with transaction.atomic():
        delivery = (
            Delivery.objects.select_for_update(of=("self",))
            .select_related("notice__subscription")
            .filter(pk=delivery_id)
            .first()
        )
        if delivery is None or delivery.state != DeliveryState.PENDING:
            return delivery.state if delivery else "gone"
        delivery.attempts += 1
        try:
            _send(delivery)
        except Exception as exc:  # any failure is recorded and tried again
            # Readers of the Notices page see the error: never the target's path or query.
            reason = str(exc).replace(delivery.target, _site(delivery.target))
            delivery.last_error = f"{type(exc).__name__}: {reason}"[:2000]
            if delivery.attempts >= MAX_ATTEMPTS:
                delivery.state = DeliveryState.FAILED
            delivery.save(update_fields=["attempts", "last_error", "state", "updated_at"])
            log.warning("delivery %s failed (attempt %d): %s", delivery.pk, delivery.attempts, exc)
            return str(delivery.state) if delivery.state == DeliveryState.FAILED else "retry"
        delivery.state = DeliveryState.SENT
        delivery.sent_at = timezone.now()
        delivery.last_error = ""
        delivery.save(update_fields=["attempts", "last_error", "state", "sent_at", "updated_at"])
        return str(delivery.state)


def _send(delivery: Delivery) -> None:
    notice = delivery.notice
    if delivery.channel == "webhook":
        response = requests.post(
            delivery.target,
            json=notice.body,
            timeout=WEBHOOK_TIMEOUT_SECONDS,
            allow_redirects=False,
            headers={
                "Idempotency-Key": f"notice-{notice.pk}",
                "User-Agent": "lineage-explorer",
            },
        )
        if response.status_code >= 300:
            raise RuntimeError(f"the webhook answered {response.status_code}")
        return
    send_mail(
        " ".join(f"[Lineage Explorer] {notice.title}".split()),  # one line: a header
        text_of(notice),
        settings.DEFAULT_FROM_EMAIL,
        [delivery.target],
    )


def _site(url: str) -> str:
    """A URL's scheme and host only: what readers of the Notices page may see of it."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}" if parts.hostname else url


def requeue(older_than: timedelta = REQUEUE_AFTER, now: datetime | None = None) -> int:
    """Queue again the deliveries left pending (their task was lost: a broker outage, a
    worker that died between tries); gives how many. Safe to repeat: a delivery already
    sent is not sent again."""
    before = (now or timezone.now()) - older_than
    stale = list(
        Delivery.objects.filter(state=DeliveryState.PENDING, updated_at__lt=before).values_list(
            "pk", flat=True
        )[:1000]
    )
    if stale:
        Delivery.objects.filter(pk__in=stale).update(updated_at=timezone.now())
        _queue(stale)
    return len(stale)


def text_of(notice: Notice) -> str:
    """A notice in words, for e-mail."""
    body = notice.body
    lines = [body.get("title", notice.title), ""]
    if body.get("reason"):
        lines += [f"Reason: {body['reason']}", ""]
    datasets = body.get("datasets", [])
    if datasets:
        lines.append(
            f"Datasets of {body.get('subscription', 'yours')} concerned "
            f"({body.get('datasetCount', len(datasets))}):"
        )
        for item in datasets:
            lines.append(f"- {item['namespace']} {item['name']}: {item['url']}")
            if item.get("path"):
                lines.append(f"  path: {' -> '.join(item['path'])}")
    for event in body.get("events", []):
        lines.append(f"- event #{event['id']} {event['job']}: {event['error']}")
    lines += ["", f"More: {body.get('link', settings.LINEAGE_BASE_URL)}"]
    return "\n".join(lines)
