"""Catalog as code: owners, PII flags, subject kinds and retention policies in YAML.

The file is validated whole before anything is written, then applied in one
transaction through catalog.actions, so every change lands in the history and
a re-import of the same file changes nothing.

    subjectKinds:
      - {name: customer, description: People who buy from us}
    retentionPolicies:
      - {name: two-years, days: 730, action: delete, legalBasis: "GDPR 6(1)(b)"}
    namespaces:   # each file's whole say: an omitted owner or description is cleared
      - {name: "postgres://shop-db:5432", ownerName: shop-team, description: The shop}
    datasets:
      - namespace: postgres://shop-db:5432
        name: shop.public.customers
        description: All customers
        owners:   # or plain names; kind (team, person), email and displayName when given
          - {name: crm-team, type: DATA_OWNER, email: crm@example.com}
        tags: [gold]
        sensitivity: confidential
        retentionPolicy: two-years
        fields:
          customer_id: {pii: identifier, subjectKind: customer}
          email: {pii: email, subjectKind: customer, description: Login e-mail, tags: [login]}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone

from catalog import actions, naming, queries
from catalog.actions import Actor, OwnerSpec
from catalog.models import (
    ChangeSource,
    Dataset,
    DatasetField,
    FlagSource,
    Namespace,
    Owner,
    OwnerKind,
    PiiCategory,
    RetentionAction,
    RetentionPolicy,
    Sensitivity,
    SubjectKind,
)

DATASET_KEYS = {
    "namespace",
    "name",
    "description",
    "owners",
    "tags",
    "sensitivity",
    "retentionPolicy",
    "fields",
}
FIELD_KEYS = {"pii", "subjectKind", "sensitivity", "description", "tags"}
OWNER_KEYS = {"name", "type", "kind", "email", "displayName"}
OWNER_FILE_KEYS = {"display_name": "displayName"}  # the file's name of an Owner field
SUBJECT_KIND_KEYS = {"name", "description"}
POLICY_KEYS = {"name", "days", "action", "legalBasis", "description"}
NAMESPACE_KEYS = {"name", "ownerName", "description"}
MAX_DAYS = 36_525  # a hundred years


class CatalogFileError(ValueError):
    """A problem in a catalog file, naming where it is (``datasets[2].fields.email.pii``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


@dataclass
class FieldEntry:
    name: str
    values: dict[str, Any]


@dataclass
class DatasetEntry:
    namespace: str
    name: str
    values: dict[str, Any]
    fields: list[FieldEntry] = field(default_factory=list)


@dataclass
class CatalogFile:
    subject_kinds: list[dict[str, str]] = field(default_factory=list)
    retention_policies: list[dict[str, Any]] = field(default_factory=list)
    namespaces: list[dict[str, str]] = field(default_factory=list)
    datasets: list[DatasetEntry] = field(default_factory=list)


def _mapping(value: Any, path: str, keys: set[str] | None = None) -> dict[str, Any]:
    """``value`` as a mapping, with no key but ``keys`` when they are given."""
    if not isinstance(value, dict):
        raise CatalogFileError(path, f"expected a mapping, got {type(value).__name__}")
    # Keys as text: YAML keys may be numbers, which do not sort with strings.
    unknown = sorted(map(str, set(value) - keys)) if keys is not None else []
    if unknown:
        raise CatalogFileError(f"{path}.{unknown[0]}", "unknown key")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CatalogFileError(path, f"expected a list, got {type(value).__name__}")
    return value


def _text(value: Any, path: str, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise CatalogFileError(path, "expected a non-empty string")
    return value


def _short(value: Any, path: str, limit: int = 255) -> str:
    text = _text(value, path, False)
    if len(text) > limit:
        raise CatalogFileError(path, f"longer than {limit} characters")
    return text


def _tags(value: Any, path: str) -> list[str]:
    """Tag names as the API takes them: without white space around, non-empty, at most 128
    characters, a new one without a comma; repeats count once."""
    tags = []
    for j, tag in enumerate(_list(value, path)):
        name = _short(_text(tag, f"{path}[{j}]").strip(), f"{path}[{j}]", 128)
        if problem := actions.tag_name_problem(name):
            raise CatalogFileError(f"{path}[{j}]", problem)
        tags.append(name)
    return sorted(set(tags))


def _email(value: Any, path: str) -> str:
    text = _short(value, path, 254)
    if text:
        try:
            validate_email(text)
        except ValidationError as exc:
            raise CatalogFileError(path, f"{text!r} is not an email address") from exc
    return text


def _choice(value: Any, path: str, choices: list[str]) -> str:
    if value is None or value == "":
        return ""
    if value not in choices:
        raise CatalogFileError(path, f"{value!r} is not one of {', '.join(choices)}")
    return str(value)


def parse(text: str) -> CatalogFile:
    """Parse and validate a catalog file; raises CatalogFileError naming the place at fault."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CatalogFileError("file", f"not valid YAML: {exc}") from exc
    doc = _mapping(doc or {}, "file")
    unknown = set(doc) - {"subjectKinds", "retentionPolicies", "namespaces", "datasets"}
    if unknown:
        raise CatalogFileError(sorted(map(str, unknown))[0], "unknown top-level key")
    result = CatalogFile()
    for i, item in enumerate(_list(doc.get("subjectKinds"), "subjectKinds")):
        path = f"subjectKinds[{i}]"
        item = _mapping(item, path, SUBJECT_KIND_KEYS)
        name = _text(item.get("name"), f"{path}.name")
        known = SubjectKind.objects.filter(name=name).exists()  # named before the rule
        if not actions.SUBJECT_KIND_NAME.match(name) and not known:
            raise CatalogFileError(f"{path}.name", actions.SUBJECT_KIND_RULE)
        result.subject_kinds.append(
            {
                "name": name,
                "description": _text(item.get("description"), f"{path}.description", False),
            }
        )
    for i, item in enumerate(_list(doc.get("retentionPolicies"), "retentionPolicies")):
        path = f"retentionPolicies[{i}]"
        item = _mapping(item, path, POLICY_KEYS)
        days = item.get("days")
        if not isinstance(days, int) or isinstance(days, bool) or not 0 <= days <= MAX_DAYS:
            raise CatalogFileError(
                f"{path}.days", f"expected a whole number of days from 0 to {MAX_DAYS:,}"
            )
        action = _choice(item.get("action"), f"{path}.action", RetentionAction.values)
        if not action:
            raise CatalogFileError(f"{path}.action", "required")
        result.retention_policies.append(
            {
                "name": _short(_text(item.get("name"), f"{path}.name"), f"{path}.name", 128),
                "days": days,
                "action": action,
                "legal_basis": _short(item.get("legalBasis"), f"{path}.legalBasis"),
                "description": _text(item.get("description"), f"{path}.description", False),
            }
        )
    for i, item in enumerate(_list(doc.get("namespaces"), "namespaces")):
        path = f"namespaces[{i}]"
        item = _mapping(item, path, NAMESPACE_KEYS)
        name = _text(item.get("name"), f"{path}.name")
        result.namespaces.append(
            {
                "name": _short(naming.canonical_namespace(name), f"{path}.name", 1024),
                "owner_name": _short(item.get("ownerName"), f"{path}.ownerName").strip(),
                "description": _short(
                    item.get("description"), f"{path}.description", 10_000
                ).strip(),
            }
        )
    known_kinds = {k["name"] for k in result.subject_kinds} | set(
        SubjectKind.objects.values_list("name", flat=True)
    )
    known_policies = {p["name"] for p in result.retention_policies} | set(
        RetentionPolicy.objects.values_list("name", flat=True)
    )
    for i, item in enumerate(_list(doc.get("datasets"), "datasets")):
        result.datasets.append(_parse_dataset(item, f"datasets[{i}]", known_kinds, known_policies))
    return result


def _parse_dataset(
    item: Any, path: str, known_kinds: set[str], known_policies: set[str]
) -> DatasetEntry:
    item = _mapping(item, path, DATASET_KEYS)
    namespace, name = naming.canonical(
        _text(item.get("namespace"), f"{path}.namespace"), _text(item.get("name"), f"{path}.name")
    )
    entry = DatasetEntry(namespace=namespace, name=name, values={})
    if "description" in item:
        entry.values["description"] = _text(item["description"], f"{path}.description", False)
    if "sensitivity" in item:
        entry.values["sensitivity"] = _choice(
            item["sensitivity"], f"{path}.sensitivity", Sensitivity.values
        )
    if "retentionPolicy" in item:
        policy = item["retentionPolicy"]
        if policy is not None and policy not in known_policies:
            raise CatalogFileError(f"{path}.retentionPolicy", f"unknown policy {policy!r}")
        entry.values["retention_policy"] = policy
    if "owners" in item:
        owners = []
        for j, owner in enumerate(_list(item["owners"], f"{path}.owners")):
            opath = f"{path}.owners[{j}]"
            if isinstance(owner, str):
                owner = {"name": owner}
            owner = _mapping(owner, opath, OWNER_KEYS)
            owners.append(
                OwnerSpec(
                    name=_text(owner.get("name"), f"{opath}.name"),
                    type=_text(owner.get("type"), f"{opath}.type", False),
                    kind=_choice(owner.get("kind"), f"{opath}.kind", OwnerKind.values),
                    email=_email(owner["email"], f"{opath}.email") if "email" in owner else None,
                    display_name=_short(owner["displayName"], f"{opath}.displayName")
                    if "displayName" in owner
                    else None,
                )
            )
        entry.values["owners"] = owners
    if "tags" in item:
        entry.values["tags"] = _tags(item["tags"], f"{path}.tags")
    fields = item.get("fields") or {}
    for name, values in _mapping(fields, f"{path}.fields").items():
        fpath = f"{path}.fields.{name}"
        values = _mapping(values or {}, fpath, FIELD_KEYS)
        parsed: dict[str, Any] = {}
        if "pii" in values:
            parsed["pii_category"] = _choice(values["pii"], f"{fpath}.pii", PiiCategory.values)
        if "subjectKind" in values:
            kind = values["subjectKind"]
            if kind is not None and kind not in known_kinds:
                raise CatalogFileError(f"{fpath}.subjectKind", f"unknown subject kind {kind!r}")
            parsed["subject_kind"] = kind
        if "sensitivity" in values:
            parsed["sensitivity"] = _choice(
                values["sensitivity"], f"{fpath}.sensitivity", Sensitivity.values
            )
        if "description" in values:
            parsed["description"] = _text(values["description"], f"{fpath}.description", False)
        if "tags" in values:
            parsed["tags"] = _tags(values["tags"], f"{fpath}.tags")
        entry.fields.append(FieldEntry(name=str(name), values=parsed))
    return entry


@dataclass
class ImportReport:
    created: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.changes)


def apply(catalog: CatalogFile, actor: Actor | None = None) -> ImportReport:
    """Apply a parsed catalog file in one transaction; returns what changed."""
    actor = actor or Actor(name="catalog_import", source=ChangeSource.IMPORT)
    report = ImportReport()
    now = timezone.now()
    with transaction.atomic():
        for kind in catalog.subject_kinds:
            obj, created = SubjectKind.objects.get_or_create(name=kind["name"])
            if created:
                report.created.append(f"subject kind {kind['name']}")
            if kind["description"] and obj.description != kind["description"]:
                obj.description = kind["description"]
                obj.save(update_fields=["description"])
        for p in catalog.retention_policies:
            values = {
                "duration": timedelta(days=p["days"]),
                "action": p["action"],
                "legal_basis": p["legal_basis"],
                "description": p["description"],
            }
            policy, created = RetentionPolicy.objects.get_or_create(name=p["name"], defaults=values)
            if created:
                report.created.append(f"retention policy {p['name']}")
            elif any(getattr(policy, k) != v for k, v in values.items()):
                RetentionPolicy.objects.filter(pk=policy.pk).update(**values)
                report.changes.append(f"retention policy {p['name']} updated")
        for spec in catalog.namespaces:
            ns, created = Namespace.objects.get_or_create(name=spec["name"])
            if created:
                report.created.append(f"namespace {spec['name']}")
            for key, attribute in (("ownerName", "owner_name"), ("description", "description")):
                old = getattr(ns, attribute)
                if old != spec[attribute]:
                    report.changes.append(
                        f"namespace {ns.name} {key}: {old!r} → {spec[attribute]!r}"
                    )
            actions.describe_namespace(ns, spec["owner_name"], spec["description"])
        for entry in catalog.datasets:
            _apply_dataset(entry, actor, report, now)
    return report


def _apply_dataset(entry: DatasetEntry, actor: Actor, report: ImportReport, now: Any) -> None:
    # The dataset as any channel names it: canonical, or the one this name is an alias of.
    namespace, name = naming.canonical(entry.namespace, entry.name)
    aliased = queries.aliased_dataset(namespace, name)
    if (
        aliased is not None
        and not Dataset.objects.filter(namespace__name=namespace, name=name).exists()
    ):
        dataset, created = Dataset.objects.get(pk=aliased), False
    else:
        ns, _ = Namespace.objects.get_or_create(name=namespace)
        dataset, created = Dataset.objects.get_or_create(
            namespace=ns, name=name, defaults={"first_seen": now, "last_seen": now}
        )
    label = f"{entry.namespace}:{entry.name}"
    if created:
        report.created.append(f"dataset {label}")
    values = dict(entry.values)
    owners = values.get("owners", [])
    known = {owner.name: owner for owner in Owner.objects.filter(name__in=[o.name for o in owners])}
    for spec in owners:
        before = known.get(spec.name)
        for attribute, value in spec.details().items():
            if before is not None and getattr(before, attribute) != value:
                key = OWNER_FILE_KEYS.get(attribute, attribute)
                old = getattr(before, attribute)
                report.changes.append(f"owner {spec.name} {key}: {old!r} → {value!r}")
    if "retention_policy" in values:
        name = values["retention_policy"]
        values["retention_policy"] = RetentionPolicy.objects.get(name=name) if name else None
    for record in actions.update_dataset(dataset, values, actor, at=now):
        report.changes.append(f"{label} {record.attribute}: {record.old!r} → {record.new!r}")
    for fentry in entry.fields:
        fobj, fcreated = DatasetField.objects.get_or_create(
            dataset=dataset,
            name=fentry.name,
            defaults={"first_seen": now, "ordinal": dataset.fields.count()},
        )
        if fcreated:
            report.created.append(f"field {label}:{fentry.name}")
        fvalues = dict(fentry.values)
        if "subject_kind" in fvalues:
            kind = fvalues["subject_kind"]
            fvalues["subject_kind"] = SubjectKind.objects.get(name=kind) if kind else None
        for record in actions.update_field(fobj, fvalues, actor, at=now):
            report.changes.append(
                f"{label}:{fentry.name} {record.attribute}: {record.old!r} → {record.new!r}"
            )


def export() -> dict[str, Any]:
    """The catalog's steward-maintained facts as a document ``parse`` accepts."""
    doc: dict[str, Any] = {
        "subjectKinds": [
            {"name": k.name, **({"description": k.description} if k.description else {})}
            for k in SubjectKind.objects.order_by("name")
        ],
        "retentionPolicies": [
            {
                "name": p.name,
                "days": p.duration_days,
                "action": p.action,
                **({"legalBasis": p.legal_basis} if p.legal_basis else {}),
                **({"description": p.description} if p.description else {}),
            }
            for p in RetentionPolicy.objects.order_by("name")
        ],
        "namespaces": [
            {
                "name": ns.name,
                **({"ownerName": ns.owner_name} if ns.owner_name else {}),
                **({"description": ns.description} if ns.description else {}),
            }
            for ns in Namespace.objects.exclude(owner_name="", description="").order_by("name")
        ],
        "datasets": [],
    }
    datasets = (
        Dataset.objects.select_related("namespace", "retention_policy")
        .prefetch_related("ownerships__owner", "tags", "fields__subject_kind", "fields__tags")
        .order_by("namespace__name", "name")
    )
    for ds in datasets:
        entry: dict[str, Any] = {"namespace": ds.namespace.name, "name": ds.name}
        if ds.description:
            entry["description"] = ds.description
        owners = [
            {
                "name": o.owner.name,
                **({"type": o.ownership_type} if o.ownership_type else {}),
                **({"kind": o.owner.kind} if o.owner.kind != OwnerKind.TEAM else {}),
                **({"displayName": o.owner.display_name} if o.owner.display_name else {}),
                **({"email": o.owner.email} if o.owner.email else {}),
            }
            for o in ds.ownerships.all()
        ]
        if owners:
            entry["owners"] = owners
        tags = sorted(t.name for t in ds.tags.all())
        if tags:
            entry["tags"] = tags
        if ds.sensitivity:
            entry["sensitivity"] = ds.sensitivity
        if ds.retention_policy:
            entry["retentionPolicy"] = ds.retention_policy.name
        fields: dict[str, Any] = {}
        for f in ds.fields.all():
            values: dict[str, Any] = {}
            # Propagated flags are derived from lineage; only declared ones are catalog code.
            if f.flag_source == FlagSource.DECLARED:
                if f.pii_category:
                    values["pii"] = f.pii_category
                if f.subject_kind:
                    values["subjectKind"] = f.subject_kind.name
            if f.sensitivity:
                values["sensitivity"] = f.sensitivity
            if f.description:
                values["description"] = f.description
            tags = sorted(t.name for t in f.tags.all())
            if tags:
                values["tags"] = tags
            if values:
                fields[f.name] = values
        if fields:
            entry["fields"] = fields
        if len(entry) > 2:
            doc["datasets"].append(entry)
    return doc


def dump(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)
