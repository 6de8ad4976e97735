"""`ingest_events --engine spark`: Spark cleans the archive, the same normaliser loads it."""

from __future__ import annotations

import gzip
import json
import random
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction

from ingest.models import RawEvent
from tests.ingest_builders import all_fixture_events
from tests.test_ingest_properties import snapshot

pytestmark = [pytest.mark.spark, pytest.mark.django_db]


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """Every fixture event, shuffled, some twice, with malformed lines, split over plain and gzip."""
    events = all_fixture_events()
    rng = random.Random(7)
    lines = [json.dumps(e) for e in events] + [json.dumps(e) for e in rng.sample(events, 5)]
    rng.shuffle(lines)
    lines.insert(3, "not json at all")
    lines.insert(9, json.dumps({"eventTime": "2026-01-01T00:00:00Z", "run": {"runId": "x"}}))
    half = len(lines) // 2
    folder = tmp_path / "archive"
    folder.mkdir()
    (folder / "a.ndjson").write_text("\n".join(lines[:half]) + "\n", encoding="utf-8")
    with gzip.open(folder / "b.ndjson.gz", "wt", encoding="utf-8") as out:
        out.write("\n".join(lines[half:]) + "\n")
    return folder


def load(engine: str, *paths: Path, **options: Any) -> tuple[dict[str, Any], str, str]:
    """Load with one engine, snapshot the catalog and graph, and roll everything back."""
    out, err = StringIO(), StringIO()
    with transaction.atomic():
        call_command(
            "ingest_events",
            *map(str, paths),
            engine=engine,
            no_progress=True,
            stdout=out,
            stderr=err,
            **options,
        )
        state = snapshot()
        transaction.set_rollback(True)
    return state, out.getvalue(), err.getvalue()


def test_it_gives_the_same_graph_as_the_inline_engine(spark: Any, archive: Path) -> None:
    files = sorted(archive.iterdir())
    inline, _, _ = load("inline", *files)
    on_spark, spark_out, spark_err = load("spark", *files)
    assert on_spark == inline
    assert inline["table_edges"] and inline["column_edges"]
    assert "0 failed" in spark_out
    assert "2 skipped" in spark_out
    assert "5 duplicates dropped" in spark_err
    assert "a.ndjson:4" in spark_err  # the malformed line, named by file and line


def test_small_batches_give_the_same_graph(spark: Any, archive: Path) -> None:
    files = sorted(archive.iterdir())
    whole, _, _ = load("inline", *files)
    in_threes, out, _ = load("spark", *files, batch_size=3)
    assert in_threes == whole
    assert "0 failed" in out


def test_it_stores_the_bodies_the_inline_engine_stores(spark: Any, archive: Path) -> None:
    """Spark's lines are the canonical JSON: stored as they are, they equal the inline bodies."""
    files = sorted(archive.iterdir())
    bodies: dict[str, dict[str, str]] = {}
    for engine in ("inline", "spark"):
        with transaction.atomic():
            call_command(
                "ingest_events",
                *map(str, files),
                engine=engine,
                no_progress=True,
                stdout=StringIO(),
                stderr=StringIO(),
            )
            bodies[engine] = dict(RawEvent.objects.values_list("fingerprint", "body"))
            transaction.set_rollback(True)
    assert bodies["spark"] == bodies["inline"]
    assert len(bodies["spark"]) > 10


def test_a_rerun_stores_nothing_twice(spark: Any, archive: Path) -> None:
    files = sorted(archive.iterdir())
    call_command(
        "ingest_events",
        *map(str, files),
        engine="spark",
        no_progress=True,
        stdout=StringIO(),
        stderr=StringIO(),
    )
    count = RawEvent.objects.count()
    out = StringIO()
    call_command(
        "ingest_events",
        *map(str, files),
        engine="spark",
        no_progress=True,
        stdout=out,
        stderr=StringIO(),
    )
    assert RawEvent.objects.count() == count
    assert out.getvalue().startswith("0 stored")


def test_it_keeps_sparks_output_in_the_work_dir(spark: Any, archive: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    call_command(
        "ingest_events",
        *map(str, sorted(archive.iterdir())),
        engine="spark",
        work_dir=str(work),
        no_progress=True,
        stdout=StringIO(),
        stderr=StringIO(),
    )
    assert (work / "_summary.json").is_file()
    assert list((work / "events").glob("part-*"))
    rejects = [
        json.loads(line)
        for part in (work / "rejects").glob("part-*")
        for line in part.read_text().splitlines()
    ]
    assert sorted(r["line"] for r in rejects) == [4, 10]


def test_spark_options_need_the_spark_engine(archive: Path) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--engine spark"):
        call_command("ingest_events", str(archive / "a.ndjson"), engine="inline", master="local[1]")


def test_it_creates_the_data_folder_it_works_in(
    spark: Any, archive: Path, tmp_path: Path, settings: Any
) -> None:
    # With PostgreSQL nothing else creates the data folder before the first backfill.
    settings.DATA_DIR = tmp_path / "not-there-yet"
    call_command(
        "ingest_events",
        *map(str, sorted(archive.iterdir())),
        engine="spark",
        no_progress=True,
        stdout=StringIO(),
        stderr=StringIO(),
    )
    assert settings.DATA_DIR.is_dir()
    assert RawEvent.objects.exists()
