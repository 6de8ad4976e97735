"""The demo lakehouse's jobs: raw → staging → marts → ML features → reports.

Each job is a plain function of a :class:`DemoDay` and its :class:`JobRun`; the emitter derives
the column lineage from what the job actually writes, nothing is declared by hand.

On ``CHANGE_DAY`` the lakehouse changes shape: ``reports.country_kpis`` stops reading
``marts/web_sessions`` and starts reading ``marts/daily_revenue``, and the legacy report
``reports/legacy_country_summary`` is dropped and no longer produced.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from pipelines.demo import data
from pipelines.lineage import JobRun, LineageEmitter, RunRef

CHANGE_DAY = 3
SQL_USER = "svc_lakehouse"

# Relative dataset paths under the lakehouse root, with their owning teams.
OWNERS: dict[str, list[str]] = {
    "raw/customers": ["team:crm-platform"],
    "raw/orders": ["team:commerce"],
    "raw/web_events": ["team:web-analytics"],
    "staging/customers": ["team:crm-platform"],
    "staging/orders": ["team:commerce"],
    "staging/web_events": ["team:web-analytics"],
    "marts/customer_360": ["team:crm-analytics"],
    "marts/daily_revenue": ["team:finance"],
    "marts/web_sessions": ["team:web-analytics"],
    "features/customer_features": ["team:data-science"],
    "reports/country_kpis": ["team:finance"],
    "reports/top_customers": ["team:marketing"],
    "reports/legacy_country_summary": ["team:finance"],
}

# Catalog tables (Spark SQL) over lakehouse folders, created by the SQL jobs when needed.
TABLES: dict[str, str] = {
    "staging.customers": "staging/customers",
    "staging.orders": "staging/orders",
    "marts.customer_360": "marts/customer_360",
    "marts.daily_revenue": "marts/daily_revenue",
    "reports.top_customers": "reports/top_customers",
}
_TABLE_SCHEMAS = {
    "marts.daily_revenue": (
        "order_date DATE, country STRING, buyers BIGINT, orders BIGINT, revenue DOUBLE"
    ),
    "reports.top_customers": (
        "country STRING, cust_key BIGINT, email_hash STRING, lifetime_value DOUBLE, "
        "country_rank INT"
    ),
}


@dataclass
class DemoDay:
    """Everything a job needs for one simulated day."""

    spark: Any
    emitter: LineageEmitter
    root: str
    day_number: int
    seed: int
    parent: RunRef | None = None
    sources: data.SourceData | None = None
    tables_ready: set[str] = field(default_factory=set)

    @property
    def day(self) -> date:
        return data.simulated_day(self.day_number)

    def path(self, relative: str) -> str:
        """Return the absolute location of a lakehouse dataset."""
        return f"{self.root}/{relative}"

    def read(self, relative: str) -> Any:
        return self.spark.read.parquet(self.path(relative))

    def source_data(self) -> data.SourceData:
        if self.sources is None:
            self.sources = data.source_data(self.seed, self.day_number)
        return self.sources

    def ensure_table(self, table: str) -> None:
        """Point catalog table ``table`` at its lakehouse folder and refresh its file listing."""
        location = self.path(TABLES[table])
        catalog = self.spark.catalog
        if catalog.tableExists(table):
            current = self.emitter.table_location(table).rstrip("/")
            if current != self.emitter.qualify(location).rstrip("/"):
                self.spark.sql(f"DROP TABLE {table}")
        if not catalog.tableExists(table):
            schema = _TABLE_SCHEMAS.get(table)
            columns = f"({schema}) " if schema else ""
            self.spark.sql(f"CREATE TABLE {table} {columns}USING parquet LOCATION '{location}'")
        catalog.refreshTable(table)


JobFunction = Callable[[DemoDay, JobRun], None]


@dataclass(frozen=True)
class DemoJob:
    """A job of the demo, the days it runs on, and who owns it."""

    name: str
    run: JobFunction
    owners: tuple[str, ...]
    description: str
    runs_on: Callable[[int], bool] = lambda day: True


# raw ---------------------------------------------------------------------------------------


def raw_customers(ctx: DemoDay, run: JobRun) -> None:
    rows = ctx.source_data().customers
    df = ctx.spark.createDataFrame(rows, data.CUSTOMER_SCHEMA).coalesce(1)
    run.write(df, ctx.path("raw/customers"))


def raw_orders(ctx: DemoDay, run: JobRun) -> None:
    rows = ctx.source_data().orders
    df = ctx.spark.createDataFrame(rows, data.ORDER_SCHEMA).coalesce(1)
    run.write(df, ctx.path("raw/orders"))


def raw_web_events(ctx: DemoDay, run: JobRun) -> None:
    rows = ctx.source_data().web_events
    df = ctx.spark.createDataFrame(rows, data.WEB_EVENT_SCHEMA).coalesce(1)
    run.write(df, ctx.path("raw/web_events"))


# staging -----------------------------------------------------------------------------------


def staging_customers(ctx: DemoDay, run: JobRun) -> None:
    from pyspark.sql import functions as F

    raw = ctx.read("raw/customers")
    df = raw.where(F.col("email").isNotNull()).select(
        "customer_id",
        F.trim(F.col("name")).alias("name"),
        F.lower(F.trim(F.col("email"))).alias("email"),
        F.upper(F.col("country")).alias("country"),
        "signup_date",
        F.regexp_replace(F.col("phone"), r"[^0-9+]", "").alias("phone"),
        "address",
    )
    run.write(df.coalesce(1), ctx.path("staging/customers"))


def staging_orders(ctx: DemoDay, run: JobRun) -> None:
    from pyspark.sql import functions as F

    raw = ctx.read("raw/orders")
    df = raw.where(F.col("status") != "cancelled").select(
        "order_id",
        "customer_id",
        F.to_date(F.col("order_ts")).alias("order_date"),
        "order_ts",
        F.round(F.col("amount"), 2).alias("amount"),
        "status",
    )
    run.write(df.coalesce(1), ctx.path("staging/orders"))


def staging_web_events(ctx: DemoDay, run: JobRun) -> None:
    from pyspark.sql import functions as F

    raw = ctx.read("raw/web_events")
    df = raw.where(F.col("user_id").isNotNull()).select(
        "event_id",
        F.col("user_id").alias("customer_id"),
        "ip",
        "url",
        F.col("ts").alias("event_ts"),
        F.col("device.os").alias("device_os"),
    )
    run.write(df.coalesce(1), ctx.path("staging/web_events"))


# marts -------------------------------------------------------------------------------------


def marts_customer_360(ctx: DemoDay, run: JobRun) -> None:
    from pyspark.sql import functions as F

    customers = ctx.read("staging/customers")
    per_customer = (
        ctx.read("staging/orders")
        .groupBy("customer_id")
        .agg(
            F.count("order_id").alias("order_count"),
            F.round(F.sum("amount"), 2).alias("lifetime_value"),
            F.max("order_date").alias("last_order_date"),
        )
    )
    ltv = F.coalesce(F.col("lifetime_value"), F.lit(0.0))
    df = customers.join(per_customer, "customer_id", "left").select(
        F.col("customer_id").alias("cust_key"),
        F.col("name").alias("full_name"),
        F.sha2(F.col("email"), 256).alias("email_hash"),
        "country",
        "signup_date",
        F.coalesce(F.col("order_count"), F.lit(0)).alias("order_count"),
        ltv.alias("lifetime_value"),
        "last_order_date",
        F.when(ltv >= 500, "gold").when(ltv >= 150, "silver").otherwise("bronze").alias("segment"),
    )
    run.write(df.coalesce(1), ctx.path("marts/customer_360"))


DAILY_REVENUE_SQL = """
SELECT o.order_date,
       c.country,
       COUNT(DISTINCT o.customer_id) AS buyers,
       COUNT(*) AS orders,
       ROUND(SUM(o.amount), 2) AS revenue
