"""Lean lineage reads: CPU per request in one process, Django's WSGI handler against the project's.

    .venv/bin/python -m benchmarks.bench_lean [--scale 100000] [--pairs 8] [--requests 300]

Uses the graph benchmark's database ``lineage_bench_<N>`` (``bench_graph
--reuse`` makes it) and its first draw of random datasets, fields and
instants. Each scenario's requests go through a WSGI application in this
process, with the settings the graph benchmark serves it with (``DEBUG=false``):

- full: Django's own ``WSGIHandler``, the middleware chain and DRF;
- lean: ``lineage_site.handler.LineageWSGIHandler``, what ``lineage_site.wsgi``
  serves, which answers plain bearer-token reads of table and column lineage
  before the middleware chain (``graph/lean.py``).

After one pass through both (caches filled, every answer compared: status,
body and headers must be the same), ``--pairs`` pairs of ``--requests``
requests each, full then lean, then lean then full. CPU per request is this
process's CPU time over the requests (PostgreSQL's is not counted: it is the
same for both); the medians over pairs and their ratio go to
benchmarks/results/lean.json. With four clients on two cores, latency is
about twice the machine's CPU per request, so what is saved here is saved
twice over in P95.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from benchmarks.bench_graph import (
    ROOT,
    SERVED_SETTINGS,
    bench_token,
    loadavg,
    pick_nodes,
    scenarios,
    setup_django,
)

RESULTS = ROOT / "benchmarks" / "results" / "lean.json"
SCENARIOS = (
    "table_down_d2_random",
    "table_down_d5_random",
    "table_down_d5_random_asof",
    "table_up_d5_random",
    "table_both_d5_random",
    "column_d5_random",
    "column_d5_random_asof",
)
Application = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def environ(path: str, token: str) -> dict[str, Any]:
    """The WSGI environ of an API client's GET (gunicorn gives the same keys)."""
    path_info, _, query = path.partition("?")
    return {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path_info,
        "QUERY_STRING": query,
        "SCRIPT_NAME": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_ACCEPT": "application/json",
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "wsgi.input": io.BytesIO(b""),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.version": (1, 0),
    }


def call(app: Application, env: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
    """One request through a WSGI application: status, headers and the whole body."""
    started: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started["status"], started["headers"] = status, headers

    result = app(env, start_response)
    try:
        body = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return started["status"], started["headers"], body


def cpu_per_request_ms(app: Application, paths: list[str], token: str, count: int) -> float:
    envs = [environ(paths[i % len(paths)], token) for i in range(count)]
    before = time.process_time()
    for env in envs:
        call(app, env)
    return (time.process_time() - before) * 1000 / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()

    os.environ.update(SERVED_SETTINGS, GRAPH_LEAN_READS="true")
    os.environ.pop("CELERY_BROKER_URL", None)
    # WhiteNoise warns that nothing was collected: no static file is asked for here.
    warnings.filterwarnings("ignore", message="No directory at")
    database = f"lineage_bench_{args.scale // 1000}k"
    setup_django(database)
    from django.core.handlers.wsgi import WSGIHandler

    from lineage_site.handler import LineageWSGIHandler

    full, lean = WSGIHandler(), LineageWSGIHandler()
    if lean.lean is None:
        raise SystemExit("the lean reads are off in these settings: nothing to compare")
    token = bench_token()
    paths = scenarios(pick_nodes(seed=args.scale))
    started_at = datetime.now(UTC).isoformat()
    results: dict[str, Any] = {}
    for name in SCENARIOS:
        print(f"[{args.scale}] {name}…", flush=True)
        for path in paths[name]:
            answers = [call(app, environ(path, token)) for app in (full, lean)]
            if answers[0] != answers[1]:
                raise SystemExit(f"{name}: the two handlers answer {path} differently")
            if not answers[0][0].startswith("200"):
                raise SystemExit(f"{name}: {path} answered {answers[0][0]}")
        samples: dict[str, list[float]] = {"full": [], "lean": []}
        for number in range(args.pairs):
            order = (("full", full), ("lean", lean))
            for label, app in order if number % 2 == 0 else order[::-1]:
                samples[label].append(cpu_per_request_ms(app, paths[name], token, args.requests))
        medians = {label: statistics.median(values) for label, values in samples.items()}
        results[name] = {
            "full_cpu_ms_per_request": round(medians["full"], 3),
            "lean_cpu_ms_per_request": round(medians["lean"], 3),
            "lean_over_full": round(medians["lean"] / medians["full"], 2),
            "full_per_pair": [round(v, 3) for v in samples["full"]],
            "lean_per_pair": [round(v, 3) for v in samples["lean"]],
        }
        print(
            f"    full {medians['full']:.3f} ms, lean {medians['lean']:.3f} ms, "
            f"ratio {medians['lean'] / medians['full']:.2f}",
            flush=True,
        )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "lean lineage reads, CPU per request in one process",
                "started_at": started_at,
                "finished_at": datetime.now(UTC).isoformat(),
                "database": database,
                "pairs": args.pairs,
                "requests_per_sample": args.requests,
                "loadavg": loadavg(),
                "scenarios": results,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
