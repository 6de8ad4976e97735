"""Builders for the explorer page tests: a small shop lakehouse with history.

The shop has a Postgres source, a lake with raw → clean → marts layers,
Spark jobs with runs (one failed), column lineage carrying a customer's email
and id downstream, two schema versions, and one change of wiring over time:
``customer_360`` read ``raw/customers`` until ``T2`` and ``clean/customers``
from then on, so the graph as of ``T1`` differs from the graph now.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from catalog.models import (
    ChangeRecord,
    ChangeSource,
    Dataset,
    DatasetField,
    DatasetOwnership,
    DatasetVersion,
    Namespace,
    Owner,
    RetentionPolicy,
    SubjectKind,
    Tag,
)
from graph import propagation
from graph.models import (
    ColumnEdge,
    Direction,
    Job,
    Run,
    RunDataset,
    RunState,
    TableEdge,
    TransformationSubtype,
    TransformationType,
)

SHOP = "postgres://shop-db:5432"
LAKE = "s3://acme-lake"
SPARK = "spark://etl"

T0 = datetime(2025, 1, 1, tzinfo=UTC)
T1 = datetime(2025, 2, 1, tzinfo=UTC)
T2 = datetime(2025, 3, 1, tzinfo=UTC)
T3 = datetime(2025, 4, 1, tzinfo=UTC)


def make_dataset(
    namespace: str,
    name: str,
    fields: tuple[str, ...] = (),
    at: datetime = T0,
    **extra: Any,
) -> Dataset:
    ns, _ = Namespace.objects.get_or_create(name=namespace)
    ds = Dataset.objects.create(namespace=ns, name=name, first_seen=at, last_seen=at, **extra)
    DatasetField.objects.bulk_create(
        DatasetField(dataset=ds, name=f, type="string", ordinal=i, first_seen=at)
        for i, f in enumerate(fields)
    )
    return ds


def make_job(namespace: str, name: str, sql: str = "", at: datetime = T0) -> Job:
    ns, _ = Namespace.objects.get_or_create(name=namespace)
    return Job.objects.create(namespace=ns, name=name, sql=sql, created_at=at, updated_at=at)


def connect(
    job: Job,
    inputs: list[Dataset],
    outputs: list[Dataset],
    valid_from: datetime = T0,
    valid_to: datetime | None = None,
) -> None:
    for ds in inputs:
        TableEdge.objects.create(
            job=job, dataset=ds, direction=Direction.INPUT, valid_from=valid_from, valid_to=valid_to
        )
    for ds in outputs:
        TableEdge.objects.create(
            job=job,
            dataset=ds,
            direction=Direction.OUTPUT,
            valid_from=valid_from,
            valid_to=valid_to,
        )


def make_run(
    job: Job,
    started: datetime,
    state: str = RunState.COMPLETED,
    minutes: int = 5,
    inputs: tuple[Dataset, ...] = (),
    outputs: tuple[Dataset, ...] = (),
    error: str = "",
) -> Run:
    run = Run.objects.create(
        run_uuid=uuid.uuid4(),
        job=job,
        state=state,
        state_event_time=started + timedelta(minutes=minutes),
        started_at=started,
        ended_at=started + timedelta(minutes=minutes),
        error_message=error,
        created_at=started,
    )
    for ds in inputs:
        RunDataset.objects.create(
            run=run, dataset=ds, direction=Direction.INPUT, event_time=started
        )
    for ds in outputs:
        RunDataset.objects.create(
            run=run, dataset=ds, direction=Direction.OUTPUT, event_time=run.ended_at or started
        )
    if job.latest_run_id is None or (
        job.latest_run is not None and job.latest_run.created_at <= started
    ):
        job.latest_run = run
        job.save(update_fields=["latest_run"])
    return run


def column(
    job: Job | None,
    source: DatasetField,
    target: DatasetField,
    subtype: str = TransformationSubtype.IDENTITY,
    kind: str = TransformationType.DIRECT,
    masking: bool = False,
    valid_from: datetime = T0,
    valid_to: datetime | None = None,
) -> ColumnEdge:
    return ColumnEdge.objects.create(
        job=job,
        source_field=source,
        target_dataset=target.dataset,
        target_field=target,
        transformation_type=kind,
        transformation_subtype=subtype,
        masking=masking,
        valid_from=valid_from,
        valid_to=valid_to,
    )


def fld(ds: Dataset, name: str) -> DatasetField:
    return ds.fields.get(name=name)


@dataclass
class Shop:
    customers: Dataset
    orders: Dataset
    raw: Dataset
    clean: Dataset
    revenue: Dataset
    c360: Dataset
    scratch: Dataset
    ingest: Job
    cleaner: Job
    report: Job
    c360_job: Job
    runs: dict[str, Run] = field(default_factory=dict)
    retention: RetentionPolicy | None = None
    customer_kind: SubjectKind | None = None

    @property
    def datasets(self) -> list[Dataset]:
        return [self.customers, self.orders, self.raw, self.clean, self.revenue, self.c360]


def build_shop() -> Shop:
    """The shop lakehouse described in the module docstring."""
    retention = RetentionPolicy.objects.create(
        name="two-years", duration=timedelta(days=730), action="delete"
    )
    customer = SubjectKind.objects.create(name="customer")
    crm = Owner.objects.create(name="crm-team", display_name="CRM team")
    data_eng = Owner.objects.create(name="data-eng", display_name="Data engineering")
    gold = Tag.objects.create(name="gold")

    customers = make_dataset(
        SHOP,
        "shop.public.customers",
        ("customer_id", "email", "country"),
        description="Every customer who ever signed up",
        platform="postgres",
        sensitivity="confidential",
        retention_policy=retention,
    )
    orders = make_dataset(
        SHOP, "shop.public.orders", ("order_id", "customer_id", "amount"), platform="postgres"
    )
    raw = make_dataset(
        LAKE,
        "lake/raw/customers",
        ("customer_id", "email", "country"),
        platform="s3",
        location="s3://acme-lake/raw/customers",
    )
    clean = make_dataset(
        LAKE, "lake/clean/customers", ("customer_id", "email_hash", "country"), platform="s3"
    )
    revenue = make_dataset(
        LAKE, "lake/marts/revenue_by_country", ("country", "revenue"), platform="s3"
    )
    c360 = make_dataset(
        LAKE, "lake/marts/customer_360", ("customer_id", "email_hash", "lifetime_value")
    )
    scratch = make_dataset(LAKE, "lake/tmp/scratch", ("x",), platform="s3")

    DatasetOwnership.objects.create(dataset=customers, owner=crm, ownership_type="DATA_OWNER")
    DatasetOwnership.objects.create(dataset=raw, owner=data_eng)
    DatasetOwnership.objects.create(dataset=clean, owner=data_eng)
    DatasetOwnership.objects.create(dataset=revenue, owner=crm)
    customers.tags.add(gold)

    DatasetField.objects.filter(dataset=customers, name="customer_id").update(
        subject_kind=customer, pii_category="identifier"
    )
    DatasetField.objects.filter(dataset=customers, name="email").update(pii_category="email")

    ingest = make_job(SPARK, "ingest_customers", sql="SELECT * FROM shop.public.customers")
    cleaner = make_job(SPARK, "clean_customers")
    report = make_job(
        SPARK,
        "revenue_report",
        sql="SELECT c.country, SUM(o.amount) FROM clean c JOIN orders o USING (customer_id) "
        "GROUP BY c.country",
    )
    c360_job = make_job(SPARK, "build_customer_360")

    connect(ingest, [customers], [raw])
    connect(cleaner, [raw], [clean])
    connect(report, [clean, orders], [revenue])
    # customer_360 was rewired at T2: raw/customers → clean/customers.
    connect(c360_job, [raw, orders], [c360], valid_from=T0, valid_to=T2)
    TableEdge.objects.filter(job=c360_job, dataset=orders).update(valid_to=None)
    TableEdge.objects.filter(job=c360_job, dataset=c360).update(valid_to=None)
    connect(c360_job, [clean], [], valid_from=T2)

    runs = {
        "ingest-1": make_run(ingest, T1, inputs=(customers,), outputs=(raw,)),
        "ingest-2": make_run(
            ingest,
            T3,
            state=RunState.FAILED,
            minutes=2,
            inputs=(customers,),
            error="Connection refused: shop-db:5432",
        ),
        "clean-1": make_run(cleaner, T1 + timedelta(hours=1), inputs=(raw,), outputs=(clean,)),
        "report-1": make_run(
            report, T1 + timedelta(hours=2), inputs=(clean, orders), outputs=(revenue,)
        ),
        "c360-1": make_run(
            c360_job, T2 + timedelta(hours=2), inputs=(clean, orders), outputs=(c360,)
        ),
    }

    column(ingest, fld(customers, "customer_id"), fld(raw, "customer_id"))
    column(ingest, fld(customers, "email"), fld(raw, "email"))
    column(ingest, fld(customers, "country"), fld(raw, "country"))
    column(cleaner, fld(raw, "customer_id"), fld(clean, "customer_id"))
    column(
        cleaner,
        fld(raw, "email"),
        fld(clean, "email_hash"),
        subtype=TransformationSubtype.TRANSFORMATION,
        masking=True,
    )
    column(cleaner, fld(raw, "country"), fld(clean, "country"))
    column(report, fld(clean, "country"), fld(revenue, "country"))
    column(
        report,
        fld(orders, "amount"),
        fld(revenue, "revenue"),
        subtype=TransformationSubtype.AGGREGATION,
    )
    column(c360_job, fld(raw, "customer_id"), fld(c360, "customer_id"), valid_to=T2)
    column(c360_job, fld(clean, "customer_id"), fld(c360, "customer_id"), valid_from=T2)
    column(c360_job, fld(clean, "email_hash"), fld(c360, "email_hash"), valid_from=T2)
    column(
        c360_job,
        fld(orders, "amount"),
        fld(c360, "lifetime_value"),
        subtype=TransformationSubtype.AGGREGATION,
    )

    DatasetVersion.objects.create(
        dataset=customers,
        version=uuid.uuid4(),
        created_at=T0,
        schema_hash="v1",
        fields=[
            {"name": "customer_id", "type": "int"},
            {"name": "email", "type": "varchar"},
            {"name": "phone", "type": "varchar"},
        ],
    )
    DatasetVersion.objects.create(
        dataset=customers,
        version=uuid.uuid4(),
        created_at=T1,
        run_uuid=runs["ingest-1"].run_uuid,
        schema_hash="v2",
        fields=[
            {"name": "customer_id", "type": "bigint"},
            {"name": "email", "type": "varchar"},
            {"name": "country", "type": "varchar"},
        ],
    )
    ChangeRecord.objects.create(
        at=T1,
        actor_name="stella-steward",
        source=ChangeSource.STEWARD,
        dataset=customers,
        field_name="email",
        attribute="pii_category",
        old="",
        new="email",
    )
    # The copies' flags come from propagation along the column edges above.
    propagation.recompute_all()
    return Shop(
        customers=customers,
        orders=orders,
        raw=raw,
        clean=clean,
        revenue=revenue,
        c360=c360,
        scratch=scratch,
        ingest=ingest,
        cleaner=cleaner,
        report=report,
        c360_job=c360_job,
        runs=runs,
        retention=retention,
        customer_kind=customer,
    )


def build_chain(length: int, fan_out: int = 1, namespace: str = LAKE) -> list[Dataset]:
    """A wide layered graph: ``length`` layers of ``fan_out`` datasets, each fed by one job.

    Returns the datasets in creation order; the first is the root. Used for the
    large-graph page tests and the benchmark's browser timings.
    """
    root = make_dataset(namespace, "bench/root", ("id", "email"))
    previous = [root]
    created = [root]
    job_ns, _ = Namespace.objects.get_or_create(name=SPARK)
    edges: list[TableEdge] = []
    counter = 0
    for layer in range(length):
        current: list[Dataset] = []
        for i, parent in enumerate(previous):
            for k in range(fan_out):
                counter += 1
                ds = Dataset.objects.create(
                    namespace=root.namespace,
                    name=f"bench/l{layer}/t{i}_{k}_{counter}",
                    first_seen=T0,
                    last_seen=T0,
                )
                job = Job.objects.create(namespace=job_ns, name=f"bench_job_{counter}")
                edges.append(
                    TableEdge(job=job, dataset=parent, direction=Direction.INPUT, valid_from=T0)
                )
                edges.append(
                    TableEdge(job=job, dataset=ds, direction=Direction.OUTPUT, valid_from=T0)
                )
                current.append(ds)
                created.append(ds)
        previous = current
    TableEdge.objects.bulk_create(edges)
    return created


def drop(ds: Dataset, at: datetime) -> None:
    """Drop ``ds`` at ``at`` as lineage records it: its edges closed, a closing schema
    version, and its state."""
    TableEdge.objects.filter(dataset=ds, valid_to__isnull=True).update(valid_to=at)
    DatasetVersion.objects.create(
        dataset=ds,
        version=uuid.uuid4(),
        created_at=at,
        schema_hash="drop",
        fields=[],
        lifecycle_state="DROP",
    )
    ds.lifecycle_state, ds.dropped_at = "DROPPED", at
    ds.save(update_fields=["lifecycle_state", "dropped_at"])
