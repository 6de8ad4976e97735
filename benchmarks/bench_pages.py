"""Explorer page speed: server time per page at 100,000 datasets, and time from
navigation to an interactive graph in headless Chromium for 100, 500 and 2,000 nodes, and
the explorer's first view of a dataset at 1440x900 and 800x900 (time, smallest label).

    python -m benchmarks.bench_pages [--database-url postgres://…] [--datasets 100000]

The database is loaded once with ``manage.py generate_lineage`` (skipped when it
already holds enough datasets). Server time is measured in-process with
Django's test client (request → response, templates and queries included, no
network), steady state: each URL of a page is requested once before the timed
rounds (a process's first answer for a node fills caches that later requests
of every user share); those first answers are reported apart
(``first_request_p50_ms``, ``first_request_max_ms``).
Browser time is measured against a gunicorn server on this machine: from the
start of navigation to the moment the drawn graph answers input (the page
marks it after layout and two animation frames). The baseline, measured in
the same run, is the same page with dagre forced as the layout for every
size (the vendored layered layout that small graphs use).

Results go to benchmarks/results/pages.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "pages.json"
SHOTS = ROOT / "test-artifacts"
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/lineage_pages_100k"
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
SERVER_TARGET_MS = 200.0
GRAPH_TARGET_MS = 1500.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50_ms": round(statistics.median(values), 1),
        "p95_ms": round(percentile(values, 0.95), 1),
        "max_ms": round(max(values), 1),
    }


def setup_django(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def ensure_loaded(datasets: int) -> int:
    from django.core.management import call_command
    from django.db import connection

    from catalog.models import Dataset

    call_command("migrate", verbosity=0, interactive=False)
    count = Dataset.objects.count()
    if count < datasets:
        print(f"loading {datasets} datasets (have {count})…", flush=True)
        call_command("generate_lineage", datasets=datasets, no_progress=True)
        count = Dataset.objects.count()
    if connection.vendor == "postgresql":
        # Fresh statistics after a bulk load, as autovacuum would give a live database.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return count


def bench_user() -> Any:
    from django.contrib.auth.models import Group, User

    user, _ = User.objects.get_or_create(username="bench-viewer")
    user.groups.add(Group.objects.get(name="viewer"))
    return user


# --- picking realistic inputs ------------------------------------------------------------


def pick_inputs(seed: int = 7) -> dict[str, Any]:
    """Random datasets, jobs, runs and fields, hubs (most-read datasets) and search terms."""
    from django.db.models import Count, Max, Min

    from catalog.models import Dataset, DatasetField
    from graph.models import Job, Run, TableEdge

    rng = random.Random(seed)
    bounds = Dataset.objects.aggregate(lo=Min("pk"), hi=Max("pk"))

    def sample_pks(model: Any, n: int) -> list[int]:
        b = model.objects.aggregate(lo=Min("pk"), hi=Max("pk"))
        picks = [rng.randint(b["lo"], b["hi"]) for _ in range(n * 3)]
        found = list(model.objects.filter(pk__in=picks).values_list("pk", flat=True))
        rng.shuffle(found)
        return found[:n]

    datasets = list(
        Dataset.objects.filter(pk__in=sample_pks(Dataset, 40)).select_related("namespace")
    )
    jobs = list(Job.objects.filter(pk__in=sample_pks(Job, 30)).select_related("namespace"))
    runs = list(Run.objects.filter(pk__in=sample_pks(Run, 30)).values_list("run_uuid", flat=True))
    fields = list(
        DatasetField.objects.filter(pk__in=sample_pks(DatasetField, 30)).select_related(
            "dataset__namespace"
        )
    )
    hubs = [
        row["dataset_id"]
        for row in TableEdge.objects.filter(direction="in", valid_to__isnull=True)
        .values("dataset_id")
        .annotate(n=Count("id"))
        .order_by("-n")[:5]
    ]
    hub_datasets = list(Dataset.objects.filter(pk__in=hubs).select_related("namespace"))
    words = set()
    for ds in datasets:
        for token in ds.name.replace("/", ".").replace("_", ".").split("."):
            if len(token) >= 4 and not token.isdigit():
                words.add(token)
    terms = sorted(words)[:20] or ["customer", "orders"]
    rng.shuffle(terms)
    return {
        "datasets": datasets,
        "jobs": jobs,
        "runs": runs,
        "fields": fields,
        "hubs": hub_datasets,
        "terms": terms,
        "pk_range": (bounds["lo"], bounds["hi"]),
    }


def ds_query(ds: Any) -> str:
    return urlencode({"namespace": ds.namespace.name, "name": ds.name})


def node(ds: Any) -> str:
    return f"dataset:{ds.namespace.name}:{ds.name}"


def field_node(f: Any) -> str:
    return f"datasetField:{f.dataset.namespace.name}:{f.dataset.name}:{f.name}"


def page_urls(inp: dict[str, Any]) -> dict[str, list[str]]:
    """For each page, the URLs to time (one per request)."""
    ds, jobs, hubs = inp["datasets"], inp["jobs"], inp["hubs"]
    as_of = "2025-07-01T00:00:00Z"
    return {
        "home": ["/"],
        "dataset list": ["/datasets/", "/datasets/?pii=1&retention=-", "/datasets/?owner=-"],
        "search": [f"/search/?q={t}" for t in inp["terms"]],
        "search with filters": [f"/search/?q={t}&pii=1" for t in inp["terms"][:10]],
        "search suggestions": [f"/search/suggest?q={t[:4]}" for t in inp["terms"]],
        "dataset page": [f"/datasets/show?{ds_query(d)}" for d in ds],
        "dataset page as of": [f"/datasets/show?{ds_query(d)}&asOf={as_of}" for d in ds[:15]],
        "dataset lineage fragment": [f"/datasets/lineage?{ds_query(d)}" for d in ds],
        "dataset lineage fragment (hub)": [f"/datasets/lineage?{ds_query(d)}" for d in hubs],
        "dataset runs fragment": [f"/datasets/runs?{ds_query(d)}" for d in ds],
        "job page": [
            f"/jobs/show?{urlencode({'namespace': j.namespace.name, 'name': j.name})}" for j in jobs
        ],
        "run page": [f"/runs/{r}" for r in inp["runs"]],
        "graph page": [f"/graph/?{urlencode({'node': node(d)})}" for d in ds],
        "graph data depth 3": [f"/graph/data?{urlencode({'node': node(d)})}" for d in ds],
        "graph data depth 3 as of": [
            f"/graph/data?{urlencode({'node': node(d), 'asOf': as_of})}" for d in ds
        ],
        "graph data diff": [
            f"/graph/data?{urlencode({'node': node(d), 'compare': as_of})}" for d in ds[:15]
        ],
        "graph data hub (2,000-node cap)": [
            f"/graph/data?{urlencode({'node': node(d), 'depth': 5})}" for d in hubs
        ],
        "graph data column level": [
            f"/graph/data?{urlencode({'node': field_node(f), 'level': 'column'})}"
            for f in inp["fields"]
        ],
        "impact page": [f"/impact/?{urlencode({'node': node(d)})}" for d in ds],
        "impact page (hub)": [f"/impact/?{urlencode({'node': node(d)})}" for d in hubs],
        "impact CSV": [f"/impact/export?{urlencode({'node': node(d)})}" for d in ds[:15]],
        "stewardship": ["/stewardship/"],
        "orphans fragment": ["/stewardship/orphans"],
    }


def server_times(inp: dict[str, Any], user: Any, repeat: int) -> dict[str, Any]:
    from django.test import Client

    client = Client()
    client.force_login(user)
    out: dict[str, Any] = {}
    for name, urls in page_urls(inp).items():
        if not urls:
            continue
        # Each URL once first: a process's first answer for a node fills caches shared by
        # every later request (of any user). Those first answers are reported apart.
        cold: list[float] = []
        failed = ""
        for url in urls:
            warm = time.perf_counter()
            first = client.get(url)
            cold.append((time.perf_counter() - warm) * 1000)
            if first.status_code != 200:
                failed = f"HTTP {first.status_code} for {url}"
                break
        if failed:
            out[name] = {"error": failed}
            continue
        timings: list[float] = []
        cpu: list[float] = []
        statuses: set[int] = set()
        rounds = max(1, repeat // len(urls)) if len(urls) < repeat else 1
        for _ in range(rounds):
            for url in urls:
                start, start_cpu = time.perf_counter(), time.thread_time()
                response = client.get(url)
                timings.append((time.perf_counter() - start) * 1000)
                cpu.append((time.thread_time() - start_cpu) * 1000)
                statuses.add(response.status_code)
        out[name] = {
            **summary(timings),
            # This process's CPU only (the database's work is in its own process): less
            # sensitive than wall time to other load on a shared machine.
            "app_cpu_p50_ms": round(statistics.median(cpu), 1),
            "first_ms": round(cold[0], 1),
            "first_request_p50_ms": round(statistics.median(cold), 1),
            "first_request_max_ms": round(max(cold), 1),
            "statuses": sorted(statuses),
            "within_target": percentile(timings, 0.95) <= SERVER_TARGET_MS,
        }
        print(
            f"  {name:36s} p50 {out[name]['p50_ms']:8.1f} ms  p95 {out[name]['p95_ms']:8.1f} ms"
            f"  app cpu p50 {out[name]['app_cpu_p50_ms']:6.1f} ms",
            flush=True,
        )
    return out


# --- the browser ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(database_url: str, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": database_url, "DEBUG": "true"}
    process = subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "gunicorn"),
            "lineage_site.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--threads",
            "4",
            "--timeout",
            "300",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 1):
                return process
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError("gunicorn did not start")


def session_cookie(user: Any) -> str:
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.save()
    return str(store.session_key)


def graph_timing(page: Any, url: str, timeout_ms: int) -> dict[str, float]:
    page.goto(url, wait_until="commit")
    page.wait_for_function(
        "document.documentElement.dataset.graphReady === 'true'", timeout=timeout_ms
    )
    return dict(
        page.evaluate(
            """() => {
                const mark = (name) => (performance.getEntriesByName(name)[0] || {}).startTime || 0;
                const data = performance.getEntriesByType('resource')
                    .filter((e) => e.name.includes('/graph/data'))[0];
                return {
                    interactive_ms: window.__graphReadyAt,
                    data_request_ms: data ? data.responseEnd - data.requestStart : 0,
                    draw_ms: mark('graph-drawn') - mark('graph-data-received'),
                    nodes: Number(document.querySelector('#cy').dataset.nodes),
                    edges: Number(document.querySelector('#cy').dataset.edges),
                };
            }"""
        )
    )


def first_views(browser: Any, base: str, cookie: str, datasets: list[Any]) -> dict[str, Any]:
    """The explorer as it opens on a dataset (its default depth and direction) at 1440x900
    and 800x900: time to an interactive graph, and the smallest label drawn (CSS px)."""
    views: dict[str, Any] = {}
    for width in (1440, 800):
        context = browser.new_context(viewport={"width": width, "height": 900})
        context.add_cookies([{"name": "sessionid", "value": cookie, "url": base}])
        page = context.new_page()
        samples: list[dict[str, float]] = []
        for ds in datasets:
            timing = graph_timing(page, f"{base}/graph/?{urlencode({'node': ds.node_id})}", 60_000)
            timing["min_label_px"] = page.evaluate(
                """() => { const cy = window.lineageExplorer.cy;
                           const shown = cy.nodes().not('.compound').not('.nolabel');
                           if (!shown.length) return 0;
                           return Math.min(...shown.map((n) => parseFloat(n.style('font-size'))))
                                  * cy.zoom(); }"""
            )
            samples.append(timing)
        page.screenshot(path=str(SHOTS / f"bench-first-view-{width}.png"))
        context.close()
        readable = [s for s in samples if s["nodes"] <= 60]
        views[f"{width}x900"] = {
            **summary([s["interactive_ms"] for s in samples]),
            "nodes_p50": statistics.median(s["nodes"] for s in samples),
            "min_label_px": round(min((s["min_label_px"] for s in readable), default=0), 1),
            "graphs_up_to_60_nodes": len(readable),
        }
        print(f"  first view {width}x900: {json.dumps(views[f'{width}x900'])}", flush=True)
    return views


def browser_times(
    inp: dict[str, Any], user: Any, database_url: str, runs: int, sizes: list[int]
) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    hub = inp["hubs"][0]
    port = free_port()
    server = start_server(database_url, port)
    base = f"http://127.0.0.1:{port}"
    cookie = session_cookie(user)
    out: dict[str, Any] = {"hub": node(hub), "sizes": {}}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            context.add_cookies([{"name": "sessionid", "value": cookie, "url": base}])
            page = context.new_page()
            for size in sizes:
                query = {"node": node(hub), "depth": 6, "direction": "both", "limit": size}
                url = f"{base}/graph/?{urlencode(query)}"
                graph_timing(page, url, 120_000)  # warm the server and the browser cache
                entry: dict[str, Any] = {}
                for layout, count, limit_ms in (
                    ("auto", runs, 120_000),
                    ("dagre", runs if size <= 500 else 1, 180_000),
                ):
                    samples: list[dict[str, float]] = []
                    for _ in range(count):
                        try:
                            samples.append(graph_timing(page, f"{url}&layout={layout}", limit_ms))
                        except Exception as exc:  # a timeout is a result too
                            entry[f"{layout}_error"] = (
                                f"{type(exc).__name__}: no graph in {limit_ms} ms"
                            )
                            break
                    if not samples:
                        continue
                    interactive = [s["interactive_ms"] for s in samples]
                    entry[layout] = {
                        **summary(interactive),
                        "data_request_p50_ms": round(
                            statistics.median(s["data_request_ms"] for s in samples), 1
                        ),
                        "draw_p50_ms": round(statistics.median(s["draw_ms"] for s in samples), 1),
                        "nodes": int(samples[0]["nodes"]),
                        "edges": int(samples[0]["edges"]),
                    }
                auto, dagre = entry.get("auto"), entry.get("dagre")
                if auto:
                    entry["within_target"] = size != 500 or auto["p50_ms"] <= GRAPH_TARGET_MS
                if auto and dagre:
                    entry["dagre_over_auto"] = round(dagre["p50_ms"] / auto["p50_ms"], 2)
                out["sizes"][str(size)] = entry
                SHOTS.mkdir(exist_ok=True)
                graph_timing(page, url, 120_000)
                page.screenshot(path=str(SHOTS / f"bench-graph-{size}.png"))
                print(f"  graph {size:5d} nodes: {json.dumps(entry)}", flush=True)
            out["first_view"] = first_views(browser, base, cookie, inp["datasets"][:runs])
            browser.close()
    finally:
        server.terminate()
        server.wait(10)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-url", default=os.environ.get("BENCH_PAGES_DATABASE_URL", DEFAULT_URL)
    )
    parser.add_argument("--datasets", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30, help="requests per page")
    parser.add_argument("--browser-runs", type=int, default=5)
    parser.add_argument("--sizes", default="100,500,2000")
    parser.add_argument("--skip-browser", action="store_true")
    parser.add_argument(
        "--skip-server",
        action="store_true",
        help="keep the server figures already in --out (re-measure the browser only)",
    )
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)

    setup_django(args.database_url)
    from django.db import connection

    count = ensure_loaded(args.datasets)
    user = bench_user()
    inputs = pick_inputs()
    started = time.time()
    load_at_start = [round(v, 2) for v in os.getloadavg()]
    out = Path(args.out)
    if args.skip_server and out.exists():
        server = json.loads(out.read_text()).get("server", {})
    else:
        print(f"server time per page ({connection.vendor}, {count} datasets)", flush=True)
        server = server_times(inputs, user, args.repeat)
    browser: dict[str, Any] = {}
    if not args.skip_browser:
        print("browser: navigation to interactive graph", flush=True)
        sizes = [int(s) for s in args.sizes.split(",")]
        browser = browser_times(inputs, user, args.database_url, args.browser_runs, sizes)
    load: Callable[[], tuple[float, float, float]] = os.getloadavg
    result = {
        "benchmark": "pages",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": load_at_start,
            "load_average_at_end": [round(v, 2) for v in load()],
        },
        "database": connection.vendor,
        "datasets": count,
        "targets": {"server_p95_ms": SERVER_TARGET_MS, "graph_500_interactive_ms": GRAPH_TARGET_MS},
        "server": server,
        "browser": browser,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
