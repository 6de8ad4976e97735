"""Prometheus alert rules over the app's own metrics, each linked to its runbook section.

``python manage.py alert_rules`` writes them as a Prometheus rule file, with the runbook
links at ``LINEAGE_BASE_URL``. The SLI alerts read the ``lineage_sli`` gauges, which
``/metrics`` takes from the indicators the scheduled task measures every hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    # How long the condition holds before the alert fires (the rule's ``for``).
    wait: str
    # "page": someone acts now; "ticket": within the working day.
    severity: str
    summary: str
    # The section of docs/runbooks.md that says what to do.
    runbook: str


def _sli_missed(indicator: str) -> str:
    # Every web host exports the same database gauges: one series per indicator first.
    return (
        f'max by (indicator) (lineage_sli{{indicator="{indicator}"}})'
        f' < on(indicator) max by (indicator) (lineage_sli_target{{indicator="{indicator}"}})'
    )


ALERTS = (
    Alert(
        "LineageDatabaseDown",
        # A scrape by token needs the database, so the gauge may be missing rather than 0.
        "max(lineage_database_up) == 0 or absent(lineage_database_up)",
        "2m",
        "page",
        "Lineage Explorer cannot read its database",
        "database-unreachable",
    ),
    Alert(
        "LineageIngestionLagHigh",
        "histogram_quantile(0.95, sum by (le) (rate(lineage_ingestion_lag_seconds_bucket[10m])))"
        " > 30",
        "10m",
        "page",
        "95 % of OpenLineage events take over 30 s to become lineage",
        "ingestion-lag",
    ),
    Alert(
        "LineageIngestionBacklog",
        "max(lineage_ingestion_oldest_waiting_seconds) > 300",
        "5m",
        "page",
        "An OpenLineage event has waited over 5 minutes to be normalised",
        "ingestion-lag",
    ),
    Alert(
        "LineageDeadLetters",
        "max(lineage_dead_letters) > 0",
        "15m",
        "ticket",
        "OpenLineage events failed for good and wait for a replay",
        "dead-letters",
    ),
    Alert(
        "LineageStale",
        _sli_missed("freshness"),
        "1h",
        "ticket",
        "Too many datasets were not written within twice their job's usual interval",
        "stale-lineage",
    ),
    Alert(
        "LineageCoverageLow",
        _sli_missed("coverage"),
        "6h",
        "ticket",
        "Too many datasets have no job reading or writing them",
        "stale-lineage",
    ),
    Alert(
        "LineageStewardshipIncomplete",
        _sli_missed("completeness"),
        "24h",
        "ticket",
        "Datasets holding personal data lack an owner, a retention policy or a PII review",
        "incomplete-stewardship",
    ),
    Alert(
        "LineageSlisNotMeasured",
        "time() - max(lineage_sli_measured_timestamp_seconds) > 3 * 3600"
        " or absent(lineage_sli_measured_timestamp_seconds)",
        "75m",
        "ticket",
        "The indicators have not been measured for 3 hours (is Celery beat running?)",
        "stale-lineage",
    ),
    Alert(
        "LineageSparkJobFailed",
        'increase(lineage_spark_jobs_total{outcome="failed"}[1h]) > 0',
        "0m",
        "ticket",
        "A subject scan or erasure on Spark failed or lost its worker",
        "stuck-spark-scan",
    ),
)


def rule_file(base_url: str) -> dict[str, Any]:
    """The rules as a Prometheus rule file (a YAML document once dumped)."""
    runbooks = base_url.rstrip("/") + "/health/runbooks"
    return {
        "groups": [
            {
                "name": "lineage-explorer",
                "rules": [
                    {
                        "alert": alert.name,
                        "expr": alert.expr,
                        "for": alert.wait,
                        "labels": {"severity": alert.severity},
                        "annotations": {
                            "summary": alert.summary,
                            "runbook_url": f"{runbooks}#{alert.runbook}",
                        },
                    }
                    for alert in ALERTS
                ],
            }
        ]
    }
