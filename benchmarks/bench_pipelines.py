"""Spark pipelines: demo lakehouse wall time, and backfill throughput on Spark.

(a) Demo pipeline: ``python -m pipelines.demo --days N`` as a subprocess on ``local[2]``
    (or $SPARK_MASTER), JVM start included, events to the spool file only (no app), run
    ``--repeat`` times; median wall time and the pipeline's own time (JVM start excluded).
(b) Backfill: a synthetic OpenLineage archive of ``--events`` events (about 1 KB each, 5 %
    exact duplicates, 0.1 % malformed lines) in ``--shards`` gzip files, then
    ``pipelines/backfill.py`` (validate, fingerprint, de-duplicate, sort by eventTime, write
    NDJSON + rejects) on Spark; events per second. Baseline measured in the same run: the
    same work (``pipelines.backfill.check_line`` + de-duplication + sort + write) in one plain
    Python process over the same files. CPU seconds of both (Spark: driver, JVM and Python
    workers, read from /proc) are recorded too: they depend far less on other load.

(c) Into the database, on PostgreSQL + Redis: an archive of ``--db-events`` events,
    loaded into a fresh database by ``manage.py ingest_events --engine spark`` (Spark
    cleans, then the bulk load normalises in one process) and, in another fresh database,
    by the Celery path (``ingest_events --engine celery`` stores and queues, ``--workers``
    real ``celery worker`` processes normalise); wall time from the command's start until
    every event is normalised, events per second and the ratio. Both end in the same
    normaliser, which sets the pace of both.

Usage: python benchmarks/bench_pipelines.py [--days N] [--repeat K] [--events E] [--shards S]
           [--db-events D] [--workers W] [--skip-demo] [--skip-backfill] [--skip-db] [--keep]
Writes benchmarks/results/pipelines.json.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "pipelines.json"
MASTER = os.environ.get("SPARK_MASTER", "local[2]")


def bench_demo(days: int, repeat: int, keep: bool) -> dict[str, Any]:
    walls, inner = [], []
    for attempt in range(repeat):
        data_dir = Path(tempfile.mkdtemp(prefix="bench-demo-"))
        started = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.demo",
                "--data-dir",
                str(data_dir),
                "--days",
                str(days),
                "--master",
                MASTER,
                "--retries",
                "0",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - started
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        walls.append(wall)
        inner.append(summary["seconds"])
        print(
            f"(a) demo run {attempt + 1}: {wall:.1f} s wall, {summary['seconds']:.1f} s pipeline, "
            f"{summary['jobs_run']} job runs, {summary['events_spooled']} events"
        )
        if not keep:
            shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "days": days,
        "master": MASTER,
        "job_runs": summary["jobs_run"],
        "events": summary["events_spooled"],
        "wall_seconds": [round(w, 2) for w in walls],
        "median_wall_seconds": round(statistics.median(walls), 2),
        "median_pipeline_seconds": round(statistics.median(inner), 2),
    }


def synthetic_event(rng: random.Random, n: int, start: datetime) -> dict[str, Any]:
    job = f"etl.job_{rng.randrange(2000):04d}"
    inputs = [
        {
            "namespace": "postgres://warehouse:5432",
            "name": f"shop.public.table_{rng.randrange(5000)}",
        }
        for _ in range(rng.randint(1, 3))
    ]
    output = f"shop.analytics.table_{rng.randrange(5000)}"
    fields = [f"col_{i}" for i in range(6)]
    source = inputs[0]
    return {
        "eventType": rng.choice(("START", "COMPLETE", "COMPLETE", "FAIL")),
        "eventTime": (start + timedelta(seconds=rng.randrange(30 * 86400))).isoformat(),
        "producer": "https://example.com/bench",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
        "run": {"runId": str(uuid.UUID(int=rng.getrandbits(128), version=4))},
        "job": {"namespace": "bench", "name": job},
        "inputs": inputs,
        "outputs": [
            {
                "namespace": "postgres://warehouse:5432",
                "name": output,
                "facets": {
                    "schema": {
                        "_producer": "https://example.com/bench",
                        "_schemaURL": "https://openlineage.io/spec/facets/1-2-0/SchemaDatasetFacet.json",
                        "fields": [{"name": f, "type": "VARCHAR"} for f in fields],
                    },
                    "columnLineage": {
                        "_producer": "https://example.com/bench",
                        "_schemaURL": "https://openlineage.io/spec/facets/1-2-0/ColumnLineageDatasetFacet.json",
                        "fields": {
                            f: {
                                "inputFields": [
                                    {
                                        **source,
                                        "field": f,
                                        "transformations": [
                                            {"type": "DIRECT", "subtype": "IDENTITY"}
                                        ],
                                    }
                                ]
                            }
                            for f in fields[:3]
                        },
                    },
                },
            }
        ],
    }


def write_archive(folder: Path, events: int, shards: int) -> dict[str, Any]:
    rng = random.Random(42)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    duplicates = malformed = 0
    recent: list[str] = []
    with contextlib.ExitStack() as stack:
        handles = [
            stack.enter_context(
                gzip.open(folder / f"events-{i:03d}.ndjson.gz", "wt", compresslevel=1)
            )
            for i in range(shards)
        ]
        for n in range(events):
            roll = rng.random()
            if roll < 0.001:
                line = '{"eventTime": "2026-01-01T00:00:00Z", "run": '  # cut off mid-way
                malformed += 1
            elif roll < 0.051 and recent:
                line = rng.choice(recent)
                duplicates += 1
            else:
                line = json.dumps(synthetic_event(rng, n, start))
                recent.append(line)
                if len(recent) > 1000:
                    recent.pop(0)
            handles[n % shards].write(line + "\n")
    size = sum(p.stat().st_size for p in folder.glob("*.gz"))
    return {
        "events": events,
        "shards": shards,
        "duplicates_written": duplicates,
        "malformed_written": malformed,
        "gzip_bytes": size,
    }


def plain_python_backfill(files: list[Path], out: Path) -> dict[str, int]:
    from pipelines.backfill import check_line

    best: dict[str, tuple[Any, str]] = {}
    rejects = []
    for path in files:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for number, text in enumerate(lines, start=1):
                checked = check_line(str(path), number, text)
                if checked is None:
                    continue
                if checked.reason:
                    rejects.append({"file": checked.file, "line": number, "reason": checked.reason})
                elif checked.fingerprint not in best:
                    best[checked.fingerprint] = (checked.event_time, checked.body or "")
    ordered = sorted(best.items(), key=lambda item: (item[1][0], item[0]))
    out.mkdir(parents=True, exist_ok=True)
    with (out / "events.ndjson").open("w", encoding="utf-8") as sink:
        for _, (_, body) in ordered:
            sink.write(body + "\n")
    with (out / "rejects.ndjson").open("w", encoding="utf-8") as sink:
        for reject in rejects:
            sink.write(json.dumps(reject) + "\n")
    return {"written": len(ordered), "rejected": len(rejects)}


def tree_cpu_seconds(root: int) -> float:
    """Return the CPU seconds (user + system, reaped children too) of a process tree (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    used: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        used[int(entry)] = sum(int(x) for x in fields[11:15])
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += used.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total / tick


def bench_backfill(events: int, shards: int, keep: bool) -> dict[str, Any]:
    from pipelines.backfill import run_backfill
    from pipelines.spark import get_spark

    folder = Path(tempfile.mkdtemp(prefix="bench-backfill-"))
    archive = folder / "archive"
    archive.mkdir()
    started = time.perf_counter()
    made = write_archive(archive, events, shards)
    print(
        f"(b) archive: {events} events in {shards} gzip shards, "
        f"{made['gzip_bytes'] / 1e6:.0f} MB, written in {time.perf_counter() - started:.0f} s"
    )
    files = sorted(archive.glob("*.gz"))

    spark = get_spark("bench-backfill", master=MASTER)
    run_backfill(spark, [str(files[0])], str(folder / "warmup"))  # JIT and Python workers warm
    cpu_before = tree_cpu_seconds(os.getpid())
    started = time.perf_counter()
    summary = run_backfill(spark, [str(f) for f in files], str(folder / "spark-out"))
    spark_seconds = time.perf_counter() - started
    spark_cpu = tree_cpu_seconds(os.getpid()) - cpu_before
    spark.stop()
    print(
        f"(b) Spark backfill: {spark_seconds:.1f} s, {events / spark_seconds:,.0f} events/s, "
        f"{summary.written} written, {summary.duplicates} duplicates, {summary.rejected} rejected"
    )

    cpu_before = time.process_time()
    started = time.perf_counter()
    plain = plain_python_backfill(files, folder / "python-out")
    python_seconds = time.perf_counter() - started
    python_cpu = time.process_time() - cpu_before
    print(
        f"(b) one Python process: {python_seconds:.1f} s, {events / python_seconds:,.0f} events/s"
    )
    assert plain["written"] == summary.written, (plain, summary)
    assert plain["rejected"] == summary.rejected, (plain, summary)
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "archive": made,
        "master": MASTER,
        "spark_seconds": round(spark_seconds, 2),
        "spark_events_per_second": round(events / spark_seconds),
        "python_seconds": round(python_seconds, 2),
        "python_events_per_second": round(events / python_seconds),
        "speedup_vs_one_python_process": round(python_seconds / spark_seconds, 2),
        "spark_cpu_seconds": round(spark_cpu, 1),
        "python_cpu_seconds": round(python_cpu, 1),
        "written": summary.written,
        "duplicates": summary.duplicates,
        "rejected": summary.rejected,
    }


