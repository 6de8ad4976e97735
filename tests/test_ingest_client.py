"""The real openlineage-python client (HttpTransport, api_key auth, gzip) against a live server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import requests
from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import (
    DatasetEvent,
    InputDataset,
    Job,
    JobEvent,
    OutputDataset,
    Run,
    RunEvent,
    RunState,
    StaticDataset,
)
from openlineage.client.facet_v2 import (
    column_lineage_dataset,
    error_message_run,
    lifecycle_state_change_dataset,
    schema_dataset,
    sql_job,
)
from openlineage.client.transport.http import (
    ApiKeyTokenProvider,
    HttpCompression,
    HttpConfig,
    HttpTransport,
)

from catalog.models import Namespace
from graph.models import ColumnEdge, TableEdge
from graph.models import Run as RunRow
from ingest.models import RawEvent

pytestmark = pytest.mark.django_db(transaction=True)

PG = "postgres://shop-db:5432"
PRODUCER = "https://github.com/lineage-explorer/tests/client"


@pytest.fixture(autouse=True)
def _clear_lineage_before_flush():
    """Remove lineage rows while the graph's revision row still exists: on SQLite the graph's
    revision triggers fire during the end-of-test table flush and can clash with its log."""
    yield
    Namespace.objects.all().delete()


def client_for(live_server, key: str | None, compression: HttpCompression | None = None):
    auth = ApiKeyTokenProvider({"apiKey": key}) if key else None
    config = HttpConfig(
        url=live_server.url, compression=compression, timeout=10.0, retry={"total": 0}
    )
    if auth is not None:
        config.auth = auth
    return OpenLineageClient(transport=HttpTransport(config))


def when(hour: int, minute: int = 0) -> str:
    return datetime(2026, 3, 2, hour, minute, tzinfo=UTC).isoformat()


def run_events(run_id: str):
    schema = schema_dataset.SchemaDatasetFacet(
        fields=[
            schema_dataset.SchemaDatasetFacetFields(name="id", type="bigint"),
            schema_dataset.SchemaDatasetFacetFields(name="email", type="text"),
        ]
    )
    lineage = column_lineage_dataset.ColumnLineageDatasetFacet(
        fields={
            "email_hash": column_lineage_dataset.Fields(
                inputFields=[
                    column_lineage_dataset.InputField(
                        namespace=PG,
                        name="shop.public.customers",
                        field="email",
                        transformations=[
                            column_lineage_dataset.Transformation(
                                type="DIRECT", subtype="TRANSFORMATION", masking=True
                            )
                        ],
                    )
                ]
            )
        }
    )
    job = Job(
        namespace="clients",
        name="hash_emails",
        facets={"sql": sql_job.SQLJobFacet(query="select md5(email) from shop.public.customers")},
    )
    inputs = [InputDataset(namespace=PG, name="shop.public.customers", facets={"schema": schema})]
    outputs = [OutputDataset(namespace=PG, name="dw.customers", facets={"columnLineage": lineage})]
    return [
        RunEvent(
            eventType=RunState.START,
            eventTime=when(1),
            run=Run(runId=run_id),
            job=job,
            producer=PRODUCER,
            inputs=inputs,
        ),
        RunEvent(
            eventType=RunState.COMPLETE,
            eventTime=when(2),
            run=Run(runId=run_id),
            job=job,
            producer=PRODUCER,
            inputs=inputs,
            outputs=outputs,
        ),
    ]


@pytest.mark.parametrize("compression", [None, HttpCompression.GZIP])
def test_the_openlineage_client_posts_events_that_become_lineage(
    live_server, producer, token_for, compression
):
    client = client_for(live_server, token_for(producer), compression)
    run_id = "0193e2d0-0000-7000-8000-00000000c001"
    for event in run_events(run_id):
        client.emit(event)
    assert RawEvent.objects.filter(state="done").count() == 2
    run = RunRow.objects.get(run_uuid=run_id)
    assert run.state == "COMPLETED"
    assert run.job.sql.startswith("select md5")
    assert TableEdge.objects.filter(valid_to__isnull=True).count() == 2
    edge = ColumnEdge.objects.get()
    assert (edge.source_field.name, edge.target_field.name, edge.masking) == (
        "email",
        "email_hash",
        True,
    )


def test_the_client_sends_dataset_and_job_events(live_server, producer, token_for):
    client = client_for(live_server, token_for(producer), HttpCompression.GZIP)
    client.emit(
        JobEvent(
            eventTime=when(1),
            producer=PRODUCER,
            job=Job(namespace="views", name="v_customers"),
            inputs=[InputDataset(namespace=PG, name="shop.public.customers")],
            outputs=[OutputDataset(namespace=PG, name="analytics.v_customers")],
        )
    )
    client.emit(
        DatasetEvent(
            eventTime=when(3),
            producer=PRODUCER,
            dataset=StaticDataset(
                namespace=PG,
                name="analytics.v_customers",
                facets={
                    "lifecycleStateChange": lifecycle_state_change_dataset.LifecycleStateChangeDatasetFacet(
                        lifecycleStateChange=lifecycle_state_change_dataset.LifecycleStateChange.DROP
                    )
                },
            ),
        )
    )
    assert list(RawEvent.objects.order_by("id").values_list("kind", flat=True)) == [
        "job",
        "dataset",
    ]
    # The dropped view's edge closed; the job's read of its source is another dataset's edge.
    still_open = TableEdge.objects.filter(valid_to__isnull=True).select_related("dataset")
    assert [e.dataset.name for e in still_open] == ["shop.public.customers"]
    assert TableEdge.objects.get(dataset__name="analytics.v_customers").valid_to is not None


def test_the_client_reports_failures_with_their_error(live_server, producer, token_for):
    client = client_for(live_server, token_for(producer))
    client.emit(
        RunEvent(
            eventType=RunState.FAIL,
            eventTime=when(4),
            run=Run(
                runId="0193e2d0-0000-7000-8000-00000000c002",
                facets={
                    "errorMessage": error_message_run.ErrorMessageRunFacet(
                        message="division by zero", programmingLanguage="python"
                    )
                },
            ),
            job=Job(namespace="clients", name="divide"),
            producer=PRODUCER,
        )
    )
    assert RunRow.objects.get().error_message == "division by zero"


def test_the_server_refuses_the_client_without_a_valid_token(live_server, viewer, token_for):
    url = f"{live_server.url}/api/v1/lineage"
    body = '{"eventTime": "2026-03-02T00:00:00Z"}'
    anonymous = requests.post(
        url, data=body, headers={"Content-Type": "application/json"}, timeout=10
    )
    assert anonymous.status_code == 401
    assert anonymous.json()["field"] == "Authorization"
    wrong_role = requests.post(
        url,
        data=body,
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {token_for(viewer)}",
        },
        timeout=10,
    )
    assert wrong_role.status_code == 403
    assert not RawEvent.objects.exists()