FROM staging.orders o
JOIN staging.customers c ON o.customer_id = c.customer_id
WHERE o.status = 'completed'
GROUP BY o.order_date, c.country
"""


def marts_daily_revenue(ctx: DemoDay, run: JobRun) -> None:
    for table in ("staging.orders", "staging.customers", "marts.daily_revenue"):
        ctx.ensure_table(table)
    run.insert_overwrite("marts.daily_revenue", DAILY_REVENUE_SQL)


def marts_web_sessions(ctx: DemoDay, run: JobRun) -> None:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    events = ctx.read("staging/web_events")
    by_customer = Window.partitionBy("customer_id").orderBy("event_ts", "event_id")
    gap = F.col("event_ts").cast("long") - F.col("previous_ts").cast("long")
    df = (
        events.withColumn("previous_ts", F.lag("event_ts").over(by_customer))
        .withColumn(
            "new_session",
            F.when(F.col("previous_ts").isNull() | (gap > 1800), 1).otherwise(0),
        )
        .select(
            "customer_id",
            "ip",
            "url",
            "event_ts",
            F.sum("new_session").over(by_customer).alias("session_number"),
            F.row_number().over(by_customer).alias("event_seq"),
        )
    )
    run.write(df.coalesce(1), ctx.path("marts/web_sessions"))


# ML features -------------------------------------------------------------------------------


def features_customer_features(ctx: DemoDay, run: JobRun) -> None:
    from pyspark.sql import functions as F

    customers = ctx.read("marts/customer_360")
    web = (
        ctx.read("marts/web_sessions")
        .groupBy("customer_id")
        .agg(
            F.count("*").alias("page_views"),
            F.countDistinct("session_number").alias("sessions"),
            F.countDistinct("ip").alias("distinct_ips"),
        )
    )
    joined = customers.join(web, customers["cust_key"] == web["customer_id"], "left")
    df = joined.select(
        "cust_key",
        "email_hash",
        "country",
        "order_count",
        "lifetime_value",
        F.when(F.col("order_count") > 0, F.col("lifetime_value") / F.col("order_count"))
        .otherwise(F.lit(0.0))
        .alias("avg_order_value"),
        F.coalesce(F.col("page_views"), F.lit(0)).alias("page_views"),
        F.coalesce(F.col("sessions"), F.lit(0)).alias("sessions"),
        F.coalesce(F.col("distinct_ips"), F.lit(0)).alias("distinct_ips"),
        F.datediff(F.lit(ctx.day.isoformat()).cast("date"), F.col("signup_date")).alias(
            "tenure_days"
        ),
    )
    run.write(df.coalesce(1), ctx.path("features/customer_features"))


# reports -----------------------------------------------------------------------------------


def reports_country_kpis(ctx: DemoDay, run: JobRun) -> None:
    from pyspark.sql import functions as F

    customers = ctx.read("marts/customer_360")
    per_country = customers.groupBy("country").agg(
        F.count("cust_key").alias("customers"),
        F.sum(F.when(F.col("segment") == "gold", 1).otherwise(0)).alias("gold_customers"),
        F.round(F.sum("lifetime_value"), 2).alias("lifetime_revenue"),
    )
    if ctx.day_number < CHANGE_DAY:
        active = ctx.read("marts/web_sessions").select("customer_id").distinct()
        web = (
            customers.join(active, customers["cust_key"] == active["customer_id"])
            .groupBy("country")
            .agg(F.count("customer_id").alias("web_active_customers"))
        )
        df = per_country.join(web, "country", "left")
    else:
        revenue = (
            ctx.read("marts/daily_revenue")
            .groupBy("country")
            .agg(F.sum("orders").alias("orders"), F.round(F.sum("revenue"), 2).alias("revenue"))
        )
        df = per_country.join(revenue, "country", "left")
    run.write(df.orderBy("country").coalesce(1), ctx.path("reports/country_kpis"))


TOP_CUSTOMERS_SQL = """
SELECT country, cust_key, email_hash, lifetime_value, country_rank
FROM (
  SELECT country, cust_key, email_hash, lifetime_value,
         RANK() OVER (PARTITION BY country ORDER BY lifetime_value DESC) AS country_rank
  FROM marts.customer_360
) ranked
WHERE country_rank <= 10
"""


def reports_top_customers(ctx: DemoDay, run: JobRun) -> None:
    for table in ("marts.customer_360", "reports.top_customers"):
        ctx.ensure_table(table)
    run.insert_overwrite("reports.top_customers", TOP_CUSTOMERS_SQL)


def reports_legacy_country_summary(ctx: DemoDay, run: JobRun) -> None:
    from pyspark.sql import functions as F

    df = (
        ctx.read("marts/customer_360")
        .where(F.col("order_count") > 0)
        .groupBy("country")
        .agg(F.avg("lifetime_value").alias("avg_lifetime_value"))
    )
    run.write(df.coalesce(1), ctx.path("reports/legacy_country_summary"))


def drop_legacy_country_summary(ctx: DemoDay, run: JobRun) -> None:
    run.drop(ctx.path("reports/legacy_country_summary"))


def _before_change(day: int) -> bool:
    return day < CHANGE_DAY


def _on_change(day: int) -> bool:
    return day == CHANGE_DAY


JOBS: tuple[DemoJob, ...] = (
    DemoJob("raw.customers", raw_customers, ("team:crm-platform",), "CRM export of customers"),
    DemoJob("raw.orders", raw_orders, ("team:commerce",), "Shop orders export"),
    DemoJob("raw.web_events", raw_web_events, ("team:web-analytics",), "Click-stream export"),
    DemoJob(
        "staging.customers", staging_customers, ("team:crm-platform",), "Clean customer records"
    ),
    DemoJob("staging.orders", staging_orders, ("team:commerce",), "Orders without cancellations"),
    DemoJob(
        "staging.web_events",
        staging_web_events,
        ("team:web-analytics",),
        "Events of known customers, user_id renamed to customer_id",
    ),
    DemoJob(
        "marts.customer_360",
        marts_customer_360,
        ("team:crm-analytics",),
        "One row per customer, keyed by cust_key, e-mail pseudonymised",
    ),
    DemoJob(
        "marts.daily_revenue",
        marts_daily_revenue,
        ("team:finance",),
        "Completed revenue per day and country (Spark SQL)",
    ),
    DemoJob(
        "marts.web_sessions", marts_web_sessions, ("team:web-analytics",), "Sessionised events"
    ),
    DemoJob(
        "features.customer_features",
        features_customer_features,
        ("team:data-science",),
        "Churn-model features per customer",
    ),
    DemoJob("reports.country_kpis", reports_country_kpis, ("team:finance",), "KPIs per country"),
    DemoJob(
        "reports.top_customers",
        reports_top_customers,
        ("team:marketing",),
        "Ten best customers per country (Spark SQL)",
    ),
    DemoJob(
        "reports.legacy_country_summary",
        reports_legacy_country_summary,
        ("team:finance",),
        "Retired report, produced until it was dropped",
        _before_change,
    ),
    DemoJob(
        "maintenance.drop_legacy_country_summary",
        drop_legacy_country_summary,
        ("team:finance",),
        "Drops the retired legacy report",
        _on_change,
    ),
)
