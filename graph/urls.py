"""Graph pages and API routes."""

from django.urls import URLPattern, URLResolver, path

from graph import views

api_urlpatterns: list[URLPattern | URLResolver] = [
    path("search/", views.search, name="search"),
    path("search/suggest", views.suggest, name="search-suggest"),
    # ?namespace=…&name=…: both may hold slashes and colons.
    path("jobs/show", views.job_detail, name="job-detail"),
    path("runs/<uuid:run_id>", views.run_detail, name="run-detail"),
    path("graph/", views.explorer, name="graph-explorer"),
    path("graph/data", views.explorer_json, name="graph-data"),
    path("impact/", views.impact, name="impact"),
    path("impact/export", views.impact_export, name="impact-export"),
    path("datasets/lineage", views.dataset_lineage_fragment, name="dataset-lineage"),
    path("datasets/runs", views.dataset_runs_fragment, name="dataset-runs"),
    path("stewardship/orphans", views.orphans_fragment, name="orphans-fragment"),
]

urlpatterns: list[URLPattern | URLResolver] = [
    path("search/", views.search, name="search"),
    path("search/suggest", views.suggest, name="search-suggest"),
    # ?namespace=…&name=…: both may hold slashes and colons.
    path("jobs/show", views.job_detail, name="job-detail"),
    path("runs/<uuid:run_id>", views.run_detail, name="run-detail"),
    path("graph/", views.explorer, name="graph-explorer"),
    path("graph/data", views.explorer_json, name="graph-data"),
    path("impact/", views.impact, name="impact"),
    path("impact/export", views.impact_export, name="impact-export"),
    path("datasets/lineage", views.dataset_lineage_fragment, name="dataset-lineage"),
    path("datasets/runs", views.dataset_runs_fragment, name="dataset-runs"),
    path("stewardship/orphans", views.orphans_fragment, name="orphans-fragment"),
]
