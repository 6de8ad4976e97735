"""SparkSession set-up shared by the pipelines: small, quiet, UTC, master from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

DEFAULT_MASTER = "local[*]"


def master_from_env(explicit: str | None = None) -> str | None:
    """Return the master to set: explicit, else ``SPARK_MASTER``, else ``local[*]``.

    Under ``spark-submit`` (the JVM is already up) nothing is set unless asked, so the
    submit's ``--master`` wins.
    """
    if explicit:
        return explicit
    if os.environ.get("SPARK_MASTER"):
        return os.environ["SPARK_MASTER"]
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    return DEFAULT_MASTER


def get_spark(
    app_name: str,
    *,
    master: str | None = None,
    shuffle_partitions: int | None = None,
    conf: Mapping[str, str] | None = None,
) -> Any:
    """Return a SparkSession (reusing the active one) configured for small, local-friendly jobs."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    chosen = master_from_env(master)
    if chosen:
        builder = builder.master(chosen)
    partitions = shuffle_partitions or int(os.environ.get("SPARK_SHUFFLE_PARTITIONS", "4"))
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionOverwriteMode": "static",
        **(conf or {}),
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SPARK_LOG_LEVEL", "ERROR"))
    return spark
