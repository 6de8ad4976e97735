"""Spark tier: one SparkSession for the whole run, and the demo lakehouse run once per module."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openlineage.client.serde import Serde
from openlineage.client.transport.transport import Transport


class CollectingTransport(Transport):
    """An inner transport that keeps every event (as the JSON dict that would be posted)."""

    kind = "collecting"

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, event: Any) -> None:
        self.events.append(Serde.to_dict(event))


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pipelines.spark import get_spark

    logging.getLogger("py4j").setLevel(logging.WARNING)
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = get_spark(
        "lineage-explorer-tests",
        master=os.environ.get("SPARK_MASTER", "local[2]"),
        shuffle_partitions=2,
        conf={"spark.sql.warehouse.dir": str(warehouse)},
    )
    yield session
    session.stop()


@pytest.fixture
def collecting() -> CollectingTransport:
    return CollectingTransport()


def relative(name: str, root: Path | str) -> str:
    """Return a dataset name relative to a lakehouse root (for readable expectations)."""
    prefix = str(root).rstrip("/") + "/"
    return name[len(prefix) :] if name.startswith(prefix) else name
