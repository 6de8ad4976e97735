"""Ingestion in any arrival order: one realistic history, loaded three ways.

100 jobs with stable inputs run once an hour; each run sends START and COMPLETE,
with schema facets and column lineage. The same events are loaded, each time into
a fresh PostgreSQL database, through ``ingest_events --engine inline`` in batches
of 500:

* ``in_order``: by event time;
* ``late``: 10 % of the runs arrive 1-24 h after their event time;
* ``newest_first``: run by run from the present back (an archive loaded after the
  live events).

With ``--facets`` every output also carries documentation and ownership facets (the
description changes daily, the owner every third day): loaded newest first, nearly every
one of them is older than what the catalog already holds, and goes into the history late.

Events/s are timed inside the loading process (Django's start is not counted).
With ``--against DIR`` each load is also run by the checkout in DIR (the code at
a session's start, say), alternating, on a database migrated by that code.

    python -m benchmarks.bench_arrival --days 7,60 --output benchmarks/results/arrival.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import median
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
JOBS = 100
ORDERS = ("in_order", "late", "newest_first")
FIELDS = ("id", "customer_id", "amount", "country", "updated_at")
PG = "postgres://warehouse:5432"
START = datetime(2026, 1, 1, tzinfo=UTC)

# Runs inside the checkout under test: loads one file, prints what it took.
LOADER = """
import json, sys, time
import django
django.setup()
from django.core.management import call_command
options = {"engine": "inline", "batch_size": 500, "no_progress": True, "order": "file"}
try:  # the arrival order as written (checkouts that predate --order load files so)
    from ingest.management.commands.ingest_events import Command
    Command().create_parser("manage.py", "ingest_events").parse_args(["x", "--order", "file"])
except SystemExit:
    del options["order"]
