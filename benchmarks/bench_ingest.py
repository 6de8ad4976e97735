"""OpenLineage ingestion speed on PostgreSQL + Redis: accepted and normalised events per second, lag.

    python -m benchmarks.bench_ingest [--database-url postgres://…/lineage_bench_ingest]
        [--redis-url redis://127.0.0.1:6379/12] [--single 4000] [--batch 20000] [--clients 4]

Everything runs on this machine, in one run:

* **single**: ``POST /api/v1/lineage``, one event per request, from ``--clients``
  processes to gunicorn as the README deploys it (gunicorn's sync workers, one
  per core;
  ``--worker-class gthread --workers 2 --threads 4`` was the layout until
  2026-11-24: a keep-alive connection stays on one threaded worker, so the
  four clients could land unevenly on the two); no worker runs, so this is the
  accept path alone (store + queue a task);
* **batch**: ``POST /api/v1/lineage/batch`` with 500 events per request;
* **normalise**: one ``celery -A lineage_site worker --concurrency 1`` works
  through everything the two phases above stored; rate = events / (last
  processed - first claimed);
* **inline reference**: ``manage.py ingest_events --engine inline`` on the same
  events in a fresh database (the same normaliser without a broker);
* **lag**: with one worker running, one client posts events at a steady rate;
  lag = processed_at - received_at of each event (end to end through Redis).

Events are synthetic but shaped like the Spark integration's: START and COMPLETE
per run, 2-3 inputs and one output with schema and columnLineage facets, jobs
reading from a shared pool of datasets. Results go to benchmarks/results/ingest.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "ingest.json"
PYTHON = str(ROOT / ".venv" / "bin" / "python")
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/lineage_bench_ingest"
DEFAULT_REDIS = "redis://127.0.0.1:6379/12"
PG = "postgres://warehouse:5432"
TARGETS = {"single_per_s": 1000, "batch_per_s": 10000, "normalised_per_s_per_worker": 2000}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary_ms(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(values), 2),
        "p95_ms": round(percentile(values, 0.95), 2),
        "max_ms": round(max(values), 2),
    }


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --- events ------------------------------------------------------------------------------


def synthetic_events(runs: int, seed: int, first_run: int = 0) -> list[dict[str, Any]]:
    """START and COMPLETE events of ``runs`` runs, in event-time order."""
    rnd = random.Random(seed)
    pool = [f"lake.raw.table_{i}" for i in range(400)]
    fields = ["id", "customer_id", "amount", "country", "updated_at"]
    schema = {"fields": [{"name": f, "type": "string"} for f in fields]}
    # Run n starts n minutes after this: the lag phase's runs (from 10**6) end in 2025, in
    # the past, as the ingest API requires (no eventTime more than a day ahead).
    epoch = datetime(2024, 1, 1, tzinfo=UTC)
    events: list[dict[str, Any]] = []
    for n in range(first_run, first_run + runs):
        job = n % 300
        run_id = str(uuid.UUID(int=(seed << 64) + n + 1, version=4))
        start = epoch + timedelta(minutes=n)
        picked = rnd.sample(pool, rnd.choice((2, 3)))
        inputs = [{"namespace": PG, "name": name, "facets": {"schema": schema}} for name in picked]
        lineage = {
            "fields": {
                f: {
                    "inputFields": [
                        {
                            "namespace": PG,
                            "name": picked[i % len(picked)],
                            "field": f,
                            "transformations": [{"type": "DIRECT", "subtype": "IDENTITY"}],
                        }
                    ]
                }
                for i, f in enumerate(fields)
            }
        }
        output = {
            "namespace": PG,
            "name": f"lake.curated.job_{job}",
            "facets": {"schema": schema, "columnLineage": lineage},
        }
        common = {
            "producer": "https://github.com/OpenLineage/OpenLineage/tree/1.26.0/integration/spark",
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
            "job": {
                "namespace": "spark-bench",
                "name": f"etl.job_{job}",
                "facets": {"jobType": {"processingType": "BATCH", "integration": "SPARK"}},
            },
        }
        events.append(
            {
                **common,
                "eventType": "START",
                "eventTime": start.isoformat(),
                "run": {"runId": run_id, "facets": {}},
                "inputs": inputs,
                "outputs": [],
            }
        )
        events.append(
            {
                **common,
                "eventType": "COMPLETE",
                "eventTime": (start + timedelta(seconds=40)).isoformat(),
                "run": {"runId": run_id, "facets": {}},
                "inputs": inputs,
                "outputs": [output],
            }
        )
    return events


# --- services ----------------------------------------------------------------------------


def prepare_database(url: str) -> None:
    import psycopg

    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    admin = url.replace("postgres://", "postgresql://", 1).rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    env = {**os.environ, "DATABASE_URL": url}
    env.pop("CELERY_BROKER_URL", None)
    subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)


def service_env(db_url: str, redis_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": db_url,
        "CELERY_BROKER_URL": redis_url,
        "DEBUG": "false",
        "SECRET_KEY": "benchmark-only-secret-key-0123456789abcdefghijklmnopqrstuvwxyz",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "false",
        "LOG_LEVEL": "WARNING",
    }


def flush_redis(redis_url: str) -> None:
    parsed = urlparse(redis_url)
    db = parsed.path.lstrip("/") or "0"
    host, port = parsed.hostname or "127.0.0.1", str(parsed.port or 6379)
    subprocess.run(
        ["redis-cli", "-h", host, "-p", port, "-n", db, "flushdb"],
        check=True,
        capture_output=True,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    env: dict[str, str],
    port: int,
    worker_class: str = "sync",
    workers: int | None = None,
    threads: int = 1,
) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "gunicorn"),
            "lineage_site.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers or os.cpu_count() or 2),
            "--worker-class",
            worker_class,
            "--threads",
            str(threads),
            "--keep-alive",
            "30",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    for _ in range(120):
        try:
            with socket.create_connection(("127.0.0.1", port), 1):
                return proc
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("gunicorn did not start")


def start_worker(env: dict[str, str], concurrency: int = 1) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "celery"),
            "-A",
            "lineage_site",
            "worker",
            f"--concurrency={concurrency}",
            "--loglevel=WARNING",
            "--without-gossip",
            "--without-mingle",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)


# --- clients -----------------------------------------------------------------------------


def _post_all(args: tuple[int, str, str, list[str], Any]) -> list[float]:
    """One client: POST each body on a keep-alive connection; gives latencies in ms."""
    port, token, path, bodies, ready = args
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    ready.wait()
    latencies = []
    for body in bodies:
        started = time.perf_counter()
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        if response.status not in (201, 207):
            raise RuntimeError(f"{path} answered {response.status}")
        latencies.append((time.perf_counter() - started) * 1000)
    conn.close()
    return latencies


def post_parallel(
    port: int, token: str, path: str, bodies: list[str], clients: int
) -> dict[str, Any]:
    manager = multiprocessing.Manager()
    ready = manager.Event()
    shares = [bodies[i::clients] for i in range(clients)]
    with multiprocessing.get_context("fork").Pool(clients) as pool:
        pending = pool.map_async(_post_all, [(port, token, path, s, ready) for s in shares])
        time.sleep(0.5)
        started = time.perf_counter()
        ready.set()
        latencies = [ms for part in pending.get() for ms in part]
        wall = time.perf_counter() - started
    return {"requests": len(bodies), "wall_s": round(wall, 2), "latency": summary_ms(latencies)}


# --- measurements ------------------------------------------------------------------------


def setup_django(db_url: str) -> None:
    os.environ["DATABASE_URL"] = db_url
    os.environ.pop("CELERY_BROKER_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def producer_token() -> str:
    from django.contrib.auth.models import Group, User

    from catalog import actions

    user, _ = User.objects.get_or_create(username="bench-producer")
    user.groups.add(Group.objects.get(name="producer"))
    return actions.issue_token(user, name="bench")[1]


def wait_processed(total: int, timeout: float) -> float:
    from django.db import connection

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM ingest_rawevent WHERE state = 'done'")
            done = int(cursor.fetchone()[0])
            cursor.execute("SELECT count(*) FROM ingest_rawevent WHERE state = 'failed'")
            failed = int(cursor.fetchone()[0])
        if done + failed >= total:
            return time.monotonic()
        time.sleep(0.5)
    raise RuntimeError(f"only {done} of {total} events processed in {timeout} s")


def processing_span() -> dict[str, Any]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), min(claimed_at), max(processed_at), "
            "count(*) FILTER (WHERE state = 'failed') FROM ingest_rawevent"
        )
        count, first, last, failed = cursor.fetchone()
    span = (last - first).total_seconds()
    return {
        "events": count,
        "failed": failed,
        "span_s": round(span, 2),
        "per_s": round(count / span, 1),
    }


def lag_phase(port: int, token: str, events: list[dict[str, Any]], rate: float) -> dict[str, Any]:
    """One client posting at ``rate`` events/s while the worker runs; lag per event."""
    from django.db import connection

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    fingerprints = []
    started = time.perf_counter()
    for index, event in enumerate(events):
        due = started + index / rate
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        conn.request("POST", "/api/v1/lineage", body=json.dumps(event), headers=headers)
        response = conn.getresponse()
        fingerprints.append(json.loads(response.read())["fingerprint"])
    sent = time.perf_counter() - started
    conn.close()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM ingest_rawevent WHERE fingerprint = ANY(%s) "
                "AND state IN ('done', 'failed')",
                [fingerprints],
            )
            if cursor.fetchone()[0] == len(fingerprints):
                break
        time.sleep(0.25)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXTRACT(EPOCH FROM processed_at - received_at) * 1000 FROM ingest_rawevent "
            "WHERE fingerprint = ANY(%s)",
            [fingerprints],
        )
        lags = [float(row[0]) for row in cursor.fetchall()]
    return {
        "events": len(events),
        "target_rate_per_s": rate,
        "achieved_rate_per_s": round(len(events) / sent, 1),
        "lag": summary_ms(lags),
    }


def inline_reference(db_url: str, events: list[dict[str, Any]], workdir: Path) -> dict[str, Any]:
    inline_db = db_url.rsplit("/", 1)[0] + "/" + urlparse(db_url).path.lstrip("/") + "_inline"
    prepare_database(inline_db)
    path = workdir / "events.ndjson"
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n", encoding="utf-8")
    env = {**os.environ, "DATABASE_URL": inline_db, "LOG_LEVEL": "WARNING"}
    env.pop("CELERY_BROKER_URL", None)
    started = time.perf_counter()
    subprocess.run(
        [PYTHON, "manage.py", "ingest_events", str(path), "--engine", "inline", "--no-progress"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - started
    return {"events": len(events), "wall_s": round(wall, 2), "per_s": round(len(events) / wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=DEFAULT_DB)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS)
    parser.add_argument("--single", type=int, default=4000, help="events posted one by one")
    parser.add_argument("--batch", type=int, default=20000, help="events posted in batches")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--worker-class",
        default="sync",
        help="gunicorn's --worker-class (README: sync)",
    )
    parser.add_argument("--workers", type=int, default=None, help="default: one per core")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--lag-events", type=int, default=1500)
    parser.add_argument("--lag-rate", type=float, default=100.0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    options = parser.parse_args()

    results: dict[str, Any] = {
        "benchmark": "ingest",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_at_start": loadavg(),
        },
        "targets": TARGETS,
        "parameters": vars(options) | {"output": str(options.output)},
    }
    print("preparing database …", flush=True)
    prepare_database(options.database_url)
    flush_redis(options.redis_url)
    setup_django(options.database_url)
    token = producer_token()
    single = synthetic_events(options.single // 2, seed=1)
    batch = synthetic_events(options.batch // 2, seed=1, first_run=options.single // 2)
    env = service_env(options.database_url, options.redis_url)
    port = free_port()
    server = start_server(env, port, options.worker_class, options.workers, options.threads)
    worker: subprocess.Popen[bytes] | None = None
    try:
        print(f"single: {len(single)} events …", flush=True)
        bodies = [json.dumps(e) for e in single]
        phase = post_parallel(port, token, "/api/v1/lineage", bodies, options.clients)
        phase["events"] = len(single)
        phase["per_s"] = round(len(single) / phase["wall_s"], 1)
        phase["loadavg"] = loadavg()
        results["single_post"] = phase
        print(f"  {phase['per_s']} events/s accepted", flush=True)

        print(f"batch: {len(batch)} events …", flush=True)
        size = options.batch_size
        bodies = [json.dumps(batch[i : i + size]) for i in range(0, len(batch), size)]
        phase = post_parallel(port, token, "/api/v1/lineage/batch", bodies, options.clients)
        phase["events"] = len(batch)
        phase["per_s"] = round(len(batch) / phase["wall_s"], 1)
        phase["loadavg"] = loadavg()
        results["batch_post"] = phase
        print(f"  {phase['per_s']} events/s accepted", flush=True)

        total = len(single) + len(batch)
        print(f"normalise: one worker, {total} events …", flush=True)
        started = time.monotonic()
        worker = start_worker(env, concurrency=1)
        finished = wait_processed(total, timeout=3600)
        phase = processing_span()
        phase["wall_with_startup_s"] = round(finished - started, 1)
        phase["loadavg"] = loadavg()
        results["normalise_one_worker"] = phase
        print(f"  {phase['per_s']} events/s per worker", flush=True)

        print(f"lag: {options.lag_events} events at {options.lag_rate}/s …", flush=True)
        lag_events = synthetic_events(options.lag_events // 2, seed=2, first_run=10**6)
        phase = lag_phase(port, token, lag_events, options.lag_rate)
        phase["loadavg"] = loadavg()
        results["end_to_end_lag"] = phase
        print(f"  lag p50 {phase['lag']['p50_ms']} ms, p95 {phase['lag']['p95_ms']} ms", flush=True)
    finally:
        if worker is not None:
            stop(worker)
        stop(server)

    print("inline reference …", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_ingest") as workdir:
        results["inline_reference"] = inline_reference(
            options.database_url, single + batch, Path(workdir)
        )
    results["inline_reference"]["loadavg"] = loadavg()
    print(f"  {results['inline_reference']['per_s']} events/s in-process", flush=True)
    results["machine"]["loadavg_at_end"] = loadavg()
    options.output.parent.mkdir(parents=True, exist_ok=True)
    options.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {options.output}", flush=True)


if __name__ == "__main__":
    main()
