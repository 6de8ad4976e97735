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

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required, permission_required
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods

from catalog import actions, auth, naming, queries
from catalog.errors import ApiError, error_response
from catalog.flags import field_flags
from catalog.models import (
    PERSONAL_DATA,
    ChangeRecord,
    Dataset,
    DatasetAlias,
    DatasetField,
    DatasetOwnership,
    DatasetVersion,
    FlagSource,
    Namespace,
    Owner,
    OwnerKind,
    PiiCategory,
    RetentionPolicy,
    Sensitivity,
    SubjectKind,
)
from catalog.params import optional_instant
from ingest import sql_queries

T = TypeVar("T")
read_required = permission_required(auth.READ_LINEAGE, raise_exception=True)
edit_required = permission_required(auth.EDIT_CATALOG, raise_exception=True)

CLASSIFICATION_ATTRIBUTES = ("pii_category", "subject_kind", "sensitivity", "retention_policy")
WORKLIST_LIMIT = 50
LIST_COUNT_CAP = 10_000
# Catalog-wide counts scan every dataset: computed at most once a minute per process.
CACHE_SECONDS = 60
OVERVIEW_CACHE_KEY, STEWARDSHIP_CACHE_KEY = actions.WORKLIST_CACHE_KEYS


# --- helpers ---------------------------------------------------------------


def cached(key: str, compute: Callable[[], T], seconds: int = CACHE_SECONDS) -> T:
    """``compute()``, reused for ``seconds`` by this process."""
    found = cache.get(key)
    if found is None:
        found = compute()
        cache.set(key, found, seconds)
    return cast(T, found)


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


def history_filter(request: HttpRequest) -> str:
    """Which change records the history shows: people's edits unless asked otherwise."""
    show = request.GET.get("show", "people")
    return show if show in queries.HISTORY_SOURCES else "people"


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


def tag_names(raw: str) -> list[str]:
    """Comma-separated tags as a sorted list of names, each at most 128 characters."""
    names = sorted(set(_split(raw)))
    long = next((name for name in names if len(name) > 128), None)
    if long is not None:
        raise forms.ValidationError(f"Tag {long[:40]!r}… is longer than 128 characters")
    return names


def owners_text(owners: list[dict[str, str]]) -> str:
    return ", ".join(f"{o['name']} ({o['type']})" if o.get("type") else o["name"] for o in owners)


# An owner's name: letters, digits and the punctuation team and people names use
# (team:crm, data-eng, Priya Novak, p.novak@example.com); its type in brackets after it.
OWNER_NAME = re.compile(r"[\w][\w .:@/+'&-]*")
OWNER_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_ ]*")


