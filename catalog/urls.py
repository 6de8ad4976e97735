"""Catalog pages and API routes.

Namespaces and names are URL-encoded by clients, so after decoding they may
hold slashes: the regexes take the namespace up to the first ``/datasets/``.
"""

from django.urls import path, re_path

from catalog import api, views

NS = r"(?P<namespace>[\s\S]+?)"
NAME = r"(?P<name>[\s\S]+)"

api_urlpatterns = [
    path("namespaces", api.NamespaceListView.as_view(), name="api-namespaces"),
    # A field's name with slashes (URL-encoded) reaches the dataset route, which tells it.
    re_path(
        rf"^namespaces/{NS}/datasets/{NAME}/fields/(?P<field>[^/]+)$",
        api.FieldDetailView.as_view(),
        name="api-field",
    ),
    re_path(
        rf"^namespaces/{NS}/datasets/{NAME}/history$",
        api.DatasetHistoryView.as_view(),
        name="api-dataset-history",
    ),
    # Before the list: /namespaces/a/datasets/datasets is dataset "datasets" of "a" (the view
    # lists namespace "a/datasets" when only that reading names something).
    re_path(
        rf"^namespaces/{NS}/datasets/{NAME}$",
        api.DatasetDetailView.as_view(),
        name="api-dataset",
    ),
    re_path(rf"^namespaces/{NS}/datasets$", api.DatasetListView.as_view(), name="api-datasets"),
    re_path(rf"^namespaces/{NS}$", api.NamespaceDetailView.as_view(), name="api-namespace"),
    path("tokens", api.TokenListView.as_view(), name="api-tokens"),
    path("tokens/<int:token_id>", api.TokenDetailView.as_view(), name="api-token"),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("datasets/", views.dataset_list, name="dataset-list"),
    # ?namespace=…&name=…: both may hold slashes and colons.
    path("datasets/show", views.dataset_detail, name="dataset-detail"),
    path("datasets/edit", views.dataset_edit, name="dataset-edit"),
    path("datasets/field", views.field_edit, name="field-edit"),
    path("datasets/history", views.dataset_history, name="dataset-history"),
    path("datasets/schema", views.schema_compare, name="schema-compare"),
    path("stewardship/", views.stewardship, name="stewardship"),
    path("stewardship/subject-kinds", views.subject_kinds, name="subject-kinds"),
]
