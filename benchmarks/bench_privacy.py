"""GDPR subject search and Spark subject scan: latency at scale, overhead against a plain filter.

(a) Subject search through the API (``POST /api/v1/privacy/subject-search``,
    full JSON response, audit entry written) on PostgreSQL with the synthetic
    lakehouse of ``manage.py generate_lineage --datasets N`` (default 100,000:
    ~50,000 jobs, ~2,000,000 column edges, 20 % closed). The generator declares
    ``customer_id`` in a quarter of the raw CRM tables as identifying a
    customer; this script also declares their ``email`` fields (and brings their
    propagated copies up to date, timed), so searches start from ~2,000 seed fields. Variants: one value (every seed), two
    identifiers (id and email), and as of random past instants. P50/P95/max
    over ``--requests`` requests each, after warm-up; the search alone (no
    HTTP, no JSON) is timed too.
(b) Spark scan: ``pipelines/privacy/scan.py`` over generated Parquet, CSV and
    JSON files, against a hand-written Spark filter of the same predicates
    over the same files, in the same run and session, alternating order,
    ``--repeat`` times; medians and their ratio.

Usage: python benchmarks/bench_privacy.py [--datasets N] [--database-url URL] [--reuse]
           [--requests R] [--rows ROWS] [--repeat K] [--skip-search] [--skip-scan]
Writes benchmarks/results/privacy.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "privacy.json"
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/lineage_bench_privacy"
SUBJECT = 4242
EMAIL = "ada.lovelace@example.com"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(values), 1),
        "p95_ms": round(percentile(values, 95), 1),
        "max_ms": round(max(values), 1),
        "n": len(values),
    }


def rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


# -- (a) subject search ------------------------------------------------------------------------


def prepare_database(url: str, reuse: bool) -> None:
    """Create (or, unless reusing, re-create) the benchmark database."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres")).replace("postgres://", "postgresql://", 1)
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists and not reuse:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            exists = None
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def load_graph(datasets: int, reuse: bool) -> dict[str, Any]:
    from django.core.management import call_command
    from django.db import connection

    from catalog.models import Dataset, DatasetField, PiiCategory, PropagatedFlag, SubjectKind
    from graph import propagation
    from graph.models import ColumnEdge

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    if not (reuse and Dataset.objects.count() >= datasets):
        call_command("generate_lineage", datasets=datasets, no_progress=True, verbosity=0)
    loaded = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # planner statistics, as a live database has them
    customer = SubjectKind.objects.get(name="customer")
    # Declare the CRM emails as identifying customers too (the generator flags only the ids).
    declared = DatasetField.objects.filter(
        name="email", pii_category=PiiCategory.EMAIL, subject_kind__isnull=True
    ).update(subject_kind=customer)
    started = time.perf_counter()
    if declared:  # and to their copies
        propagation.recompute_all()
    propagated = time.perf_counter() - started
    return {
        "datasets": Dataset.objects.count(),
        "fields": DatasetField.objects.count(),
        "column_edges": ColumnEdge.objects.count(),
        "closed_column_edges": ColumnEdge.objects.filter(valid_to__isnull=False).count(),
        "seed_fields": DatasetField.objects.filter(subject_kind=customer).count(),
        "propagated_copies": PropagatedFlag.objects.filter(valid_to__isnull=True).count(),
        "load_seconds": round(loaded, 1),
        "propagation_seconds": round(propagated, 1),
    }


def bench_search(requests: int) -> dict[str, Any]:
    from django.contrib.auth.models import Group, User
    from django.test import Client

    from catalog.actions import issue_token
    from catalog.models import SubjectKind
    from privacy.api import DEFAULT_LIMIT
    from privacy.queries import Identifier, search_subject

    user, _ = User.objects.get_or_create(username="bench-compliance")
    user.groups.add(Group.objects.get(name="compliance"))
    _, key = issue_token(user, "bench")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    rng = random.Random(7)
    anchor = datetime(2026, 1, 1, tzinfo=UTC)

    def as_of() -> str:
        moment = anchor - timedelta(seconds=rng.randrange(0, 300 * 86400))
        return moment.isoformat().replace("+00:00", "Z")

    variants: dict[str, Any] = {
        "one_value": lambda: {"subjectKind": "customer", "value": str(rng.randrange(10**6))},
        "two_identifiers": lambda: {
            "subjectKind": "customer",
            "identifiers": [
                {"kind": "identifier", "value": str(rng.randrange(10**6))},
                {"kind": "email", "value": f"user{rng.randrange(10**6)}@example.com"},
            ],
        },
        "as_of": lambda: {"subjectKind": "customer", "value": "42", "asOf": as_of()},
    }
    out: dict[str, Any] = {}
    for name, make in variants.items():
        timings: list[float] = []
        cpu: list[float] = []
        sizes: list[int] = []
        counts: dict[str, int] = {}
        for i in range(requests + 3):
            body = make()
            started, cpu_started = time.perf_counter(), time.process_time()
            response = client.post(
                "/api/v1/privacy/subject-search", json.dumps(body), content_type="application/json"
            )
            elapsed = (time.perf_counter() - started) * 1000
            cpu_ms = (time.process_time() - cpu_started) * 1000
            assert response.status_code == 200, response.content[:300]
            if i >= 3:  # warm-up: snapshot build, caches
                timings.append(elapsed)
                cpu.append(cpu_ms)
                sizes.append(len(response.content))
                counts = response.json()["counts"]
        out[name] = {
            **summary(timings),
            "app_cpu_p50_ms": round(statistics.median(cpu), 1),
            "app_cpu_p95_ms": round(percentile(cpu, 95), 1),
            "response_kb": round(statistics.median(sizes) / 1024),
            **counts,
        }
        print(f"search {name}: {out[name]}", flush=True)

    kind = SubjectKind.objects.get(name="customer")
    query_only: list[float] = []
    for _ in range(requests):
        started = time.perf_counter()
        search_subject(kind, [Identifier(0)], None, limit=DEFAULT_LIMIT)
        query_only.append((time.perf_counter() - started) * 1000)
    out["search_only_no_http"] = summary(query_only)
    out["traversal"] = compare_traversals(kind)
    out["page_limit"] = DEFAULT_LIMIT
    print(f"search only: {out['search_only_no_http']}", flush=True)
    return out