started = time.perf_counter()
call_command("ingest_events", sys.argv[1], **options)
print(json.dumps({"seconds": time.perf_counter() - started}))
"""


def history(
    days: int, seed: int = 7, facets: bool = False
) -> list[tuple[datetime, list[dict[str, Any]]]]:
    """(event time of the run's start, [START, COMPLETE]) for every run, oldest first."""
    return list(runs_of(days * 24, seed, facets))


def runs_of(
    hours: int, seed: int = 7, facets: bool = False
) -> Iterator[tuple[datetime, list[dict[str, Any]]]]:
    """The runs of ``hours`` hours of history, hour by hour."""
    rnd = random.Random(seed)
    schema = {"fields": [{"name": f, "type": "string"} for f in FIELDS]}
    for hour in range(hours):
        for job in range(JOBS):
            inputs = [f"warehouse.src_{job % 40}", f"warehouse.dim_{job % 7}"]
            lineage = {
                "fields": {
                    f: {
                        "inputFields": [
                            {
                                "namespace": PG,
                                "name": inputs[i % 2],
                                "field": f,
                                "transformations": [{"type": "DIRECT", "subtype": "IDENTITY"}],
                            }
                        ]
                    }
                    for i, f in enumerate(FIELDS)
                }
            }
            begun = START + timedelta(hours=hour, seconds=job * 20 + rnd.randrange(10))
            common = {
                "producer": "https://github.com/OpenLineage/OpenLineage/tree/1.26.0/integration/airflow",
                "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
                "job": {"namespace": "airflow-bench", "name": f"etl.job_{job}", "facets": {}},
                "run": {"runId": str(uuid.UUID(int=rnd.getrandbits(128), version=4))},
                "inputs": [
                    {"namespace": PG, "name": name, "facets": {"schema": schema}} for name in inputs
                ],
            }
            done = {
                "namespace": PG,
                "name": f"lake.job_{job}",
                "facets": {"schema": schema, "columnLineage": lineage},
            }
            if facets:
                done["facets"]["documentation"] = {"description": f"Load {hour // 24} of {job}"}
                owner = {"name": f"team:t{hour // 72 % 3}", "type": "MAINTAINER"}
                done["facets"]["ownership"] = {"owners": [owner]}
            yield (
                begun,
                [
                    {
                        **common,
                        "eventType": "START",
                        "eventTime": begun.isoformat(),
                        "outputs": [],
                    },
                    {
                        **common,
                        "eventType": "COMPLETE",
                        "eventTime": (begun + timedelta(minutes=5)).isoformat(),
                        "outputs": [done],
                    },
                ],
            )


def arrival(runs: list[tuple[datetime, list[dict[str, Any]]]], order: str) -> list[dict[str, Any]]:
    """The events in the order they arrive."""
    if order == "newest_first":
        return [e for _, events in sorted(runs, key=lambda r: r[0], reverse=True) for e in events]
    rnd = random.Random(11)
    timed = []
    for n, (_, events) in enumerate(runs):
        delay = (
            timedelta(hours=rnd.uniform(1, 24)) if order == "late" and rnd.random() < 0.1 else None
        )
        for k, event in enumerate(events):
            at = datetime.fromisoformat(event["eventTime"]) + (delay or timedelta())
            timed.append((at, n, k, event))
    timed.sort(key=lambda item: item[:3])
    return [event for *_, event in timed]


def commit() -> str:
    """This checkout's commit, to label figures by."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return done.stdout.strip()


def fresh_database(url: str, checkout: Path) -> None:
    import psycopg

    name = urlparse(url).path.lstrip("/")
    admin = url.replace("postgres://", "postgresql://", 1).rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    env = {**os.environ, "DATABASE_URL": url}
    env.pop("CELERY_BROKER_URL", None)
    python = str(checkout / ".venv" / "bin" / "python")
    subprocess.run([python, "manage.py", "migrate", "-v0"], cwd=checkout, env=env, check=True)


def drop_database(url: str) -> None:
    import psycopg

    name = urlparse(url).path.lstrip("/")
    admin = url.replace("postgres://", "postgresql://", 1).rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def load(url: str, checkout: Path, path: Path) -> float:
    """Events/s of one load into a fresh database by the code in ``checkout``."""
    fresh_database(url, checkout)
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "lineage_site.settings",
    }
    env.pop("CELERY_BROKER_URL", None)
    python = str(checkout / ".venv" / "bin" / "python")
    done = subprocess.run(
        [python, "-c", LOADER, str(path)], cwd=checkout, env=env, capture_output=True
    )
    if done.returncode:
        raise SystemExit(f"loading {path.name} failed:\n{done.stderr.decode()[-3000:]}")
    return float(json.loads(done.stdout.decode().strip().splitlines()[-1])["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", default="7,60", help="history sizes in days (comma-separated)")
    parser.add_argument("--orders", default=",".join(ORDERS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--facets", action="store_true", help="outputs carry documentation and ownership"
    )
    parser.add_argument("--against", type=Path, help="a second checkout, loaded alternately")
    parser.add_argument(
        "--database", default="postgres://postgres@127.0.0.1:5432/lineage_bench_arrival"
    )
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks/results/arrival.json")
    args = parser.parse_args()
    checkouts = {"this": ROOT}
    if args.against is not None:
        checkouts["against"] = args.against.resolve()
    orders = args.orders.split(",")
    out: dict[str, Any] = {
        "benchmark": "arrival",
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d"),
        "jobs": JOBS,
        "batch_size": 500,
        "facets": args.facets,
        "against": str(args.against) if args.against else None,
        "sizes": [],
    }
    with tempfile.TemporaryDirectory(prefix="arrival-") as work:
        for days in (int(d) for d in args.days.split(",")):
            runs = history(days, facets=args.facets)
            size: dict[str, Any] = {"days": days, "events": 2 * len(runs), "orders": {}}
            paths = {}
            for order in orders:
                paths[order] = Path(work) / f"{days}-{order}.ndjson"
                with paths[order].open("w", encoding="utf-8") as handle:
                    for event in arrival(runs, order):
                        handle.write(json.dumps(event) + "\n")
            seconds: dict[tuple[str, str], list[float]] = {
                (order, name): [] for order in orders for name in checkouts
            }
            for round_ in range(args.rounds):
                # The orders take turns, and so do the checkouts (ABBA): a machine that
                # speeds up or slows down during the run favours none of them.
                turn = list(checkouts.items())
                turn = turn if round_ % 2 == 0 else turn[::-1]
                shift = round_ % len(orders)
                for order in orders[shift:] + orders[:shift]:
                    for name, checkout in turn:
                        found = seconds[(order, name)]
                        found.append(load(args.database, checkout, paths[order]))
                        print(
                            f"{days} d {order} {name}: {size['events'] / found[-1]:,.0f} ev/s",
                            file=sys.stderr,
                        )
            for order in orders:
                size["orders"][order] = {
                    name: {
                        "seconds": [round(s, 2) for s in seconds[(order, name)]],
                        "events_per_s": round(size["events"] / median(seconds[(order, name)]), 1),
                    }
                    for name in checkouts
                }
            for name in checkouts:
                base = size["orders"].get("in_order", {}).get(name)
                for found in size["orders"].values():
                    if base is not None:
                        found[name]["vs_in_order"] = round(
                            found[name]["events_per_s"] / base["events_per_s"], 3
                        )
            out["sizes"].append(size)
    drop_database(args.database)
    sizes = {s["days"]: s for s in out["sizes"]}
    if len(sizes) > 1:
        small, large = sizes[min(sizes)], sizes[max(sizes)]
        out["in_order_large_vs_small"] = {
            name: round(
                large["orders"]["in_order"][name]["events_per_s"]
                / small["orders"]["in_order"][name]["events_per_s"],
                3,
            )
            for name in checkouts
            if "in_order" in large["orders"]
        }
    args.output.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
