"""The catalog: namespaces, datasets, fields, owners, tags, PII and retention.

Datasets and fields follow OpenLineage naming. Every steward edit is kept as
a ChangeRecord so the catalog can be read as of any past instant; schema
changes are kept as DatasetVersion rows.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone


class PiiCategory(models.TextChoices):
    EMAIL = "email", "Email address"
    NAME = "name", "Person name"
    PHONE = "phone", "Phone number"
    ADDRESS = "address", "Postal address"
    NATIONAL_ID = "national_id", "National id"
    IP = "ip", "IP address"
    DEVICE_ID = "device_id", "Device id"
    FREE_TEXT = "free_text", "Free text"
    DATE_OF_BIRTH = "date_of_birth", "Date of birth"
    FINANCIAL = "financial", "Financial"
    HEALTH = "health", "Health"
    LOCATION = "location", "Location"
    IDENTIFIER = "identifier", "Subject identifier"
    OTHER = "other", "Other personal data"


class Sensitivity(models.TextChoices):
    PUBLIC = "public", "Public"
    INTERNAL = "internal", "Internal"
    CONFIDENTIAL = "confidential", "Confidential"
    RESTRICTED = "restricted", "Restricted"


class FlagSource(models.TextChoices):
    """Whether a PII / subject flag was set by a person or derived from lineage."""

    DECLARED = "declared", "Declared"
    PROPAGATED = "propagated", "Propagated along lineage"


class LifecycleState(models.TextChoices):
    ACTIVE = "ACTIVE", "Active"
    DROPPED = "DROPPED", "Dropped"
    RENAMED = "RENAMED", "Renamed"


class Namespace(models.Model):
    name = models.CharField(max_length=1024, unique=True)
    description = models.TextField(blank=True)
    owner_name = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        permissions = [
            ("read_lineage", "Can read the catalog and lineage"),
            ("edit_catalog", "Can edit owners, PII flags, tags and retention"),
        ]

    def __str__(self) -> str:
        return self.name


class SubjectKind(models.Model):
    """A kind of data subject (customer, employee, …) whose data the catalog tracks."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class RetentionAction(models.TextChoices):
    DELETE = "delete", "Delete"
    ANONYMISE = "anonymise", "Anonymise"
    ARCHIVE = "archive", "Archive"


class RetentionPolicy(models.Model):
    name = models.CharField(max_length=128, unique=True)
    duration = models.DurationField(help_text="How long rows are kept")
    action = models.CharField(max_length=16, choices=RetentionAction.choices)
    legal_basis = models.CharField(max_length=255, blank=True)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "retention policies"

    def __str__(self) -> str:
        return self.name

    @property
    def duration_days(self) -> int:
        return self.duration // timedelta(days=1)


class Tag(models.Model):
    name = models.CharField(max_length=128, unique=True)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class OwnerKind(models.TextChoices):
    PERSON = "person", "Person"
    TEAM = "team", "Team"


class Owner(models.Model):
    name = models.CharField(max_length=255, unique=True)
    kind = models.CharField(max_length=8, choices=OwnerKind.choices, default=OwnerKind.TEAM)
    display_name = models.CharField(max_length=255, blank=True)
    email = models.EmailField(blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.display_name or self.name


class Dataset(models.Model):
    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=1024)
    # The dataset this one was renamed to (lifecycle RENAME with previousIdentifier).
    alias_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="renamed_from"
    )
    platform = models.CharField(max_length=64, blank=True)
    location = models.CharField(max_length=2048, blank=True, help_text="Physical location URI")
    storage_format = models.CharField(max_length=32, blank=True)
    source_name = models.CharField(max_length=255, blank=True)
    description = models.TextField(blank=True)
    sensitivity = models.CharField(max_length=16, choices=Sensitivity.choices, blank=True)
    retention_policy = models.ForeignKey(
        RetentionPolicy, null=True, blank=True, on_delete=models.SET_NULL, related_name="datasets"
    )
    tags = models.ManyToManyField(Tag, blank=True, related_name="datasets")
    lifecycle_state = models.CharField(
        max_length=16, choices=LifecycleState.choices, default=LifecycleState.ACTIVE
    )
    # Temporary / scratch tables followed through by SQL lineage, hidden in views.
    is_hidden = models.BooleanField(default=False)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)
    dropped_at = models.DateTimeField(null=True, blank=True)
    # Latest value and event time of each OpenLineage facet that lineage sets here
    # ({"documentation": {"at": iso, "value": …}, …}), so late events never win.
    lineage_facets = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["namespace__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="dataset_unique_name")
        ]
        indexes = [models.Index(fields=["name"]), models.Index(fields=["last_seen"])]

    def __str__(self) -> str:
        return f"{self.namespace.name}:{self.name}"

    @property
    def node_id(self) -> str:
        return f"dataset:{self.namespace.name}:{self.name}"


