"""SQL query-log lineage: speed and accuracy, side by side with sqllineage.

(a) Unique statements per second with column lineage, on one core, over the
    hand-written corpus (tests/fixtures/sql_corpus): this project's parser,
    openlineage-sql alone, openlineage-sql tables + this parser's columns,
    and sqllineage, each scored for accuracy with the same rules.
(b) A generated log of 1,000,000 lines (a few thousand distinct scheduled
    statements with varying literals, dashboards' SELECTs, scripts with temp
    tables, failures, ad-hoc queries): lines per second from the file to
    OpenLineage events, then the first --graph-lines of it into the graph
    through the outbox and the normaliser (what the upload task runs).
    sqllineage, which has no cache, runs on the first lines of the same log.

Wall-clock and CPU time are both reported: on a shared machine the CPU time
of the (single-core, pinned) process is the fairer measure.

Usage: python benchmarks/bench_sql.py [--lines N] [--repeat R] [--graph-lines N]
       [--graph-db sqlite|postgres] [--skip-unique]
Writes benchmarks/results/sql.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The event reader checks values with the API's rules (catalog.params imports DRF, which
# reads the settings as it loads).
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")

from ingest.sql import SqlLineageParser  # noqa: E402
from ingest.sql.dialects import resolve_dialect  # noqa: E402
from ingest.sql.pipeline import SqlLogProcessor  # noqa: E402
from ingest.sql.readers import read_log  # noqa: E402
from tests.sql_corpus import (  # noqa: E402
    Case,
    Lineage,
    load_catalog,
    load_corpus,
    record_lineage,
    score,
)

CORPUS = ROOT / "tests" / "fixtures" / "sql_corpus"
RESULTS = ROOT / "benchmarks" / "results" / "sql.json"
NAMESPACE = "postgres://warehouse:5432"


# -- adapters: every parser reduced to the corpus's comparable form -------------


def _complete(dialect: str, database: str, schema: str, parts: list[str]) -> str:
    parts = [p for p in parts if p and p != "<default>"]
    if resolve_dialect(dialect).name_parts == 3:
        defaults = [database, schema]
        parts = [*defaults[: max(0, 3 - len(parts))], *parts] if len(parts) < 3 else parts
    elif len(parts) < 2:
        parts = [schema or database, *parts]
    return ".".join(parts)


def ours(catalog: dict[str, dict[str, list[str]]]) -> Callable[[Case], Lineage]:
    parsers: dict[str, SqlLineageParser] = {}

    def actual(case: Case) -> Lineage:
        parser = parsers.get(case.dialect)
        if parser is None:
            tables = catalog.get(case.dialect, {})
            parser = parsers[case.dialect] = SqlLineageParser(
                case.dialect, schema_provider=tables.get
            )
        parser.clear()  # unique statements: never a cache hit
        record = parser.parse(case.sql, database=case.database, schema=case.schema)
        return record_lineage(record)

    return actual


def openlineage_sql(
    with_columns_from: Callable[[Case], Lineage] | None = None,
) -> Callable[[Case], Lineage]:
    import openlineage_sql as ol

    def actual(case: Case) -> Lineage:
        spec = resolve_dialect(case.dialect)
        try:
            meta = ol.parse([case.sql], dialect=spec.openlineage, default_schema=case.schema)
        except BaseException as exc:  # a Rust panic arrives as a BaseException
            if isinstance(exc, KeyboardInterrupt):
                raise
            return Lineage()

        def name(table: Any) -> str:
            if table is None:
                return ""
            return _complete(
                case.dialect,
                case.database,
                case.schema,
                [table.database or "", table.schema or "", table.name],
            )

        inputs = frozenset(name(t) for t in meta.in_tables)
        outputs = frozenset(name(t) for t in meta.out_tables)
        kind = _first_word_kind(case.sql)
        if kind == "SELECT":
            outputs = frozenset()
        if with_columns_from is not None:
            mine = with_columns_from(case)
            return Lineage(inputs, outputs, mine.columns, mine.transforms, mine.indirect, mine.kind)
        columns: set[tuple[str, str]] = set()
        if len(outputs) == 1:
            (target,) = outputs
            for lineage in meta.column_lineage:
                for source in lineage.lineage:
                    if source.origin is not None:
                        columns.add(
                            (
                                f"{target}.{lineage.descendant.name}",
                                f"{name(source.origin)}.{source.name}",
                            )
                        )
        return Lineage(inputs, outputs, frozenset(columns))

    return actual


def sqllineage(catalog: dict[str, dict[str, list[str]]]) -> Callable[[Case], Lineage]:
    from sqllineage.config import SQLLineageConfig
    from sqllineage.core.metadata.dummy import DummyMetaDataProvider
    from sqllineage.runner import LineageRunner

    providers: dict[str, DummyMetaDataProvider] = {}
    dialects = {"spark": "sparksql", "hive": "hive"}

    def actual(case: Case) -> Lineage:
        provider = providers.get(case.dialect)
        if provider is None:
            tables = catalog.get(case.dialect, {})
            provider = providers[case.dialect] = DummyMetaDataProvider(
                {
                    ".".join(n.lower().split(".")[-2:]): [c.lower() for c in cols]
                    for n, cols in tables.items()
                }
            )
        spec = resolve_dialect(case.dialect)
        try:
            with SQLLineageConfig(DEFAULT_SCHEMA=case.schema.lower()):
                runner = LineageRunner(
                    case.sql,
                    dialect=dialects.get(spec.name, spec.name),
                    metadata_provider=provider,
                    silent_mode=True,
                )
                sources = list(runner.source_tables)
                targets = list(runner.target_tables)
                paths = list(runner.get_column_lineage())
        except Exception:
            return Lineage()
        upper = spec.name == "snowflake"

        def name(table: Any) -> str:
            text = str(table).upper() if upper else str(table)
            return _complete(case.dialect, case.database, case.schema, text.split("."))

        def column(col: Any) -> str:
            text = f"{name(col.parent)}.{col.raw_name}"
            return text if not upper else text.rsplit(".", 1)[0] + "." + col.raw_name.upper()

        columns = {(column(path[-1]), column(path[0])) for path in paths if len(path) >= 2}
        outputs = frozenset(name(t) for t in targets)
        return Lineage(frozenset(name(t) for t in sources), outputs, frozenset(columns))

    return actual


def _first_word_kind(sql: str) -> str:
    word = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
    return "SELECT" if word in {"SELECT", "WITH"} else word


# -- (a) unique statements --------------------------------------------------------


def _recorded(lineages: dict[str, Lineage]) -> Callable[[Case], Lineage]:
    def actual(case: Case) -> Lineage:
        return lineages[case.id]

    return actual


def bench_unique(repeat: int) -> dict[str, Any]:
    """Every parser on every corpus statement, interleaved statement by statement.

    Interleaving puts each parser under the same machine load at the same
    moment, so the ratios hold on a busy machine. sqllineage, the slowest,
    takes part in the first pass only; the others run ``repeat`` passes.
    """
    cases = load_corpus(CORPUS)
    catalog = load_catalog(CORPUS)
    mine = ours(catalog)
    adapters: dict[str, Callable[[Case], Lineage]] = {
        "lineage_explorer": mine,
        "openlineage_sql": openlineage_sql(),
        "openlineage_sql_tables+lineage_explorer_columns": openlineage_sql(mine),
        "sqllineage": sqllineage(catalog),
    }
    for adapter in adapters.values():
        for case in cases[:3]:
            adapter(case)  # warm imports and dialect tables
    wall: dict[str, list[float]] = {label: [] for label in adapters}
    cpu: dict[str, list[float]] = {label: [] for label in adapters}
    found: dict[str, dict[str, Lineage]] = {label: {} for label in adapters}
    for rep in range(repeat):
        totals = {label: [0.0, 0.0] for label in adapters}
        for case in cases:
            for label, adapter in adapters.items():
                if label == "sqllineage" and rep > 0:
                    continue
                started, cpu_started = time.perf_counter(), time.process_time()
                found[label][case.id] = adapter(case)
                totals[label][0] += time.perf_counter() - started
                totals[label][1] += time.process_time() - cpu_started
        for label, (seconds, cpu_seconds) in totals.items():
            if label == "sqllineage" and rep > 0:
                continue
            wall[label].append(seconds)
            cpu[label].append(cpu_seconds)
    runs: dict[str, dict[str, Any]] = {}
    for label in adapters:
        result = score(cases, _recorded(found[label]))
        median, cpu_median = statistics.median(wall[label]), statistics.median(cpu[label])
        runs[label] = {
            "statements": len(cases),
            "passes": len(wall[label]),
            "seconds_median": round(median, 3),
            "cpu_seconds_median": round(cpu_median, 3),
            "statements_per_second": round(len(cases) / median, 1),
            "statements_per_cpu_second": round(len(cases) / cpu_median, 1),
            "first_pass_seconds": round(wall[label][0], 3),
            "first_pass_cpu_seconds": round(cpu[label][0], 3),
            "accuracy": result.as_dict(),
        }
        print(
            f"(a) {label:48s} {len(cases) / median:8.1f} statements/s "
            f"({len(cases) / cpu_median:8.1f} per CPU second)  "
            f"tables {json.dumps(result.as_dict()['tables'])[:60]} "
            f"columns {json.dumps(result.as_dict()['columns'])[:60]}"
        )
    mine_run, baseline = runs["lineage_explorer"], runs["sqllineage"]
    return {
        "corpus_statements": len(cases),
        "runs": runs,
        # Both from the interleaved first pass: same moments, same load.
        "speedup_vs_sqllineage": round(
            baseline["first_pass_seconds"] / mine_run["first_pass_seconds"], 1
        ),
        "speedup_vs_sqllineage_cpu": round(
            baseline["first_pass_cpu_seconds"] / mine_run["first_pass_cpu_seconds"], 1
        ),
    }


# -- (b) a realistic log ------------------------------------------------------------

_SCHEMAS = ["raw", "staging", "core", "mart", "finance", "marketing", "product", "ops"]


def _catalog(rng: random.Random) -> dict[str, list[str]]:
    tables: dict[str, list[str]] = {}
    for schema in _SCHEMAS:
        for i in range(50):
            width = rng.randint(5, 14)
            tables[f"warehouse.{schema}.t{i}"] = [
                "id",
                "customer_id",
                "created_at",
                "status",
                "amount",
            ] + [f"c{j}" for j in range(width - 5)]
    return tables


def _templates(rng: random.Random, catalog: dict[str, list[str]], count: int) -> list[str]:
    """Distinct scheduled statements with literal slots: {d} date, {n} number, {ids} IN-list."""
    names = list(catalog)
    out: list[str] = []
    while len(out) < count:
        src, other, dst = rng.sample(names, 3)
        s_cols = catalog[src]
        pick = rng.sample(s_cols[5:] or s_cols, min(3, len(s_cols) - 5 or 1))
        short = lambda n: n.split(".", 1)[1]  # noqa: E731
        kind = rng.random()
        if kind < 0.45:
            sql = (
                f"INSERT INTO {short(dst)}_agg (day, customer_id, total, n, {', '.join(pick)}) "
                f"SELECT date_trunc('day', s.created_at), s.customer_id, SUM(s.amount), COUNT(o.id), "
                f"{', '.join('MAX(s.' + c + ')' for c in pick)} FROM {short(src)} s "
                f"LEFT JOIN {short(other)} o ON o.customer_id = s.customer_id "
                "WHERE s.created_at >= '{d}' AND s.status IN ({ids}) GROUP BY 1, 2"
            )
        elif kind < 0.6:
            sql = (
                f"CREATE TABLE {short(dst)}_{{ymd}} AS SELECT s.id, s.customer_id, s.amount * {{n}} AS scaled, "
                f"CASE WHEN s.status = 'x' THEN s.{pick[0]} END AS flag FROM {short(src)} s "
                "WHERE s.created_at::date = '{d}'"
            )
        elif kind < 0.72:
            sql = (
                f"MERGE INTO {short(dst)} t USING (SELECT customer_id, SUM(amount) AS total FROM {short(src)} "
                "WHERE created_at > '{d}' GROUP BY customer_id) s ON t.customer_id = s.customer_id "
                "WHEN MATCHED THEN UPDATE SET amount = s.total "
                "WHEN NOT MATCHED THEN INSERT (customer_id, amount) VALUES (s.customer_id, s.total)"
            )
        elif kind < 0.82:
            sql = (
                f"UPDATE {short(dst)} d SET status = s.status, amount = s.amount + {{n}} FROM {short(src)} s "
                "WHERE d.id = s.id AND s.created_at > '{d}'"
            )
        elif kind < 0.9:
            sql = (
                f"CREATE TEMP TABLE tmp_{len(out)} AS SELECT id, customer_id, amount FROM {short(src)} "
                "WHERE created_at > '{d}'; "
                f"INSERT INTO {short(dst)} (id, customer_id, amount) SELECT t.id, t.customer_id, t.amount "
                f"FROM tmp_{len(out)} t JOIN {short(other)} o ON o.id = t.id; DROP TABLE tmp_{len(out)}"
            )
        else:
            sql = (
                f"DELETE FROM {short(dst)} USING {short(src)} s WHERE {short(dst)}.id = s.id "
                "AND s.created_at < '{d}'"
            )
        out.append(sql)
    return out


def _dashboard(rng: random.Random, catalog: dict[str, list[str]]) -> str:
    table = rng.choice(list(catalog))
    cols = catalog[table]
    return (
        f"SELECT {rng.choice(cols)}, COUNT(*) FROM {table.split('.', 1)[1]} "
        "WHERE created_at > '{d}' AND id IN ({ids}) GROUP BY 1 ORDER BY 2 DESC LIMIT {n}"
    )


def generate_log(path: Path, lines: int, seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    catalog = _catalog(rng)
    scheduled = _templates(rng, catalog, 2500)
    dashboards = [_dashboard(rng, catalog) for _ in range(500)]
    weights = [1 / (i + 1) ** 0.8 for i in range(len(scheduled))]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    adhoc = 0
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["query_id", "start_time", "user", "database", "schema", "status", "query"])
        for n in range(lines):
            moment = start + timedelta(seconds=n * 2.6)
            day = moment - timedelta(days=rng.randint(0, 3))
            roll = rng.random()
            if roll < 0.45:
                template, user = rng.choice(dashboards), "bi"
            elif roll < 0.452:
                adhoc += 1
                template, user = (
                    f"SELECT c{adhoc % 9}, id FROM core.t{adhoc % 50} WHERE amount > {adhoc}",
                    "analyst",
                )
            else:
                template, user = rng.choices(scheduled, weights)[0], "etl"
            ids = ", ".join(
                f"'{s}'"
                for s in rng.sample(["paid", "open", "void", "sent", "new"], rng.randint(1, 4))
            )
            query = (
                template.replace("{d}", day.strftime("%Y-%m-%d"))
                .replace("{ymd}", day.strftime("%Y%m%d"))
                .replace("{n}", str(rng.randint(1, 500)))
                .replace("{ids}", ids)
            )
            status = "failed" if rng.random() < 0.02 else "success"
            writer.writerow([f"q{n}", moment.isoformat(), user, "warehouse", "core", status, query])
    return {
        "catalog": catalog,
        "scheduled_statements": len(scheduled),
        "dashboard_statements": len(dashboards),
        "adhoc": adhoc,
    }


def bench_log(lines: int, graph_lines: int = 0, graph_db: str = "sqlite") -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "queries.csv"
        started = time.perf_counter()
        info = generate_log(path, lines)
        generated = time.perf_counter() - started
        catalog = info.pop("catalog")
        size = path.stat().st_size
        processor = SqlLogProcessor(NAMESPACE, "postgres", schema_provider=catalog.get)
        events = 0
        started, cpu_started = time.perf_counter(), time.process_time()
        with path.open("rb") as f:
            for processed in processor.process(read_log(f, "csv")):
                events += len(processed.events)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        stats = processor.stats.as_dict()
        result: dict[str, Any] = {
            "lines": lines,
            "file_bytes": size,
            "generation_seconds": round(generated, 1),
            "distinct_templates": info,
            "parse_and_events": {
                "seconds": round(elapsed, 2),
                "cpu_seconds": round(cpu, 2),
                "lines_per_second": round(lines / elapsed),
                "lines_per_cpu_second": round(lines / cpu),
                "unique_statements_parsed": processor.parser.misses,
                "cache_hit_ratio": round(
                    processor.parser.hits / max(1, processor.parser.hits + processor.parser.misses),
                    4,
                ),
                "events": events,
                "stats": stats,
            },
        }
        print(
            f"(b) {lines:,} lines parsed into {events:,} events in {elapsed:.1f}s "
            f"({cpu:.1f} CPU s): {lines / elapsed:,.0f} lines/s, {lines / cpu:,.0f} per CPU second"
        )
        sample = _sqllineage_on_log(path, catalog, budget_seconds=60.0)
        result["sqllineage_sample"] = sample
        result["speedup_vs_sqllineage"] = round(
            result["parse_and_events"]["lines_per_second"] / max(sample["lines_per_second"], 1e-9),
            1,
        )
        result["speedup_vs_sqllineage_cpu"] = round(
            result["parse_and_events"]["lines_per_cpu_second"]
            / max(sample["lines_per_cpu_second"], 1e-9),
            1,
        )
        if graph_lines:
            result["into_graph"] = bench_into_graph(path, graph_lines, graph_db)
        return result


def _sqllineage_on_log(
    path: Path, catalog: dict[str, list[str]], budget_seconds: float
) -> dict[str, Any]:
    """sqllineage over the first lines of the same log, until the time budget runs out."""
    from sqllineage.config import SQLLineageConfig
    from sqllineage.core.metadata.dummy import DummyMetaDataProvider
    from sqllineage.runner import LineageRunner

    provider = DummyMetaDataProvider(
        {".".join(n.split(".")[-2:]): cols for n, cols in catalog.items()}
    )
    done = failures = 0
    started, cpu_started = time.perf_counter(), time.process_time()
    with path.open(newline="") as f, SQLLineageConfig(DEFAULT_SCHEMA="core"):
        reader = csv.DictReader(f)
        for row in reader:
            if row["status"] == "failed":
                done += 1
                continue
            try:
                runner = LineageRunner(
                    row["query"], dialect="postgres", metadata_provider=provider, silent_mode=True
                )
                runner.get_column_lineage()
            except Exception:  # sqllineage raises on what it cannot parse; count and go on
                failures += 1
            done += 1
            if time.perf_counter() - started > budget_seconds:
                break
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    print(f"(b) sqllineage: {done} lines in {elapsed:.1f}s ({cpu:.1f} CPU s)")
    return {
        "lines": done,
        "failures": failures,
        "seconds": round(elapsed, 2),
        "cpu_seconds": round(cpu, 2),
        "lines_per_second": round(done / elapsed, 2),
        "lines_per_cpu_second": round(done / cpu, 2),
    }


def bench_into_graph(path: Path, lines: int, database: str) -> dict[str, Any]:
    """The first ``lines`` of the log into the graph, through the outbox and the normaliser.

    Runs what the upload task runs (ingest.sql_actions.process_upload) in this
    process, on a fresh SQLite file or a fresh PostgreSQL database.
    """
    import django

    tmp = Path(tempfile.mkdtemp(prefix="bench_sql_graph_"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")
    os.environ["LINEAGE_DATA_DIR"] = str(tmp)
    db_name = ""
    if database == "postgres":
        import psycopg

        base = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
        db_name = f"bench_sql_{os.getpid()}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{db_name}"')
        os.environ["DATABASE_URL"] = base.rsplit("/", 1)[0] + "/" + db_name
    else:
        os.environ.pop("DATABASE_URL", None)
    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from graph.models import ColumnEdge, Run, TableEdge
    from ingest import sql_actions

    try:
        call_command("migrate", verbosity=0, skip_checks=True)
        slice_path = tmp / "slice.csv"
        with path.open("rb") as src, slice_path.open("wb") as out:
            for number, line in enumerate(src):
                if number > lines:
                    break
                out.write(line)
        upload = sql_actions.create_upload(
            namespace=NAMESPACE,
            dialect="postgres",
            fmt="csv",
            path=slice_path,
            database="warehouse",
            schema="core",
            source="command",
            enqueue=False,
        )
        started, cpu_started = time.perf_counter(), time.process_time()
        done = sql_actions.process_upload(upload.pk)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        assert done is not None
        result = {
            "database": connection.vendor,
            "lines": lines,
            "seconds": round(elapsed, 2),
            "cpu_seconds_this_process": round(cpu, 2),
            "lines_per_second": round(lines / elapsed, 1),
            "lines_per_cpu_second": round(lines / cpu, 1),
            "events": done.events,
            "runs": Run.objects.count(),
            "table_edges": TableEdge.objects.count(),
            "column_edges": ColumnEdge.objects.count(),
            "state": done.state,
        }
        print(
            f"(b) into the graph ({connection.vendor}): {lines:,} lines in {elapsed:.1f}s "
            f"({cpu:.1f} CPU s): {lines / elapsed:,.0f} lines/s, {lines / cpu:,.0f} per CPU second"
        )
        return result
    finally:
        connection.close()
        if db_name:
            import psycopg

            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db_name}"')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-unique", action="store_true")
    parser.add_argument("--skip-log", action="store_true")
    parser.add_argument(
        "--graph-lines", type=int, default=20_000, help="lines to take into the graph (0: none)"
    )
    parser.add_argument("--graph-db", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    results: dict[str, Any] = {
        "benchmark": "sql",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus_used": 1, "cpus": os.cpu_count()},
    }
    previous: dict[str, Any] = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.skip_unique:
        results["unique_statements"] = previous.get("unique_statements")
    else:
        results["unique_statements"] = bench_unique(args.repeat)
    if args.skip_log:
        results["log"] = previous.get("log")
    else:
        results["log"] = bench_log(args.lines, args.graph_lines, args.graph_db)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
