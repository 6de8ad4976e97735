"""The host's node document file: where it is not shared, nothing is written, and the
command says why. (The passes themselves run on PostgreSQL: tests/integration.)"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from graph import documents, tasks
from tests.graph_builders import LineageBuilder

pytestmark = pytest.mark.django_db


def test_where_documents_are_not_shared_nothing_is_rendered_and_the_command_says_why(settings):
    LineageBuilder().chain("a", "b")
    # SQLite never shares; PostgreSQL does unless turned off.
    settings.GRAPH_SHARED_NODE_DATA = False
    reason = (
        "GRAPH_SHARED_NODE_DATA is off"
        if connection.vendor == "postgresql"
        else "node documents are shared only on PostgreSQL"
    )
    result = documents.render_documents(full=True)
    assert result == documents.PassResult(skipped=reason)
    out = StringIO()
    call_command("render_node_documents", "--full", stdout=out)
    assert out.getvalue() == f"Nothing rendered: {reason}.\n"
    assert tasks.render_node_documents.delay(full=False).get()["skipped"] == reason
    assert not (settings.DATA_DIR / "nodedocs").exists()


def test_the_command_rejects_a_batch_below_one():
    with pytest.raises(CommandError, match="--batch must be at least 1"):
        call_command("render_node_documents", "--batch", "0")


def test_the_scheduler_runs_a_pass_every_interval(settings):
    from lineage_site.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["graph-render-node-documents"]
    assert entry["task"] in app.tasks
    assert entry["schedule"] == float(settings.GRAPH_DOCUMENTS_INTERVAL)


def test_node_summaries_read_back_from_their_text_as_they_were_written():
    from dataclasses import replace
    from datetime import UTC, datetime

    from graph.details import (
        DatasetInfo,
        FieldInfo,
        JobInfo,
        OwnerInfo,
        RetentionInfo,
        RunInfo,
        dataset_info_from_json,
        info_json,
        job_info_from_json,
    )

    t = datetime(2025, 3, 1, 12, 30, 15, 250, tzinfo=UTC)
    dataset = DatasetInfo(
        pk=7,
        namespace="postgres://shop-db:5432",
        name="public.customers",
        description='He said "hi"',
        platform="postgres",
        location="",
        source_name="shop",
        sensitivity="confidential",
        lifecycle_state="DROPPED",
        is_hidden=True,
        created_at=t,
        updated_at=t,
        first_seen=t,
        last_seen=t,
        fields=(
            FieldInfo(3, "email", "varchar", "", "email", "customer", "rule", ("gdpr",)),
            FieldInfo(4, "id", "int", "key", "", None, "", ()),
        ),
        tags=("core", "gold"),
        owners=(OwnerInfo("crm-team", "DATA_OWNER", "team", "crm@example.com"),),
        retention=RetentionInfo("customer-data", 365, "delete", "contract"),
    )
    job = JobInfo(
        7,
        "airflow://etl",
        "load.customers",
        "JOB",
        "BATCH",
        "airflow",
        "",
        "",
        t,
        t,
        "load",
        RunInfo("a-b", "FAILED", t, None, "boom"),
    )
    for summary in (dataset, replace(dataset, retention=None, fields=())):
        assert dataset_info_from_json(info_json(summary)) == summary
    for run in (job, replace(job, latest_run=None, parent_name=None)):
        assert job_info_from_json(info_json(run)) == run


def test_a_file_without_the_dictionaries_of_its_compressed_columns_is_not_read(tmp_path):
    import numpy as np

    from graph import docfile, revision

    def write(extra: dict[str, np.ndarray]) -> docfile.DocFile:
        kind = revision.Kind.DATASET
        sections: dict = {f"{kind}.pks": np.zeros(0, dtype=np.int64)}
        for column in docfile.COLUMNS:
            sections[f"{kind}.{column}.at"] = np.zeros(1, dtype=np.int64)
            sections[f"{kind}.{column}"] = tmp_path / column
            sections[f"{kind}.{column}"].write_bytes(b"")
        path = tmp_path / "file.docs"
        with open(path, "wb") as out:
            docfile.assemble(
                out, revision.Revision(1, "t"), {**sections, **extra}, {"kinds": [kind]}
            )
        return docfile.DocFile(path)

    with pytest.raises(docfile.CorruptFile, match="the data column has no dictionary"):
        write({})
    empty = np.zeros(0, dtype=np.uint8)
    dictionaries = {
        docfile.DICTIONARY.format(kind=revision.Kind.DATASET, column=column): empty
        for column in docfile.COLUMNS
    }
    assert write(dictionaries).documents == 0
