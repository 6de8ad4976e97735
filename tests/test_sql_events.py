"""OpenLineage events built from SQL logs, as the normaliser will read them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from ingest.events import parse_event
from ingest.sql.events import HIDDEN_FACET, EventBuilder, Execution, job_name
from ingest.sql.parser import SqlLineageParser
from ingest.sql.pipeline import SqlLogProcessor
from ingest.sql.readers import QueryRecord, read_log

LOGS = Path(__file__).parent / "fixtures" / "sql_logs"
NS = "postgres://warehouse:5432"
CATALOG = {"shop.public.orders": ["id", "customer_id", "amount", "status", "created_at"]}


def process(name: str, fmt: str, dialect: str = "postgres"):
    processor = SqlLogProcessor(NS, dialect, schema_provider=CATALOG.get)
    with (LOGS / name).open("rb") as f:
        return processor, list(processor.process(read_log(f, fmt)))


def test_it_builds_events_the_openlineage_parser_accepts():
    _, lines = process("warehouse.csv", "csv")
    events = [e for line in lines for e in line.events]
    assert events
    for event in events:
        parsed = parse_event(json.loads(json.dumps(event)))
        assert parsed.kind in {"run", "dataset"}
    _, jsonl = process("warehouse.jsonl", "jsonl", "snowflake")
    for event in (e for line in jsonl for e in line.events):
        parse_event(json.loads(json.dumps(event)))


def test_it_makes_one_job_per_normalised_statement_and_one_run_per_execution():
    _, lines = process("warehouse.csv", "csv")
    first, second = lines[0].events, lines[1].events
    assert [e["eventType"] for e in first] == ["START", "COMPLETE"]
    assert first[0]["job"]["name"] == second[0]["job"]["name"]
    assert first[0]["job"]["name"].startswith("insert.shop.mart.daily_revenue.")
    assert first[0]["run"]["runId"] != second[0]["run"]["runId"]
    assert first[0]["run"]["runId"] == first[1]["run"]["runId"]
    assert first[0]["eventTime"] == "2026-01-05T02:00:00Z"
    # Re-reading the log gives the same run ids: re-ingestion is harmless.
    _, again = process("warehouse.csv", "csv")
    assert again[0].events[0]["run"]["runId"] == first[0]["run"]["runId"]


def test_it_carries_the_sql_and_job_type_facets():
    _, lines = process("warehouse.csv", "csv")
    start, complete = lines[0].events
    assert start["job"] == {"namespace": NS, "name": complete["job"]["name"]}
    assert "inputs" not in start  # datasets travel once, with the COMPLETE
    job = complete["job"]
    assert job["namespace"] == NS
    assert job["facets"]["sql"]["query"].startswith("INSERT INTO mart.daily_revenue")
    assert job["facets"]["sql"]["dialect"] == "postgres"
    assert {
        k: job["facets"]["jobType"][k] for k in ("processingType", "integration", "jobType")
    } == {
        "processingType": "BATCH",
        "integration": "SQL",
        "jobType": "QUERY",
    }


def test_it_writes_the_column_lineage_facet_per_the_spec():
    _, lines = process("warehouse.csv", "csv")
    complete = lines[0].events[1]
    assert complete["inputs"] == [{"namespace": NS, "name": "shop.public.orders"}]
    (output,) = complete["outputs"]
    assert output["name"] == "shop.mart.daily_revenue"
    facet = output["facets"]["columnLineage"]
    assert facet["_schemaURL"].endswith(
        "ColumnLineageDatasetFacet.json#/$defs/ColumnLineageDatasetFacet"
    )
    assert facet["fields"]["revenue"] == {
        "inputFields": [
            {
                "namespace": NS,
                "name": "shop.public.orders",
                "field": "amount",
                "transformations": [
                    {
                        "type": "DIRECT",
                        "subtype": "AGGREGATION",
                        "description": "",
                        "masking": False,
                    }
                ],
            }
        ]
    }
    indirect = {(f["field"], t["subtype"]) for f in facet["dataset"] for t in f["transformations"]}
    assert indirect == {("created_at", "FILTER"), ("created_at", "GROUP_BY")}
    assert all(t["type"] == "INDIRECT" for f in facet["dataset"] for t in f["transformations"])


def test_it_records_selects_as_reads_and_skips_failed_queries():
    processor, lines = process("warehouse.csv", "csv")
    select = lines[2]
    assert select.events == []
    (read,) = select.reads
    assert set(read.datasets) == {(NS, "shop.public.customers"), (NS, "shop.public.orders")}
    assert read.user == "analyst"
    assert lines[3].events == [] and lines[3].reads == []
    assert processor.stats.skipped_failed == 1


def test_it_follows_the_temp_table_and_emits_ddl_as_dataset_events():
    _, lines = process("warehouse.csv", "csv")
    script = lines[4].events
    assert len(script) == 2  # only the INSERT: the temp table is followed through
    assert [i["name"] for i in script[1]["inputs"]] == ["shop.public.orders"]
    drop = lines[5].events
    assert drop == [
        {
            "eventTime": "2026-01-06T04:00:00Z",
            "producer": drop[0]["producer"],
            "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/DatasetEvent",
            "dataset": {
                "namespace": NS,
                "name": "shop.mart.old_report",
                "facets": {
                    "lifecycleStateChange": {
                        "_producer": drop[0]["producer"],
                        "_schemaURL": drop[0]["dataset"]["facets"]["lifecycleStateChange"][
                            "_schemaURL"
                        ],
                        "lifecycleStateChange": "DROP",
                    }
                },
            },
        }
    ]


def test_it_folds_date_suffixed_outputs_and_names_created_schemas():
    _, lines = process("warehouse.csv", "csv")
    (output,) = lines[6].events[1]["outputs"]
    assert output["name"] == "shop.mart.events_*"
    assert [f["name"] for f in output["facets"]["schema"]["fields"]] == [
        "id",
        "user_id",
        "event_type",
    ]


def test_it_uses_the_query_tag_as_job_name_and_marks_hidden_inputs():
    parser = SqlLineageParser("postgres")
    record = parser.parse("INSERT INTO mart.x SELECT a FROM tmp_staging", database="d", schema="s")
    execution = Execution(
        NS, "INSERT INTO mart.x SELECT a FROM tmp_staging", "postgres",
        datetime(2026, 1, 1, tzinfo=UTC), query_tag="nightly.x",
    )  # fmt: skip
    events = EventBuilder().build(record, execution).events
    assert events[0]["job"]["name"] == events[1]["job"]["name"] == "nightly.x"
    (source,) = events[1]["inputs"]
    assert source["facets"][HIDDEN_FACET]["hidden"] is True
    assert job_name(record.statements[0]).startswith("insert.d.mart.x.")


def test_it_reports_problems_with_line_numbers():
    processor, lines = process("bad.csv", "csv")
    problems = [(p.line, p.field) for line in lines for p in line.problems]
    assert (3, "") in problems and (4, "") in problems
    assert (5, "query") in problems and (6, "start_time") in problems
    unparsed = [p for line in lines for p in line.problems if line.line == 8]
    assert unparsed and unparsed[0].statement == 0
    assert processor.stats.as_dict()["parse_errors"] == 1
    assert [len(line.events) for line in lines if line.line in (2, 9)] == [2, 2]


def test_it_gives_each_event_read_exactly_as_the_openlineage_parser_reads_it():
    # Parsed once per statement, not per execution: the result must not differ in any field,
    # the fingerprint and the stored canonical text included.
    for name, fmt, dialect in (
        ("warehouse.csv", "csv", "postgres"),
        ("warehouse.jsonl", "jsonl", "snowflake"),
    ):
        _, lines = process(name, fmt, dialect)
        # Text JSON must escape, and names from tags, in the same records.
        lines += SqlLogProcessor(NS, dialect, schema_provider=CATALOG.get).process(
            [
                QueryRecord(
                    100,
                    'INSERT INTO shop.public.x SELECT id AS "ïd" FROM shop.public.orders\n'
                    "WHERE status = 'a\\b\t\"c\"' -- 注释 \u2028",
                    datetime(2026, 1, 5, tzinfo=UTC),
                    end_time=datetime(2026, 1, 5, 0, 3, tzinfo=UTC),
                    query_tag='nightly "x" \\ é',
                )
            ]
        )
        for line in lines:
            assert len(line.parsed) == len(line.events)
            for event, parsed in zip(line.events, line.parsed, strict=True):
                assert parsed == parse_event(json.loads(json.dumps(event)))


def test_it_rejects_the_statement_whose_event_is_not_acceptable_and_goes_on():
    processor = SqlLogProcessor(NS, "postgres", schema_provider=CATALOG.get)
    at = datetime(2026, 1, 5, tzinfo=UTC)
    huge = "t" * 1100  # a dataset name longer than OpenLineage names may be here
    records = [
        QueryRecord(1, f"INSERT INTO shop.public.{huge} SELECT id FROM shop.public.orders", at),
        QueryRecord(2, "INSERT INTO shop.public.x SELECT id FROM shop.public.orders", at),
    ]
    bad, good = processor.process(records)
    assert not bad.events and not bad.parsed
    (problem,) = bad.problems
    assert problem.line == 1 and problem.statement == 0
    assert problem.message.startswith("event rejected: outputs[0].name is longer than")
    assert problem.field == "outputs[0].name"
    assert [e.event_type for e in good.parsed] == ["START", "COMPLETE"]
    assert processor.stats.parse_errors == 1
