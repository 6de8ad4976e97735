"""Personal-data propagation: a flag reaching 10,000 fields, and ingestion with it on and off.

On PostgreSQL, alone or (``--datasets N``) beside the synthetic lakehouse of
``manage.py generate_lineage --datasets N`` (whose declared flags are propagated as it
loads; ``--reuse`` keeps a database already loaded).

(a) reach: a source column copied into ``--fanout`` datasets, each copied again into
    ``--fanout`` more (10,100 fields reached at 100). A steward declares
    the source column as personal data through the field API; the time until that
    request returns is the time until every copy shows the flag (the flags are brought
    up to date in the edit's own transaction). Then the declaration is removed, timed
    the same way. ``--repeat`` times each, medians.
(b) ingestion: OpenLineage events whose column lineage copies declared columns (so each
    batch opens and closes edges out of flagged fields), normalised in-process in batches
    of 500, with propagation as it runs and with its ingestion hook replaced by a no-op,
    alternating, ``--rounds`` each; events/s medians and their ratio.

Usage: python -m benchmarks.bench_propagation [--fanout 100] [--events 4000] [--rounds 3]
           [--datasets N] [--reuse] [--database-url URL]
Writes benchmarks/results/propagation.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_privacy import prepare_database  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "propagation.json"
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/lineage_bench_propagation"
NS = "postgres://bench:5432"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def load_graph(datasets: int) -> dict[str, Any]:
    """The lakehouse beside which the flag spreads (loaded unless already there), without
    what an earlier run of this script left."""
    from django.core.management import call_command

    from catalog.models import Dataset, DatasetField, Namespace, PropagatedFlag
    from graph.models import ColumnEdge, Job

    Job.objects.filter(namespace__name=NS).delete()
    Dataset.objects.filter(namespace__name=NS).delete()
    Namespace.objects.filter(name=NS).delete()
    if datasets and Dataset.objects.count() < datasets:
        call_command("generate_lineage", datasets=datasets, no_progress=True)
    return {
        "datasets": Dataset.objects.count(),
        "fields": DatasetField.objects.count(),
        "column_edges": ColumnEdge.objects.count(),
        "propagated_rows": PropagatedFlag.objects.count(),
    }


def build_fanout(fanout: int) -> int:
    """source.c -> fanout copies -> fanout copies each; returns how many fields it reaches."""
    from catalog.models import Dataset, DatasetField, Namespace
    from graph.models import ColumnEdge, Job

    ns = Namespace.objects.create(name=NS)
    job = Job.objects.create(namespace=ns, name="copy", created_at=T0)

    def dataset(name: str) -> DatasetField:
        ds = Dataset.objects.create(namespace=ns, name=name, first_seen=T0, last_seen=T0)
        return DatasetField.objects.create(dataset=ds, name="c", first_seen=T0)

    source = dataset("raw.source")
    level: list[DatasetField] = [source]
    reached = 0
    edges = []
    for depth in range(2):
        below = []
        for parent in level:
            for i in range(fanout):
                child = dataset(f"copy.{depth}.{parent.pk}.{i}")
                below.append(child)
                edges.append(
                    ColumnEdge(
                        job=job,
                        source_field=parent,
                        target_dataset=child.dataset,
                        target_field=child,
                        transformation_type="DIRECT",
                        transformation_subtype="IDENTITY",
                        valid_from=T0,
                    )
                )
        reached += len(below)
        level = below
    ColumnEdge.objects.bulk_create(edges, batch_size=5000)
    return reached


def bench_reach(fanout: int, repeat: int) -> dict[str, Any]:
    from django.contrib.auth.models import Group, User
    from django.test import Client

    from catalog.models import DatasetField, FlagSource

    reached = build_fanout(fanout)
    steward, _ = User.objects.get_or_create(username="bench-steward")
    steward.groups.add(Group.objects.get(name="steward"))
    client = Client()
    client.force_login(steward)
    url = f"/api/v1/namespaces/{quote(NS, safe='')}/datasets/raw.source/fields/c"
    declare: list[float] = []
    remove: list[float] = []
    for _ in range(repeat):
        for body, times in (({"pii": "email"}, declare), ({"pii": None}, remove)):
            started = time.perf_counter()
            response = client.patch(url, body, content_type="application/json")
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, response.content
        copies = DatasetField.objects.filter(dataset__namespace__name=NS)
        flagged = copies.filter(flag_source=FlagSource.PROPAGATED).count()
        assert flagged == 0, flagged
    client.patch(url, {"pii": "email"}, content_type="application/json")
    shown = copies.filter(flag_source=FlagSource.PROPAGATED, pii_category="email").count()
    assert shown == reached, (shown, reached)
    return {
        "fields_reached": reached,
        "declare_ms": {"median": round(statistics.median(declare), 1), "all": declare},
        "remove_ms": {"median": round(statistics.median(remove), 1), "all": remove},
        "target_ms": 2000,
    }


def events(count: int, start: int) -> list[dict[str, Any]]:
    """Run events of 50 jobs, each copying the declared columns of a raw table."""
    from tests.ingest_builders import dataset, run_event, run_id, schema

    out = []
    for n in range(start, start + count):
        job = n % 50
        when = (T0 + timedelta(minutes=n)).isoformat().replace("+00:00", "Z")
        columns = {
            f"out{k}": {
                "inputFields": [
                    {
                        "namespace": NS,
                        "name": f"raw.t{job}",
                        "field": f"c{k}",
                        "transformations": [{"type": "DIRECT", "subtype": "IDENTITY"}],
                    }
                ]
            }
            for k in range(5)
        }
        # Every other run of a job reads one column fewer: its edges close and reopen.
        if n // 50 % 2:
            columns.pop("out4")
        out.append(
            run_event(
                "COMPLETE",
                run_id(n),
                when,
                job=f"etl.{job}",
                inputs=[dataset(f"raw.t{job}", ns=NS, schema=schema(*[f"c{k}" for k in range(5)]))],
                outputs=[
                    dataset(
                        f"copy.t{job}",
                        ns=NS,
                        schema=schema(*columns),
                        columnLineage={"fields": columns},
                    )
                ],
            )
        )
    return out


def bench_ingest(count: int, rounds: int) -> dict[str, Any]:
    from unittest import mock

    from catalog import actions as catalog_actions
    from catalog.models import ChangeSource, DatasetField
    from graph import propagation
    from ingest import actions

    # The raw tables exist with declared columns before the events arrive.
    actions.ingest_event_dicts(events(50, 10_000_000), inline=True)
    steward = catalog_actions.Actor(name="bench", source=ChangeSource.STEWARD)
    for f in DatasetField.objects.filter(dataset__name__startswith="raw.t"):
        catalog_actions.update_field(f, {"pii_category": "email"}, steward)
    rates: dict[str, list[float]] = {"on": [], "off": []}
    offset = 0
    for _ in range(rounds):
        for mode in ("on", "off"):
            batch = events(count, offset)
            offset += count
            hook = (
                mock.patch.object(propagation, "edges_changed", lambda *args: None)
                if mode == "off"
                else contextlib.nullcontext()
            )
            with hook:
                started = time.perf_counter()
                actions.bulk_load(batch, batch_size=500)
                rates[mode].append(count / (time.perf_counter() - started))
    on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
    return {
        "events_per_round": count,
        "events_per_second": {k: [round(v) for v in rates[k]] for k in rates},
        "median_on": round(on),
        "median_off": round(off),
        "ratio_on_over_off": round(on / off, 3),
        "target_ratio": 0.9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fanout", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--events", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--datasets", type=int, default=0)
    parser.add_argument("--reuse", action="store_true", help="keep a database already loaded")
    parser.add_argument("--database-url", default=DEFAULT_DB)
    args = parser.parse_args()
    prepare_database(args.database_url, args.reuse)
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    results = {
        "benchmark": "propagation",
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "date": datetime.now(UTC).date().isoformat(),
        "graph": load_graph(args.datasets),
        "reach": bench_reach(args.fanout, args.repeat),
        "ingest": bench_ingest(args.events, args.rounds),
    }
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
