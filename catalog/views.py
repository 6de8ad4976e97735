"""Catalog pages: overview, dataset list, dataset page with in-place steward edits,
schema history, and the stewardship worklists.

Sections that need the lineage graph (runs, upstream/downstream, orphans) are
server-rendered fragments of graph pages, loaded by the page's script: the
catalog does not import the graph app.

Edits follow one pattern: a small form fragment is fetched, posted back with
``X-Fragment: 1`` and answered with the re-rendered section; without
JavaScript the same views render a full page and redirect after the post.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.paginator import Paginator
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from catalog import actions, auth, queries
from catalog.errors import ApiError
from catalog.models import (
    ChangeRecord,
    Dataset,
    DatasetField,
    DatasetVersion,
    Namespace,
    PiiCategory,
    RetentionPolicy,
    Sensitivity,
    SubjectKind,
)
from catalog.params import optional_instant

read_required = permission_required(auth.READ_LINEAGE, raise_exception=True)
edit_required = permission_required(auth.EDIT_CATALOG, raise_exception=True)

CLASSIFICATION_ATTRIBUTES = ("pii_category", "subject_kind", "sensitivity", "retention_policy")
WORKLIST_LIMIT = 50


# --- helpers ---------------------------------------------------------------


def is_fragment(request: HttpRequest) -> bool:
    """Whether the page script asked for a partial (a section) rather than a whole page."""
    return request.headers.get("X-Fragment") == "1"


def dataset_url(dataset: Dataset, **extra: str) -> str:
    query = {"namespace": dataset.namespace.name, "name": dataset.name, **extra}
    return f"{reverse('dataset-detail')}?{urlencode(query)}"


def fetch_dataset(params: Any) -> Dataset:
    """The dataset named by ``namespace`` and ``name`` parameters, with its details, or 404."""
    dataset = queries.get_dataset(params.get("namespace", ""), params.get("name", ""))
    if dataset is None:
        raise Http404("No such dataset")
    return dataset


def field_node_prefix(dataset: Dataset) -> str:
    """The node id of the dataset's fields, short of the field name."""
    return f"datasetField:{dataset.namespace.name}:{dataset.name}:"


def fetch_field(dataset: Dataset, name: str) -> DatasetField:
    for f in dataset.fields.all():
        if f.name == name:
            return f
    raise Http404("No such field")


def page_as_of(request: HttpRequest) -> datetime | None:
    try:
        return optional_instant(request.GET)
    except ApiError:
        return None


@dataclass
class SchemaChange:
    name: str
    old_type: str
    new_type: str


