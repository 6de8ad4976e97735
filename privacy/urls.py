"""Privacy pages and API routes. Subject values only ever travel in POST bodies."""

from django.urls import URLPattern, URLResolver, path

from privacy import api, views

api_urlpatterns: list[URLPattern | URLResolver] = [
    path("privacy/subject-search", api.SubjectSearchView.as_view(), name="privacy-api-search"),
    path("privacy/subject-kinds", api.SubjectKindListView.as_view(), name="privacy-api-kinds"),
    path(
        "privacy/subject-kinds/<slug:name>",
        api.SubjectKindDetailView.as_view(),
        name="privacy-api-kind",
    ),
    path("privacy/scans", api.ScanListView.as_view(), name="privacy-api-scans"),
    path("privacy/runs/<uuid:run_id>", api.RunDetailView.as_view(), name="privacy-api-run"),
    path("privacy/erasure-plans", api.ErasurePlanListView.as_view(), name="privacy-api-plans"),
    path(
        "privacy/erasure-plans/<uuid:plan_id>",
        api.ErasurePlanDetailView.as_view(),
        name="privacy-api-plan",
    ),
    path(
        "privacy/erasure-plans/<uuid:plan_id>/export.csv",
        api.ErasurePlanExportView.as_view(),
        {"fmt": "csv"},
        name="privacy-api-plan-csv",
    ),
    path(
        "privacy/erasure-plans/<uuid:plan_id>/export.json",
        api.ErasurePlanExportView.as_view(),
        {"fmt": "json"},
        name="privacy-api-plan-json",
    ),
    path(
        "privacy/erasure-plans/<uuid:plan_id>/dry-run",
        api.ErasureRunView.as_view(),
        name="privacy-api-plan-dry-run",
    ),
    path(
        "privacy/erasure-plans/<uuid:plan_id>/apply",
        api.ErasureApplyView.as_view(),
        name="privacy-api-plan-apply",
    ),
    path("privacy/audit", api.AuditListView.as_view(), name="privacy-api-audit"),
]

urlpatterns: list[URLPattern | URLResolver] = [
    path("privacy/", views.search, name="privacy-search"),
    path("privacy/scan", views.start_scan, name="privacy-scan"),
    path("privacy/runs/<uuid:run_id>", views.run_detail, name="privacy-run"),
    path("privacy/erasure", views.create_plan, name="privacy-plan-create"),
    path("privacy/erasure/<uuid:plan_id>", views.plan_detail, name="privacy-plan"),
    path("privacy/erasure/<uuid:plan_id>/run", views.run_plan, name="privacy-plan-run"),
    path("privacy/audit", views.audit, name="privacy-audit"),
]
