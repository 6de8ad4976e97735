"""Operations at scale: ``/metrics``, ``/api/v1/slis`` and the Health page, and the
notices of a taint reaching ten thousand datasets.

    python -m benchmarks.bench_ops [--database lineage_bench_100k_against] [--requests 30]

Runs in process over a generated database (``bench_graph`` makes them; this code's
migrations are applied first) with Django's test client, so the times are the server's
own: each view's P50 and P95 over ``--requests`` requests after two warm-up ones, and the
first request's time (``slis_first_ms``: the process reads every job's cadence then). The
generated databases hold one run per job; freshness is judged from a job's last runs, so
a database with fewer than two finished runs per job first gets ``--run-history`` more for
each job (0: none; one job in three hourly, one daily, one weekly; every tenth job six hours late). The
fan-out taints the dataset with the largest downstream reach, with one subscription per
namespace (webhooks, never called: no worker runs), and times ``ops.notify.taint_notices``
until every delivery is queued on Redis. The taint and its notices are removed after.
Results go to benchmarks/results/ops.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "ops.json"
PYTHON = sys.executable


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def timed(client: Any, path: str, requests: int, **headers: str) -> dict[str, float]:
    for _ in range(2):
        client.get(path, **headers)
    took = []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get(path, **headers)
        took.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    return {"p50_ms": round(statistics.median(took), 1), "p95_ms": round(percentile(took, 0.95), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="lineage_bench_100k_against")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--run-history", type=int, default=9)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    url = f"postgres://postgres@127.0.0.1:5432/{args.database}"
    env = {**os.environ, "DATABASE_URL": url}
    subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    os.environ.update(
        DATABASE_URL=url,
        CELERY_BROKER_URL=args.redis_url,
        DJANGO_SETTINGS_MODULE="lineage_site.settings",
        ALLOWED_HOSTS="testserver",
    )
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.contrib.auth.models import Group, User
    from django.test import Client

    from catalog import actions
    from catalog.models import Dataset, Namespace

    add_run_history(args.run_history)
    user, _ = User.objects.get_or_create(username="bench-ops")
    user.groups.add(Group.objects.get(name="viewer"))
    token = actions.issue_token(user, name="bench-ops")[1]
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    client = Client()
    client.force_login(user)
    report: dict[str, Any] = {
        "benchmark": "ops",
        "database": args.database,
        "datasets": Dataset.objects.count(),
        "requests": args.requests,
    }
    started = time.perf_counter()
    assert Client().get("/api/v1/slis", **bearer).status_code == 200
    report["slis_first_ms"] = round((time.perf_counter() - started) * 1000, 1)
    report["metrics"] = timed(Client(), "/metrics", args.requests, **bearer)
    report["slis"] = timed(Client(), "/api/v1/slis", args.requests, **bearer)
    report["slis_personal"] = timed(Client(), "/api/v1/slis?personal=true", args.requests, **bearer)
    report["health_page"] = timed(client, "/health/", args.requests)
    print(json.dumps(report, indent=1), flush=True)
    report["fan_out"] = fan_out(Dataset, Namespace, user)
    report["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report["fan_out"], indent=1))
    print(f"wrote {args.output}")


def add_run_history(per_job: int) -> None:
    from django.db import connection

    from graph.models import Job, Run

    if not per_job or Run.objects.filter(state="COMPLETED").count() >= 2 * Job.objects.count():
        return
    print(f"adding {per_job} finished runs to each job…", flush=True)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO graph_run (run_uuid, state, started_at, ended_at, error_message,
              error_stack, facets, edges_applied, created_at, updated_at, job_id,
              column_lineage, facet_times)
            SELECT gen_random_uuid(), 'COMPLETED', t, t + interval '5 minutes', '', '', '{}',
              false, t, t, j.id, '{}', '{}'
            FROM graph_job j, generate_series(1, %s) k,
            LATERAL (SELECT now() - k * (CASE j.id %% 3 WHEN 0 THEN interval '1 hour'
              WHEN 1 THEN interval '1 day' ELSE interval '7 days' END)
              - CASE WHEN j.id %% 10 = 0 THEN interval '6 hours' ELSE interval '0' END AS t) x
            """,
            [per_job],
        )
        cursor.execute("ANALYZE graph_run")


def fan_out(dataset_model: Any, namespace_model: Any, user: Any) -> dict[str, Any]:
    from graph import queries
    from graph.models import Taint
    from ops import notify
    from ops.models import Delivery, Notice, Subscription

    best, reach = None, 0
    # The most-read datasets reach furthest downstream.
    from django.db.models import Count

    candidates = (
        dataset_model.objects.annotate(readers=Count("edges"))
        .order_by("-readers")
        .values_list("pk", flat=True)[:20]
    )
    for pk in candidates:
        size = queries.taint_reach(Taint(dataset_id=pk)).ds.size
        if size > reach:
            best, reach = pk, size
    subscriptions = [
        Subscription.objects.create(
            name=f"bench {ns.name}", namespace=ns, webhook_url="http://127.0.0.1:9/never"
        )
        for ns in namespace_model.objects.all()
    ]
    assert best is not None, "no dataset to taint"
    taint = Taint.objects.create(dataset_id=best, reason="bench", created_by=user)
    try:
        started = time.perf_counter()
        notices = notify.taint_notices(taint.pk)
        seconds = time.perf_counter() - started
        deliveries = Delivery.objects.filter(notice__in=notices).count()
    finally:
        Notice.objects.filter(key=f"taint:{taint.pk}").delete()
        taint.delete()
        for subscription in subscriptions:
            subscription.delete()
        from lineage_site.celery import app

        app.control.purge()  # the queued deliveries: no worker was to send them
    return {
        "datasets_reached": int(reach),
        "subscriptions": len(subscriptions),
        "notices": len(notices),
        "deliveries_queued": deliveries,
        "seconds": round(seconds, 3),
    }


if __name__ == "__main__":
    main()
