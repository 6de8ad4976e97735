"""The OpenLineage emitter: delivery over HTTP, retries, spool file, FAIL events."""

from __future__ import annotations

import gzip
import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pipelines.lineage import EmitterConfig, LineageEmitter, SimulatedClock, deterministic_run_id
from tests.spark.conftest import CollectingTransport

pytestmark = pytest.mark.spark

T0 = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)


class FakeLineageApp:
    """A tiny HTTP server answering POST /api/v1/lineage with scripted status codes."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.requests: list[dict[str, Any]] = []
        app = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                app.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                status = app.statuses.pop(0) if app.statuses else 201
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeLineageApp:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def sleeps() -> list[float]:
    return []


def _emitter(spark: Any, tmp_path: Path, sleeps: list[float], **config: Any) -> LineageEmitter:
    settings = {"spool_path": str(tmp_path / "spool.ndjson"), "retries": 2, "timeout": 2.0}
    return LineageEmitter(
        spark,
        EmitterConfig(**{**settings, **config}),
        clock=SimulatedClock(T0),
        sleep=sleeps.append,
    )


def _spooled(tmp_path: Path) -> list[dict[str, Any]]:
    spool = tmp_path / "spool.ndjson"
    if not spool.exists():
        return []
    return [json.loads(line) for line in spool.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def small_df(spark: Any, tmp_path: Path) -> Iterator[Any]:
    source = tmp_path / "source"
    spark.createDataFrame([(1, "a@example.com")], "id BIGINT, email STRING").write.parquet(
        str(source)
    )
    yield spark.read.parquet(str(source))


def test_it_spools_events_when_the_app_is_unreachable_and_the_job_succeeds(
    spark: Any, tmp_path: Path, sleeps: list[float], small_df: Any
) -> None:
    emitter = _emitter(spark, tmp_path, sleeps, url=_closed_port_url(), api_key="tok")
    with emitter.job("copy", run_key="2026-03-02") as run:
        run.write(small_df, str(tmp_path / "copy"))

    assert spark.read.parquet(str(tmp_path / "copy")).count() == 1
    events = _spooled(tmp_path)
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    assert events[0]["run"]["runId"] == deterministic_run_id("spark", "copy", "2026-03-02")
    assert events[1]["outputs"][0]["name"] == str(tmp_path / "copy")
    # START retried with backoff, then the transport stayed offline for COMPLETE.
    assert sleeps == [0.5, 1.0]
    assert emitter.transport.stats.spooled == 2
    assert emitter.transport.stats.sent == 0


def test_it_posts_gzip_with_a_bearer_token_and_retries_server_errors(
    spark: Any, tmp_path: Path, sleeps: list[float], small_df: Any
) -> None:
    with FakeLineageApp([503, 502]) as app:
        emitter = _emitter(spark, tmp_path, sleeps, url=app.url, api_key="s3cret")
        with emitter.job("copy") as run:
            run.write(small_df, str(tmp_path / "copy"))

    assert len(app.requests) == 4  # START failed twice, then START and COMPLETE went through
    assert sleeps == [0.5, 1.0]
    first = app.requests[-2]
    assert first["path"] == "/api/v1/lineage"
    assert first["headers"]["Authorization"] == "Bearer s3cret"
    assert first["headers"]["Content-Encoding"] == "gzip"
    event = json.loads(gzip.decompress(first["body"]))
    assert event["eventType"] == "START"
    assert event["inputs"][0]["facets"]["schema"]["fields"][1]["name"] == "email"
    assert _spooled(tmp_path) == []
    assert emitter.transport.stats.sent == 2


def test_it_spools_an_event_the_app_refuses_without_retrying(
    spark: Any, tmp_path: Path, sleeps: list[float]
) -> None:
    with FakeLineageApp([422, 201]) as app:
        emitter = _emitter(spark, tmp_path, sleeps, url=app.url)
        with emitter.job("noop") as run:
            run.start()

    assert sleeps == []
    assert [e["eventType"] for e in _spooled(tmp_path)] == ["START"]
    assert len(app.requests) == 2


def test_it_emits_fail_with_the_error_and_reraises(
    spark: Any, tmp_path: Path, sleeps: list[float]
) -> None:
    collecting = CollectingTransport()
    emitter = LineageEmitter(
        spark,
        EmitterConfig(spool_path=str(tmp_path / "spool.ndjson")),
        clock=SimulatedClock(T0),
        inner_transport=collecting,
    )
    with pytest.raises(Exception, match="PATH_NOT_FOUND"), emitter.job("broken") as run:
        run.write(spark.read.parquet(str(tmp_path / "missing")), str(tmp_path / "out"))

    assert [e["eventType"] for e in collecting.events] == ["START", "FAIL"]
    error = collecting.events[1]["run"]["facets"]["errorMessage"]
    assert "PATH_NOT_FOUND" in error["message"]
    assert error["programmingLanguage"] == "python"
    assert "Traceback" in error["stackTrace"]


def test_it_emits_fail_for_an_error_after_the_write(
    spark: Any, tmp_path: Path, small_df: Any
) -> None:
    collecting = CollectingTransport()
    emitter = LineageEmitter(
        spark,
        EmitterConfig(spool_path=str(tmp_path / "spool.ndjson")),
        clock=SimulatedClock(T0),
        inner_transport=collecting,
    )
    with pytest.raises(ValueError, match="boom"), emitter.job("half") as run:
        run.write(small_df, str(tmp_path / "out"))
        raise ValueError("boom")

    start, fail = collecting.events
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL")
    assert fail["run"]["facets"]["errorMessage"]["message"] == "ValueError: boom"
    assert fail["outputs"][0]["name"] == str(tmp_path / "out")
    assert start["eventTime"] < fail["eventTime"]


def test_it_gives_the_same_run_id_for_the_same_job_and_day() -> None:
    first = deterministic_run_id("ns", "job", "2026-03-02")
    assert first == deterministic_run_id("ns", "job", "2026-03-02")
    assert first != deterministic_run_id("ns", "job", "2026-03-03")
    assert first != deterministic_run_id("ns", "other", "2026-03-02")


@pytest.mark.django_db
def test_it_spools_events_that_ingest_events_loads_later(
    spark: Any, tmp_path: Path, sleeps: list[float], small_df: Any
) -> None:
    from django.core.management import call_command

    from ingest.models import RawEvent

    emitter = _emitter(spark, tmp_path, sleeps, url=_closed_port_url(), retries=0)
    with emitter.job("copy", run_key="2026-03-02") as run:
        run.write(small_df, str(tmp_path / "copy"))

    call_command("ingest_events", str(tmp_path / "spool.ndjson"), "--no-progress")
    assert RawEvent.objects.count() == 2
    call_command("ingest_events", str(tmp_path / "spool.ndjson"), "--no-progress")
    assert RawEvent.objects.count() == 2
