"""Notices to owners: who is told of a taint, of stale lineage and of dead letters, what the
notice says (the datasets, the path that makes each theirs, links), delivery by webhook to a
real local server (a retry after a 500, never twice) and by e-mail (Django's locmem
backend)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import time_machine
from django.core import mail
from django.utils import timezone

from catalog.models import DatasetOwnership, Owner
from graph.taint import mark_tainted
from ingest import actions
from ingest.events import parse_event
from ingest.models import EventState, RawEvent
from ops import notify
from ops.models import Delivery, DeliveryState, Notice, NoticeKind, Subscription
from tests.graph_builders import NS, LineageBuilder
from tests.ingest_builders import PG, at, columns, dataset, run_event, run_id, schema

pytestmark = pytest.mark.django_db


class Hook:
    """A local webhook receiver answering each request with the next status (then 200)."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.statuses: list[int] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                hook.received.append(
                    {
                        "body": json.loads(self.rfile.read(length)),
                        "key": self.headers["Idempotency-Key"],
                    }
                )
                self.send_response(hook.statuses.pop(0) if hook.statuses else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()


@pytest.fixture
def hook() -> Iterator[Hook]:
    found = Hook()
    yield found
    found.server.shutdown()


@pytest.fixture
def chain() -> LineageBuilder:
    g = LineageBuilder()
    g.chain("a", "b", "c")
    return g


def test_a_taint_tells_the_owners_of_everything_at_risk_with_the_path(
    chain, hook, steward, django_capture_on_commit_callbacks, settings
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    team = Owner.objects.create(name="team-c")
    DatasetOwnership.objects.create(dataset=chain.ds["c"], owner=team)
    everyone = Subscription.objects.create(
        name="platform", namespace=chain.ns, webhook_url=hook.url
    )
    owners = Subscription.objects.create(name="team-c", owner=team, email="c@example.com")
    Subscription.objects.create(
        name="elsewhere", dataset=LineageBuilder().dataset("unrelated"), email="x@example.com"
    )
    Subscription.objects.create(
        name="stale only", namespace=chain.ns, kinds=[NoticeKind.STALE], email="s@example.com"
    )
    with django_capture_on_commit_callbacks(execute=True):
        taint = mark_tainted(chain.ds["a"], reason="bad load", actor=steward)
    assert Notice.objects.count() == 2
    (sent,) = hook.received
    body = sent["body"]
    assert body["kind"] == "taint" and body["title"] == "a is tainted: bad load"
    assert body["datasetCount"] == 3
    by_name = {item["name"]: item for item in body["datasets"]}
    assert by_name["a"]["tainted"] and by_name["c"]["distance"] == 2
    assert by_name["c"]["path"] == [
        chain.id("a"),
        chain.id("job:job_0"),
        chain.id("b"),
        chain.id("job:job_1"),
        chain.id("c"),
    ]
    assert by_name["c"]["url"].endswith("/datasets/show?namespace=" + _quoted(NS) + "&name=c")
    (email,) = mail.outbox
    assert email.to == ["c@example.com"] and "a is tainted: bad load" in email.subject
    assert f"path: {chain.id('a')} -> " in email.body and "/datasets/show?" in email.body
    assert Notice.objects.get(subscription=owners).body["datasetCount"] == 1
    # The same taint is never told twice; a new one is.
    notify.taint_notices(taint.pk)
    assert Notice.objects.count() == 2 and len(hook.received) == 1
    with django_capture_on_commit_callbacks(execute=True):
        mark_tainted(chain.ds["b"], reason="again", actor=steward)
    assert Notice.objects.filter(subscription=everyone).count() == 2


def _quoted(text: str) -> str:
    from urllib.parse import quote_plus

    return quote_plus(text)


def test_a_webhook_answering_500_is_tried_again_and_sent_once(
    chain, hook, steward, django_capture_on_commit_callbacks
):
    hook.statuses = [500]
    Subscription.objects.create(name="platform", namespace=chain.ns, webhook_url=hook.url)
    with django_capture_on_commit_callbacks(execute=True):
        mark_tainted(chain.ds["a"], reason="bad load", actor=steward)
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.last_error) == (DeliveryState.SENT, 2, "")
    assert len(hook.received) == 2
    assert hook.received[0]["key"] == hook.received[1]["key"] == f"notice-{delivery.notice_id}"
    # A task delivered twice (a worker's late acknowledgement) sends nothing more.
    assert notify.deliver(delivery.pk) == DeliveryState.SENT
    assert len(hook.received) == 2


def test_a_webhook_that_keeps_failing_is_given_up_with_its_error(
    chain, hook, steward, django_capture_on_commit_callbacks
):
    hook.statuses = [503] * 10
    Subscription.objects.create(name="platform", namespace=chain.ns, webhook_url=hook.url)
    with django_capture_on_commit_callbacks(execute=True):
        mark_tainted(chain.ds["a"], reason="bad load", actor=steward)
    delivery = Delivery.objects.get()
    assert delivery.state == DeliveryState.FAILED
    assert delivery.attempts == notify.MAX_ATTEMPTS == len(hook.received)
    assert delivery.last_error == "RuntimeError: the webhook answered 503"
    assert [notify.backoff(n) for n in (1, 2, 3)] == [30, 60, 120]


def test_dead_letters_are_told_to_the_namespace_once_an_hour(
    chain, hook, django_capture_on_commit_callbacks
):
    Subscription.objects.create(name="platform", namespace=chain.ns, webhook_url=hook.url)

    def fail(n: int) -> None:
        event = run_event("COMPLETE", run_id(n), at(1), outputs=[dataset("b", ns=NS)])
        with django_capture_on_commit_callbacks(execute=True):
            stored = actions.store_events([parse_event(event, f"fp-{n}")], "api", enqueue=False)
            pk = next(iter(stored.stored.values()))
            # Stored, then found wrong when normalised: it fails for good.
            RawEvent.objects.filter(pk=pk).update(body=json.dumps({**event, "eventTime": "soon"}))
            actions.process_events([pk])
        assert RawEvent.objects.get(pk=pk).state == EventState.FAILED

    fail(1)
    (sent,) = hook.received
    assert sent["body"]["kind"] == "dead_letters"
    assert sent["body"]["title"] == "1 event failed for good"
    assert sent["body"]["events"][0]["error"].startswith("EventError: eventTime")
    assert [item["name"] for item in sent["body"]["datasets"]] == ["b"]
    fail(2)
    assert len(hook.received) == 1  # the same hour: told already


def test_stale_lineage_is_told_once_each_time_it_goes_stale(hook):
    now = timezone.now()
    g = LineageBuilder()
    g.chain("raw", "hourly_out")
    for hours in range(4, 10):
        g.run("job_0", at=now - timedelta(hours=hours))
    Subscription.objects.create(name="team", dataset=g.ds["hourly_out"], webhook_url=hook.url)
    (notice,) = notify.stale_notices(now)
    assert notice.body["datasets"][0]["name"] == "hourly_out"
    assert notice.title.startswith("Lineage is stale: last written 4.0 h ago, usually every 1.0 h")
    assert notify.stale_notices(now + timedelta(hours=1)) == []
    g.run("job_0", at=now)
    g.run("job_0", at=now + timedelta(hours=1))
    assert notify.stale_notices(now + timedelta(hours=8)) != []  # stale again, later


def test_the_notices_page_shows_each_delivery(
    chain, hook, steward, viewer, client, django_capture_on_commit_callbacks
):
    hook.statuses = [500]
    Subscription.objects.create(name="platform", namespace=chain.ns, webhook_url=hook.url)
    with django_capture_on_commit_callbacks(execute=True):
        mark_tainted(chain.ds["a"], reason="bad load", actor=steward)
    client.force_login(viewer)
    text = client.get("/health/notices").content.decode()
    assert "a is tainted: bad load" in text
    assert "webhook: <strong>Sent</strong> after 2 attempts" in text
    assert "platform" in text


def test_a_schema_dropping_a_column_read_downstream_tells_its_readers(
    hook, django_capture_on_commit_callbacks
):
    from catalog.models import Namespace

    def load(*events: dict[str, Any]) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            actions.ingest_event_dicts(list(events), inline=True)

    orders = dataset("orders", schema=schema("id", "amount"))
    load(
        run_event("COMPLETE", run_id(1), at(1), job="load", outputs=[orders]),
        run_event(
            "COMPLETE",
            run_id(2),
            at(1, 1),
            job="sum",
            inputs=[orders],
            outputs=[
                dataset(
                    "totals",
                    schema=schema("amount"),
                    columnLineage=columns({"amount": [("orders", "amount")]}),
                )
            ],
        ),
    )
    Subscription.objects.create(
        name="analysts", namespace=Namespace.objects.get(name=PG), webhook_url=hook.url
    )
    # A new schema of orders without amount: totals.amount read it.
    load(
        run_event(
            "COMPLETE",
            run_id(3),
            at(2),
            job="load",
            outputs=[dataset("orders", schema=schema("id"))],
        )
    )
    (sent,) = hook.received
    body = sent["body"]
    assert (body["kind"], body["title"], body["changes"]) == (
        "schema",
        "orders: amount removed",
        {"amount": "removed"},
    )
    by_name = {item["name"]: item for item in body["datasets"]}
    assert by_name["totals"]["columns"] == ["amount"]
    assert by_name["totals"]["path"] == [
        f"datasetField:{PG}:orders:amount",
        "job:spark:sum",
        f"datasetField:{PG}:totals:amount",
    ]
    # A retyped column that nobody reads downstream tells nobody.
    load(
        run_event(
            "COMPLETE",
            run_id(4),
            at(3),
            job="load",
            outputs=[dataset("orders", schema=schema(("id", "bigint")))],
        )
    )
    assert len(hook.received) == 1


def test_a_schema_version_arriving_late_is_told_with_the_time_it_held(
    hook, django_capture_on_commit_callbacks
):
    from catalog.models import Namespace

    def load(*events: dict[str, Any]) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            actions.ingest_event_dicts(list(events), inline=True)

    def write(n: int, when: str, *fields: str | tuple[str, str]) -> dict[str, Any]:
        orders = dataset("orders", schema=schema(*fields))
        return run_event("COMPLETE", run_id(n), when, job="load", outputs=[orders])

    with time_machine.travel("2026-03-04T00:00:00Z"):
        orders = dataset("orders", schema=schema("id", "amount"))
        total = dataset(
            "totals",
            schema=schema("amount"),
            columnLineage=columns({"amount": [("orders", "amount")]}),
        )
        load(
            write(1, at(1), "id", "amount"),
            run_event("COMPLETE", run_id(2), at(1, 1), job="sum", inputs=[orders], outputs=[total]),
            write(3, at(3), ("id", "bigint"), "amount"),
        )
        Subscription.objects.create(
            name="analysts", namespace=Namespace.objects.get(name=PG), webhook_url=hook.url
        )
        assert hook.received == []
        # A retried run of the 2nd, arriving after the 3rd's: amount was missing from then on.
        load(write(4, at(2), "id"))
        (sent,) = hook.received
        assert sent["body"]["title"] == (
            "orders: amount removed (from 2026-03-02 00:00 until 2026-03-03 00:00 UTC, told late)"
        )
        assert (sent["body"]["from"], sent["body"]["until"]) == (
            "2026-03-02T00:00:00+00:00",
            "2026-03-03T00:00:00+00:00",
        )
        assert [d["name"] for d in sent["body"]["datasets"]] == ["orders", "totals"]
        # The 3rd now follows a version without amount: it adds it back and retypes id as it
        # did before, which tells nobody.
        # A version later than the 3rd, retyped, after a late one that retyped it otherwise:
        load(write(5, at(3, 12), ("id", "string"), ("amount", "decimal")))
        load(write(6, at(3, 6), ("id", "string"), ("amount", "double")))
        titles = [r["body"]["title"] for r in hook.received[1:]]
        assert titles == [
            "orders: amount retyped string → decimal, id retyped bigint → string",
            "orders: amount retyped string → double, id retyped bigint → string "
            "(from 2026-03-03 06:00 until 2026-03-03 12:00 UTC, told late)",
            "orders: amount retyped double → decimal "
            "(after a version of 2026-03-03 06:00 UTC told late)",
        ]
        # Two versions arriving together, in order: each told once, neither late.
        load(write(8, at(4), "id", "amount"), write(9, at(4, 1), "id"))
        titles = [r["body"]["title"] for r in hook.received[4:]]
        assert titles == ["orders: amount retyped decimal → string", "orders: amount removed"]
    # History loaded long after it happened is not told.
    with time_machine.travel("2026-04-01T00:00:00Z"):
        load(write(7, at(2, 12), "id"))
    assert len(hook.received) == 6


def test_a_delivery_whose_task_was_lost_is_sent_by_the_sweep(chain, hook, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    subscription = Subscription.objects.create(
        name="platform",
        namespace=chain.ns,
        webhook_url=f"{hook.url}/T000/B000/secret-token",
        email="p@example.com",
    )
    taint = chain.ds["a"]
    from graph.models import Taint

    marked = Taint.objects.create(dataset=taint, reason="two\nlines", created_at=timezone.now())
    # The broker was down when the notice was made: its deliveries were never queued.
    from unittest import mock

    with mock.patch.object(notify, "_queue"):
        notify.taint_notices(marked.pk)
    assert set(Delivery.objects.values_list("state", flat=True)) == {DeliveryState.PENDING}
    assert notify.requeue() == 0  # not yet: their tasks may still run
    assert notify.requeue(now=timezone.now() + notify.REQUEUE_AFTER * 2) == 2
    assert set(Delivery.objects.values_list("state", flat=True)) == {DeliveryState.SENT}
    (email,) = mail.outbox
    assert email.subject == "[Lineage Explorer] a is tainted: two lines"
    # Readers see where a webhook goes, not its secret path.
    assert subscription.webhook_site == f"http://127.0.0.1:{hook.server.server_address[1]}"


def test_the_notices_page_never_shows_a_webhook_path(chain, hook, viewer, client):
    Subscription.objects.create(
        name="platform", namespace=chain.ns, webhook_url="https://hooks.example.com/T0/B0/secret"
    )
    client.force_login(viewer)
    text = client.get("/health/notices").content.decode()
    assert "webhook at https://hooks.example.com" in text and "secret" not in text


def test_a_subscription_must_cover_something_be_told_somewhere_and_name_known_kinds(chain):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as refused:
        Subscription(name="nobody", kinds=["taint", "weather"]).full_clean()
    assert set(refused.value.message_dict) == {"dataset", "email", "kinds"}
    assert "not weather" in refused.value.message_dict["kinds"][0]
    Subscription(name="platform", namespace=chain.ns, email="p@example.com").full_clean()
