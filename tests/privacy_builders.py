"""A shop with known truth for subject search: who holds customer data, and when.

Timeline (all UTC):

* ``T0`` everything exists; ``shop.public.customers`` declares ``customer_id``
  and ``email`` as identifying a customer;
* ``T_FLAG`` a steward declares ``shop.public.orders.customer_id`` too;
* ``T_LTV`` the ``ltv`` job stops reading orders (its inputs changed), so
  ``marts/customer_ltv`` no longer derives from customers;
* ``T_DROP`` ``tmp/export_2024`` (a copy of emails) is dropped;
* ``T_SEG`` ``build_segments`` starts copying the hashed email into
  ``marts/segments``, and propagation flags ``legacy/crm_dump.cust_no`` from
  ``customers.customer_id`` (along lineage beyond what the shop records: a copy a
  search finds only through its flag).

Lineage (→ column edges, through jobs):

* customers.customer_id → customers_clean.cust_key (rename, IDENTITY)
* customers.email → customers_clean.email_sha (sha2, TRANSFORMATION masked)
* customers.country → customers_clean.country (IDENTITY)
* customers_clean.email_sha → segments.email_hash (IDENTITY, from T_SEG)
* customers_clean.cust_key → revenue_by_country.customer_count (AGGREGATION)
* customers_clean.country → revenue_by_country.country (IDENTITY)
* orders.amount → revenue_by_country.revenue (AGGREGATION)
* orders.customer_id → revenue_by_country (dataset level, INDIRECT JOIN)
* revenue_by_country.customer_count → features.cust_cnt (IDENTITY)
* orders.customer_id → customer_ltv.customer_id (IDENTITY, until T_LTV)
* seeds.x → customer_ltv.ltv (IDENTITY, from T_LTV)
* customers.email → export_2024.email (IDENTITY, until T_DROP)
* hr.employees.employee_id → hr.payroll.employee_id (another subject kind)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from catalog.models import (
    ChangeRecord,
    ChangeSource,
    Dataset,
    DatasetField,
    DatasetOwnership,
    FlagSource,
    LifecycleState,
    Namespace,
    Owner,
    PiiCategory,
    PropagatedFlag,
    RetentionAction,
    RetentionPolicy,
    SubjectKind,
)
from graph.models import ColumnEdge, Direction, Job, TableEdge

SHOP = "postgres://shop-db:5432"
LAKE = "s3://acme-lake"
HR = "postgres://hr-db:5432"
ETL = "spark://etl"

T0 = datetime(2024, 1, 1, tzinfo=UTC)
T_FLAG = datetime(2024, 3, 1, tzinfo=UTC)
T_LTV = datetime(2024, 6, 1, tzinfo=UTC)
T_DROP = datetime(2024, 9, 1, tzinfo=UTC)
T_SEG = datetime(2024, 10, 1, tzinfo=UTC)
NOW = datetime(2025, 1, 1, tzinfo=UTC)

CUSTOMERS = "shop.public.customers"
ORDERS = "shop.public.orders"
CLEAN = "staging/customers_clean"
SEGMENTS = "marts/segments"
REVENUE = "marts/revenue_by_country"
FEATURES = "ml/features"
LTV = "marts/customer_ltv"
EXPORT = "tmp/export_2024"
CRM_DUMP = "legacy/crm_dump"
SEEDS = "ref/seeds"
EMPLOYEES = "hr.public.employees"
PAYROLL = "hr.public.payroll"


@dataclass
class Shop:
    datasets: dict[str, Dataset] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)

    def f(self, dataset: str, name: str) -> DatasetField:
        return self.datasets[dataset].fields.get(name=name)


def _dataset(
    shop: Shop,
    namespace: str,
    name: str,
    fields: dict[str, tuple[str, str]],
    at: datetime = T0,
    **extra: Any,
) -> Dataset:
    ns, _ = Namespace.objects.get_or_create(name=namespace)
    ds = Dataset.objects.create(namespace=ns, name=name, first_seen=at, last_seen=at, **extra)
    for i, (fname, (ftype, pii)) in enumerate(fields.items()):
        DatasetField.objects.create(
            dataset=ds, name=fname, type=ftype, ordinal=i, pii_category=pii, first_seen=at
        )
    shop.datasets[name] = ds
    return ds


def _job(shop: Shop, name: str) -> Job:
    ns, _ = Namespace.objects.get_or_create(name=ETL)
    job = Job.objects.create(namespace=ns, name=name, created_at=T0, updated_at=T0)
    shop.jobs[name] = job
    return job


def _edge(
    shop: Shop,
    job: str,
    source: tuple[str, str],
    target: tuple[str, str | None],
    ttype: str = "DIRECT",
    subtype: str = "IDENTITY",
    masking: bool = False,
    valid_from: datetime = T0,
    valid_to: datetime | None = None,
) -> None:
    j = shop.jobs[job]
    src = shop.f(*source)
    target_ds = shop.datasets[target[0]]
    target_field = shop.f(target[0], target[1]) if target[1] else None
    ColumnEdge.objects.create(
        job=j,
        source_field=src,
        target_dataset=target_ds,
        target_field=target_field,
        transformation_type=ttype,
        transformation_subtype=subtype,
        masking=masking,
        valid_from=valid_from,
        valid_to=valid_to,
    )
    for ds, direction in ((src.dataset, Direction.INPUT), (target_ds, Direction.OUTPUT)):
        if not TableEdge.objects.filter(
            job=j, dataset=ds, direction=direction, valid_to=valid_to
        ).exists():
            TableEdge.objects.create(
                job=j, dataset=ds, direction=direction, valid_from=valid_from, valid_to=valid_to
            )


def _flag(field: DatasetField, kind: SubjectKind, at: datetime | None) -> None:
    """A steward declares the field as identifying ``kind`` (at ``at``, or before history)."""
    field.subject_kind = kind
    field.flag_source = FlagSource.DECLARED
    field.save()
    if at is not None:
        ChangeRecord.objects.create(
            at=at,
            actor_name="stella-steward",
            source=ChangeSource.STEWARD,
            dataset=field.dataset,
            field_name=field.name,
            attribute="subject_kind",
            old=None,
            new=kind.name,
        )


def _propagated(field: DatasetField, source: DatasetField, at: datetime) -> None:
    """Propagation's own record that ``source``'s flag reached ``field`` from ``at``."""
    field.subject_kind = source.subject_kind
    field.flag_source = FlagSource.PROPAGATED
    field.save()
    PropagatedFlag.objects.create(field=field, source=source, valid_from=at)


def _own(dataset: Dataset, owner: str, kind: str = "DATA_OWNER") -> None:
    o, _ = Owner.objects.get_or_create(name=owner)
    DatasetOwnership.objects.create(dataset=dataset, owner=o, ownership_type=kind)


def build_shop() -> Shop:
    """Create the shop; returns handles on its datasets and jobs."""
    shop = Shop()
    customer = SubjectKind.objects.create(name="customer", description="A shop customer")
    employee = SubjectKind.objects.create(name="employee")
    crm = RetentionPolicy.objects.create(
        name="crm-7y", duration=timedelta(days=7 * 365), action=RetentionAction.DELETE
    )
    sales = RetentionPolicy.objects.create(
        name="sales-10y",
        duration=timedelta(days=3650),
        action=RetentionAction.ANONYMISE,
        legal_basis="tax law",
    )
    s, e, n, i = "string", PiiCategory.EMAIL, PiiCategory.NAME, PiiCategory.IDENTIFIER
    customers = _dataset(
        shop,
        SHOP,
        CUSTOMERS,
        {"customer_id": ("bigint", i), "email": (s, e), "name": (s, n), "country": (s, "")},
        retention_policy=crm,
    )
    orders = _dataset(
        shop,
        SHOP,
        ORDERS,
        {"order_id": ("bigint", ""), "customer_id": ("bigint", i), "amount": ("double", "")},
        retention_policy=sales,
    )
    clean = _dataset(
        shop,
        LAKE,
        CLEAN,
        {"cust_key": ("bigint", ""), "email_sha": (s, ""), "country": (s, "")},
    )
    _dataset(shop, LAKE, SEGMENTS, {"email_hash": (s, ""), "segment": (s, "")})
    _dataset(
        shop,
        LAKE,
        REVENUE,
        {"country": (s, ""), "revenue": ("double", ""), "customer_count": ("bigint", "")},
    )
    _dataset(shop, LAKE, FEATURES, {"cust_cnt": ("bigint", "")})
    _dataset(shop, LAKE, LTV, {"customer_id": ("bigint", ""), "ltv": ("double", "")})
    export = _dataset(shop, LAKE, EXPORT, {"email": (s, "")})
    export.lifecycle_state = LifecycleState.DROPPED
    export.dropped_at = T_DROP
    export.save()
    _dataset(shop, LAKE, CRM_DUMP, {"cust_no": ("bigint", "")})
    _dataset(shop, LAKE, SEEDS, {"x": ("double", "")})
    employees = _dataset(shop, HR, EMPLOYEES, {"employee_id": ("bigint", i), "email": (s, e)})
    _dataset(shop, HR, PAYROLL, {"employee_id": ("bigint", ""), "salary": ("double", "")})

    _own(customers, "team-crm")
    _own(orders, "team-sales")
    _own(orders, "ada-finance", "TECHNICAL_OWNER")
    _own(clean, "team-data")

    _flag(shop.f(CUSTOMERS, "customer_id"), customer, None)
    _flag(shop.f(CUSTOMERS, "email"), customer, None)
    _flag(shop.f(ORDERS, "customer_id"), customer, T_FLAG)
    _propagated(shop.f(CRM_DUMP, "cust_no"), shop.f(CUSTOMERS, "customer_id"), T_SEG)
    _flag(shop.f(EMPLOYEES, "employee_id"), employee, None)
    _flag(shop.f(EMPLOYEES, "email"), employee, None)
    del employees

    for job in (
        "stage_customers",
        "build_segments",
        "revenue_report",
        "features",
        "ltv",
        "export_emails",
        "payroll",
    ):
        _job(shop, job)
    _edge(shop, "stage_customers", (CUSTOMERS, "customer_id"), (CLEAN, "cust_key"))
    _edge(
        shop,
        "stage_customers",
        (CUSTOMERS, "email"),
        (CLEAN, "email_sha"),
        subtype="TRANSFORMATION",
        masking=True,
    )
    _edge(shop, "stage_customers", (CUSTOMERS, "country"), (CLEAN, "country"))
    _edge(shop, "build_segments", (CLEAN, "email_sha"), (SEGMENTS, "email_hash"), valid_from=T_SEG)
    _edge(
        shop,
        "revenue_report",
        (CLEAN, "cust_key"),
        (REVENUE, "customer_count"),
        subtype="AGGREGATION",
        masking=True,
    )
    _edge(shop, "revenue_report", (CLEAN, "country"), (REVENUE, "country"))
    _edge(shop, "revenue_report", (ORDERS, "amount"), (REVENUE, "revenue"), subtype="AGGREGATION")
    _edge(shop, "revenue_report", (ORDERS, "customer_id"), (REVENUE, None), "INDIRECT", "JOIN")
    _edge(shop, "features", (REVENUE, "customer_count"), (FEATURES, "cust_cnt"))
    _edge(shop, "ltv", (ORDERS, "customer_id"), (LTV, "customer_id"), valid_to=T_LTV)
    _edge(shop, "ltv", (SEEDS, "x"), (LTV, "ltv"), valid_from=T_LTV)
    _edge(shop, "export_emails", (CUSTOMERS, "email"), (EXPORT, "email"), valid_to=T_DROP)
    _edge(shop, "payroll", (EMPLOYEES, "employee_id"), (PAYROLL, "employee_id"))
    return shop


def relations(body: dict[str, Any]) -> dict[str, str]:
    """Return {dataset name: relation} of a subject-search response (datasets and aggregates)."""
    found = {d["name"]: d["relation"] for d in body["datasets"]}
    found.update({d["name"]: d["relation"] for d in body["aggregates"]})
    return found