def compare_traversals(kind: Any) -> dict[str, Any]:
    """The graph engine's ranked reach with four strength levels against two, same seeds."""
    import numpy as np

    from graph import snapshot, traverse
    from graph.snapshot import TimeFilter
    from privacy.queries import subject_fields

    seeds = [f for f in subject_fields(kind, None) if f.declared]
    ids = np.asarray([f.id for f in seeds], dtype=np.int64)
    datasets = np.asarray([f.dataset_id for f in seeds], dtype=np.int64)
    snap = snapshot.columns()
    tf = TimeFilter.at(None)
    engine = traverse.ranked_field_reach(snap, ids, datasets, tf, None)
    ours = traverse.ranked_field_reach(snap, ids, datasets, tf, None, levels=(2, 0))

    def classes(reach: Any) -> tuple[Any, Any]:
        order = np.argsort(reach.field)
        return reach.field[order], (reach.strength >= 2)[order]

    same = all(np.array_equal(a, b) for a, b in zip(classes(engine), classes(ours), strict=True))
    timings: dict[str, list[float]] = {"engine_four_pass": [], "two_class": []}
    for _ in range(9):
        for name, run in (
            (
                "engine_four_pass",
                lambda: traverse.ranked_field_reach(snap, ids, datasets, tf, None),
            ),
            (
                "two_class",
                lambda: traverse.ranked_field_reach(snap, ids, datasets, tf, None, levels=(2, 0)),
            ),
        ):
            started = time.perf_counter()
            run()
            timings[name].append((time.perf_counter() - started) * 1000)
    out = {
        "seeds": int(ids.size),
        "fields_reached": int(engine.field.size),
        "same_classes": bool(same),
        **{f"{k}_median_ms": round(statistics.median(v), 1) for k, v in timings.items()},
    }
    print(f"traversal: {out}", flush=True)
    return out


# -- (b) Spark scan ------------------------------------------------------------------------


