"""Graph engine benchmark: lineage API latency at 10,000 and 100,000 datasets on PostgreSQL.

    .venv/bin/python -m benchmarks.bench_graph [--scales 10000,100000] [--reuse]

For each scale: a PostgreSQL database ``lineage_bench_<N>`` is created and
filled with ``manage.py generate_lineage`` (kept for ``--reuse``); the app is
served by gunicorn on 127.0.0.1 as the README deploys it (the project's sync
workers, one per core; ``--workers``, ``--worker-class sync`` for gunicorn's own,
``--worker-class gthread --threads N`` to compare); 1 and 4
concurrent clients, each its own process, time full JSON responses (P50/P95).
Right before each scenario's 4-client part, the reference call (``namespaces``:
token, role, one query) is timed the same way: ``reference_p95_ms`` and
``p95_over_reference`` say how fast the machine was at that moment. Every
4-client part is then run again, ``--rounds`` rounds in all (6 by default),
each round with random datasets, fields and instants of its own (as cold as
the first round's; hubs and their as-of instants are the first round's, warm),
the scenarios interleaved so that the machine's drift falls on all of them
alike: ``api_pooled`` holds the P50/P95 over every round's requests (720 per
ordinary scenario instead of 120), each round's P95 and the reference call's.
One round's P95 of 120 requests moved by a third or more from run to run of the
same code on the 2-core machine; ``api`` keeps the first round, measured as
before. In the same run, over the same data:

- floor: breadth-first search over Python dicts of the current edges in this
  process (ids only, no I/O) — what the traversal alone costs;
- peer: Marquez's lineage query (undirected, jobs joined through shared
  datasets, recursive CTE with UNION) at depth 1 and 2, statement timeout 15 s;
- alternative: a directed recursive CTE over graph_tableedge with validity
  filters (ids only), the design measured before this engine.

Memory: resident set of each gunicorn worker after the run and of this
process, and each worker's proportional set (the node document file the workers
map is counted once between them there, once in each in the resident set);
snapshot sizes and build times measured in-process. Results go to
benchmarks/results/graph.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "graph.json"
PG_ADMIN = "postgres://postgres@127.0.0.1:5432/postgres"
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)
PYTHON = str(ROOT / ".venv" / "bin" / "python")
SERVER: dict[str, Any] = {"workers": 2, "threads": 1, "worker_class": "sync"}  # gunicorn
# The settings the app is served with here (production ones, on the loopback address).
SERVED_SETTINGS = {
    "DEBUG": "false",
    "SECRET_KEY": "benchmark-only-secret-key-0123456789abcdefghijklmnopqrstuvwxyz",
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "SECURE_SSL_REDIRECT": "false",
    "LOG_LEVEL": "WARNING",
}
# --worker-class choices, as gunicorn names them.
WORKER_CLASSES = {"sync": "sync", "gthread": "gthread"}


def pg_url(db: str) -> str:
    return f"postgres://postgres@127.0.0.1:5432/{db}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(ms: list[float]) -> dict[str, float]:
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 0.5), 2),
        "p95_ms": round(percentile(ms, 0.95), 2),
        "mean_ms": round(statistics.fmean(ms), 2) if ms else float("nan"),
    }


def _proc_mb(path: str, key: str) -> float | None:
    """A kB figure of /proc (``key:`` line of ``path``) in MB."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def rss_mb(pid: int) -> float | None:
    return _proc_mb(f"/proc/{pid}/status", "VmRSS:")


def pss_mb(pid: int) -> float | None:
    """Proportional set size: pages shared between processes (the mapped node document
    file, graph/docfile.py) counted once across them, not once in each."""
    return _proc_mb(f"/proc/{pid}/smaps_rollup", "Pss:")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by these processes."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --- setting up a scale ------------------------------------------------------------------


