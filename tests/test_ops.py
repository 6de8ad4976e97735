"""Liveness, readiness and Prometheus metrics, as a platform team's probes and scrapes see
them. (A real database and broker outage: tests/integration/test_ops_outage.py.)"""

from __future__ import annotations

import io
import ipaddress
import json
import socket
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.ingest_builders import at, dataset, run_event, run_id, schema

pytestmark = pytest.mark.django_db


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(client: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics by (name, sorted labels), read with the client's own parser."""
    response = client.get("/metrics")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def total(samples: dict[tuple[str, Any], float], name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, found), v in samples.items() if n == name and wanted <= set(found))


def test_healthz_answers_without_sign_in_or_the_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"].startswith("max-age=0")
    assert client.post("/healthz").status_code == 405


def test_readyz_is_ready_when_the_database_answers(client, settings):
    settings.CELERY_BROKER_URL = ""  # in-process tasks: no broker to wait for
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"database": "ok"}}


def test_readyz_names_a_broker_nobody_answers_at(client, settings):
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{free_port()}/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable" and body["down"] == ["broker"]
    assert body["checks"]["database"] == "ok"
    # What is down and the kind of error; the address is in the log only.
    assert body["checks"]["broker"].startswith("down: ")
    assert "127.0.0.1" not in body["checks"]["broker"]


def test_metrics_need_a_token_or_an_allowed_address(client, api, viewer, outsider, settings):
    settings.METRICS_ALLOWED_NETWORKS = []
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert "METRICS_ALLOWED_IPS" in refused.json()["error"]
    assert refused["WWW-Authenticate"] == 'Bearer realm="metrics"'
    bad = client.get("/metrics", HTTP_AUTHORIZATION="Bearer not-a-token")
    assert bad.status_code == 401 and bad.json()["error"] == "Invalid or revoked token"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic abc").status_code == 401
    # A user in no role may not, signed in or with a token.
    assert api(outsider).get("/metrics").status_code == 403
    client.force_login(outsider)
    assert client.get("/metrics").status_code == 403
    client.force_login(viewer)
    assert ("lineage_revision", ()) in scrape(client)
    client.logout()
    # Any role's token will do.
    assert ("lineage_revision", ()) in scrape(api(viewer))
    # So does an address of the list, without a token (the test client is 127.0.0.1).
    settings.METRICS_ALLOWED_NETWORKS = [ipaddress.ip_network("127.0.0.0/8")]
    assert ("lineage_database_up", ()) in scrape(client)
    settings.METRICS_ALLOWED_NETWORKS = [ipaddress.ip_network("10.0.0.0/8")]
    assert client.get("/metrics").status_code == 401