class DatasetForm(forms.Form):
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    owners = forms.CharField(
        required=False,
        max_length=2000,
        help_text="Comma-separated; an ownership type in brackets, e.g. crm-team (DATA_OWNER)",
    )
    add_owner = forms.CharField(
        required=False,
        max_length=255,
        label="Add an owner",
        widget=forms.TextInput(
            attrs={
                "list": "known-owners",
                "autocomplete": "off",
                "placeholder": "Find a team or user",
            }
        ),
    )
    add_owner_type = forms.CharField(
        required=False,
        max_length=64,
        label="as",
        widget=forms.TextInput(attrs={"placeholder": "DATA_OWNER"}),
    )
    new_owners = forms.BooleanField(
        required=False,
        label="Add owners not known yet",
        help_text="Without this, every owner must be a known owner or user.",
    )
    tags = forms.CharField(required=False, max_length=2000, help_text="Comma-separated")
    sensitivity = forms.ChoiceField(choices=[("", "—"), *Sensitivity.choices], required=False)
    retention_policy = forms.ModelChoiceField(
        queryset=RetentionPolicy.objects.all(), required=False, empty_label="none"
    )

    def clean_owners(self) -> list[actions.OwnerSpec]:
        specs = []
        for item in _split(self.cleaned_data["owners"]):
            name, bracket, rest = item.partition("(")
            name, kind = name.strip(), rest.strip()
            if bracket and not kind.endswith(")"):
                raise forms.ValidationError(f"Unclosed bracket in {item!r}")
            kind = kind.removesuffix(")").strip()
            if not name:
                raise forms.ValidationError(f"Missing owner name in {item!r}")
            if bracket and not OWNER_TYPE.fullmatch(kind):
                raise forms.ValidationError(
                    f"{kind!r} is not an ownership type: letters, digits and _ only,"
                    " e.g. DATA_OWNER"
                )
            specs.append(actions.OwnerSpec(name=name, type=kind))
        return specs

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        specs = cleaned.get("owners")
        if specs is None:
            return cleaned
        added = (cleaned.get("add_owner") or "").strip()
        if added:
            kind = (cleaned.get("add_owner_type") or "").strip()
            if kind and not OWNER_TYPE.fullmatch(kind):
                self.add_error(
                    "add_owner_type",
                    f"{kind!r} is not an ownership type: letters, digits and _ only,"
                    " e.g. DATA_OWNER",
                )
                return cleaned
            if all(spec.name != added for spec in specs):
                specs.append(actions.OwnerSpec(name=added, type=kind))
        if specs:
            names = {spec.name for spec in specs}
            known = set(Owner.objects.filter(name__in=names).values_list("name", flat=True))
            users = get_user_model().objects.filter(username__in=names, is_active=True)
            people = set(users.values_list("username", flat=True)) - known
            known |= people
            # A user picked from the list is a person, not a team.
            specs[:] = [
                replace(spec, kind=OwnerKind.PERSON) if spec.name in people else spec
                for spec in specs
            ]
            unknown = sorted(names - known)
            malformed = [n for n in unknown if not OWNER_NAME.fullmatch(n) or len(n) > 255]
            if malformed:
                self.add_error(
                    "owners",
                    f"{malformed[0]!r} is not an owner name: letters, digits, spaces and"
                    " . : @ / + ' & - only, at most 255 characters (the ownership type goes in"
                    " round brackets)",
                )
            elif unknown and not cleaned.get("new_owners"):
                self.add_error(
                    "owners",
                    f"Not a known owner or user: {', '.join(unknown)}. Pick one from the list,"
                    ' or tick "Add owners not known yet" to create it.',
                )
        return cleaned

    def clean_tags(self) -> list[str]:
        return tag_names(self.cleaned_data["tags"])


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
    new_subject_kind = forms.CharField(
        label="or a new subject kind", required=False, max_length=64, strip=True
    )
    sensitivity = forms.ChoiceField(choices=[("", "—"), *Sensitivity.choices], required=False)
    description = forms.CharField(required=False, max_length=4000)
    tags = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.TextInput(attrs={"placeholder": "comma-separated"}),
    )

    def clean_tags(self) -> list[str]:
        return tag_names(self.cleaned_data["tags"])

    def clean_new_subject_kind(self) -> str:
        name: str = self.cleaned_data.get("new_subject_kind", "")
        if name and not actions.SUBJECT_KIND_NAME.match(name):
            raise forms.ValidationError(actions.SUBJECT_KIND_RULE)
        return name


FLAG_ACTIONS = {
    "block": {"propagation_blocked": True},
    "unblock": {"propagation_blocked": False},
}


def with_flags(fields: list[DatasetField]) -> list[DatasetField]:
    """The fields, each with its flag's ``flag`` (where a propagated one came from)."""
    flags = field_flags(fields)
    for f in fields:
        f.flag = flags[f.pk]  # type: ignore[attr-defined]
    return fields


def field_changes(target: DatasetField, cleaned: dict[str, Any]) -> dict[str, Any]:
    """What a posted field form changes. A field showing a propagated flag is declared only
    when the flag posted differs from the one shown (the form shows it); none posted on it
    means "not personal data here": a block."""
    changes = dict(cleaned)
    name = changes.pop("new_subject_kind", "")
    if name:
        changes["subject_kind"] = actions.ensure_subject_kind(name)
    if target.flag_source == FlagSource.PROPAGATED:
        shown = (target.pii_category, target.subject_kind)
        posted = (changes.get("pii_category", ""), changes.get("subject_kind"))
        if posted == shown:
            changes.pop("pii_category", None)
            changes.pop("subject_kind", None)
        elif posted == ("", None):
            changes.pop("pii_category", None)
            changes.pop("subject_kind", None)
            changes["propagation_blocked"] = True
    return changes


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


