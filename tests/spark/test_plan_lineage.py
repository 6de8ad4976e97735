"""Column lineage derived from Spark's analysed plans, on small hand-made jobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipelines.lineage import derive_column_lineage

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def tables(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("plans")
    people = spark.createDataFrame(
        [(1, "Ada", "ada@example.com", "DE", 10.0), (2, "Ben", "ben@example.com", "FR", 5.0)],
        "id BIGINT, name STRING, email STRING, country STRING, score DOUBLE",
    )
    visits = spark.createDataFrame(
        [(1, "/a", ["x", "y"]), (2, "/b", ["z"])],
        "person_id BIGINT, url STRING, tags ARRAY<STRING>",
    )
    people.write.parquet(str(root / "people"))
    visits.write.parquet(str(root / "visits"))
    return {
        "root": str(root),
        "people": spark.read.parquet(str(root / "people")),
        "visits": spark.read.parquet(str(root / "visits")),
    }


def lineage(df: Any, root: str) -> dict[str, Any]:
    """Return fields and dataset edges as ``table.field SUBTYPE`` strings (``*`` when masked)."""
    derived = derive_column_lineage(df)
    assert derived.warnings == []
    prefix = root.rstrip("/") + "/"

    def edge(row: list[Any]) -> str:
        return f"{row[1].removeprefix(prefix)}.{row[2]} {row[4]}{'*' if row[5] else ''}"

    mapping = derived.as_mapping()
    return {
        "fields": {col: [edge(r) for r in rows] for col, rows in mapping["fields"].items()},
        "dataset": [edge(r) for r in mapping["dataset"]],
    }


def test_it_follows_a_rename_as_identity(tables: dict[str, Any]) -> None:
    from pyspark.sql import functions as F

    df = tables["people"].select(F.col("id").alias("person_key"), "name")
    assert lineage(df, tables["root"]) == {
        "fields": {"name": ["people.name IDENTITY"], "person_key": ["people.id IDENTITY"]},
        "dataset": [],
    }


def test_it_marks_hashes_as_masking_transformations(tables: dict[str, Any]) -> None:
    from pyspark.sql import functions as F

    df = tables["people"].select(
        F.sha2("email", 256).alias("h1"), F.md5("email").alias("h2"), F.upper("name").alias("n")
    )
    fields = lineage(df, tables["root"])["fields"]
    assert fields == {
        "h1": ["people.email TRANSFORMATION*"],
        "h2": ["people.email TRANSFORMATION*"],
        "n": ["people.name TRANSFORMATION"],
    }


def test_it_puts_join_filter_group_and_sort_keys_on_the_dataset(tables: dict[str, Any]) -> None:
    from pyspark.sql import functions as F

    people, visits = tables["people"], tables["visits"]
    df = (
        people.join(visits, people["id"] == visits["person_id"])
        .where(F.col("score") > 1)
        .groupBy("country")
        .agg(F.sum("score").alias("total"), F.count("url").alias("visits"))
        .orderBy("total")
    )
    assert lineage(df, tables["root"]) == {
        "fields": {
            "country": ["people.country IDENTITY"],
            "total": ["people.score AGGREGATION"],
            "visits": ["visits.url AGGREGATION*"],
        },
        "dataset": [
            "people.country GROUP_BY",
            "people.id JOIN",
            "people.score FILTER",
            "people.score SORT",
            "visits.person_id JOIN",
        ],
    }


def test_it_keeps_case_conditions_and_window_keys_on_their_column(tables: dict[str, Any]) -> None:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_country = Window.partitionBy("country").orderBy(F.desc("score"))
    df = tables["people"].select(
        F.when(F.col("score") > 5, F.col("name")).otherwise("n/a").alias("label"),
        F.rank().over(by_country).alias("position"),
        F.lag("email").over(by_country).alias("previous_email"),
    )
    assert lineage(df, tables["root"])["fields"] == {
        "label": ["people.name TRANSFORMATION", "people.score CONDITIONAL"],
        "position": ["people.country WINDOW", "people.score WINDOW"],
        "previous_email": [
            "people.country WINDOW",
            "people.email TRANSFORMATION",
            "people.score WINDOW",
        ],
    }


def test_it_merges_union_branches_and_follows_ctes_and_subqueries(
    spark: Any, tables: dict[str, Any]
) -> None:
    tables["people"].createOrReplaceTempView("people")
    tables["visits"].createOrReplaceTempView("visits")
    df = spark.sql(
        """
        WITH seen AS (SELECT DISTINCT person_id FROM visits)
        SELECT id AS key, email AS contact FROM people WHERE id IN (SELECT person_id FROM seen)
        UNION ALL
        SELECT person_id AS key, url AS contact FROM visits
        """
    )
    assert lineage(df, tables["root"]) == {
        "fields": {
            "contact": ["people.email IDENTITY", "visits.url IDENTITY"],
            "key": ["people.id IDENTITY", "visits.person_id IDENTITY"],
        },
        "dataset": ["people.id FILTER", "visits.person_id FILTER"],
    }


def test_it_follows_generators_and_self_joins(tables: dict[str, Any]) -> None:
    from pyspark.sql import functions as F

    visits = tables["visits"]
    exploded = visits.select("person_id", F.explode("tags").alias("tag"))
    people = tables["people"]
    other = people.alias("other")
    pairs = people.alias("me").join(other, F.col("me.country") == F.col("other.country"))
    assert lineage(exploded, tables["root"])["fields"] == {
        "person_id": ["visits.person_id IDENTITY"],
        "tag": ["visits.tags TRANSFORMATION"],
    }
    pair_lineage = lineage(pairs.select(F.col("other.name").alias("peer")), tables["root"])
    assert pair_lineage == {
        "fields": {"peer": ["people.name IDENTITY"]},
        "dataset": ["people.country JOIN"],
    }


def test_it_reports_no_inputs_for_in_memory_data(spark: Any) -> None:
    derived = derive_column_lineage(spark.createDataFrame([(1,)], "x INT"))
    assert derived.inputs == {}
    assert derived.fields == {"x": {}}
    assert derived.warnings == []


def test_it_names_input_datasets_by_absolute_path(tables: dict[str, Any]) -> None:
    derived = derive_column_lineage(tables["people"])
    (dataset,) = derived.inputs
    assert dataset.namespace == "file"
    assert dataset.name == str(Path(tables["root"], "people"))
