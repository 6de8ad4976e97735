"""Graph pages and API routes."""

from django.urls import URLPattern, URLResolver, path

from graph import api, views

api_urlpatterns: list[URLPattern | URLResolver] = [
    # GET /api/v1/lineage is dispatched here by ingest's endpoint, which owns POST.
    path("lineage", api.LineageView.as_view(), name="api-lineage-graph"),
    path("column-lineage", api.ColumnLineageView.as_view(), name="api-column-lineage"),
    path("lineage/impact", api.ImpactView.as_view(), name="api-lineage-impact"),
    path("lineage/root-cause", api.RootCauseView.as_view(), name="api-lineage-root-cause"),
    path("lineage/path", api.PathView.as_view(), name="api-lineage-path"),
    path("lineage/diff", api.DiffView.as_view(), name="api-lineage-diff"),
    path("lineage/changes", api.ChangesView.as_view(), name="api-lineage-changes"),
    path("lineage/orphans", api.OrphansView.as_view(), name="api-lineage-orphans"),
    path("lineage/sources", api.SourcesView.as_view(), name="api-lineage-sources"),
    path("taints", api.TaintListView.as_view(), name="api-taints"),
    path("taints/<int:taint_id>", api.TaintDetailView.as_view(), name="api-taint"),
]

urlpatterns: list[URLPattern | URLResolver] = [
    path("search/", views.search, name="search"),
    path("search/suggest", views.suggest, name="search-suggest"),
    # ?namespace=…&name=…: both may hold slashes and colons.
    path("jobs/show", views.job_detail, name="job-detail"),
    path("runs/<uuid:run_id>", views.run_detail, name="run-detail"),
    path("graph/", views.explorer, name="graph-explorer"),
    path("graph/data", views.explorer_json, name="graph-data"),
    path("graph/export", views.explorer_export, name="graph-export"),
    path("impact/", views.impact, name="impact"),
    path("impact/export", views.impact_export, name="impact-export"),
    path("root-cause/", views.root_cause, name="root-cause"),
    path("datasets/lineage", views.dataset_lineage_fragment, name="dataset-lineage"),
    path("datasets/runs", views.dataset_runs_fragment, name="dataset-runs"),
    path("datasets/taints", views.dataset_taints, name="dataset-taints"),
    path("taints/<int:taint_id>/clear", views.clear_taint_page, name="taint-clear"),
    path("stewardship/orphans", views.orphans_fragment, name="orphans-fragment"),
]