def overview_stats() -> dict[str, Any]:
    """Catalog-wide counts for the overview, recomputed at most once a minute."""

    def compute() -> dict[str, Any]:
        visible = Dataset.objects.filter(is_hidden=False)
        owned = DatasetOwnership.objects.filter(dataset=OuterRef("pk"))
        return {
            "datasets": visible.count(),
            "unowned": visible.filter(~Exists(owned)).count(),
            "pii_fields": DatasetField.objects.filter(
                PERSONAL_DATA, removed_at__isnull=True
            ).count(),
            # Namespaces that hold datasets (those of jobs alone are found by search).
            "namespaces": list(
                Namespace.objects.annotate(n=Count("datasets", filter=Q(datasets__is_hidden=False)))
                .filter(n__gt=0)
                .order_by("name")[:200]
            ),
            "at": timezone.now(),
        }

    return cached(OVERVIEW_CACHE_KEY, compute)


@login_required
@read_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "catalog/home.html",
        {
            "stats": overview_stats(),
            "recent": Dataset.objects.filter(is_hidden=False)
            .select_related("namespace")
            .order_by("-last_seen")[:10],
        },
    )


def filtered_datasets(params: Any) -> QuerySet[Dataset]:
    """Datasets matching the list filters: text, namespace, PII, owner, retention, platform, tag.

    Filters on related rows are EXISTS subqueries, so no DISTINCT is needed and
    the name index can serve the ordering.
    """
    qs = Dataset.objects.filter(is_hidden=False)
    text = (params.get("q") or "").strip()
    if text:
        # A dataset is found by its aliases' names too (its other names: symlinks).
        qs = qs.filter(
            Q(name__icontains=text)
            | Q(description__icontains=text)
            | Exists(DatasetAlias.objects.filter(dataset=OuterRef("pk"), name__icontains=text))
        )
    if params.get("namespace"):
        qs = qs.filter(namespace__name=naming.canonical_namespace(params["namespace"]))
    if params.get("pii") == "1":
        qs = qs.filter(_has_personal_data())
    owner = params.get("owner") or ""
    if owner == "-":
        qs = qs.filter(~Exists(DatasetOwnership.objects.filter(dataset=OuterRef("pk"))))
    elif owner:
        qs = qs.filter(
            Exists(DatasetOwnership.objects.filter(dataset=OuterRef("pk"), owner__name=owner))
        )
    retention = params.get("retention") or ""
    if retention == "-":
        qs = qs.filter(retention_policy__isnull=True)
    elif retention:
        qs = qs.filter(retention_policy__name=retention)
    if params.get("platform"):
        qs = qs.filter(platform=params["platform"])
    if params.get("tag"):
        # Tagged themselves, or through a field of theirs.
        qs = qs.filter(
            Exists(
                Dataset.tags.through.objects.filter(
                    dataset_id=OuterRef("pk"), tag__name=params["tag"]
                )
            )
            | Exists(
                DatasetField.tags.through.objects.filter(
                    datasetfield__dataset_id=OuterRef("pk"),
                    datasetfield__removed_at__isnull=True,
                    tag__name=params["tag"],
                )
            )
        )
    return qs


@dataclass
class ListPage:
    """One page of a long list, counted only up to a cap (counting 100,000 rows is slow)."""

    rows: list[Any]
    number: int
    has_next: bool
    count: int
    capped: bool

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def previous_page_number(self) -> int:
        return self.number - 1

    @property
    def next_page_number(self) -> int:
        return self.number + 1

    @property
    def has_other_pages(self) -> bool:
        return self.has_next or self.has_previous