def prepare_database(scale: int, reuse: bool) -> str:
    import psycopg

    db = f"lineage_bench_{scale // 1000}k"
    env = {**os.environ, "DATABASE_URL": pg_url(db)}
    with psycopg.connect(PG_ADMIN.replace("postgres://", "postgresql://"), autocommit=True) as c:
        exists = c.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db]).fetchone()
        if exists and reuse:
            print(f"[{scale}] reusing database {db}", flush=True)
            deploy(db, ROOT)
            return db
        c.execute(f'DROP DATABASE IF EXISTS "{db}"')
        c.execute(f'CREATE DATABASE "{db}"')
    subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    started = time.perf_counter()
    subprocess.run(
        [PYTHON, "manage.py", "generate_lineage", "--datasets", str(scale), "--no-progress"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    print(f"[{scale}] generated in {time.perf_counter() - started:.0f} s", flush=True)
    return db


def prepare_copy(db: str, code: Path) -> str:
    """A copy of ``db`` (made afresh: it holds the benchmark's token) for the checkout at
    ``code`` (``--against``), with that code's node documents: documents carry the digest
    of the code that rendered them, and a database records one last pass, so two releases
    cannot share one database's documents."""
    import psycopg

    copy = f"{db}_against"
    with psycopg.connect(PG_ADMIN.replace("postgres://", "postgresql://"), autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{copy}"')
        c.execute(f'CREATE DATABASE "{copy}" TEMPLATE "{db}"')
    deploy(copy, code)
    return copy


DEPLOYED: dict[str, float] = {}


def deploy(db: str, code: Path) -> None:
    """What a release's first deploy runs on a host, as the README's production set-up
    says (``migrate`` and ``render_node_documents``), timed into DEPLOYED; the host has no
    lineage snapshot bases of the release yet (a base is named after its release)."""
    for base in (code / "data" / "snapshots").glob(f"{db}-*"):
        base.unlink()
    env = {**os.environ, "DATABASE_URL": pg_url(db)}
    started = time.perf_counter()
    for command in (["migrate", "-v0"], ["render_node_documents"]):
        subprocess.run([PYTHON, "manage.py", *command], cwd=code, env=env, check=True)
    DEPLOYED[str(code)] = round(time.perf_counter() - started, 1)


def setup_django(db: str) -> None:
    os.environ["DATABASE_URL"] = pg_url(db)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def bench_token() -> str:
    from django.contrib.auth.models import Group, User

    from catalog import actions

    user, _ = User.objects.get_or_create(username="bench-viewer")
    user.groups.add(Group.objects.get(name="viewer"))
    return actions.issue_token(user, name="bench")[1]


def pick_nodes(seed: int, rounds: int = 1) -> dict[str, Any]:
    """Random datasets and fields, the hubs (most-read datasets), and instants in the history;
    under ``"rounds"``, ``rounds - 1`` more draws of datasets, fields and instants (drawn
    after the first, which is therefore the same whatever ``rounds`` is)."""
    from django.db import connection

    rng = random.Random(seed)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT d.id, n.name, d.name FROM catalog_dataset d "
            "JOIN catalog_namespace n ON n.id = d.namespace_id ORDER BY d.id"
        )
        datasets = cursor.fetchall()
        cursor.execute(
            "SELECT dataset_id, count(*) FROM graph_tableedge "
            "WHERE direction = 'in' AND valid_to IS NULL GROUP BY dataset_id "
            "ORDER BY count(*) DESC LIMIT 10"
        )
        hub_rows = cursor.fetchall()
        cursor.execute(
            "SELECT f.id, n.name, d.name, f.name FROM catalog_datasetfield f "
            "JOIN catalog_dataset d ON d.id = f.dataset_id "
            "JOIN catalog_namespace n ON n.id = d.namespace_id "
            "WHERE f.id IN (SELECT target_field_id FROM graph_columnedge "
            "WHERE target_field_id IS NOT NULL AND id % 97 = 0) ORDER BY f.id"
        )
        fields = cursor.fetchall()
    by_id = {pk: (ns, name) for pk, ns, name in datasets}
    hubs = [(pk, *by_id[pk], readers) for pk, readers in hub_rows]

    def draw() -> dict[str, Any]:
        random_ds = rng.sample(datasets, 200)
        instants = [
            ANCHOR - timedelta(days=rng.uniform(20, 300), seconds=rng.uniform(0, 86400))
            for _ in range(200)
        ]
        return {
            "random": [(pk, f"dataset:{ns}:{name}") for pk, ns, name in random_ds],
            "fields": [
                (pk, f"datasetField:{ns}:{ds}:{f}") for pk, ns, ds, f in rng.sample(fields, 200)
            ],
            "instants": [t.isoformat().replace("+00:00", "Z") for t in instants],
        }

    first = draw()
    return {
        **first,
        "hubs": [(pk, f"dataset:{ns}:{name}", readers) for pk, ns, name, readers in hubs],
        "rounds": [draw() for _ in range(rounds - 1)],
    }


# --- serving and timing ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(db: str, port: int, code: Path = ROOT) -> subprocess.Popen[bytes]:
    """gunicorn serving ``db`` with the checkout at ``code`` (this one, or ``--against``)."""
    # Every run starts with no answer kept by an earlier server (the start code's files).
    shutil.rmtree(code / "data" / "responses", ignore_errors=True)
    env = {**os.environ, "DATABASE_URL": pg_url(db), **SERVED_SETTINGS}
    env.pop("CELERY_BROKER_URL", None)
    proc = subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "gunicorn"),
            "--chdir",
            str(code),
            "lineage_site.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(SERVER["workers"]),
            "--worker-class",
            WORKER_CLASSES[SERVER["worker_class"]],
            *(["--threads", str(SERVER["threads"])] if SERVER["worker_class"] == "gthread" else []),
            "--timeout",
            "300",
            "--log-level",
            "warning",
        ],
        cwd=code,
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


