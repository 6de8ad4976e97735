"""Ingest pages and API routes.

Namespaces and names are URL-encoded by clients, so after decoding they may
hold slashes: the regexes take the namespace up to the first ``/jobs/`` or
``/datasets/``. These routes are matched before the catalog's.
"""

from django.urls import URLPattern, URLResolver, path, re_path

from ingest import api, sql_api, sql_views, views

NS = r"(?P<namespace>[\s\S]+?)"
JOB = r"(?P<job>[\s\S]+)"
NAME = r"(?P<name>[\s\S]+)"

api_urlpatterns: list[URLPattern | URLResolver] = [
    path("lineage", api.lineage_endpoint, name="api-lineage"),
    path("lineage/batch", api.LineageBatchView.as_view(), name="api-lineage-batch"),
    path("events/lineage", api.EventListView.as_view(), name="api-lineage-events"),
    path("ingestion/status", api.IngestionStatusView.as_view(), name="api-ingestion-status"),
    path("ingestion/replay", api.ReplayView.as_view(), name="api-ingestion-replay"),
    path("search", api.SearchView.as_view(), name="api-search"),
    path("jobs/runs/<str:run_id>", api.RunDetailView.as_view(), name="api-run"),
    re_path(rf"^namespaces/{NS}/jobs$", api.JobListView.as_view(), name="api-jobs"),
    re_path(rf"^namespaces/{NS}/jobs/{JOB}/runs$", api.JobRunsView.as_view(), name="api-job-runs"),
    re_path(rf"^namespaces/{NS}/jobs/{JOB}$", api.JobDetailView.as_view(), name="api-job"),
    re_path(
        rf"^namespaces/{NS}/datasets/{NAME}/versions$",
        api.DatasetVersionsView.as_view(),
        name="api-dataset-versions",
    ),
    path("sql-logs", sql_api.SqlLogListView.as_view(), name="api-sql-logs"),
    path("sql-logs/<int:upload_id>", sql_api.SqlLogDetailView.as_view(), name="api-sql-log"),
]

urlpatterns: list[URLPattern | URLResolver] = [
    path("ingestion/", views.status, name="ingestion-status"),
    path("ingestion/replay", views.replay, name="ingestion-replay"),
    path("ingestion/sql-logs/", sql_views.sql_logs, name="sql-logs"),
    path("ingestion/sql-logs/<int:upload_id>/", sql_views.sql_log_detail, name="sql-log-detail"),
    path(
        "ingestion/sql-logs/<int:upload_id>/progress",
        sql_views.sql_log_progress,
        name="sql-log-progress",
    ),
]