def list_page(qs: QuerySet[Any], raw_page: str | None, per_page: int = 50) -> ListPage:
    """One page of ``qs`` by name.

    The matching (pk, name) pairs are fetched first without an order, up to
    the cap: a rare filter then costs one hash join instead of a walk of the
    name index probing every dataset; past the cap the index walk finds a page
    quickly, and the count says "more than".
    """
    try:
        number = max(1, min(int(raw_page or 1), 10_000))
    except ValueError:
        number = 1
    start = (number - 1) * per_page
    keys = list(qs.order_by().values_list("pk", "name")[: LIST_COUNT_CAP + 1])
    if len(keys) > LIST_COUNT_CAP:
        rows = list(qs[start : start + per_page + 1])
    else:
        keys.sort(key=lambda key: (key[1], key[0]))
        wanted = [pk for pk, _name in keys[start : start + per_page + 1]]
        by_pk = {row.pk: row for row in qs.filter(pk__in=wanted)}
        rows = [by_pk[pk] for pk in wanted if pk in by_pk]
    return ListPage(
        rows=rows[:per_page],
        number=number,
        has_next=len(rows) > per_page,
        count=min(len(keys), LIST_COUNT_CAP),
        capped=len(keys) > LIST_COUNT_CAP,
    )


@login_required
@read_required
@require_GET
def dataset_list(request: HttpRequest) -> HttpResponse:
    params = request.GET
    qs = (
        filtered_datasets(params)
        .select_related("namespace", "retention_policy")
        .prefetch_related(
            Prefetch(
                "ownerships",
                queryset=DatasetOwnership.objects.select_related("owner").order_by("owner__name"),
            )
        )
        .order_by("name", "pk")
    )
    return render(
        request,
        "catalog/dataset_list.html",
        {
            "page": list_page(qs, params.get("page")),
            "nav": "datasets",
            "namespaces": Namespace.objects.filter(
                Exists(Dataset.objects.filter(namespace=OuterRef("pk"), is_hidden=False))
            ).order_by("name")[:500],
            # The namespace filtered on, for its owner and description.
            "namespace": queries.get_namespace(params["namespace"])
            if params.get("namespace")
            else None,
            "policies": RetentionPolicy.objects.order_by("name"),
            "platforms": platforms(),
            "filters": params,
            "query_without_page": urlencode(
                [(k, v) for k, v in params.items() if k != "page" and v]
            ),
        },
    )


def platforms() -> list[str]:
    """The platforms datasets are on, for filter menus (a full scan: cached for a while)."""

    def compute() -> list[str]:
        return list(
            Dataset.objects.exclude(platform="")
            .order_by("platform")
            .values_list("platform", flat=True)
            .distinct()[:100]
        )

    return cached("explorer:platforms", compute, 10 * CACHE_SECONDS)


@login_required
@read_required
@require_GET
def dataset_detail(request: HttpRequest) -> HttpResponse:
    dataset = fetch_dataset(request.GET)
    try:
        as_of = optional_instant(request.GET)
    except ApiError as exc:
        return error_response(request, 400, exc.message, exc.field)
    show = history_filter(request)
    context: dict[str, Any] = {
        "dataset": dataset,
        "as_of": as_of,
        "as_of_param": as_of.isoformat().replace("+00:00", "Z") if as_of else "",
        "field_node_prefix": field_node_prefix(dataset),
        "history": queries.history(dataset, limit=50, show=show, as_of=as_of),
        "history_show": show,
        "history_choices": HISTORY_CHOICES,
        "nav": "datasets",
        "editable": as_of is None,
    }
    names = [(dataset.namespace.name, dataset.name)]
    names += [(a.namespace.name, a.name) for a in dataset.aliases.select_related("namespace")]
    context["readers"] = sql_queries.readers_of(names, as_of=as_of)
    versions = queries.latest_versions(dataset, limit=21, as_of=as_of)
    context["versions"] = version_rows(versions)[:20]
    context["version_choices"] = versions
    if as_of is None:
        fields = with_flags([f for f in dataset.fields.all() if f.removed_at is None])
        context["fields"] = fields
        context["pii_count"] = sum(1 for f in fields if f.pii_category or f.subject_kind_id)
        context["subject_count"] = sum(1 for f in fields if f.subject_kind_id)
    else:
        state = queries.dataset_state_as_of(dataset, as_of)
        context["state"] = state
        context["pii_count"] = state.pii_count
        context["subject_count"] = state.subject_count
    return render(request, "catalog/dataset_detail.html", context)


