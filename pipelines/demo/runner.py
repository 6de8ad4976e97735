"""Runs the demo lakehouse over several simulated days, emitting OpenLineage for every job."""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from datetime import time as day_time
from pathlib import Path
from typing import Any

from openlineage.client.transport.transport import Transport

from pipelines.demo import data
from pipelines.demo.jobs import JOBS, OWNERS, SQL_USER, DemoDay, DemoJob
from pipelines.lineage import DatasetId, EmitterConfig, LineageEmitter, SimulatedClock

log = logging.getLogger(__name__)

Progress = Callable[[int, int, str, str], None]

JOB_NAMESPACE = "lakehouse-demo"
PARENT_JOB = "lakehouse.daily"
DEFAULT_DATA_DIR = "data/lakehouse"
DEFAULT_DAYS = 4
DAY_STARTS_AT = day_time(2, 0)  # the nightly batch
SQL_LOG = "sql_logs/spark_sql_queries.jsonl"
SPOOL = "lineage-spool.ndjson"
CATALOG_TEMPLATE = Path(__file__).with_name("catalog.template.yaml")
SCHEMAS = ("staging", "marts", "reports")
# An analyst's own queries each morning, run on Spark and logged as theirs: plain SELECTs,
# which the app shows as reads of the tables (not as lineage).
ANALYST = "ana.lytics"
ANALYST_AT = day_time(9, 0)
ANALYST_QUERIES = (
    "SELECT country, SUM(revenue) AS revenue\nFROM marts.daily_revenue\n"
    "GROUP BY country\nORDER BY revenue DESC",
    "SELECT customer_id, country\nFROM staging.customers\nWHERE country = 'DE'\nLIMIT 50",
)


@dataclass
class DemoSummary:
    """What a demo run did, as printed at the end (and used by the benchmark)."""

    data_dir: str
    days: list[str] = field(default_factory=list)
    jobs_run: int = 0
    events_sent: int = 0
    events_spooled: int = 0
    spool_path: str = ""
    sql_log_path: str = ""
    catalog_path: str = ""
    seconds: float = 0.0


def owner_lookup(root: str) -> Any:
    """Return a function giving the owners of a lakehouse dataset (by its path under root)."""
    prefix = root.rstrip("/") + "/"

    def owners(dataset: DatasetId) -> list[str]:
        if dataset.namespace != "file" or not dataset.name.startswith(prefix):
            return []
        return OWNERS.get(dataset.name[len(prefix) :], [])

    return owners


def day_start(day_number: int) -> datetime:
    """Return when the nightly batch of a simulated day starts (UTC)."""
    return datetime.combine(data.simulated_day(day_number), DAY_STARTS_AT, tzinfo=UTC)


def run_demo(
    spark: Any,
    data_dir: str,
    *,
    lineage_url: str | None = None,
    api_key: str | None = None,
    days: Sequence[int] = tuple(range(1, DEFAULT_DAYS + 1)),
    seed: int = data.DEFAULT_SEED,
    job_namespace: str = JOB_NAMESPACE,
    inner_transport: Transport | None = None,
    retries: int = 3,
    backoff: float = 0.5,
    progress: Progress | None = None,
) -> DemoSummary:
    """Run the demo's jobs for each simulated day in ``days``; return a summary.

    Outputs are rewritten from scratch, run ids and event times are deterministic, so running
    it again sends the same events (which the app de-duplicates).
    """
    started = time.monotonic()
    root = str(Path(data_dir).resolve())
    Path(root).mkdir(parents=True, exist_ok=True)
    sql_log = Path(root, SQL_LOG)
    sql_log.unlink(missing_ok=True)
    config = EmitterConfig(
        url=lineage_url,
        api_key=api_key,
        job_namespace=job_namespace,
        spool_path=str(Path(root, SPOOL)),
        sql_log_path=str(sql_log),
        sql_user=SQL_USER,
        retries=retries,
        backoff=backoff,
    )
    emitter = LineageEmitter(
        spark, config, owners=owner_lookup(root), inner_transport=inner_transport
    )
    summary = DemoSummary(
        data_dir=root,
        spool_path=config.spool_path,
        sql_log_path=str(sql_log),
        catalog_path=write_catalog(root),
    )
    for schema in SCHEMAS:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {schema}")
    planned = planned_runs(days)
    try:
        for day_number in days:

            def step(job: str, day: int = day_number) -> None:
                summary.jobs_run += 1
                if progress is not None:
                    progress(summary.jobs_run, planned, data.simulated_day(day).isoformat(), job)

            run_day(spark, emitter, root, day_number, seed, step)
            analyst_reads(spark, emitter, day_number)
            summary.days.append(data.simulated_day(day_number).isoformat())
    finally:
        emitter.close()
    summary.events_sent = emitter.transport.stats.sent
    summary.events_spooled = emitter.transport.stats.spooled
    summary.seconds = round(time.monotonic() - started, 2)
    return summary