def test_the_counters_move_when_events_are_ingested(
    api, producer, viewer, django_capture_on_commit_callbacks
):
    reader = api(viewer)
    before = scrape(reader)
    events = [
        run_event(
            "COMPLETE",
            run_id(n),
            at(1),
            inputs=[dataset("shop.orders", schema=schema("id", "amount"))],
            outputs=[dataset("shop.totals", schema=schema("amount"))],
        )
        for n in (1, 2)
    ]
    poster = api(producer)
    with django_capture_on_commit_callbacks(execute=True):
        for event in events:
            response = poster.post(
                "/api/v1/lineage", json.dumps(event), content_type="application/json"
            )
            assert response.status_code == 201, response.content
        # The same event again is no new event.
        poster.post("/api/v1/lineage", json.dumps(events[0]), content_type="application/json")
    after = scrape(reader)

    def moved(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert moved("lineage_events_accepted_total", source="api") == 2
    assert moved("lineage_events_normalized_total") == 2
    assert moved("lineage_ingestion_lag_seconds_count") == 2
    assert moved("lineage_events_dead_lettered_total") == 0
    assert moved("lineage_http_requests_total", view="api-lineage", method="POST") == 3
    assert moved("lineage_http_request_duration_seconds_count", method="POST") == 3
    assert total(after, "lineage_ingestion_queue_depth", state="pending") == 0
    assert total(after, "lineage_dead_letters") == 0
    assert total(after, "lineage_database_up") == 1
    assert total(after, "lineage_revision") > total(before, "lineage_revision")


def test_an_event_that_fails_for_good_is_counted_as_a_dead_letter(
    api, producer, viewer, django_capture_on_commit_callbacks
):
    from ingest import actions
    from ingest.events import parse_event
    from ingest.models import EventState, RawEvent

    reader = api(viewer)
    before = scrape(reader)
    event = run_event("COMPLETE", run_id(9), at(1), outputs=[dataset("shop.orders")])
    with django_capture_on_commit_callbacks(execute=True):
        stored = actions.store_events([parse_event(event, "fp-dead")], "api", enqueue=False)
    raw = RawEvent.objects.get(pk=next(iter(stored.stored.values())))
    RawEvent.objects.filter(pk=raw.pk).update(body="{not json")
    with django_capture_on_commit_callbacks(execute=True):
        actions.process_events([raw.pk])
    assert RawEvent.objects.get(pk=raw.pk).state == EventState.FAILED
    after = scrape(reader)
    assert (
        total(after, "lineage_events_failed_total") - total(before, "lineage_events_failed_total")
        == 1
    )
    assert (
        total(after, "lineage_events_dead_lettered_total")
        - total(before, "lineage_events_dead_lettered_total")
        == 1
    )
    assert total(after, "lineage_dead_letters") == 1


def exported_names(client: Any) -> set[str]:
    """The metric families /metrics declares and the samples it carries (a labelled counter
    nobody incremented has no sample yet)."""
    response = client.get("/metrics")
    names = set()
    for family in text_string_to_metric_families(response.content.decode()):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names


def test_the_measured_indicators_are_gauges_against_their_targets(api, viewer):
    from ops import slis

    measured = {s.name: s for s in slis.record_today()}
    samples = scrape(api(viewer))
    for name in ("coverage", "ingestionLag", "deadLetters"):
        labels = (("indicator", name),)
        assert samples[("lineage_sli_target", labels)] == measured[name].target
        if measured[name].value is None:  # nothing judged yet
            assert ("lineage_sli", labels) not in samples
        else:
            assert samples[("lineage_sli", labels)] == measured[name].value
    stamp = samples[("lineage_sli_measured_timestamp_seconds", ())]
    assert stamp == measured["coverage"].measured_at.timestamp()


def test_every_alert_rule_parses_reads_exported_metrics_and_links_its_runbook(api, viewer, client):
    import promql_parser
    import yaml
    from django.core.management import call_command

    from ops import slis
    from ops.alerts import ALERTS

    slis.record_today()
    names = exported_names(api(viewer))
    client.force_login(viewer)
    runbooks = client.get("/health/runbooks").content.decode()
    for alert in ALERTS:
        expr = promql_parser.parse(alert.expr)
        selectors: list[str] = []
        promql_parser.walk(
            expr,
            lambda node: (
                selectors.append(node.name)  # noqa: B023
                if isinstance(node, promql_parser.VectorSelector)
                else None
            ),
        )
        assert selectors, alert.name
        for name in selectors:
            family = name.removesuffix("_total").removesuffix("_bucket")
            assert name in names or family in names, (alert.name, name)
        assert f'id="{alert.runbook}"' in runbooks, alert.name
        assert alert.severity in ("page", "ticket")
    out = io.StringIO()
    call_command("alert_rules", base_url="https://lineage.example.com/", stdout=out)
    (group,) = yaml.safe_load(out.getvalue())["groups"]
    assert [rule["alert"] for rule in group["rules"]] == [a.name for a in ALERTS]
    lag = next(r for r in group["rules"] if r["alert"] == "LineageIngestionLagHigh")
    assert lag["for"] == "10m" and lag["labels"] == {"severity": "page"}
    assert lag["annotations"]["runbook_url"] == (
        "https://lineage.example.com/health/runbooks#ingestion-lag"
    )