HISTORY_CHOICES = (("people", "Edits by people"), ("lineage", "Lineage events"), ("all", "All"))


@login_required
@read_required
@require_GET
def dataset_history(request: HttpRequest) -> HttpResponse:
    dataset = fetch_dataset(request.GET)
    show = history_filter(request)
    return render(
        request,
        "catalog/_history.html",
        {"history": queries.history(dataset, limit=50, show=show), "history_show": show},
    )


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


def known_owners(limit: int = 1000) -> list[str]:
    """Owners and users by name, for the owner picker."""
    names = set(Owner.objects.order_by("name").values_list("name", flat=True)[:limit])
    users = get_user_model().objects.filter(is_active=True).order_by("username")
    names |= set(users.values_list("username", flat=True)[:limit])
    return sorted(names)


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
    context = {"dataset": dataset, "form": form, "known_owners": known_owners()}
    template = "catalog/_dataset_form.html" if is_fragment(request) else "catalog/edit.html"
    status = 422 if form.is_bound else 200
    return render(request, template, context, status=status)


@login_required
@edit_required
@require_http_methods(["GET", "POST"])
def field_edit(request: HttpRequest) -> HttpResponse:
    """Steward edit of one field's PII category, subject kind, sensitivity, description and
    tags."""
    dataset = fetch_dataset(request.GET)
    target = fetch_field(dataset, request.GET.get("field", ""))
    if request.method == "POST" and request.POST.get("action"):
        actor = actions.Actor(user=request.user)
        action = request.POST["action"]
        if action == "confirm" and target.flag_source == FlagSource.PROPAGATED:
            actions.confirm_flag(target, actor)
        elif action in FLAG_ACTIONS:
            actions.update_field(target, FLAG_ACTIONS[action], actor)
        else:
            return error_response(request, 400, f"Unknown action {action[:40]!r}", "action")
        messages.success(request, f"Field {target.name} updated.")
        return HttpResponseRedirect(dataset_url(dataset))
    if request.method == "POST":
        form = FieldForm(request.POST)
        if form.is_valid():
            changes = field_changes(target, form.cleaned_data)
            actions.update_field(target, changes, actions.Actor(user=request.user))
            if not is_fragment(request):
                messages.success(request, f"Field {target.name} updated.")
                return HttpResponseRedirect(dataset_url(dataset))
            dataset = fetch_dataset(request.GET)
            return render(
                request,
                "catalog/_field_row.html",
                {
                    "dataset": dataset,
                    "field": with_flags([fetch_field(dataset, target.name)])[0],
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
                "tags": ", ".join(t.name for t in target.tags.all()),
            }
        )
    context = {"dataset": dataset, "field": target, "form": form}
    template = "catalog/_field_form.html" if is_fragment(request) else "catalog/edit.html"
    status = 422 if form.is_bound else 200
    return render(request, template, context, status=status)


class SignInView(LoginView):
    """Django's sign-in page, saying where the demo's logins are when ``make run`` made them."""

    template_name = "registration/login.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)
        logins = Path(settings.DATA_DIR) / "demo-login.txt"
        context["demo_login"] = str(logins) if logins.exists() else ""
        return context


# --- stewardship -----------------------------------------------------------


MAX_LITERAL_IDS = 5000


def with_fields(condition: Q) -> Q:
    """Datasets having a current field that meets ``condition``.

    The field indexes find those fields quickly; when they belong to few
    datasets the keys go into the query as a list, so the planner fetches the
    candidates by key instead of walking every dataset (by name, say) and
    probing each. Many datasets: a subquery.
    """
    fields = DatasetField.objects.filter(condition, removed_at__isnull=True).order_by()
    ids = list(fields.values_list("dataset_id", flat=True).distinct()[: MAX_LITERAL_IDS + 1])
    if len(ids) <= MAX_LITERAL_IDS:
        return Q(pk__any_of=ids)
    return Q(pk__in=fields.values("dataset_id"))


def _has_personal_data() -> Q:
    return with_fields(PERSONAL_DATA)


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
        qs.select_related("namespace", "retention_policy").order_by("name", "pk")[:WORKLIST_LIMIT]
    )
    count = len(rows) if len(rows) < WORKLIST_LIMIT else qs.count()
    return Worklist(key, title, explanation, count, rows, more)