def analyst_reads(spark: Any, emitter: LineageEmitter, day_number: int) -> None:
    """Run the analyst's morning queries on Spark and log them under the analyst's name."""
    at = datetime.combine(data.simulated_day(day_number), ANALYST_AT, tzinfo=UTC)
    for statement in ANALYST_QUERIES:
        spark.sql(statement).collect()
        emitter.log_query(statement, at, ANALYST)


def planned_runs(days: Sequence[int]) -> int:
    """Return how many job runs the demo makes over these days."""
    return sum(1 for day in days for job in JOBS if job.runs_on(day))


def run_day(
    spark: Any,
    emitter: LineageEmitter,
    root: str,
    day_number: int,
    seed: int,
    done: Callable[[str], None] | None = None,
) -> int:
    """Run one simulated day under a parent run; return how many jobs ran."""
    start = day_start(day_number)
    emitter.clock = SimulatedClock(start, step=timedelta(seconds=20))
    run_key = data.simulated_day(day_number).isoformat()
    ran = 0
    with emitter.job(
        PARENT_JOB,
        run_key=run_key,
        owners=["team:data-platform"],
        description="Nightly lakehouse batch",
        nominal_time=start,
    ) as parent:
        parent.start()
        ctx = DemoDay(spark, emitter, root, day_number, seed, parent=parent.ref)
        for job in JOBS:
            if job.runs_on(day_number):
                run_job(ctx, job, run_key)
                ran += 1
                if done is not None:
                    done(job.name)
    return ran


def run_job(ctx: DemoDay, job: DemoJob, run_key: str) -> None:
    """Run one job of the demo inside its OpenLineage run."""
    log.info("day %s: %s", run_key, job.name)
    with ctx.emitter.job(
        job.name,
        run_key=run_key,
        parent=ctx.parent,
        owners=job.owners,
        description=job.description,
        nominal_time=day_start(ctx.day_number),
    ) as run:
        job.run(ctx, run)


def write_catalog(root: str) -> str:
    """Write the demo's catalog file (owners, PII, retention) with this lakehouse's paths."""
    text = CATALOG_TEMPLATE.read_text(encoding="utf-8").replace("{lakehouse}", root)
    target = Path(root, "catalog.yaml")
    target.write_text(text, encoding="utf-8")
    return str(target)


def print_progress(done: int, total: int, day: str, job: str) -> None:
    """Print one progress line (JSON) for whoever runs the demo as a subprocess."""
    print(json.dumps({"progress": done, "total": total, "day": day, "job": job}), flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.demo",
        description="Run the demo lakehouse on Spark and send its OpenLineage to the app.",
    )
    parser.add_argument("--lineage-url", help="app base URL (events go to URL/api/v1/lineage)")
    parser.add_argument("--api-key", help="producer token (Authorization: Bearer …)")
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="lakehouse folder")
    parser.add_argument("--days", type=int, default=DEFAULT_DAYS, help="simulated days to run")
    parser.add_argument("--seed", type=int, default=data.DEFAULT_SEED)
    parser.add_argument("--master", help="Spark master (default: $SPARK_MASTER or local[*])")
    parser.add_argument("--job-namespace", default=JOB_NAMESPACE)
    parser.add_argument("--retries", type=int, default=3, help="delivery retries per event")
    parser.add_argument(
        "--progress", action="store_true", help="print a JSON progress line after each job"
    )
    parser.add_argument("--verbose", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m pipelines.demo`` and ``spark-submit pipelines/demo/__main__.py``."""
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from pipelines.spark import get_spark

    root = Path(args.data_dir).resolve()
    spark = get_spark(
        "lineage-explorer-demo",
        master=args.master,
        conf={"spark.sql.warehouse.dir": str(root / "_spark_warehouse")},
    )
    api_key = args.api_key or os.environ.get("LINEAGE_API_KEY")
    summary = run_demo(
        spark,
        str(root),
        lineage_url=args.lineage_url,
        api_key=api_key,
        days=range(1, args.days + 1),
        seed=args.seed,
        job_namespace=args.job_namespace,
        retries=args.retries,
        progress=print_progress if args.progress else None,
    )
    print(json.dumps(summary.__dict__, sort_keys=True), flush=True)
    return 0
