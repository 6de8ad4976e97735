"""What the operations app keeps: one sample of each service level indicator a day."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone


class SliSample(models.Model):
    """An indicator's value on a day, over the whole catalog (the Health page's trends): the
    last of the day's hourly measures. ``/metrics`` shows the latest as gauges."""

    day = models.DateField()
    name = models.CharField(max_length=32)
    value = models.FloatField(null=True)
    target = models.FloatField()
    measured_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "name"], name="sli_sample_day")]
        ordering = ["day", "name"]

    def __str__(self) -> str:
        return f"{self.name} on {self.day}: {self.value}"


class NoticeKind(models.TextChoices):
    TAINT = "taint", "A dataset tainted, or at risk downstream of a taint"
    SCHEMA = "schema", "A column that downstream lineage reads removed or retyped"
    STALE = "stale", "A dataset's lineage became stale"
    DEAD_LETTERS = "dead_letters", "Events failed for good (dead letters)"


class Subscription(models.Model):
    """Who is told, about which datasets (those of a dataset, a namespace or an owner), of
    which kinds of notice (none listed: every kind), and how: a webhook, an e-mail, or both."""

    name = models.CharField(max_length=128, help_text="The team or person told")
    dataset = models.ForeignKey(
        "catalog.Dataset", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    namespace = models.ForeignKey(
        "catalog.Namespace", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    owner = models.ForeignKey(
        "catalog.Owner", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    kinds = models.JSONField(default=list, blank=True)
    webhook_url = models.URLField(max_length=2048, blank=True)
    email = models.EmailField(blank=True)
    active = models.BooleanField(
        default=True,
        help_text="Clear to tell it nothing more: one that was told something keeps its "
        "notices on record and cannot be deleted.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "pk"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """A subscription covers something, is told somewhere, and of known kinds."""
        problems = {}
        if not (self.dataset_id or self.namespace_id or self.owner_id):
            problems["dataset"] = "Choose the dataset, the namespace or the owner it covers."
        if not (self.webhook_url or self.email):
            problems["email"] = "Give a webhook URL, an e-mail address, or both."
        unknown = sorted(set(self.kinds or []) - set(NoticeKind.values))
        if not isinstance(self.kinds, list) or unknown:
            problems["kinds"] = f"Kinds are a list of {', '.join(NoticeKind.values)}" + (
                f"; not {', '.join(map(str, unknown))}" if unknown else ""
            )
        if problems:
            raise ValidationError(problems)

    @property
    def webhook_site(self) -> str:
        """The webhook's scheme and host: its path may hold a secret (Slack's does)."""
        parts = urlsplit(self.webhook_url)
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{parts.hostname}{port}" if parts.hostname else ""

    def wants(self, kind: str) -> bool:
        return self.active and (not self.kinds or kind in self.kinds)


class Notice(models.Model):
    """One event told to one subscription: never twice (``key`` names the event)."""

    # What was told, when and to whom is a record: a subscription told something cannot be
    # deleted (it is turned off instead).
    subscription = models.ForeignKey(Subscription, on_delete=models.PROTECT, related_name="notices")
    kind = models.CharField(max_length=16, choices=NoticeKind.choices)
    key = models.CharField(max_length=255)
    title = models.CharField(max_length=255)
    # What the webhook receives as JSON (and the e-mail says in words).
    body = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(fields=["subscription", "key"], name="notice_once_per_event")
        ]

    def __str__(self) -> str:
        return self.title


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"


class Delivery(models.Model):
    """A notice sent through one channel: tried again with backoff until sent or given up."""

    notice = models.ForeignKey(Notice, on_delete=models.CASCADE, related_name="deliveries")
    channel = models.CharField(max_length=8)  # "webhook" or "email"
    target = models.CharField(max_length=2048)
    state = models.CharField(
        max_length=8, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pk"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["notice", "channel"], name="delivery_once_per_channel")
        ]

    def __str__(self) -> str:
        return f"{self.channel} to {self.target}: {self.state}"
