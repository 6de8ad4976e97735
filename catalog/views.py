"""Catalog pages: home, dataset list and dataset page."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required, permission_required
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from catalog import auth, queries
from catalog.models import Dataset, DatasetField, Namespace, PiiCategory

read_required = permission_required(auth.READ_LINEAGE, raise_exception=True)


@login_required
@read_required
def home(request: HttpRequest) -> HttpResponse:
    stats = Dataset.objects.filter(is_hidden=False).aggregate(
        datasets=Count("id"),
        unowned=Count("id", filter=Q(ownerships__isnull=True)),
    )
    pii_fields = DatasetField.objects.filter(
        Q(pii_category__gt="") | Q(subject_kind__isnull=False), removed_at__isnull=True
    ).count()
    return render(
        request,
        "catalog/home.html",
        {
            "stats": stats,
            "pii_fields": pii_fields,
            "namespaces": Namespace.objects.annotate(n=Count("datasets")).order_by("name"),
        },
    )


@login_required
@read_required
def dataset_list(request: HttpRequest) -> HttpResponse:
    params = request.GET
    qs = queries.search_datasets(
        text=params.get("q", "").strip(),
        namespace=params.get("namespace") or None,
        pii=True if params.get("pii") == "1" else None,
        owner=params.get("owner") or None,
    ).order_by("namespace__name", "name")
    page = Paginator(qs, 50).get_page(params.get("page"))
    return render(
        request,
        "catalog/dataset_list.html",
        {
            "page": page,
            "nav": "datasets",
            "namespaces": Namespace.objects.order_by("name"),
            "filters": params,
        },
    )


@login_required
@read_required
def dataset_detail(request: HttpRequest) -> HttpResponse:
    dataset = queries.get_dataset(request.GET.get("namespace", ""), request.GET.get("name", ""))
    if dataset is None:
        raise Http404("No such dataset")
    return render(
        request,
        "catalog/dataset_detail.html",
        {
            "dataset": dataset,
            "fields": [f for f in dataset.fields.all() if f.removed_at is None],
            "history": queries.history(dataset, limit=50),
            "versions": queries.latest_versions(dataset, limit=20),
            "pii_choices": PiiCategory.choices,
            "nav": "datasets",
        },
    )
