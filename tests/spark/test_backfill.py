"""Spark backfill of OpenLineage archives: rejects with line numbers, de-duplication, order."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from pipelines.backfill import check_line, run_backfill
from pipelines.fingerprint import canonical_fingerprint

pytestmark = pytest.mark.spark

RUN_ID = "0196a0b2-6b1c-7a51-9d2e-4f7c3b1a2d10"


def event(minute: int, event_type: str = "START", run_id: str = RUN_ID) -> dict[str, Any]:
    return {
        "eventType": event_type,
        "eventTime": f"2026-03-02T02:{minute:02d}:00+00:00",
        "run": {"runId": run_id},
        "job": {"namespace": "shop", "name": "orders.load"},
        "inputs": [{"namespace": "postgres://db:5432", "name": "shop.public.orders"}],
        "outputs": [],
        "producer": "https://example.com/producer",
        "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
    }


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp_path = tmp_path_factory.mktemp("archive")
    plain = [
        json.dumps(event(30, "COMPLETE")),
        "this is not json",
        "",
        json.dumps(event(10)),
        json.dumps({**event(11), "run": {"runId": "not-a-uuid"}}),
        json.dumps(event(10), indent=None, separators=(", ", ": ")),  # same event, other spacing
    ]
    zipped = [
        json.dumps(
            {"eventTime": "2026-03-02T01:00:00Z", "dataset": {"namespace": "s3://b", "name": "k"}}
        ),
        json.dumps({"eventTime": "yesterday", "job": {"namespace": "a", "name": "b"}}),
        json.dumps(event(30, "COMPLETE")),  # duplicate of the first file's first line
        '{"eventTime": "2026-03-02T00:00:00Z"',
    ]
    (tmp_path / "a.ndjson").write_text("\n".join(plain) + "\n", encoding="utf-8")
    with gzip.open(tmp_path / "b.ndjson.gz", "wt", encoding="utf-8") as out:
        out.write("\n".join(zipped) + "\n")
    return {"dir": tmp_path, "files": [str(tmp_path / "a.ndjson"), str(tmp_path / "b.ndjson.gz")]}


@pytest.fixture(scope="module")
def backfilled(spark: Any, archive: dict[str, Any]) -> Any:
    return run_backfill(spark, archive["files"], str(archive["dir"] / "out"))


def test_it_rejects_bad_lines_with_their_line_numbers_and_keeps_going(
    archive: dict[str, Any], backfilled: Any
) -> None:
    summary = backfilled

    assert (summary.lines, summary.blank, summary.valid, summary.rejected) == (10, 1, 5, 4)
    rejects_dir = archive["dir"] / "out" / "rejects"
    rejects = [
        json.loads(line)
        for part in sorted(rejects_dir.glob("part-*"))
        for line in part.read_text(encoding="utf-8").splitlines()
    ]
    assert [(Path(r["file"]).name, r["line"], r["reason"].split(":")[0]) for r in rejects] == [
        ("a.ndjson", 2, "not JSON"),
        ("a.ndjson", 5, "run.runId"),
        ("b.ndjson.gz", 2, "eventTime"),
        ("b.ndjson.gz", 4, "not JSON"),
    ]
    assert rejects[0]["excerpt"] == "this is not json"
    saved = json.loads((archive["dir"] / "out" / "_summary.json").read_text(encoding="utf-8"))
    assert saved["rejected"] == 4


def test_it_deduplicates_by_fingerprint_and_sorts_by_event_time(
    archive: dict[str, Any], backfilled: Any
) -> None:
    summary = backfilled

    lines = [
        line
        for part in sorted((archive["dir"] / "out" / "events").glob("part-*"))
        for line in part.read_text(encoding="utf-8").splitlines()
    ]
    events = [json.loads(line) for line in lines]
    assert (summary.duplicates, summary.written) == (2, 3)
    assert [e["eventTime"] for e in events] == [
        "2026-03-02T01:00:00Z",
        "2026-03-02T02:10:00+00:00",
        "2026-03-02T02:30:00+00:00",
    ]
    # Each line is the canonical JSON, so the app computes the same fingerprint from it.
    assert lines[1] == json.dumps(event(10), sort_keys=True, separators=(",", ":"))
    assert canonical_fingerprint(json.loads(lines[1])) == canonical_fingerprint(event(10))


def test_it_writes_parquet_with_fingerprint_time_and_body(
    spark: Any, archive: dict[str, Any]
) -> None:
    out = archive["dir"] / "pq"
    run_backfill(spark, archive["files"], str(out), output_format="parquet")

    rows = spark.read.parquet(str(out / "events")).orderBy("event_time").collect()
    assert [r["kind"] for r in rows] == ["DatasetEvent", "RunEvent", "RunEvent"]
    assert rows[1]["fingerprint"] == canonical_fingerprint(event(10))
    assert json.loads(rows[2]["body"])["eventType"] == "COMPLETE"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[]", "event: expected a JSON object"),
        ('{"run": {}}', "eventTime: missing"),
        ('{"eventTime": 5, "job": {"namespace": "a", "name": "b"}}', "eventTime: expected"),
        (
            '{"eventTime": "2026-03-02T00:00:00", "job": {"namespace": "a", "name": "b"}}',
            "eventTime: no UTC offset",
        ),
        (
            '{"eventTime": "2026-03-02T00:00:00Z", "run": {"runId": "' + RUN_ID + '"}}',
            "job: expected an object",
        ),
        (
            '{"eventTime": "2026-03-02T00:00:00Z", "run": {"runId": "' + RUN_ID + '"}, '
            '"job": {"namespace": "a", "name": ""}}',
            "job.name: expected a non-empty string",
        ),
        (
            '{"eventTime": "2026-03-02T00:00:00Z", "run": {"runId": "' + RUN_ID + '"}, '
            '"job": {"namespace": "a", "name": "b"}, "eventType": "DONE"}',
            "eventType: 'DONE'",
        ),
        (
            '{"eventTime": "2026-03-02T00:00:00Z", "job": {"namespace": "a", "name": "b"}, '
            '"inputs": [{"name": "x"}]}',
            "inputs[0].namespace: expected a non-empty string",
        ),
        ('{"eventTime": "2026-03-02T00:00:00Z"}', "event: has none of run, job or dataset"),
        ("[" * 100_000 + "]" * 100_000, "event: nested too deeply"),
    ],
)
def test_it_explains_why_a_line_is_rejected(text: str, reason: str) -> None:
    checked = check_line("f", 7, text)
    assert checked is not None
    assert checked.line == 7
    assert checked.reason is not None
    assert checked.reason.startswith(reason)


def test_it_accepts_run_dataset_and_job_events() -> None:
    kinds = [
        check_line("f", 1, json.dumps(event(1))),
        check_line(
            "f",
            2,
            '{"eventTime": "2026-03-02T00:00:00Z", "dataset": {"namespace": "a", "name": "b"}}',
        ),
        check_line(
            "f", 3, '{"eventTime": "2026-03-02T00:00:00Z", "job": {"namespace": "a", "name": "b"}}'
        ),
    ]
    assert [k.kind if k else None for k in kinds] == ["RunEvent", "DatasetEvent", "JobEvent"]
    assert check_line("f", 4, "   ") is None
