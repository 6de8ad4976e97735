"""Writes to the catalog. Every change of a steward-visible attribute is recorded
as a ChangeRecord (who, when, old → new) in the same transaction."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone

from catalog.models import (
    ApiToken,
    ChangeRecord,
    ChangeSource,
    Dataset,
    DatasetField,
    DatasetOwnership,
    FlagSource,
    Namespace,
    Owner,
    OwnerKind,
    RetentionPolicy,
    SubjectKind,
    Tag,
)
from catalog.signals import flags_changed


@dataclass(frozen=True)
class OwnerSpec:
    name: str
    type: str = ""
    # The owner's own details (for every dataset they own), changed when given: None keeps
    # them, "" clears an email or a display name. A new owner without a kind takes
    # ``new_kind``.
    kind: str = ""
    email: str | None = None
    display_name: str | None = None
    new_kind: str = OwnerKind.TEAM

    def details(self) -> dict[str, str]:
        """The owner's own attributes this spec sets (model field: value)."""
        given = {"kind": self.kind or None, "email": self.email, "display_name": self.display_name}
        return {attribute: value for attribute, value in given.items() if value is not None}


@dataclass
class Actor:
    """Who makes a change: a user, or a named process (import, lineage)."""

    user: Any = None
    name: str = ""
    source: str = ChangeSource.STEWARD

    @property
    def display(self) -> str:
        if self.user is not None:
            return str(self.user.get_username())
        return self.name


def owners_value(dataset: Dataset) -> list[dict[str, str]]:
    """The dataset's owners as a sorted JSON-safe list, the form history stores."""
    rows = dataset.ownerships.select_related("owner").order_by("owner__name", "ownership_type")
    return [{"name": o.owner.name, "type": o.ownership_type} for o in rows]


def tags_value(target: Dataset | DatasetField) -> list[str]:
    """A dataset's or a field's tags, sorted: the form history stores."""
    return sorted(target.tags.values_list("name", flat=True))


def _record(
    actor: Actor,
    dataset: Dataset,
    attribute: str,
    old: Any,
    new: Any,
    at: datetime,
    field_name: str = "",
) -> ChangeRecord | None:
    if old == new:
        return None
    record = change_record(actor, dataset, attribute, old, new, at, field_name)
    record.save()
    return record


def change_record(
    actor: Actor,
    dataset: Dataset,
    attribute: str,
    old: Any,
    new: Any,
    at: datetime,
    field_name: str = "",
) -> ChangeRecord:
    """A history record, not yet written: ``actor`` set ``attribute`` from ``old`` to
    ``new`` at ``at`` (even to the value it had, where who said it is what changed)."""
    return ChangeRecord(
        at=at,
        actor=actor.user,
        actor_name=actor.display,
        source=actor.source,
        dataset=dataset,
        field_name=field_name,
        attribute=attribute,
        old=old,
        new=new,
    )


def set_owners(dataset: Dataset, owners: Iterable[OwnerSpec]) -> None:
    """Make these the dataset's owners (the caller records the change, if it is one)."""
    dataset.ownerships.all().delete()
    for spec in owners:
        given = spec.details()
        owner, created = Owner.objects.get_or_create(
            name=spec.name, defaults={"kind": spec.new_kind, **given}
        )
        changed = [a for a, value in given.items() if getattr(owner, a) != value]
        if changed and not created:
            for attribute in changed:
                setattr(owner, attribute, given[attribute])
            owner.save(update_fields=changed)
        DatasetOwnership.objects.get_or_create(
            dataset=dataset, owner=owner, ownership_type=spec.type
        )


def tag_name_problem(name: str) -> str:
    """Why ``name`` cannot name a new tag ("" when it can, or when a tag has it already):
    the pages' forms list tags comma-separated, so a new one holds no comma."""
    if "," in name and not Tag.objects.filter(name=name).exists():
        return "a tag name holds no comma"
    return ""


def _set_tags(target: Dataset | DatasetField, names: Iterable[str]) -> None:
    tags = [Tag.objects.get_or_create(name=name)[0] for name in names]
    target.tags.set(tags)


# The overview's counts and the stewardship lists, cached per process (catalog.views).
WORKLIST_CACHE_KEYS = ("explorer:overview:v1", "explorer:stewardship:v1")


def forget_worklists() -> None:
    """Drop this process's cached counts and lists once an edit is committed: whoever made
    it, on a page or through the API, sees it (other server processes within a minute)."""
    transaction.on_commit(lambda: cache.delete_many(list(WORKLIST_CACHE_KEYS)))


def update_dataset(
    dataset: Dataset,
    changes: Mapping[str, Any],
    actor: Actor,
    at: datetime | None = None,
) -> list[ChangeRecord]:
    """Apply steward changes to a dataset; returns the history records written.

    ``changes`` keys: description, sensitivity, retention_policy (RetentionPolicy
    or None), owners (list of OwnerSpec), tags (list of names).
    """
    at = at or timezone.now()
    records: list[ChangeRecord | None] = []
    with transaction.atomic():
        dataset = Dataset.objects.select_for_update().get(pk=dataset.pk)
        for attribute in ("description", "sensitivity"):
            if attribute in changes:
                old = getattr(dataset, attribute)
                setattr(dataset, attribute, changes[attribute])
                records.append(_record(actor, dataset, attribute, old, changes[attribute], at))
        if "retention_policy" in changes:
            policy: RetentionPolicy | None = changes["retention_policy"]
            old_name = dataset.retention_policy.name if dataset.retention_policy else None
            dataset.retention_policy = policy
            records.append(
                _record(actor, dataset, "retention_policy", old_name, policy and policy.name, at)
            )
        if "owners" in changes:
            old_owners = owners_value(dataset)
            set_owners(dataset, changes["owners"])
            records.append(_record(actor, dataset, "owners", old_owners, owners_value(dataset), at))
        if "tags" in changes:
            old_tags = tags_value(dataset)
            _set_tags(dataset, changes["tags"])
            records.append(_record(actor, dataset, "tags", old_tags, tags_value(dataset), at))
        dataset.updated_at = at
        dataset.save()
        forget_worklists()
    return [r for r in records if r is not None]