class DatasetAlias(models.Model):
    """Another name of a dataset (the OpenLineage symlinks facet: a table's metastore name
    beside its path). Lineage reported and lookups made under it land on the dataset."""

    namespace = models.ForeignKey(Namespace, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=1024)
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="aliases")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["namespace__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="dataset_alias_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.namespace.name}:{self.name} → {self.dataset_id}"


class DatasetOwnership(models.Model):
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="ownerships")
    owner = models.ForeignKey(Owner, on_delete=models.CASCADE, related_name="ownerships")
    # OpenLineage ownership facet "type", e.g. MAINTAINER, DATA_OWNER, TECHNICAL_OWNER.
    ownership_type = models.CharField(max_length=64, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["dataset", "owner", "ownership_type"], name="ownership_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.owner_id} owns {self.dataset_id}"


# A field holding personal data: flagged with a category (declared or propagated) or
# identifying a data subject. Matches the partial index below, which every "personal
# data only" list and count uses.
PERSONAL_DATA = models.Q(pii_category__gt="") | models.Q(subject_kind__isnull=False)


class DatasetField(models.Model):
    """A column of a dataset, kept for as long as the dataset exists.

    Nested fields are named with dots (``address.city``). A field that left
    the schema keeps its row (column edges point at it) with ``removed_at``, and
    one that left and came back keeps the stretch it was absent (FieldGap); the
    schema as of any instant comes from DatasetVersion.
    """

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="fields")
    name = models.CharField(max_length=1024)
    type = models.CharField(max_length=255, blank=True)
    description = models.TextField(blank=True)
    ordinal = models.IntegerField(default=0)
    pii_category = models.CharField(max_length=32, choices=PiiCategory.choices, blank=True)
    subject_kind = models.ForeignKey(
        SubjectKind, null=True, blank=True, on_delete=models.SET_NULL, related_name="fields"
    )
    flag_source = models.CharField(
        max_length=16, choices=FlagSource.choices, default=FlagSource.DECLARED
    )
    # With a propagated flag: whether every path it came by masks the value (a hash is still
    # personal data). Kept with the flag by graph.propagation.
    flag_masked = models.BooleanField(default=False)
    # A steward stopped propagated flags here (and below): this column holds no personal data.
    propagation_blocked = models.BooleanField(default=False)
    sensitivity = models.CharField(max_length=16, choices=Sensitivity.choices, blank=True)
    tags = models.ManyToManyField(Tag, blank=True, related_name="fields")
    first_seen = models.DateTimeField(default=timezone.now)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["dataset_id", "ordinal", "name"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "name"], name="field_unique_name")
        ]
        indexes = [
            models.Index(fields=["pii_category"]),
            # The datasets holding personal data now (a scan of every field before).
            models.Index(
                fields=["dataset"],
                condition=PERSONAL_DATA & models.Q(removed_at__isnull=True),
                name="field_personal_dataset",
            ),
            # Every subject search reads the few blocked fields (a scan of every field before).
            models.Index(
                fields=["id"], condition=models.Q(propagation_blocked=True), name="field_blocked"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.dataset}:{self.name}"


class FieldGap(models.Model):
    """A stretch of a field's life when its dataset's schema did not hold it: from the
    version that left it out (``removed_at``) to the one that brought it back
    (``returned_at``). Between ``first_seen`` and ``removed_at`` a field existed except in
    its gaps (catalog.queries.field_existed). Derived from the schema versions by
    ingest.normalizer, whatever their order."""

    field = models.ForeignKey(DatasetField, on_delete=models.CASCADE, related_name="gaps")
    removed_at = models.DateTimeField()
    returned_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["field", "removed_at"])]

    def __str__(self) -> str:
        return f"{self.field} absent from {self.removed_at:%Y-%m-%d %H:%M} to {self.returned_at:%Y-%m-%d %H:%M}"