def write_files(spark: Any, root: Path, rows: int) -> list[dict[str, Any]]:
    """Write the scanned datasets: large Parquet tables, smaller CSV and JSON; return a plan."""
    from pyspark.sql import functions as F

    def frame(n: int, seed: int) -> Any:
        ids = (F.rand(seed) * 500_000).cast("bigint")
        return spark.range(n).select(
            F.col("id").alias("order_id"),
            ids.alias("customer_id"),
            F.concat(F.lit("user"), ids.cast("string"), F.lit("@example.com")).alias("email"),
            (F.rand(seed + 1) * 100).alias("amount"),
        )

    layout = [("parquet", rows, 6), ("csv", rows // 8, 2), ("json", rows // 8, 2)]
    targets = []
    for fmt, n, copies in layout:
        for i in range(copies):
            path = root / f"{fmt}_{i}"
            writer = frame(n, 11 * i + len(fmt)).repartition(4).write.format(fmt)
            if fmt == "csv":
                writer = writer.option("header", "true")
            writer.save(str(path))
            targets.append(
                {
                    "key": f"dataset:file:{path}",
                    "location": str(path),
                    "format": fmt,
                    "columns": [
                        {"name": "customer_id", "identifiers": [0]},
                        {"name": "email", "identifiers": [1], "caseInsensitive": True},
                    ],
                }
            )
    return targets


def hand_written(spark: Any, target: dict[str, Any]) -> int:
    """The same question asked directly of one dataset: one filter, counted."""
    from pyspark.sql import functions as F

    reader = spark.read.format(target["format"])
    if target["format"] == "csv":
        reader = reader.option("header", "true")
    frame = reader.load(target["location"])
    key = F.col("customer_id")
    wanted = (key == str(SUBJECT)) if target["format"] == "csv" else (key == SUBJECT)
    return int(frame.filter(wanted | (F.lower(F.col("email")) == EMAIL)).count())


def bench_scan(rows: int, repeat: int) -> dict[str, Any]:
    """Time the scan job and the hand-written filter dataset by dataset, back to back.

    Interleaving per dataset (alternating which goes first) keeps both sides
    under the same machine load; the whole job (``run_scan``, with its plan
    handling and progress reports) is also timed against a loop of
    hand-written filters.
    """
    from pipelines.privacy.scan import run_scan, scan_dataset
    from pipelines.spark import get_spark

    spark = get_spark("bench-privacy-scan", shuffle_partitions=4)
    root = Path(tempfile.mkdtemp(prefix="bench-privacy-"))
    try:
        targets = write_files(spark, root, rows)
        plan = {"version": 1, "kind": "scan", "runId": "bench", "datasets": targets}
        values = [str(SUBJECT), EMAIL]
        per_dataset = {"ours": 0.0, "theirs": 0.0}
        rounds: list[float] = []
        whole: dict[str, list[float]] = {"ours": [], "theirs": []}
        found: dict[str, int] = {}
        for i in range(repeat + 1):
            round_time = {"ours": 0.0, "theirs": 0.0}
            for j, target in enumerate(targets):
                order = ("ours", "theirs") if (i + j) % 2 == 0 else ("theirs", "ours")
                for who in order:
                    started = time.perf_counter()
                    if who == "ours":
                        counted = scan_dataset(spark, target, values)["rowsFound"]
                    else:
                        expected = hand_written(spark, target)
                    round_time[who] += time.perf_counter() - started
                assert counted == expected, (target["key"], counted, expected)
                found[target["key"]] = counted
            if i:  # the first round warms the JVM and the file cache
                per_dataset["ours"] += round_time["ours"]
                per_dataset["theirs"] += round_time["theirs"]
                rounds.append(round_time["ours"] / round_time["theirs"])
            for who in ("ours", "theirs") if i % 2 == 0 else ("theirs", "ours"):
                started = time.perf_counter()
                if who == "ours":
                    run_scan(spark, plan, values)
                else:
                    for target in targets:
                        hand_written(spark, target)
                if i:
                    whole[who].append(time.perf_counter() - started)
        total_rows = sum(rows if t["format"] == "parquet" else rows // 8 for t in targets)
        out: dict[str, Any] = {
            "datasets": len(targets),
            "formats": sorted({t["format"] for t in targets}),
            "rows": total_rows,
            "bytes_on_disk_mb": round(
                sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 2**20, 1
            ),
            "rows_found": sum(found.values()),
            "repeats": repeat,
            "interleaved_privacy_scan_s": round(per_dataset["ours"], 3),
            "interleaved_hand_written_s": round(per_dataset["theirs"], 3),
            "overhead_ratio": round(per_dataset["ours"] / per_dataset["theirs"], 3),
            "per_round_ratio_median": round(statistics.median(rounds), 3),
            "whole_job_privacy_scan_median_s": round(statistics.median(whole["ours"]), 3),
            "whole_job_hand_written_median_s": round(statistics.median(whole["theirs"]), 3),
        }
        out["whole_job_ratio"] = round(
            out["whole_job_privacy_scan_median_s"] / out["whole_job_hand_written_median_s"], 3
        )
        print(f"scan: {out}", flush=True)
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=100_000)
    parser.add_argument("--database-url", default=os.environ.get("BENCH_PRIVACY_DB", DEFAULT_DB))
    parser.add_argument("--reuse", action="store_true", help="keep a database already loaded")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--rows", type=int, default=4_000_000, help="rows per Parquet dataset")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-search", action="store_true")
    parser.add_argument("--skip-scan", action="store_true")
    parser.add_argument("--output", default=str(RESULTS))
    parser.add_argument(
        "--update", action="store_true", help="keep the other part's results already in --output"
    )
    args = parser.parse_args(argv)

    previous: dict[str, Any] = {}
    if args.update and Path(args.output).exists():
        previous = json.loads(Path(args.output).read_text())
    results: dict[str, Any] = {
        **previous,
        "benchmark": "privacy",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "targets": {"search_p95_ms": 500, "scan_overhead_ratio": 1.2},
    }
    load = [round(x, 2) for x in os.getloadavg()]
    if not args.skip_search:
        results["search_load_average_at_start"] = load
        os.environ["DATABASE_URL"] = args.database_url
        os.environ.pop("CELERY_BROKER_URL", None)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")
        os.environ.setdefault("LOG_LEVEL", "WARNING")
        prepare_database(args.database_url, args.reuse)
        import django

        django.setup()
        results["graph"] = load_graph(args.datasets, args.reuse)
        print(f"graph: {results['graph']}", flush=True)
        results["search"] = bench_search(args.requests)
        results["search_process_max_rss_mb"] = rss_mb()
    if not args.skip_scan:
        results["scan_load_average_at_start"] = load
        results["scan"] = bench_scan(args.rows, args.repeat)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