def bench_into_db(events: int, workers: int) -> dict[str, Any]:
    """Spark path against the Celery path, both from the same archive into PostgreSQL."""
    from benchmarks.bench_ingest import (
        DEFAULT_REDIS,
        flush_redis,
        prepare_database,
        service_env,
        start_worker,
        stop,
    )

    folder = Path(tempfile.mkdtemp(prefix="bench-into-db-"))
    made = write_archive(folder, events, 2)
    files = [str(f) for f in sorted(folder.glob("*.gz"))]
    base = "postgres://postgres@127.0.0.1:5432/lineage_bench_backfill_"
    result: dict[str, Any] = {"archive": made, "master": MASTER, "celery_workers": workers}

    def waiting(url: str) -> bool:
        """Whether any stored event is still to be normalised (an index probe: polling it
        costs the database nothing, where counting a million rows twice a second would)."""
        import psycopg

        with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as conn:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM ingest_rawevent"
                " WHERE state IN ('pending', 'processing'))"
            ).fetchone()
        return bool(row and row[0])

    def stored(url: str) -> int:
        import psycopg

        with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as conn:
            row = conn.execute("SELECT count(*) FROM ingest_rawevent").fetchone()
        return int(row[0]) if row else 0

    for engine in ("spark", "celery"):
        url = base + engine
        prepare_database(url)
        flush_redis(DEFAULT_REDIS)
        env = service_env(url, DEFAULT_REDIS)
        env["SPARK_MASTER"] = MASTER
        procs = [start_worker(env) for _ in range(workers)] if engine == "celery" else []
        time.sleep(5 if procs else 0)  # workers up before the clock starts
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "manage.py",
                "ingest_events",
                *files,
                "--engine",
                engine,
                "--no-progress",  # each engine's own batch size
            ],
            cwd=ROOT,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        total = stored(url)
        while waiting(url):
            time.sleep(0.5)
        seconds = time.perf_counter() - started
        for proc in procs:
            stop(proc)
        result[engine] = {
            "seconds": round(seconds, 1),
            "events_per_second": round(events / seconds),
            "stored": total,
        }
        print(f"(c) {engine}: {seconds:.1f} s, {events / seconds:,.0f} events/s into the database")
    result["spark_over_celery"] = round(
        result["spark"]["events_per_second"] / result["celery"]["events_per_second"], 2
    )
    shutil.rmtree(folder, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--skip-backfill", action="store_true")
    parser.add_argument("--db-events", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2, help="celery workers in (c)")
    parser.add_argument("--skip-db", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args()

    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": os.getloadavg()[0],
        },
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    results["demo"] = (
        previous.get("demo") if args.skip_demo else bench_demo(args.days, args.repeat, args.keep)
    )
    results["backfill"] = (
        previous.get("backfill")
        if args.skip_backfill
        else bench_backfill(args.events, args.shards, args.keep)
    )
    results["into_database"] = (
        previous.get("into_database")
        if args.skip_db
        else bench_into_db(args.db_events, args.workers)
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