@dataclass
class SchemaDiff:
    """What changed between two schema versions (fields by name)."""

    added: list[dict[str, Any]] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)
    changed: list[SchemaChange] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def schema_diff(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> SchemaDiff:
    """The fields added, removed and retyped going from ``old`` to ``new``."""
    before = {f["name"]: f for f in old}
    after = {f["name"]: f for f in new}
    diff = SchemaDiff(
        added=[f for f in new if f["name"] not in before],
        removed=[f for f in old if f["name"] not in after],
    )
    for name, f in after.items():
        if name in before and (before[name].get("type") or "") != (f.get("type") or ""):
            diff.changed.append(
                SchemaChange(name, before[name].get("type") or "", f.get("type") or "")
            )
    return diff


@dataclass
class VersionRow:
    version: DatasetVersion
    diff: SchemaDiff | None


def version_rows(versions: list[DatasetVersion]) -> list[VersionRow]:
    """Versions newest first, each with its diff against the version before it."""
    rows = []
    for i, version in enumerate(versions):
        older = versions[i + 1] if i + 1 < len(versions) else None
        rows.append(
            VersionRow(version, schema_diff(older.fields, version.fields) if older else None)
        )
    return rows


# --- forms -----------------------------------------------------------------


def _split(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


def owners_text(owners: list[dict[str, str]]) -> str:
    return ", ".join(f"{o['name']} ({o['type']})" if o.get("type") else o["name"] for o in owners)


class DatasetForm(forms.Form):
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    owners = forms.CharField(
        required=False,
        max_length=2000,
        help_text="Comma-separated; an ownership type in brackets, e.g. crm-team (DATA_OWNER)",
    )
    tags = forms.CharField(required=False, max_length=2000, help_text="Comma-separated")
    sensitivity = forms.ChoiceField(choices=[("", "—"), *Sensitivity.choices], required=False)
    retention_policy = forms.ModelChoiceField(
        queryset=RetentionPolicy.objects.all(), required=False, empty_label="none"
    )

    def clean_owners(self) -> list[actions.OwnerSpec]:
        specs = []
        for item in _split(self.cleaned_data["owners"]):
            name, _, rest = item.partition("(")
            if rest and not rest.endswith(")"):
                raise forms.ValidationError(f"Unclosed bracket in {item!r}")
            if not name.strip():
                raise forms.ValidationError(f"Missing owner name in {item!r}")
            specs.append(actions.OwnerSpec(name=name.strip(), type=rest.rstrip(")").strip()))
        return specs

    def clean_tags(self) -> list[str]:
        return sorted(set(_split(self.cleaned_data["tags"])))


class FieldForm(forms.Form):
    pii_category = forms.ChoiceField(
        label="Personal data", choices=[("", "none"), *PiiCategory.choices], required=False
    )
    subject_kind = forms.ModelChoiceField(
        label="Identifies subject",
        queryset=SubjectKind.objects.all(),
        required=False,
        empty_label="no",
    )
    sensitivity = forms.ChoiceField(choices=[("", "—"), *Sensitivity.choices], required=False)
    description = forms.CharField(required=False, max_length=4000)


def dataset_initial(dataset: Dataset) -> dict[str, Any]:
    return {
        "description": dataset.description,
        "owners": owners_text(
            [{"name": o.owner.name, "type": o.ownership_type} for o in dataset.ownerships.all()]
        ),
        "tags": ", ".join(t.name for t in dataset.tags.all()),
        "sensitivity": dataset.sensitivity,
        "retention_policy": dataset.retention_policy,
    }


# --- pages -----------------------------------------------------------------


@login_required
@read_required
def home(request: HttpRequest) -> HttpResponse:
    visible = Dataset.objects.filter(is_hidden=False)
    stats = visible.aggregate(
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
            "namespaces": Namespace.objects.annotate(n=Count("datasets")).order_by("name")[:200],
            "recent": visible.select_related("namespace").order_by("-last_seen")[:10],
        },
    )


def filtered_datasets(params: Any) -> QuerySet[Dataset]:
    """Datasets matching the list filters: text, namespace, PII, owner, retention, platform."""
    owner = params.get("owner") or None
    qs = queries.search_datasets(
        text=params.get("q", "").strip(),
        namespace=params.get("namespace") or None,
        pii=True if params.get("pii") == "1" else None,
        owner=None if owner == "-" else owner,
    )
    if owner == "-":
        qs = qs.filter(ownerships__isnull=True)
    retention = params.get("retention") or ""
    if retention == "-":
        qs = qs.filter(retention_policy__isnull=True)
    elif retention:
        qs = qs.filter(retention_policy__name=retention)
    if params.get("platform"):
        qs = qs.filter(platform=params["platform"])
    if params.get("tag"):
        qs = qs.filter(tags__name=params["tag"])
    return qs


@login_required
@read_required
@require_GET
def dataset_list(request: HttpRequest) -> HttpResponse:
    params = request.GET
    qs = filtered_datasets(params).order_by("namespace__name", "name")
    page = Paginator(qs, 50).get_page(params.get("page"))
    return render(
        request,
        "catalog/dataset_list.html",
        {
            "page": page,
            "nav": "datasets",
            "namespaces": Namespace.objects.order_by("name")[:500],
            "policies": RetentionPolicy.objects.order_by("name"),
            "platforms": platforms(),
            "filters": params,
            "query_without_page": urlencode(
                [(k, v) for k, v in params.items() if k != "page" and v]
            ),
        },
    )


def platforms() -> list[str]:
    return list(
        Dataset.objects.exclude(platform="")
        .order_by("platform")
        .values_list("platform", flat=True)
        .distinct()[:100]
    )


@login_required
@read_required
@require_GET
def dataset_detail(request: HttpRequest) -> HttpResponse:
    dataset = fetch_dataset(request.GET)
    as_of = page_as_of(request)
    state = queries.dataset_state_as_of(dataset, as_of) if as_of else None
    versions = queries.latest_versions(dataset, limit=21)
    fields = [f for f in dataset.fields.all() if f.removed_at is None]
    return render(
        request,
        "catalog/dataset_detail.html",
        {
            "dataset": dataset,
            "as_of": as_of,
            "as_of_param": as_of.isoformat().replace("+00:00", "Z") if as_of else "",
            "state": state,
            "fields": fields,
            "pii_count": sum(1 for f in fields if f.pii_category or f.subject_kind_id),
            "subject_count": sum(1 for f in fields if f.subject_kind_id),
            "field_node_prefix": field_node_prefix(dataset),
            "history": queries.history(dataset, limit=50),
            "versions": version_rows(versions)[:20],
            "version_choices": versions,
            "nav": "datasets",
            "editable": as_of is None,
        },
    )


@login_required
@read_required
@require_GET
def dataset_history(request: HttpRequest) -> HttpResponse:
    dataset = fetch_dataset(request.GET)
    return render(request, "catalog/_history.html", {"history": queries.history(dataset, limit=50)})


@login_required
@read_required
@require_GET
def schema_compare(request: HttpRequest) -> HttpResponse:
    """The diff between two schema versions of a dataset (``from`` and ``to`` version ids)."""
    dataset = fetch_dataset(request.GET)
    by_id: dict[str, DatasetVersion] = {}
    for key in ("from", "to"):
        version_id = _uuid_or_none(request.GET.get(key))
        version = dataset.versions.filter(version=version_id).first() if version_id else None
        if version is None:
            return HttpResponse(
                f"Choose two versions of this dataset ({key} is missing or unknown).",
                status=400,
                content_type="text/plain",
            )
        by_id[key] = version
    older, newer = sorted(by_id.values(), key=lambda v: v.created_at)
    context = {
        "dataset": dataset,
        "older": older,
        "newer": newer,
        "diff": schema_diff(older.fields, newer.fields),
    }
    template = "catalog/_schema_compare.html" if is_fragment(request) else "catalog/schema.html"
    return render(request, template, context)


def _uuid_or_none(raw: str | None) -> str | None:
    try:
        return str(uuid.UUID(raw or ""))
    except ValueError:
        return None


@login_required
@edit_required
@require_http_methods(["GET", "POST"])
def dataset_edit(request: HttpRequest) -> HttpResponse:
    """Steward edit of a dataset's description, owners, tags, sensitivity and retention."""
    dataset = fetch_dataset(request.GET)
    if request.method == "POST":
        form = DatasetForm(request.POST)
        if form.is_valid():
            actions.update_dataset(dataset, form.cleaned_data, actions.Actor(user=request.user))
            if not is_fragment(request):
                messages.success(request, "Dataset updated.")
                return HttpResponseRedirect(dataset_url(dataset))
            dataset = fetch_dataset(request.GET)
            return render(request, "catalog/_about.html", {"dataset": dataset, "editable": True})
    else:
        form = DatasetForm(initial=dataset_initial(dataset))
    context = {"dataset": dataset, "form": form}
    template = "catalog/_dataset_form.html" if is_fragment(request) else "catalog/edit.html"
    status = 422 if form.is_bound else 200
    return render(request, template, context, status=status)


@login_required
@edit_required
@require_http_methods(["GET", "POST"])
def field_edit(request: HttpRequest) -> HttpResponse:
    """Steward edit of one field's PII category, subject kind, sensitivity and description."""
    dataset = fetch_dataset(request.GET)
    target = fetch_field(dataset, request.GET.get("field", ""))
    if request.method == "POST":
        form = FieldForm(request.POST)
        if form.is_valid():
            actions.update_field(target, form.cleaned_data, actions.Actor(user=request.user))
            if not is_fragment(request):
                messages.success(request, f"Field {target.name} updated.")
                return HttpResponseRedirect(dataset_url(dataset))
            dataset = fetch_dataset(request.GET)
            return render(
                request,
                "catalog/_field_row.html",
                {
                    "dataset": dataset,
                    "field": fetch_field(dataset, target.name),
                    "editable": True,
                    "field_node_prefix": field_node_prefix(dataset),
                },
            )
    else:
        form = FieldForm(
            initial={
                "pii_category": target.pii_category,
                "subject_kind": target.subject_kind,
                "sensitivity": target.sensitivity,
                "description": target.description,
            }
        )
    context = {"dataset": dataset, "field": target, "form": form}
    template = "catalog/_field_form.html" if is_fragment(request) else "catalog/edit.html"
    status = 422 if form.is_bound else 200
    return render(request, template, context, status=status)


# --- stewardship -----------------------------------------------------------


def _has_personal_data() -> Exists:
    return Exists(
        DatasetField.objects.filter(
            Q(pii_category__gt="") | Q(subject_kind__isnull=False),
            dataset=OuterRef("pk"),
            removed_at__isnull=True,
        )
    )


def _has_subject_identifier() -> Exists:
    return Exists(
        DatasetField.objects.filter(
            dataset=OuterRef("pk"), subject_kind__isnull=False, removed_at__isnull=True
        )
    )


@dataclass
class Worklist:
    key: str
    title: str
    explanation: str
    count: int
    rows: list[Any]
    more_url: str = ""


def _worklist(key: str, title: str, explanation: str, qs: QuerySet[Dataset], more: str) -> Worklist:
    rows = list(
        qs.select_related("namespace", "retention_policy").order_by("name")[:WORKLIST_LIMIT]
    )
    count = len(rows) if len(rows) < WORKLIST_LIMIT else qs.count()
    return Worklist(key, title, explanation, count, rows, more)


@login_required
@read_required
@require_GET
def stewardship(request: HttpRequest) -> HttpResponse:
    """What needs a steward: unowned, PII without retention, subject identifiers, recent changes."""
    active = Dataset.objects.filter(is_hidden=False, lifecycle_state="ACTIVE")
    list_url = reverse("dataset-list")
    worklists = [
        _worklist(
            "unowned",
            "Unowned datasets",
            "Nobody to notify when these change or break.",
            active.filter(ownerships__isnull=True),
            f"{list_url}?owner=-",
        ),
        _worklist(
            "pii-no-retention",
            "Personal data without a retention policy",
            "Fields hold personal data, but nothing says how long rows may be kept.",
            active.filter(_has_personal_data(), retention_policy__isnull=True),
            f"{list_url}?pii=1&retention=-",
        ),
        _worklist(
            "subjects",
            "Datasets with subject identifiers",
            "A field identifies a data subject: these answer erasure and access requests.",
            active.filter(_has_subject_identifier()),
            "",
        ),
    ]
    subject_kinds = {
        row["dataset_id"]: row
        for row in DatasetField.objects.filter(
            dataset__in=[d.pk for d in worklists[2].rows], subject_kind__isnull=False
        )
        .values("dataset_id")
        .annotate(n=Count("id"))
    }
    for ds in worklists[2].rows:
        ds.subject_field_count = subject_kinds.get(ds.pk, {}).get("n", 0)
    recent = list(
        ChangeRecord.objects.filter(attribute__in=CLASSIFICATION_ATTRIBUTES)
        .select_related("dataset__namespace")
        .order_by("-at", "-id")[:WORKLIST_LIMIT]
    )
    return render(
        request,
        "catalog/stewardship.html",
        {"worklists": worklists, "recent": recent, "nav": "stewardship"},
    )
