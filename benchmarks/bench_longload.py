"""A long load through Celery: does ingestion keep its pace as history grows?

The history of ``bench_arrival`` (100 jobs with stable inputs, hourly runs, START
and COMPLETE with schema and column lineage), ``--events`` of it (1,000,000 by
default: about 208 days), written to one NDJSON file and loaded with
``ingest_events --engine celery`` into a fresh PostgreSQL database (stored and
queued, sorted by eventTime), then normalised by real ``celery worker`` processes
draining the backlog, so that the figures are the normaliser's, not the storing's.
Events/s are given per tenth of the archive, in the order the workers finished them:

    python -m benchmarks.bench_longload --events 1000000 --output benchmarks/results/longload.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_arrival import JOBS, commit, fresh_database, runs_of
from benchmarks.bench_ingest import flush_redis, service_env, start_worker, stop

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")


def write_archive(path: Path, events: int) -> int:
    written = 0
    with path.open("w", encoding="utf-8") as handle:
        for _, pair in runs_of(events // (2 * JOBS) + 1):
            for event in pair:
                if written == events:
                    return written
                handle.write(json.dumps(event) + "\n")
                written += 1
    return written


def done_count(url: str) -> tuple[int, int]:
    import psycopg

    with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE state = 'done'), "
            "count(*) FILTER (WHERE state = 'failed') FROM ingest_rawevent"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def tenths(url: str, total: int) -> list[dict[str, Any]]:
    """Events/s of each tenth of the events, in the order they were finished."""
    import psycopg

    step = total // 10
    with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as conn:
        first = conn.execute("SELECT min(claimed_at) FROM ingest_rawevent").fetchone()
        marks = conn.execute(
            "SELECT at FROM (SELECT processed_at AS at, row_number() OVER (ORDER BY processed_at)"
            " AS n FROM ingest_rawevent WHERE state = 'done') t WHERE n %% %s = 0 ORDER BY n",
            [step],
        ).fetchall()
    assert first is not None
    times = [first[0], *(m[0] for m in marks)]
    # A drain's events share one processed_at: a tenth's ends are good to a drain (2,000).
    spans = [max((b - a).total_seconds(), 1e-3) for a, b in itertools.pairwise(times)]
    return [
        {"tenth": k + 1, "seconds": round(span, 1), "events_per_s": round(step / span, 1)}
        for k, span in enumerate(spans[:10])
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=1, help="celery worker processes")
    parser.add_argument("--concurrency", type=int, default=1, help="processes per worker")
    parser.add_argument(
        "--database", default="postgres://postgres@127.0.0.1:5432/lineage_bench_longload"
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks/results/longload.json")
    args = parser.parse_args()
    fresh_database(args.database, ROOT)
    flush_redis(args.redis)
    env = service_env(args.database, args.redis)
    with tempfile.TemporaryDirectory(prefix="longload-") as work:
        archive = Path(work) / "archive.ndjson"
        total = write_archive(archive, args.events)
        env["DATA_DIR"] = work
        started = time.monotonic()
        subprocess.run(
            [PYTHON, "manage.py", "ingest_events", str(archive), "--engine", "celery"],
            cwd=ROOT,
            env={**env, "LOG_LEVEL": "WARNING"},
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        stored_s = time.monotonic() - started
        workers = [start_worker(env, args.concurrency) for _ in range(args.workers)]
        started = time.monotonic()
        try:
            while True:
                done, failed = done_count(args.database)
                if done + failed >= total:
                    break
                print(f"{done:,} of {total:,} normalised", file=sys.stderr)
                time.sleep(5)
            wall = time.monotonic() - started
        finally:
            for worker in workers:
                stop(worker)
    curve = tenths(args.database, total)
    out = {
        "benchmark": "longload",
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d"),
        "events": total,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "failed": failed,
        "stored_s": round(stored_s, 1),
        "drained_s": round(wall, 1),
        "events_per_s": round(total / wall, 1),
        "tenths": curve,
        "last_over_first": round(curve[-1]["events_per_s"] / curve[0]["events_per_s"], 3),
    }
    args.output.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=2))
    from benchmarks.bench_arrival import drop_database

    drop_database(args.database)
    os.sync()


if __name__ == "__main__":
    main()
