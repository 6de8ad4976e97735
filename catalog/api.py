"""Catalog REST API in Marquez's shapes, extended with owners, PII and retention."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog import actions, naming, queries
from catalog.auth import ReadOrEditCatalog
from catalog.errors import ApiError
from catalog.flags import FieldFlag, field_flags
from catalog.models import (
    ApiToken,
    ChangeRecord,
    Dataset,
    DatasetField,
    FlagSource,
    LifecycleState,
    Namespace,
    OwnerKind,
    PiiCategory,
    RetentionPolicy,
    Sensitivity,
    SubjectKind,
)
from catalog.params import StrictInput, TextField, int_param, optional_instant, strict_body
from catalog.schema import (
    CHANGE,
    DATASET,
    DATASET_AS_OF,
    FIELD,
    NAMESPACE,
    TOKEN,
    arr,
    instant_parameter,
    obj,
    page_of,
    paging_parameters,
)

# Accept headers that API clients send and that mean "JSON": no media types to parse.
PLAIN_ACCEPT = frozenset({"*/*", "application/json"})


class PlainJsonNegotiation:
    """Answers a plain JSON request with the first renderer, skipping DRF's media-type
    parsing (a tenth of a small request's time); anything else negotiates as usual."""

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        if "format" not in request.query_params and (
            request.META.get("HTTP_ACCEPT", "*/*") in PLAIN_ACCEPT
        ):
            renderer = cast(APIView, self).get_renderers()[0]
            return renderer, renderer.media_type
        return super().perform_content_negotiation(request, force)  # type: ignore[misc]


class JsonOnlyNegotiation(DefaultContentNegotiation):
    """For views that always answer JSON: ``?format=`` is not about the response (DRF would
    answer 404 for a format none of their renderers has)."""

    class settings:  # stands in for DRF's api_settings
        URL_FORMAT_OVERRIDE = None


def iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def namespace_json(ns: Namespace) -> dict[str, Any]:
    return {
        "name": ns.name,
        "createdAt": iso(ns.created_at),
        "updatedAt": iso(ns.updated_at),
        "ownerName": ns.owner_name or None,
        "description": ns.description or None,
        "isHidden": False,
    }


def retention_json(policy: RetentionPolicy | None) -> dict[str, Any] | None:
    if policy is None:
        return None
    return {
        "name": policy.name,
        "durationDays": policy.duration_days,
        "action": policy.action,
        "legalBasis": policy.legal_basis or None,
    }


def flag_json(flag: FieldFlag) -> dict[str, Any]:
    """A field's personal-data flag: declared or propagated (from which declared fields)."""
    return {
        "pii": flag.pii or None,
        "subjectKind": flag.subject_kind,
        "flagSource": flag.source,
        "masked": flag.masked,
        "propagatedFrom": list(flag.propagated_from),
        "propagationBlocked": flag.blocked,
    }


def field_json(f: DatasetField, flag: FieldFlag | None = None) -> dict[str, Any]:
    if flag is None:
        flag = field_flags([f])[f.pk]
    return {
        "name": f.name,
        "type": f.type or None,
        "tags": [t.name for t in f.tags.all()],
        "description": f.description or None,
        **flag_json(flag),
        "sensitivity": f.sensitivity or None,
        "removed": f.removed_at is not None,
    }


def dataset_json(ds: Dataset, flags: dict[int, FieldFlag] | None = None) -> dict[str, Any]:
    """Marquez's dataset shape, plus owners, retention, sensitivity and PII per field
    (``flags``: the fields' flags, when the caller read them for many datasets at once)."""
    fields = [f for f in ds.fields.all() if f.removed_at is None]
    if flags is None:
        flags = field_flags(fields)
    return {
        "id": {"namespace": ds.namespace.name, "name": ds.name},
        "type": "DB_TABLE",
        "name": ds.name,
        "physicalName": ds.name,
        "createdAt": iso(ds.created_at),
        "updatedAt": iso(ds.updated_at),
        "namespace": ds.namespace.name,
        "sourceName": ds.source_name or ds.namespace.name,
        "fields": [field_json(f, flags[f.pk]) for f in fields],
        "tags": [t.name for t in ds.tags.all()],
        "lastModifiedAt": iso(ds.last_seen),
        "lastLifecycleState": ds.lifecycle_state,
        "description": ds.description or None,
        "facets": {},
        "deleted": ds.lifecycle_state == "DROPPED",
        "nodeId": ds.node_id,
        "platform": ds.platform or None,
        "location": ds.location or None,
        "sensitivity": ds.sensitivity or None,
        "owners": [
            {
                "name": o.owner.name,
                "type": o.ownership_type or None,
                "kind": o.owner.kind,
                "displayName": o.owner.display_name or None,
                "email": o.owner.email or None,
            }
            for o in ds.ownerships.all()
        ],
        "retentionPolicy": retention_json(ds.retention_policy),
        "firstSeen": iso(ds.first_seen),
        "lastSeen": iso(ds.last_seen),
        # Its other names (the symlinks facet): lineage and lookups under them land here.
        "aliases": [{"namespace": a.namespace.name, "name": a.name} for a in ds.aliases.all()],
    }


def dataset_as_of_json(ds: Dataset, as_of: datetime) -> dict[str, Any]:
    """The dataset's steward-visible state as it was at ``as_of``."""
    state = queries.dataset_state_as_of(ds, as_of)
    policy = RetentionPolicy.objects.filter(name=state.retention_policy).first()
    body = dataset_json(ds)
    states = {s.label: s.value for s in LifecycleState}
    lifecycle = states.get(state.lifecycle) if state.exists else None
    body.update(
        {
            "asOf": iso(as_of),
            "existed": state.exists,
            "lastLifecycleState": lifecycle,
            "deleted": lifecycle == LifecycleState.DROPPED,
            "description": state.description or None,
            "sensitivity": state.sensitivity or None,
            "owners": [{"name": o["name"], "type": o.get("type") or None} for o in state.owners],
            "tags": state.tags,
            "retentionPolicy": retention_json(policy)
            if policy
            else ({"name": state.retention_policy} if state.retention_policy else None),
            "fields": [
                {
                    "name": f.name,
                    "type": f.type or None,
                    "tags": f.tags,
                    "description": f.description or None,
                    **flag_json(f.flag),
                    "sensitivity": f.sensitivity or None,
                }
                for f in state.fields
            ],
        }
    )
    return body


def change_json(record: ChangeRecord) -> dict[str, Any]:
    return {
        "at": iso(record.at),
        "actor": record.actor_name,
        "source": record.source,
        "field": record.field_name or None,
        "attribute": record.attribute,
        "old": record.old,
        "new": record.new,
    }


def whole_name(namespace: str, name: str, tail: str) -> str | None:
    """``name + tail`` when that names a dataset, or a field of a dataset other than
    ``name`` (field_reading): a name's %2F decodes to a slash before routing, so
    ``…/datasets/raw%2Fhistory`` reaches the history route of ``raw`` too, and a field
    named ``a/history`` that route as well. The longer reading wins, as the longest
    namespace does in a node id."""
    canonical_namespace, canonical_name = naming.canonical(namespace, name + tail)
    found = Dataset.objects.filter(namespace__name=canonical_namespace, name=canonical_name)
    if found.exists() or field_reading(namespace, name + tail, skip=name):
        return name + tail
    return None


def field_reading(namespace: str, path: str, skip: str = "") -> tuple[str, str] | None:
    """``path`` (a name after ``…/datasets/``) read as ``{dataset}/fields/{field}``, the
    longest dataset first, for a dataset that has that field; ``skip`` is a dataset the
    caller has read it as already. A field's name may hold slashes, which no route's
    pattern can tell from the name's."""
    at = path.rfind("/fields/")
    while at > 0:
        if path[:at] != skip:
            dataset = queries.get_dataset(namespace, path[:at])
            if dataset is not None and any(f.name == path[at + 8 :] for f in dataset.fields.all()):
                return path[:at], path[at + 8 :]
        at = path.rfind("/fields/", 0, at)
    return None


def as_dataset(request: Request, namespace: str, whole: str | None) -> Response:
    """The request, answered as one for the dataset named ``whole`` (whole_name), with that
    view's permissions; without such a dataset, its method is not allowed here."""
    view = DatasetDetailView()
    method = "get" if request.method == "HEAD" else (request.method or "").lower()
    handler = getattr(view, method, None)
    if whole is None or handler is None:
        raise exceptions.MethodNotAllowed(request.method or "")
    view.check_permissions(request)
    response: Response = handler(request, namespace, whole)
    return response


# A read-only route under a dataset's name (``…/datasets/{name}{tail}``): a dataset of the
# whole name is edited through it too (whole_name), but PATCH is not this route's own, so it
# is neither in the schema nor in its ``Allow`` header. (A comment, not a docstring: the API
# reference would show a docstring as each route's description.)
class UnderDatasetName(APIView):
    tail = ""

    def http_method_not_allowed(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        # DRF calls this with its own request, after authenticating and checking permissions.
        drf_request = cast(Request, request)
        if request.method == "PATCH":
            namespace, name = kwargs["namespace"], kwargs["name"]
            whole = whole_name(namespace, name, self.tail)
            return as_dataset(drf_request, namespace, whole)
        return super().http_method_not_allowed(drf_request, *args, **kwargs)


def fetch_dataset(namespace: str, name: str) -> Dataset:
    dataset = queries.get_dataset(namespace, name)
    if dataset is None:
        raise ApiError(f"Dataset {namespace}:{name} not found", "name", status_code=404)
    return dataset


class NamespaceListView(APIView):
    @extend_schema(
        responses={200: obj({"namespaces": arr(NAMESPACE)})},
        summary="List namespaces",
        operation_id="listNamespaces",
    )
    def get(self, request: Request) -> Response:
        return Response({"namespaces": [namespace_json(ns) for ns in Namespace.objects.all()]})


class NamespaceInput(StrictInput):
    ownerName = TextField(max_length=255)
    description = TextField(required=False, allow_blank=True, allow_null=True, max_length=10000)


class NamespaceDetailView(APIView):
    permission_classes = [ReadOrEditCatalog]

    def _namespace(self, namespace: str) -> Namespace:
        ns = queries.get_namespace(namespace)
        if ns is None:
            raise ApiError(f"Namespace {namespace} not found", "namespace", status_code=404)
        return ns

    @extend_schema(responses={200: NAMESPACE}, summary="One namespace", operation_id="getNamespace")
    def get(self, request: Request, namespace: str) -> Response:
        return Response(namespace_json(self._namespace(namespace)))

    @extend_schema(
        request=NamespaceInput,
        responses={200: NAMESPACE},
        summary="Set a namespace's owner and description",
        description="As Marquez's: both are set each time (no description clears it). "
        "Namespaces come from lineage and catalog files: an unknown one answers 404.",
        operation_id="updateNamespace",
    )
    def put(self, request: Request, namespace: str) -> Response:
        ns = self._namespace(namespace)
        data = strict_body(NamespaceInput, request.data)
        actions.describe_namespace(ns, data["ownerName"], data.get("description") or "")
        return Response(namespace_json(ns))


def paged(request: Request, qs: QuerySet[Any]) -> tuple[list[Any], int]:
    limit = int_param(request.query_params, "limit", 100, 1, 1000)
    offset = int_param(request.query_params, "offset", 0, 0, 10**9)
    return list(qs[offset : offset + limit]), qs.count()


class DatasetListView(APIView):
    @extend_schema(
        responses={200: page_of("datasets", DATASET)},
        summary="Datasets of a namespace",
        operation_id="listDatasets",
        parameters=[
            *paging_parameters(),
        ],
    )
    def get(self, request: Request, namespace: str) -> Response:
        if queries.get_namespace(namespace) is None:
            raise ApiError(f"Namespace {namespace} not found", "namespace", status_code=404)
        namespace = naming.canonical_namespace(namespace)
        qs = queries.datasets_with_details().filter(namespace__name=namespace).order_by("name")
        rows, total = paged(request, qs)
        flags = field_flags([f for d in rows for f in d.fields.all() if f.removed_at is None])
        return Response({"totalCount": total, "datasets": [dataset_json(d, flags) for d in rows]})


class OwnerInput(serializers.Serializer[Any]):
    name = TextField(max_length=255)
    # Null where a dataset's answer shows null, so that its owners can be sent back as read.
    type = TextField(max_length=64, required=False, allow_blank=True, allow_null=True, default="")
    kind = serializers.ChoiceField(
        choices=OwnerKind.choices,
        required=False,
        default="",
        help_text="the owner's kind, changed when given; a new owner without one is a team",
    )
    email = serializers.EmailField(
        required=False,
        allow_blank=True,
        allow_null=True,
        max_length=254,
        help_text="the owner's own (every dataset they own): null keeps it, '' clears it",
    )
    displayName = TextField(
        required=False, allow_blank=True, allow_null=True, max_length=255, help_text="as email"
    )


def _new_tag_name(name: str) -> None:
    if problem := actions.tag_name_problem(name):
        raise serializers.ValidationError(problem[0].upper() + problem[1:])


def tag_list(help_text: str) -> serializers.ListField:
    """Tag names as a PATCH gives them: white space around each is dropped, and a new one
    holds no comma (catalog.actions.tag_name_problem)."""
    name = TextField(max_length=128, validators=[_new_tag_name])
    return serializers.ListField(child=name, required=False, max_length=100, help_text=help_text)


class DatasetPatchInput(StrictInput):
    description = TextField(required=False, allow_blank=True, max_length=10000)
    sensitivity = serializers.ChoiceField(
        choices=Sensitivity.values, required=False, allow_null=True, allow_blank=True
    )
    owners = serializers.ListField(child=OwnerInput(), required=False, max_length=100)
    tags = tag_list("the dataset's tags, all of them: [] removes every one")
    retentionPolicy = TextField(required=False, allow_null=True, max_length=128)

    def validate_retentionPolicy(self, value: str | None) -> RetentionPolicy | None:
        if value is None or value == "":
            return None
        policy = RetentionPolicy.objects.filter(name=value).first()
        if policy is None:
            known = ", ".join(RetentionPolicy.objects.values_list("name", flat=True)) or "none"
            raise serializers.ValidationError(
                f"Unknown retention policy {value!r} (known: {known})"
            )
        return policy


class DatasetDetailView(APIView):
    permission_classes = [ReadOrEditCatalog]

    @staticmethod
    def _field_reading(namespace: str, name: str) -> tuple[str, str] | None:
        """A name of no dataset read as a dataset's field (a field's name with slashes)."""
        if "/fields/" not in name or queries.get_dataset(namespace, name) is not None:
            return None
        return field_reading(namespace, name)

    @extend_schema(
        responses={200: {"oneOf": [DATASET, DATASET_AS_OF, FIELD]}},
        summary="One dataset (optionally as of a past instant)",
        description="A name that is no dataset's but reads as ``{dataset}/fields/{field}`` "
        "(a field whose name holds slashes) answers that field.",
        operation_id="getDataset",
        parameters=[instant_parameter("asOf")],
    )
    def get(self, request: Request, namespace: str, name: str) -> Response:
        listing = f"{namespace}/datasets"
        if (
            name == "datasets"
            and not Dataset.objects.filter(namespace__name=namespace, name=name).exists()
            and queries.get_namespace(listing) is not None
        ):
            return DatasetListView().get(request, listing)
        if split := self._field_reading(namespace, name):
            return FieldDetailView().get(request, namespace, *split)
        as_of = optional_instant(request.query_params)
        dataset = fetch_dataset(namespace, name)
        if as_of is not None:
            return Response(dataset_as_of_json(dataset, as_of))
        return Response(dataset_json(dataset))

    @extend_schema(
        request=DatasetPatchInput,
        responses={200: {"oneOf": [DATASET, FIELD]}},
        summary="Edit a dataset",
        description="A name that reads as a dataset's field (see getDataset) edits that field.",
        operation_id="updateDataset",
    )
    def patch(self, request: Request, namespace: str, name: str) -> Response:
        if split := self._field_reading(namespace, name):
            return FieldDetailView().patch(request, namespace, *split)
        dataset = fetch_dataset(namespace, name)
        data = strict_body(DatasetPatchInput, request.data)
        changes: dict[str, Any] = {}
        if "description" in data:
            changes["description"] = data["description"]
        if "sensitivity" in data:
            changes["sensitivity"] = data["sensitivity"] or ""
        if "retentionPolicy" in data:
            changes["retention_policy"] = data["retentionPolicy"]
        if "owners" in data:
            changes["owners"] = [
                actions.OwnerSpec(
                    name=o["name"],
                    type=o["type"] or "",
                    kind=o["kind"],
                    email=o.get("email"),
                    display_name=o.get("displayName"),
                )
                for o in data["owners"]
            ]
        if "tags" in data:
            changes["tags"] = data["tags"]
        actions.update_dataset(dataset, changes, actions.Actor(user=request.user))
        return Response(dataset_json(fetch_dataset(namespace, name)))


class FieldPatchInput(StrictInput):
    pii = serializers.ChoiceField(
        choices=PiiCategory.choices, required=False, allow_null=True, allow_blank=True
    )
    subjectKind = TextField(required=False, allow_null=True, max_length=64)
    sensitivity = serializers.ChoiceField(
        choices=Sensitivity.values, required=False, allow_null=True, allow_blank=True
    )
    description = TextField(required=False, allow_blank=True, max_length=10000)
    tags = tag_list("the field's tags, all of them: [] removes every one")
    confirm = serializers.BooleanField(
        required=False, help_text="true: the propagated flag shown becomes declared"
    )
    propagationBlocked = serializers.BooleanField(
        required=False, help_text="true stops propagated flags here and below; false lifts it"
    )

    def validate_subjectKind(self, value: str | None) -> SubjectKind | None:
        if value is None or value == "":
            return None
        kind = SubjectKind.objects.filter(name=value).first()
        if kind is None:
            known = ", ".join(SubjectKind.objects.values_list("name", flat=True)) or "none"
            raise serializers.ValidationError(f"Unknown subject kind {value!r} (known: {known})")
        return kind


class FieldDetailView(APIView):
    permission_classes = [ReadOrEditCatalog]

    def _field(self, namespace: str, name: str, field: str) -> DatasetField:
        dataset = fetch_dataset(namespace, name)
        found = next((f for f in dataset.fields.all() if f.name == field), None)
        if found is None:
            raise ApiError(f"Field {field!r} not found in {namespace}:{name}", "field", 404)
        return found

    @extend_schema(responses={200: FIELD}, summary="One field", operation_id="getDatasetField")
    def get(self, request: Request, namespace: str, name: str, field: str) -> Response:
        if whole := whole_name(namespace, name, f"/fields/{field}"):
            return as_dataset(request, namespace, whole)
        return Response(field_json(self._field(namespace, name, field)))

    @extend_schema(
        request=FieldPatchInput,
        responses={200: FIELD},
        summary="Edit a field",
        operation_id="updateDatasetField",
    )
    def patch(self, request: Request, namespace: str, name: str, field: str) -> Response:
        if whole := whole_name(namespace, name, f"/fields/{field}"):
            dataset = queries.get_dataset(namespace, name)
            if dataset is not None and dataset.fields.filter(name=field).exists():
                # Both readings name something: an edit is sent to neither.
                raise ApiError(
                    f"{namespace}:{whole} names a dataset, and a field of {name} too: "
                    "edit either on its page",
                    "name",
                    409,
                )
            return as_dataset(request, namespace, whole)
        target = self._field(namespace, name, field)
        data = strict_body(FieldPatchInput, request.data)
        actor = actions.Actor(user=request.user)
        propagated = target.flag_source == FlagSource.PROPAGATED
        if data.get("confirm"):
            if not propagated:
                raise ApiError("This field shows no propagated flag to confirm", "confirm")
            if "pii" in data or "subjectKind" in data:
                raise ApiError(
                    "confirm declares the flag shown: give no pii or subjectKind", "confirm"
                )
            actions.confirm_flag(target, actor)
        changes: dict[str, Any] = {}
        clearing = not data.get("pii") and not data.get("subjectKind")
        if propagated and ("pii" in data or "subjectKind" in data) and clearing:
            # Null on a propagated flag: this column holds no personal data; stop it here.
            changes["propagation_blocked"] = True
        else:
            if "pii" in data:
                changes["pii_category"] = data["pii"] or ""
            if "subjectKind" in data:
                changes["subject_kind"] = data["subjectKind"]
        if "propagationBlocked" in data:
            changes["propagation_blocked"] = data["propagationBlocked"]
        if "sensitivity" in data:
            changes["sensitivity"] = data["sensitivity"] or ""
        if "description" in data:
            changes["description"] = data["description"]
        if "tags" in data:
            changes["tags"] = sorted(set(data["tags"]))
        actions.update_field(target, changes, actor)
        return Response(field_json(self._field(namespace, name, field)))


class DatasetHistoryView(UnderDatasetName):
    permission_classes = [ReadOrEditCatalog]
    tail = "/history"

    @extend_schema(
        responses={200: obj({"changes": arr(CHANGE)})},
        summary="Who changed what on a dataset",
        operation_id="getDatasetHistory",
    )
    def get(self, request: Request, namespace: str, name: str) -> Response:
        if whole := whole_name(namespace, name, self.tail):
            return as_dataset(request, namespace, whole)
        dataset = fetch_dataset(namespace, name)
        return Response({"changes": [change_json(r) for r in queries.history(dataset)]})


class TokenListView(APIView):
    """The caller's own API tokens (never the secret, only its prefix)."""

    permission_classes = [IsAuthenticated]

    @extend_schema(
        responses={200: obj({"tokens": arr(TOKEN)})},
        summary="Your API tokens",
        operation_id="listTokens",
    )
    def get(self, request: Request) -> Response:
        tokens = ApiToken.objects.filter(user=cast(User, request.user))
        return Response(
            {
                "tokens": [
                    {
                        "id": t.pk,
                        "name": t.name,
                        "prefix": t.prefix,
                        "createdAt": iso(t.created_at),
                        "lastUsedAt": iso(t.last_used_at),
                        "revokedAt": iso(t.revoked_at),
                    }
                    for t in tokens
                ]
            }
        )


class TokenDetailView(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        responses={204: None},
        summary="Revoke one of your API tokens",
        operation_id="revokeToken",
    )
    def delete(self, request: Request, token_id: int) -> Response:
        token = ApiToken.objects.filter(pk=token_id, user=cast(User, request.user)).first()
        if token is None:
            raise ApiError(f"Token {token_id} not found", "token_id", status_code=404)
        actions.revoke_token(token)
        return Response(status=204)