def update_field(
    field: DatasetField,
    changes: Mapping[str, Any],
    actor: Actor,
    at: datetime | None = None,
    propagate: bool = True,
) -> list[ChangeRecord]:
    """Apply steward changes to a field; returns the history records written.

    ``changes`` keys: pii_category ("" for none), subject_kind (SubjectKind or None),
    propagation_blocked (bool), sensitivity, description, tags (list of names). Flags a
    person sets are declared: on a field showing a propagated flag, the attribute not given
    starts from nothing declared (``confirm_flag`` declares both as shown). The history keeps declared values
    and blocks; propagated flags are derived (graph.propagation), so the records of a flag
    edit say what was declared before, not what was shown. Unless ``propagate`` is False
    (the caller sends ``flags_changed`` once for many fields), the flags this field
    propagates are brought up to date in the same transaction.
    """
    at = at or timezone.now()
    records: list[ChangeRecord | None] = []
    with transaction.atomic():
        field = (
            DatasetField.objects.select_for_update(of=("self",))
            .select_related("subject_kind", "dataset")
            .get(pk=field.pk)
        )
        dataset = field.dataset
        declared = field.flag_source == FlagSource.DECLARED
        flag_changed = "pii_category" in changes or "subject_kind" in changes
        if flag_changed and not declared:
            field.pii_category, field.subject_kind = "", None
        for attribute in ("pii_category", "sensitivity", "description", "propagation_blocked"):
            if attribute in changes:
                old = getattr(field, attribute)
                setattr(field, attribute, changes[attribute])
                records.append(
                    _record(actor, dataset, attribute, old, changes[attribute], at, field.name)
                )
        if "subject_kind" in changes:
            kind: SubjectKind | None = changes["subject_kind"]
            old_kind = field.subject_kind.name if field.subject_kind else None
            field.subject_kind = kind
            records.append(
                _record(
                    actor, dataset, "subject_kind", old_kind, kind and kind.name, at, field.name
                )
            )
        if "tags" in changes:
            old_tags = tags_value(field)
            _set_tags(field, changes["tags"])
            records.append(
                _record(actor, dataset, "tags", old_tags, tags_value(field), at, field.name)
            )
        if flag_changed and actor.source != ChangeSource.PROPAGATION:
            field.flag_source = FlagSource.DECLARED
            field.flag_masked = False
        if changes.get("propagation_blocked") and field.flag_source == FlagSource.PROPAGATED:
            field.pii_category, field.subject_kind = "", None
            field.flag_source, field.flag_masked = FlagSource.DECLARED, False
        field.save()
        forget_worklists()
        if propagate and (flag_changed or "propagation_blocked" in changes):
            flags_changed.send(sender=DatasetField, field_ids=[field.pk], at=at)
    return [r for r in records if r is not None]


def confirm_flag(field: DatasetField, actor: Actor, at: datetime | None = None) -> None:
    """A steward confirms the flag a field shows: it becomes declared (and a source)."""
    field = DatasetField.objects.select_related("subject_kind").get(pk=field.pk)
    update_field(
        field,
        {"pii_category": field.pii_category, "subject_kind": field.subject_kind},
        actor,
        at,
    )


def describe_namespace(namespace: Namespace, owner_name: str, description: str) -> Namespace:
    """Set a namespace's owner and description (Marquez's PUT: both, every time); its
    ``updated_at`` moves when either changes."""
    if (namespace.owner_name, namespace.description) != (owner_name, description):
        namespace.owner_name, namespace.description = owner_name, description
        namespace.updated_at = timezone.now()
        namespace.save(update_fields=["owner_name", "description", "updated_at"])
    return namespace


def ensure_subject_kind(name: str) -> SubjectKind:
    kind, _ = SubjectKind.objects.get_or_create(name=name)
    return kind


class SubjectKindError(ValueError):
    def __init__(self, message: str, field: str, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.field, self.status = message, field, status


SUBJECT_KIND_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}\Z")
SUBJECT_KIND_RULE = (
    "A subject kind is a lower-case word (letters, digits, - and _), starting with a letter, "
    "at most 64 characters"
)


def create_subject_kind(name: str, description: str = "") -> SubjectKind:
    """A new kind of data subject (customer, employee, …): a lower-case slug, once."""
    if not SUBJECT_KIND_NAME.match(name):
        raise SubjectKindError(f"{SUBJECT_KIND_RULE}: {name[:64]!r}", "name")
    with transaction.atomic():
        if SubjectKind.objects.filter(name=name).exists():
            raise SubjectKindError(f"Subject kind {name!r} exists already", "name", 409)
        return SubjectKind.objects.create(name=name, description=description.strip())


def describe_subject_kind(kind: SubjectKind, description: str) -> SubjectKind:
    """A kind's description (its name stays: history and audits refer to it)."""
    kind.description = description.strip()
    kind.save(update_fields=["description"])
    return kind


def issue_token(user: Any, name: str = "") -> tuple[ApiToken, str]:
    """Create a token for the user; returns it and the secret, which is shown only once."""
    key = ApiToken.generate_key()
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=key[: ApiToken.PREFIX_LENGTH + 3],
        key_hash=ApiToken.hash_key(key),
    )
    return token, key


def revoke_token(token: ApiToken) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