class PropagatedFlag(models.Model):
    """The personal-data flag declared on ``source`` reached ``field`` along column lineage,
    over [valid_from, valid_to) (open while current); ``masked`` when every path masks it.

    Derived state, written only by graph.propagation (which documents the rules and is
    checked against a from-scratch recomputation); a field reached from several declared
    fields has a row per source.
    """

    # Looked up by field and by source through the two indexes below (which lead with them).
    field = models.ForeignKey(
        DatasetField, on_delete=models.CASCADE, related_name="propagated_flags", db_index=False
    )
    source = models.ForeignKey(
        DatasetField, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    masked = models.BooleanField(default=False)
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["field", "valid_to"]),
            models.Index(fields=["source", "valid_to"]),
        ]

    def __str__(self) -> str:
        return f"{self.source_id} -> {self.field_id} from {self.valid_from:%Y-%m-%d %H:%M}"


class DerivedVersion(models.Model):
    """The version of the code that made a kind of derived state (``name``): a release that
    changes the rules finds an older version here and rebuilds that state."""

    name = models.CharField(max_length=64, unique=True)
    version = models.IntegerField()

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"


# Newest first, as the versions' timeline orders them: of two versions starting at one
# instant, the one of the larger schema digest is in force after it (schema sightings sort
# by time, then digest).
NEWEST_VERSION_FIRST = ("-created_at", "-schema_hash")


class DatasetVersion(models.Model):
    """One state of a dataset's schema, effective from ``created_at`` (event time)."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    version = models.UUIDField(unique=True)
    created_at = models.DateTimeField()
    # Run ids are OpenLineage UUIDs; the catalog does not depend on the graph app.
    run_uuid = models.UUIDField(null=True, blank=True)
    schema_hash = models.CharField(max_length=64)
    fields = models.JSONField(default=list, help_text="[{name, type, description}]")
    lifecycle_state = models.CharField(max_length=32, blank=True)

    class Meta:
        ordering = ["dataset_id", "-created_at"]
        indexes = [models.Index(fields=["dataset", "created_at"])]

    def __str__(self) -> str:
        return f"{self.dataset_id}@{self.created_at:%Y-%m-%d %H:%M}"


class ChangeSource(models.TextChoices):
    STEWARD = "steward", "Steward edit"
    IMPORT = "import", "Catalog import"
    LINEAGE = "lineage", "Lineage event"
    PROPAGATION = "propagation", "PII propagation"


class ChangeRecord(models.Model):
    """One change to one attribute of a dataset or field: who, when, old → new.

    Values are JSON so the catalog can be replayed to any instant: the value
    of an attribute at time t is the ``new`` of the last record at or before t,
    or else the ``old`` of the first record after t.
    """

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_name = models.CharField(max_length=150, blank=True)
    source = models.CharField(max_length=16, choices=ChangeSource.choices)
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="changes")
    field_name = models.CharField(max_length=1024, blank=True)
    attribute = models.CharField(max_length=64)
    old = models.JSONField(null=True, blank=True)
    new = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["dataset", "field_name", "attribute", "at"])]

    def __str__(self) -> str:
        return f"{self.attribute} by {self.actor_name} at {self.at:%Y-%m-%d %H:%M}"


class ApiToken(models.Model):
    """A bearer token; only its SHA-256 is stored."""

    PREFIX_LENGTH = 8

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=128, blank=True)
    prefix = models.CharField(max_length=16, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    @staticmethod
    def hash_key(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    @staticmethod
    def generate_key() -> str:
        return "le_" + secrets.token_urlsafe(32)

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
