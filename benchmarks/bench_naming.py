"""Canonical dataset names: what they cost OpenLineage and SQL-log normalising.

On PostgreSQL, in-process, alternating in one run: each round loads the same
workload with canonicalisation (``catalog.naming.canonical``) and with it
replaced by the identity, each into a namespace of its own (so both create the
same rows). Names are sent already in canonical form, so both modes do the same
work but for the canonicalisation itself.

Events/s are given on the wall clock and per second of the benchmark process's
CPU time, medians over the rounds.

(a) OpenLineage: run events of 100 jobs on Snowflake tables (inputs, outputs,
    schema and column lineage), ``bulk_load`` in batches of 500.
(b) SQL log: a Snowflake query log (INSERT … SELECT over 200 tables, three
    statement shapes), through ``ingest_sql_log``.
(c) The migration's renames: ``--renames`` datasets stored under object-store keys
    with a leading slash, given their canonical names by ``canonicalise_names``.

Usage: python -m benchmarks.bench_naming [--events 2000] [--statements 2000] [--rounds 9]
           [--renames 20000] [--no-memo] [--database-url URL]
(``--no-memo``: canonical names worked out on every call, as without ``lru_cache``.)
Writes benchmarks/results/naming.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_privacy import prepare_database  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "naming.json"
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/lineage_bench_naming"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ol_events(count: int, namespace: str, first_run: int) -> list[dict[str, Any]]:
    from tests.ingest_builders import dataset, run_event, run_id, schema

    out = []
    for n in range(count):
        job = n % 100
        source = f"RAW_DB.SALES.T{job}"
        columns = {
            f"C{k}": {
                "inputFields": [
                    {
                        "namespace": namespace,
                        "name": source,
                        "field": f"C{k}",
                        "transformations": [{"type": "DIRECT", "subtype": "IDENTITY"}],
                    }
                ]
            }
            for k in range(5)
        }
        when = (T0 + timedelta(minutes=n)).isoformat().replace("+00:00", "Z")
        fields = schema(*[f"C{k}" for k in range(5)])
        out.append(
            run_event(
                "COMPLETE",
                run_id(first_run + n),
                when,
                job=f"etl.{job}",
                job_ns=namespace,
                inputs=[dataset(source, ns=namespace, schema=fields)],
                outputs=[
                    dataset(
                        f"MART_DB.SALES.T{job}",
                        ns=namespace,
                        schema=fields,
                        columnLineage={"fields": columns},
                    )
                ],
            )
        )
    return out


def sql_log(count: int) -> str:
    shapes = (
        "INSERT INTO mart_db.sales.t{a} SELECT id, amount, customer_id FROM raw_db.sales.t{b}",
        "INSERT INTO mart_db.sales.t{a} SELECT o.id, c.name FROM raw_db.sales.t{b} o "
        "JOIN raw_db.crm.c{b} c ON o.customer_id = c.id",
        "CREATE OR REPLACE TABLE mart_db.agg.t{a} AS SELECT customer_id, SUM(amount) AS total "
        "FROM raw_db.sales.t{b} GROUP BY customer_id",
    )
    lines = []
    for n in range(count):
        query = shapes[n % 3].format(a=n % 200, b=(n * 7) % 200)
        when = (T0 + timedelta(seconds=n)).isoformat().replace("+00:00", "Z")
        lines.append(json.dumps({"query_id": str(n), "query": query, "start_time": when}))
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def canonical_names(mode: str) -> Iterator[None]:
    """``on``: as shipped; ``off``: names kept as sent."""
    from unittest import mock

    from catalog import naming

    if mode == "on":
        yield
        return
    with mock.patch.object(naming, "canonical", lambda namespace, name: (namespace, name)):
        yield


def bench(events: int, statements: int, rounds: int) -> dict[str, Any]:
    from django.core.management import call_command

    from ingest import actions

    modes = ("on", "off")
    # Events/s on the wall clock, and per second of this process's CPU (the database's work
    # is the same in every mode; the machine's noise shows less in CPU time).
    rates: dict[str, dict[str, list[float]]] = {
        f"{channel}{clock}": {mode: [] for mode in modes}
        for channel in ("openlineage", "sql_log")
        for clock in ("", "_cpu")
    }
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "queries.jsonl"
        log.write_text(sql_log(statements))
        timed = time_inside(events, statements, log)
        for r in range(rounds):
            for i, mode in enumerate(modes if r % 2 == 0 else modes[::-1]):
                namespace = f"snowflake://bench-{r}-{mode}"
                batch = ol_events(events, namespace, (2 * r + i) * events)
                with canonical_names(mode):
                    started, cpu = time.perf_counter(), time.process_time()
                    actions.bulk_load(batch, batch_size=500)
                    rates["openlineage"][mode].append(events / (time.perf_counter() - started))
                    rates["openlineage_cpu"][mode].append(events / (time.process_time() - cpu))
                    started, cpu = time.perf_counter(), time.process_time()
                    call_command(
                        "ingest_sql_log", str(log), namespace=f"{namespace}-sql",
                        dialect="snowflake", fmt="jsonl", no_progress=True,
                        stdout=io.StringIO(), stderr=io.StringIO(),
                    )  # fmt: skip
                    rates["sql_log"][mode].append(statements / (time.perf_counter() - started))
                    rates["sql_log_cpu"][mode].append(statements / (time.process_time() - cpu))
                print(f"round {r} {mode}: " + ", ".join(
                    f"{k} {round(v[mode][-1])}/s" for k, v in rates.items()
                ), flush=True)  # fmt: skip
    out: dict[str, Any] = {"time_inside_canonical": timed}
    for channel, found in rates.items():
        on, off = statistics.median(found["on"]), statistics.median(found["off"])
        out[channel] = {
            "per_second": {k: [round(v) for v in found[k]] for k in found},
            "median_on": round(on),
            "median_off": round(off),
            "ratio_on_over_off": round(on / off, 3),
            "target_ratio": 0.95,
        }
    return out


def time_inside(events: int, statements: int, log: Path) -> dict[str, Any]:
    """The share of one more load's wall time spent inside ``canonical``, timed call by
    call: what the ratios below cannot resolve on a noisy machine."""
    from unittest import mock

    from django.core.management import call_command

    from catalog import naming
    from ingest import actions

    canonical = naming.canonical
    spent = [0.0, 0]

    def timed(namespace: str, name: str) -> tuple[str, str]:
        started = time.perf_counter()
        try:
            return canonical(namespace, name)
        finally:
            spent[0] += time.perf_counter() - started
            spent[1] += 1

    namespace = "snowflake://bench-timed"
    with mock.patch.object(naming, "canonical", timed):
        started = time.perf_counter()
        actions.bulk_load(ol_events(events, namespace, 10**9), batch_size=500)
        call_command(
            "ingest_sql_log", str(log), namespace=f"{namespace}-sql", dialect="snowflake",
            fmt="jsonl", no_progress=True, stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip
        wall = time.perf_counter() - started
    return {
        "calls": spent[1],
        "seconds_inside": round(spent[0], 4),
        "share_of_wall_time": round(spent[0] / wall, 4),
    }


def bench_renames(count: int) -> dict[str, Any]:
    from catalog.models import Dataset, Namespace
    from ingest.normalizer import canonicalise_names

    namespace = Namespace.objects.create(name="s3://bench-lake")
    Dataset.objects.bulk_create(
        [Dataset(namespace=namespace, name=f"/lake/raw/t{n}/part-0") for n in range(count)],
        batch_size=5000,
    )
    started = time.perf_counter()
    report = canonicalise_names()
    seconds = time.perf_counter() - started
    return {
        "datasets": count,
        "renamed": len(report.renamed),
        "seconds": round(seconds, 2),
        "renames_per_second": round(len(report.renamed) / seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--statements", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--renames", type=int, default=20_000)
    parser.add_argument("--no-memo", action="store_true")
    parser.add_argument("--database-url", default=DEFAULT_DB)
    args = parser.parse_args()
    prepare_database(args.database_url, reuse=False)
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if args.no_memo:
        from catalog import naming

        naming.canonical = naming.canonical.__wrapped__  # type: ignore[assignment]
    results = {
        "benchmark": "naming",
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "date": datetime.now(UTC).date().isoformat(),
        "memo": not args.no_memo,
        **bench(args.events, args.statements, args.rounds),
        "migration_renames": bench_renames(args.renames),
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
