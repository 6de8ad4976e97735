"""A table swapped in by rename every day: what a day's batch costs as the history grows.

Each day a job writes ``t_new``; then ``t_old`` is dropped, ``t`` renamed ``t_old`` and
``t_new`` renamed ``t`` (the swap an ETL deploy does), one batch a day, in time order,
on PostgreSQL in process. ``t.id`` is declared personal data before the first day, so
each rename carries a declaration. The figure is the median time of the first and of
the last ``--window`` days' batches, and their ratio: a day's cost must not grow with
the days before it.

Usage: python -m benchmarks.bench_renames [--days 120] [--window 20] [--database-url URL]
Writes benchmarks/results/renames.json (``--output`` to change).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bench_privacy import prepare_database  # noqa: E402

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/lineage_bench_renames"
NS = "postgres://warehouse:5432"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _when(day: int, minute: int) -> str:
    return (T0 + timedelta(days=day, minutes=minute)).isoformat().replace("+00:00", "Z")


def _dataset(name: str, **facets: Any) -> dict[str, Any]:
    return {"namespace": NS, "name": name, "facets": facets}


def _schema() -> dict[str, Any]:
    return {"fields": [{"name": "id", "type": "INT"}, {"name": "email", "type": "TEXT"}]}


def _lifecycle(day: int, minute: int, name: str, change: str, previous: str = "") -> dict:
    facet: dict[str, Any] = {"lifecycleStateChange": change}
    if previous:
        facet["previousIdentifier"] = {"namespace": NS, "name": previous}
    facets = {"schema": _schema()} if change == "RENAME" else {}
    return {
        "eventTime": _when(day, minute),
        "producer": "https://example.com/bench_renames",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/DatasetEvent",
        "dataset": _dataset(name, lifecycleStateChange=facet, **facets),
    }


def day_events(day: int) -> list[dict[str, Any]]:
    from tests.ingest_builders import run_event, run_id

    write = _dataset("shop.public.t_new", schema=_schema())
    return [
        run_event("COMPLETE", run_id(day + 1), _when(day, 1), job="swap.load", outputs=[write]),
        _lifecycle(day, 2, "shop.public.t_old", "DROP"),
        _lifecycle(day, 3, "shop.public.t_old", "RENAME", previous="shop.public.t"),
        _lifecycle(day, 4, "shop.public.t", "RENAME", previous="shop.public.t_new"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=120)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--database-url", default=DEFAULT_DB)
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "renames.json"))
    args = parser.parse_args()
    prepare_database(args.database_url, reuse=False)
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from catalog import actions as catalog_actions
    from catalog.models import DatasetField, PiiCategory, SubjectKind
    from ingest.actions import ingest_event_dicts
    from tests.ingest_builders import run_event, run_id

    call_command("migrate", verbosity=0)
    first = _dataset("shop.public.t", schema=_schema())
    ingest_event_dicts(
        [run_event("COMPLETE", run_id(0), _when(-1, 0), job="swap.load", outputs=[first])],
        inline=True,
    )
    kind = SubjectKind.objects.create(name="customer")
    catalog_actions.update_field(
        DatasetField.objects.get(dataset__name="shop.public.t", name="id"),
        {"pii_category": PiiCategory.IDENTIFIER, "subject_kind": kind},
        catalog_actions.Actor(name="bench"),
        at=T0 - timedelta(hours=12),
    )
    seconds = []
    for day in range(args.days):
        started = time.perf_counter()
        report = ingest_event_dicts(day_events(day), inline=True)
        seconds.append(time.perf_counter() - started)
        assert not report.rejected, report.rejected
    early = statistics.median(seconds[: args.window])
    late = statistics.median(seconds[-args.window :])
    flagged = DatasetField.objects.filter(name="id", pii_category=PiiCategory.IDENTIFIER)
    result = {
        "days": args.days,
        "window": args.window,
        "first_days_median_ms": round(early * 1000, 1),
        "last_days_median_ms": round(late * 1000, 1),
        "last_over_first": round(late / early, 3),
        "flagged_names": sorted(flagged.values_list("dataset__name", flat=True)),
        "code": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "measured": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    print(json.dumps(result, indent=1))
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