def document_file_mb(db: str) -> float | None:
    """Size of the node document file the server's workers map (graph/docfile.py)."""
    found = sorted((ROOT / "data" / "nodedocs").glob(f"{db}-*.docs"))
    return round(found[0].stat().st_size / 2**20, 1) if found else None


def swap_used_mb() -> float:
    """Swap in use on the machine now (0 where it has none)."""
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    free = int(info["SwapTotal"].split()[0]) - int(info["SwapFree"].split()[0])
    return round(free / 1024, 1)


def worker_pids(master: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(master)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


class Client:
    """One HTTP connection sending authenticated GETs, kept alive where the server allows."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}", "Connection": "keep-alive"}
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    def get(self, path: str) -> tuple[float, int, int]:
        started = time.perf_counter()
        try:
            self.conn.request("GET", path, headers=self.headers)
            response = self.conn.getresponse()
            body = response.read()
        except (http.client.HTTPException, OSError):
            self.conn.close()
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
            self.conn.request("GET", path, headers=self.headers)
            response = self.conn.getresponse()
            body = response.read()
        elapsed = (time.perf_counter() - started) * 1000
        return elapsed, response.status, len(body)


def _client_loop(args: tuple[int, str, list[str], int, int, float]) -> list[tuple[float, int, int]]:
    """One client process: ``count`` random GETs from ``paths`` once the clock reaches
    ``start`` (so every client begins together)."""
    port, token, paths, index, count, start = args
    client = Client(port, token)
    rng = random.Random(index)
    time.sleep(max(0.0, start - time.monotonic()))
    return [client.get(rng.choice(paths)) for _ in range(count)]


def run_load(
    port: int,
    token: str,
    paths: list[str],
    clients: int,
    per_client: int,
    keep: list[float] | None = None,
) -> dict[str, Any]:
    """``clients`` concurrent clients, each its own process (as separate users would be:
    no client waits for another's interpreter), ``per_client`` requests each; the
    timings are also added to ``keep`` when given."""
    start = time.monotonic() + 0.2
    jobs = [(port, token, paths, i, per_client, start) for i in range(clients)]
    with multiprocessing.get_context("fork").Pool(clients) as pool:
        results = pool.map(_client_loop, jobs)
    wall = time.monotonic() - start
    timings = [t for rows in results for t, status, _ in rows if status == 200]
    if keep is not None:
        keep.extend(timings)
    sizes = [size for rows in results for _, status, size in rows if status == 200]
    errors = sum(1 for rows in results for _, status, _ in rows if status != 200)
    result = summary(timings)
    result.update(
        {
            "clients": clients,
            "errors": errors,
            "throughput_rps": round(len(timings) / wall, 1),
            "median_bytes": int(statistics.median(sizes)) if sizes else 0,
        }
    )
    return result


def scenarios(nodes: dict[str, Any]) -> dict[str, list[str]]:
    """Paths per scenario; ``baseline_namespaces`` is the cheapest authenticated API call
    (token, role, one query), timed the same way as a reference for this machine."""
    rnd = [nid for _, nid in nodes["random"]]
    hubs = [nid for _, nid, _ in nodes["hubs"]]
    fields = [nid for _, nid in nodes["fields"]]
    instants = nodes["instants"]

    def lineage(ids: list[str], **params: Any) -> list[str]:
        return [f"/api/v1/lineage?{urlencode({'nodeId': i, **params})}" for i in ids]

    def with_as_of(paths: list[str]) -> list[str]:
        return [
            f"{p}&{urlencode({'asOf': instants[i % len(instants)]})}" for i, p in enumerate(paths)
        ]

    down = {"direction": "downstream"}
    return {
        "baseline_namespaces": ["/api/v1/namespaces"],
        "table_down_d2_random": lineage(rnd, depth=2, **down),
        "table_down_d5_random": lineage(rnd, depth=5, **down),
        "table_down_closure_random": lineage(rnd, depth=1000, **down),
        "table_up_d5_random": lineage(rnd, depth=5, direction="upstream"),
        "table_both_d5_random": lineage(rnd, depth=5),
        "table_down_d5_random_asof": with_as_of(lineage(rnd, depth=5, **down)),
        "table_down_d2_hub": lineage(hubs, depth=2, **down),
        "table_down_d5_hub": lineage(hubs, depth=5, **down),
        "table_down_closure_hub": lineage(hubs, depth=1000, **down),
        "table_down_d5_hub_asof": with_as_of(lineage(hubs, depth=5, **down)),
        "column_d5_random": [
            f"/api/v1/column-lineage?{urlencode({'nodeId': f, 'depth': 5, 'withDownstream': 'true'})}"
            for f in fields
        ],
        "column_d5_random_asof": with_as_of(
            [
                f"/api/v1/column-lineage?{urlencode({'nodeId': f, 'depth': 5, 'withDownstream': 'true'})}"
                for f in fields
            ]
        ),
        "impact_hub": [f"/api/v1/lineage/impact?{urlencode({'nodeId': h})}" for h in hubs],
    }


# --- the floor, the peer and the alternative ----------------------------------------------


def floor_bfs(nodes: dict[str, Any]) -> dict[str, Any]:
    """Breadth-first search over Python dicts of current edges: ids only, no I/O."""
    from django.db import connection

    started = time.perf_counter()
    consumers: dict[int, list[int]] = defaultdict(list)
    outputs: dict[int, list[int]] = defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT job_id, dataset_id, direction FROM graph_tableedge WHERE valid_to IS NULL"
        )
        for job, ds, direction in cursor.fetchall():
            if direction == "in":
                consumers[ds].append(job)
            else:
                outputs[job].append(ds)
    build_s = time.perf_counter() - started

    def bfs(root: int, depth: int) -> int:
        seen_ds, seen_job = {root}, set()
        frontier = [root]
        for _ in range(depth):
            jobs = [j for ds in frontier for j in consumers.get(ds, ()) if j not in seen_job]
            if not jobs:
                break
            seen_job.update(jobs)
            nxt = [d for j in set(jobs) for d in outputs.get(j, ()) if d not in seen_ds]
            seen_ds.update(nxt)
            frontier = list(set(nxt))
        return len(seen_ds) + len(seen_job)

    out: dict[str, Any] = {"build_s": round(build_s, 2)}
    for label, roots in (
        ("random", [pk for pk, _ in nodes["random"]]),
        ("hub", [pk for pk, _, _ in nodes["hubs"]]),
    ):
        for depth_label, depth in (("d2", 2), ("d5", 5), ("closure", 1000)):
            times, sizes = [], []
            for root in roots * (1 if label == "random" else 5):
                t = time.perf_counter()
                sizes.append(bfs(root, depth))
                times.append((time.perf_counter() - t) * 1000)
            out[f"down_{depth_label}_{label}"] = {
                **summary(times),
                "median_nodes": int(statistics.median(sizes)),
                "max_nodes": max(sizes),
            }
    return out


MARQUEZ_CTE = """
WITH RECURSIVE
  job_io AS (
    SELECT job_id,
      ARRAY_AGG(DISTINCT dataset_id) FILTER (WHERE direction = 'in') AS inputs,
      ARRAY_AGG(DISTINCT dataset_id) FILTER (WHERE direction = 'out') AS outputs
    FROM graph_tableedge WHERE valid_to IS NULL GROUP BY job_id
  ),
  lineage(job_id, inputs, outputs, depth) AS (
    SELECT job_id, inputs, outputs, 0 FROM job_io WHERE job_id = %s
    UNION
    SELECT io.job_id, io.inputs, io.outputs, l.depth + 1
    FROM job_io io, lineage l
    WHERE io.job_id != l.job_id
      AND array_cat(io.inputs, io.outputs) && array_cat(l.inputs, l.outputs)
      AND l.depth < %s
  )
SELECT count(DISTINCT job_id) FROM lineage
"""

DIRECTED_CTE = """
WITH RECURSIVE walk(dataset_id, depth) AS (
  SELECT %(root)s::bigint, 0
  UNION
  SELECT o.dataset_id, w.depth + 1
  FROM walk w
  JOIN graph_tableedge i ON i.dataset_id = w.dataset_id AND i.direction = 'in'
       AND i.valid_from <= %(t)s AND (i.valid_to IS NULL OR i.valid_to > %(t)s)
  JOIN graph_tableedge o ON o.job_id = i.job_id AND o.direction = 'out'
       AND o.valid_from <= %(t)s AND (o.valid_to IS NULL OR o.valid_to > %(t)s)
  WHERE w.depth < %(depth)s
)
SELECT count(DISTINCT dataset_id) FROM walk
"""


def peer_queries(nodes: dict[str, Any]) -> dict[str, Any]:
    """Marquez's undirected lineage CTE and a directed as-of CTE, query time only."""
    from django.db import connection

    out: dict[str, Any] = {}
    roots = [pk for pk, _ in nodes["random"][:5]]
    hubs = [pk for pk, _, _ in nodes["hubs"][:2]]
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = '15s'")
        for label, ids in (("random", roots), ("hub", hubs)):
            for depth in (1, 2):
                times: list[float] = []
                timeouts = 0
                for ds in ids:
                    # Marquez starts from a job reading or writing the dataset.
                    cursor.execute(
                        "SELECT job_id FROM graph_tableedge WHERE dataset_id = %s "
                        "AND valid_to IS NULL ORDER BY direction DESC LIMIT 1",
                        [ds],
                    )
                    row = cursor.fetchone()
                    if row is None:
                        continue
                    t = time.perf_counter()
                    try:
                        cursor.execute(MARQUEZ_CTE, [row[0], depth])
                        cursor.fetchone()
                        times.append((time.perf_counter() - t) * 1000)
                    except Exception:
                        timeouts += 1
                out[f"marquez_undirected_d{depth}_{label}"] = {
                    **summary(times),
                    "timeouts_15s": timeouts,
                }
        for label, ids in (("random", [pk for pk, _ in nodes["random"][:60]]), ("hub", hubs * 5)):
            for name, when in (
                ("now", ANCHOR + timedelta(days=1)),
                ("asof", ANCHOR - timedelta(days=120)),
            ):
                times = []
                for ds in ids:
                    t = time.perf_counter()
                    cursor.execute(DIRECTED_CTE, {"root": ds, "t": when, "depth": 5})
                    cursor.fetchone()
                    times.append((time.perf_counter() - t) * 1000)
                out[f"directed_cte_d5_{label}_{name}"] = summary(times)
        cursor.execute("SET statement_timeout = 0")
    return out


def engine_traversal(nodes: dict[str, Any]) -> dict[str, Any]:
    """The engine's traversal alone (ids only, no details, no HTTP), in this process, over
    the same nodes as the floor: what the in-memory snapshot design costs per query."""
    import numpy as np

    from graph import snapshot, traverse

    snap = snapshot.table()
    instants = [datetime.fromisoformat(t.replace("Z", "+00:00")) for t in nodes["instants"]]
    out: dict[str, Any] = {}
    for label, roots in (
        ("random", [pk for pk, _ in nodes["random"]]),
        ("hub", [pk for pk, _, _ in nodes["hubs"]] * 5),
    ):
        for depth_label, depth in (("d2", 2), ("d5", 5), ("closure", 1000)):
            for when in ("now", "asof"):
                times, sizes = [], []
                for i, root in enumerate(roots):
                    tf = snapshot.TimeFilter.at(
                        instants[i % len(instants)] if when == "asof" else None
                    )
                    t = time.perf_counter()
                    reach = traverse.table_reach(snap, "down", depth, tf, np.asarray([root]))
                    times.append((time.perf_counter() - t) * 1000)
                    sizes.append(reach.size)
                out[f"down_{depth_label}_{label}_{when}"] = {
                    **summary(times),
                    "median_nodes": int(statistics.median(sizes)),
                }
    return out


def impact_summaries(nodes: dict[str, Any]) -> dict[str, Any]:
    """What a hub's impact shows of each dataset and job it reaches (their summaries), read
    from the host's node document file against rendered from the database, which a process
    would do without the file's summary column; in this process, alternating, 3 rounds."""
    from graph import docfile, nodedata, queries
    from graph.resolve import resolve_node_id

    if docfile.get() is None:
        return {"skipped": "no node document file"}
    reached = []
    for _, nid, _ in nodes["hubs"]:
        found = queries.impact(resolve_node_id(nid))
        reached.append(([d.dataset.pk for d in found.datasets], [j.job.pk for j in found.jobs]))
    times: dict[str, list[float]] = {"file": [], "rendered": []}
    for _ in range(3):
        for datasets, jobs in reached:
            for way, read in (
                ("file", (nodedata.dataset_infos, nodedata.job_infos)),
                ("rendered", (nodedata.render_datasets, nodedata.render_jobs)),
            ):
                started = time.perf_counter()
                read[0](datasets)
                read[1](jobs)
                times[way].append((time.perf_counter() - started) * 1000)
    return {
        "nodes_median": int(statistics.median(len(d) + len(j) for d, j in reached)),
        **{way: summary(ms) for way, ms in times.items()},
    }


def held_bytes(snap: Any) -> int:
    """The bytes of a snapshot's arrays: its stores' columns and adjacencies, and its mask."""
    from graph.snapshot import ADJACENCY_ARRAYS

    total = int(snap.alive.nbytes)
    for store in (snap.base, snap.overlay):
        total += sum(int(c.nbytes) for c in store.cols.values())
        adjacencies = store.adj.values()
        total += sum(int(getattr(a, n).nbytes) for a in adjacencies for n in ADJACENCY_ARRAYS)
    return total


def snapshot_costs() -> dict[str, Any]:
    from graph import revision, snapshot

    out = {}
    for kind in (snapshot.TABLE, snapshot.COLUMN):
        started = time.perf_counter()
        snap = snapshot.build(kind, revision.current())
        out[kind.name] = {
            "build_s": round(time.perf_counter() - started, 2),
            "edges": snap.edge_count,
            "mb": round(held_bytes(snap) / 1e6, 1),
        }
    return out


# --- main --------------------------------------------------------------------------------


def pooled(
    samples: list[float],
    per_round: list[float],
    reference: list[float],
    reference_per_round: list[float],
) -> dict[str, Any]:
    """One scenario's 4-client parts over every round, with the reference call's."""
    result: dict[str, Any] = dict(summary(samples))
    result["p95_ms_per_round"] = per_round
    if reference:
        result["reference_p95_ms"] = round(percentile(reference, 0.95), 2)
        result["reference_p95_ms_per_round"] = reference_per_round
        result["p95_over_reference"] = round(result["p95_ms"] / result["reference_p95_ms"], 2)
    return result


def against_report(
    code: str, compared: dict[str, dict[str, list[float]]], other_master: int, workers: list[int]
) -> dict[str, Any]:
    """This code's 4-client P95 per scenario over the start code's (``--against``), timed in
    the same rounds, and both codes' worker memory."""
    scenarios_out = {}
    for name, this in compared["this"].items():
        that = compared["against"][name]
        p95, p95_other = percentile(this, 0.95), percentile(that, 0.95)
        scenarios_out[name] = {
            "n": len(this),
            "p95_ms": round(p95, 2),
            "against_p95_ms": round(p95_other, 2),
            "p50_ms": round(percentile(this, 0.5), 2),
            "against_p50_ms": round(percentile(that, 0.5), 2),
            "p95_ratio": round(p95 / p95_other, 2),
        }
    others = worker_pids(other_master)
    pss = [pss_mb(pid) or 0.0 for pid in workers]
    pss_other = [pss_mb(pid) or 0.0 for pid in others]
    return {
        "code": code,
        "scenarios": scenarios_out,
        "workers_pss_mb": pss,
        "against_workers_pss_mb": pss_other,
        "pss_ratio": round(max(pss) / max(max(pss_other), 1.0), 2),
        "worst_p95_ratio": max(v["p95_ratio"] for v in scenarios_out.values()),
    }


def bench_scale(
    scale: int, reuse: bool, per_client: int, rounds: int = 1, against: Path | None = None
) -> dict[str, Any]:
    db = prepare_database(scale, reuse)
    setup_django(db)
    from django.db import connection, connections

    token = bench_token()
    other_db = None
    if against is not None:
        connections.close_all()  # a database is copied with no one connected to it
        other_db = prepare_copy(db, against)

    with connection.cursor() as cursor:
        counts = {}
        for table in ("catalog_dataset", "graph_job", "graph_tableedge", "graph_columnedge"):
            cursor.execute(f"SELECT count(*) FROM {table}")
            counts[table] = cursor.fetchone()[0]
        for table in ("graph_tableedge", "graph_columnedge"):
            cursor.execute(f"SELECT count(*) FROM {table} WHERE valid_to IS NOT NULL")
            counts[f"{table}_closed"] = cursor.fetchone()[0]
        # First views of a node read its rows from PostgreSQL: whether they are in shared
        # buffers or must come from the operating system's cache shows in every first view.
        cursor.execute(
            "SELECT name, setting, unit FROM pg_settings "
            "WHERE name IN ('shared_buffers', 'effective_cache_size', 'server_version')"
        )
        postgres = {name: f"{setting}{unit or ''}" for name, setting, unit in cursor.fetchall()}
        cursor.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        postgres["database_size"] = cursor.fetchone()[0]
    nodes = pick_nodes(seed=scale, rounds=rounds)
    result: dict[str, Any] = {
        "scale": scale,
        "database": db,
        "rows": counts,
        "postgres": postgres,
        "hubs": [{"nodeId": nid, "readers": readers} for _, nid, readers in nodes["hubs"]],
        "loadavg_start": loadavg(),
    }
    print(f"[{scale}] snapshots in-process…", flush=True)
    result["snapshots"] = snapshot_costs()
    print(f"[{scale}] floor…", flush=True)
    result["floor_in_memory_bfs"] = floor_bfs(nodes)
    result["engine_traversal_in_process"] = engine_traversal(nodes)
    result["impact_summaries_in_process"] = impact_summaries(nodes)
    port = free_port()
    started = time.perf_counter()
    server = start_server(db, port)
    # The other checkout's server, over the same database: port and process (started once
    # this one is ready, so that each one's start is timed alone).
    other: tuple[int, subprocess.Popen[bytes]] | None = None
    # Per code ("this", "against"), per scenario: 4-client timings of rounds 2 on.
    compared: dict[str, dict[str, list[float]]] = {
        "this": defaultdict(list),
        "against": defaultdict(list),
    }
    try:
        paths = scenarios(nodes)
        # Warm every worker: snapshots are built lazily, once per process.
        warm = paths["table_down_d2_random"][:8] + paths["column_d5_random"][:8]
        run_load(port, token, warm, 2 * SERVER["workers"], 6)
        # From starting gunicorn to the warm-up answered: the workers warm before serving.
        result["ready_s"] = round(time.perf_counter() - started, 1)
        result["deploy_s"] = DEPLOYED.get(str(ROOT))
        if against is not None and other_db is not None:
            started = time.perf_counter()
            other_port = free_port()
            other = (other_port, start_server(other_db, other_port, against))
            run_load(other_port, token, warm, 2 * SERVER["workers"], 6)
            result["against_ready_s"] = round(time.perf_counter() - started, 1)
            result["against_deploy_s"] = DEPLOYED.get(str(against))
        workers = worker_pids(server.pid)
        result["api"] = {}
        result["api_first_request"] = {}
        # Every round's 4-client timings, and the P95 of each round, per scenario; the same
        # for the reference call timed before each.
        kept: dict[str, list[float]] = defaultdict(list)
        kept_p95: dict[str, list[float]] = defaultdict(list)
        kept_ref: dict[str, list[float]] = defaultdict(list)
        kept_ref_p95: dict[str, list[float]] = defaultdict(list)
        for name, scenario_paths in paths.items():
            if "hub" in name:
                # Hubs are asked for again and again: time the first (cold node cache) request
                # of each apart, then the steady state.
                client = Client(port, token)
                cold = [client.get(p)[0] for p in scenario_paths[:3]]
                result["api_first_request"][name] = summary(cold)
                # Steady state: every worker has answered these hubs once.
                run_load(port, token, scenario_paths, 2 * SERVER["workers"], len(scenario_paths))
            for clients in (1, 4):
                count = per_client if clients == 1 else max(per_client // 2, 10)
                if "hub" in name:
                    count = max(count // 2, 10)
                print(f"[{scale}] {name} x{clients}…", flush=True)
                reference = None
                if clients == 4 and name != "baseline_namespaces":
                    # The machine's speed right now: the reference call, timed just before.
                    reference = run_load(
                        port, token, paths["baseline_namespaces"], 4, 30, kept_ref[name]
                    )
                    kept_ref_p95[name].append(reference["p95_ms"])
                before = cpu_seconds(workers)
                stats = run_load(
                    port,
                    token,
                    scenario_paths,
                    clients,
                    count,
                    kept[name] if clients == 4 else None,
                )
                used = cpu_seconds(workers) - before
                stats["server_cpu_ms_per_request"] = round(used * 1000 / max(stats["n"], 1), 2)
                if reference is not None:
                    stats["reference_p95_ms"] = reference["p95_ms"]
                    stats["p95_over_reference"] = round(stats["p95_ms"] / reference["p95_ms"], 2)
                if clients == 4:
                    kept_p95[name].append(stats["p95_ms"])
                result["api"][f"{name}/c{clients}"] = stats
        # More rounds of every 4-client part, each with nodes, fields and instants of its own
        # (as cold as the first round's), scenarios interleaved so that the machine's drift
        # falls on all of them alike.
        for number, drawn in enumerate(nodes["rounds"], start=2):
            round_paths = scenarios({**nodes, **drawn})
            for name, scenario_paths in round_paths.items():
                if "hub" in name:
                    # Hubs are measured warm, as in the first round (as-of instants too).
                    scenario_paths = paths[name]
                print(f"[{scale}] round {number} of {rounds}: {name} x4…", flush=True)
                count = max(per_client // 2, 10)
                if "hub" in name:
                    count = max(count // 2, 10)
                if name != "baseline_namespaces":
                    reference = run_load(
                        port, token, round_paths["baseline_namespaces"], 4, 30, kept_ref[name]
                    )
                    kept_ref_p95[name].append(reference["p95_ms"])
                if other is None:
                    stats = run_load(port, token, scenario_paths, 4, count, kept[name])
                    kept_p95[name].append(stats["p95_ms"])
                    continue
                if "hub" in name and number == 2:
                    # The other server meets these hubs for the first time: warm it as this
                    # one was in the first round.
                    run_load(other[0], token, scenario_paths, 2 * SERVER["workers"], 10)
                # Both codes, the order alternating from round to round.
                order = [("this", port), ("against", other[0])]
                for code, code_port in order if number % 2 else order[::-1]:
                    stats = run_load(
                        code_port, token, scenario_paths, 4, count, compared[code][name]
                    )
                    if code == "this":
                        kept[name].extend(compared[code][name][-stats["n"] :])
                        kept_p95[name].append(stats["p95_ms"])
        result["api_pooled"] = {
            f"{name}/c4": {
                **pooled(kept[name], kept_p95[name], kept_ref[name], kept_ref_p95[name]),
                "rounds": rounds,
            }
            for name in paths
        }
        result["memory_mb"] = {
            "gunicorn_master": rss_mb(server.pid),
            "gunicorn_workers": [rss_mb(pid) for pid in workers],
            "gunicorn_workers_pss": [pss_mb(pid) for pid in workers],
            "node_document_file": document_file_mb(db),
            "benchmark_process": rss_mb(os.getpid()),
        }
        if other is not None:
            result["against"] = against_report(str(against), compared, other[1].pid, workers)
    finally:
        for proc in [server] + ([other[1]] if other is not None else []):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
    print(f"[{scale}] peer queries…", flush=True)
    result["peer_sql"] = peer_queries(nodes)
    result["loadavg_end"] = loadavg()
    result["swap_used_mb"] = swap_used_mb()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", default="10000,100000")
    parser.add_argument("--reuse", action="store_true", help="reuse generated databases")
    parser.add_argument("--per-client", type=int, default=60, help="requests per client")
    parser.add_argument(
        "--rounds",
        type=int,
        default=6,
        help="rounds of every 4-client part, each with its own random nodes (default 6)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 2,
        help="gunicorn worker processes (default one per core, as the README deploys)",
    )
    parser.add_argument("--threads", type=int, default=1, help="threads per gthread worker")
    parser.add_argument(
        "--output", type=Path, default=RESULTS, help=f"where to write (default {RESULTS})"
    )
    parser.add_argument(
        "--worker-class",
        choices=sorted(WORKER_CLASSES),
        default="sync",
        help="gunicorn worker class: sync (what the README deploys) or gthread",
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout (e.g. a worktree of the start code) served over a copy of the "
        "database; every round after the first times both, alternating which goes first",
    )
    args = parser.parse_args()
    report: dict[str, Any] = {
        "benchmark": "graph",
        "started_at": datetime.now(UTC).isoformat(),
        "machine": {"cpus": os.cpu_count(), "loadavg_at_start": loadavg()},
        "rounds": args.rounds,
        "server": {
            "workers": args.workers,
            "worker_class": args.worker_class,
            "threads": args.threads,
        },
        "scales": [],
    }
    for scale in (int(s) for s in args.scales.split(",")):
        # Each scale in its own process: Django binds to one database per process.
        out = subprocess.run(
            [
                PYTHON,
                "-m",
                "benchmarks.bench_graph",
                "--one-scale",
                str(scale),
                *(["--reuse"] if args.reuse else []),
                "--per-client",
                str(args.per_client),
                "--rounds",
                str(args.rounds),
                "--workers",
                str(args.workers),
                "--threads",
                str(args.threads),
                "--worker-class",
                args.worker_class,
                *(["--against", str(args.against)] if args.against else []),
            ],
            cwd=ROOT,
            capture_output=False,
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        report["scales"].append(json.loads(out.stdout.strip().splitlines()[-1]))
    report["finished_at"] = datetime.now(UTC).isoformat()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    if "--one-scale" in sys.argv:
        parser = argparse.ArgumentParser()
        parser.add_argument("--one-scale", type=int)
        parser.add_argument("--reuse", action="store_true")
        parser.add_argument("--per-client", type=int, default=60)
        parser.add_argument("--rounds", type=int, default=6)
        parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
        parser.add_argument("--threads", type=int, default=1)
        parser.add_argument("--worker-class", default="sync", choices=sorted(WORKER_CLASSES))
        parser.add_argument("--against", type=Path)
        ns = parser.parse_args()
        SERVER.update(workers=ns.workers, threads=ns.threads, worker_class=ns.worker_class)
        real_stdout = sys.stdout
        sys.stdout = sys.stderr  # progress to stderr; the last stdout line is the JSON
        data = bench_scale(ns.one_scale, ns.reuse, ns.per_client, ns.rounds, ns.against)
        real_stdout.write(json.dumps(data) + "\n")
    else:
        main()
