"""/readyz through real outages: the app served by gunicorn over a PostgreSQL cluster and a
Redis server of the test's own, which the test stops one after the other."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
COUNT_THREE_EVENTS = """
import django
django.setup()
from django.utils import timezone
from ops import metrics
metrics.normalized([timezone.now()] * 3)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def as_postgres(command: list[str]) -> list[str]:
    """PostgreSQL's tools refuse to run as root."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@pytest.fixture
def cluster() -> Iterator[dict[str, Any]]:
    """A PostgreSQL cluster of this test's own, running."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    assert found, "PostgreSQL's server programs (initdb, pg_ctl) are not installed"
    bin_dir = Path(found[-1]).parent
    base = Path(tempfile.mkdtemp(prefix="lineage-readyz-"))
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
    data, port = base / "data", free_port()
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
    subprocess.run(as_postgres([*initdb, "--no-sync"]), check=True, capture_output=True)
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
    pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(data)]
    subprocess.run(
        as_postgres([*pg_ctl, "-o", options, "-w", "start", "-l", str(base / "log")]),
        check=True,
        capture_output=True,
    )
    try:
        yield {"url": f"postgres://postgres@127.0.0.1:{port}/postgres", "pg_ctl": pg_ctl}
    finally:
        subprocess.run(as_postgres([*pg_ctl, "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def broker() -> Iterator[dict[str, Any]]:
    """A Redis server of this test's own, running."""
    port = free_port()
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _answers(port), "Redis")
        yield {"url": f"redis://127.0.0.1:{port}/0", "process": server}
    finally:
        server.kill()
        server.wait()


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


def wait_for(ready: Any, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not start in {seconds:.0f} s")
        time.sleep(0.1)


def test_readyz_names_what_is_down_through_a_real_broker_and_database_outage(
    cluster, broker, tmp_path
):
    port = free_port()
    (tmp_path / "metrics").mkdir()
    env = {
        **os.environ,
        "DATABASE_URL": cluster["url"],
        "CELERY_BROKER_URL": broker["url"],
        "GRAPH_WARM_ON_START": "false",
        "LINEAGE_DATA_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "lineage_site.settings",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "METRICS_ALLOWED_IPS": "127.0.0.1",
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "lineage_site.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            "1",
        ],
        cwd=ROOT,
        env=env,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(port), "gunicorn")
        ready = requests.get(f"{base}/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"status": "ready", "checks": {"database": "ok", "broker": "ok"}}

        # Another process of the host (a Celery worker, say) counts events: the scrape of
        # the web process adds them up (prometheus-client's multiprocess mode).
        subprocess.run([sys.executable, "-c", COUNT_THREE_EVENTS], cwd=ROOT, env=env, check=True)
        scraped = requests.get(f"{base}/metrics", timeout=10)
        assert scraped.status_code == 200
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(scraped.text)
            for sample in family.samples
        }
        assert samples[("lineage_events_normalized_total", ())] == 3
        assert samples[("lineage_ingestion_lag_seconds_count", ())] == 3
        assert (
            samples[
                (
                    "lineage_http_requests_total",
                    (("method", "GET"), ("status", "200"), ("view", "readyz")),
                )
            ]
            == 1
        )
        # Its tables are not there (nothing migrated): the scrape says it could not read them.
        assert samples[("lineage_database_up", ())] == 0

        broker["process"].kill()
        broker["process"].wait()
        no_broker = requests.get(f"{base}/readyz", timeout=10)
        assert no_broker.status_code == 503
        assert no_broker.json()["down"] == ["broker"]
        assert no_broker.json()["checks"]["database"] == "ok"

        subprocess.run(
            as_postgres([*cluster["pg_ctl"], "-m", "immediate", "stop"]),
            check=True,
            capture_output=True,
        )
        neither = requests.get(f"{base}/readyz", timeout=10)
        assert neither.status_code == 503
        body = neither.json()
        assert body["down"] == ["broker", "database"]
        assert body["checks"]["database"].startswith("down: OperationalError")
        # The process itself is alive: liveness says so, whatever is down.
        alive = requests.get(f"{base}/healthz", timeout=10)
        assert alive.status_code == 200 and alive.json() == {"status": "ok"}
    finally:
        server.terminate()
        server.wait(30)