def stewardship_worklists() -> dict[str, Any]:
    """The stewardship lists and counts, recomputed at most once a minute (and after edits)."""

    def compute() -> dict[str, Any]:
        active = Dataset.objects.filter(is_hidden=False, lifecycle_state="ACTIVE")
        list_url = reverse("dataset-list")
        owned = DatasetOwnership.objects.filter(dataset=OuterRef("pk"))
        worklists = [
            _worklist(
                "unowned",
                "Unowned datasets",
                "Nobody to notify when these change or break.",
                active.filter(~Exists(owned)),
                f"{list_url}?owner=-",
            ),
            _worklist(
                "pii-no-retention",
                "Personal data without a retention policy",
                "Fields hold personal data, but nothing says how long rows may be kept.",
                active.filter(with_fields(PERSONAL_DATA), retention_policy__isnull=True),
                f"{list_url}?pii=1&retention=-",
            ),
            _worklist(
                "subjects",
                "Datasets with subject identifiers",
                "A field identifies a data subject: these answer erasure and access requests.",
                active.filter(with_fields(Q(subject_kind__isnull=False))),
                "",
            ),
        ]
        subject_counts = dict(
            DatasetField.objects.filter(
                dataset__in=[ds.pk for ds in worklists[2].rows],
                subject_kind__isnull=False,
                removed_at__isnull=True,
            )
            .order_by()
            .values_list("dataset_id")
            .annotate(n=Count("id"))
        )
        for ds in worklists[2].rows:
            ds.subject_field_count = subject_counts.get(ds.pk, 0)
        return {"worklists": worklists, "at": timezone.now()}

    return cached(STEWARDSHIP_CACHE_KEY, compute)


class SubjectKindForm(forms.Form):
    name = forms.CharField(max_length=64, strip=True)
    description = forms.CharField(required=False, max_length=2000, strip=True)


@login_required
@require_http_methods(["GET", "POST"])
def subject_kinds(request: HttpRequest) -> HttpResponse:
    """The kinds of data subject: defined and described by stewards, read by compliance."""
    may_edit = auth.has_perm(request.user, auth.EDIT_CATALOG)
    if not (may_edit or auth.has_perm(request.user, auth.SEARCH_SUBJECTS)):
        raise PermissionDenied("Subject kinds are for stewards and compliance officers")
    form = SubjectKindForm()
    status = 200
    if request.method == "POST":
        if not may_edit:
            raise PermissionDenied("Defining subject kinds needs the steward role")
        form = SubjectKindForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            existing = SubjectKind.objects.filter(name=data["name"]).first()
            try:
                if existing is not None and request.POST.get("edit"):
                    actions.describe_subject_kind(existing, data["description"])
                else:
                    actions.create_subject_kind(data["name"], data["description"])
            except actions.SubjectKindError as exc:
                form.add_error(exc.field, exc.message)
            else:
                messages.success(request, f"Subject kind {data['name']} saved.")
                return HttpResponseRedirect(reverse("subject-kinds"))
        status = 422
    kinds = SubjectKind.objects.annotate(
        n=Count("fields", filter=Q(fields__removed_at__isnull=True))
    ).order_by("name")
    context = {"kinds": kinds, "form": form, "may_edit": may_edit, "nav": "stewardship"}
    return render(request, "catalog/subject_kinds.html", context, status=status)


@login_required
@read_required
@require_GET
def stewardship(request: HttpRequest) -> HttpResponse:
    """What needs a steward: unowned, PII without retention, subject identifiers, recent changes."""
    lists = stewardship_worklists()
    recent = list(
        ChangeRecord.objects.filter(attribute__in=CLASSIFICATION_ATTRIBUTES)
        .select_related("dataset__namespace")
        .order_by("-at", "-id")[:WORKLIST_LIMIT]
    )
    return render(
        request,
        "catalog/stewardship.html",
        {
            "worklists": lists["worklists"],
            "computed_at": lists["at"],
            "recent": recent,
            "nav": "stewardship",
        },
    )
