"""SparkSession set-up shared by the pipelines: small, quiet, UTC, master from the environment."""

from __future__ import annotations

import os
import sys
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
    if (chosen or "").startswith("local"):
        # Local Python workers use this interpreter (the venv), not whatever python3 is first
        # on PATH; on a cluster PYSPARK_PYTHON is the deployment's business.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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


_SHIPPED: set[str] = set()


def ship_package(spark: Any) -> None:
    """Make ``pipelines`` importable by Python workers on any cluster (once per application).

    Python functions run by executors are pickled by reference to this package; when the
    package comes from a source tree (not installed), a zip of it is added with ``addPyFile``.
    """
    import tempfile
    import zipfile
    from pathlib import Path

    context = spark.sparkContext
    app = str(context.applicationId)
    if app in _SHIPPED:
        return
    package = Path(__file__).resolve().parent
    archive = Path(tempfile.mkdtemp(prefix="pipelines-py-")) / "pipelines.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        for source in sorted(package.rglob("*.py")):
            bundle.write(source, source.relative_to(package.parent).as_posix())
    context.addPyFile(str(archive))
    _SHIPPED.add(app)


def delete_path(spark: Any, path: str) -> bool:
    """Delete a file or folder through Hadoop (local or any file system Spark reaches)."""
    jvm = spark.sparkContext._jvm
    target = jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return bool(fs.delete(target, True))
