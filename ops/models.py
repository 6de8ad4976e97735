"""What the operations app keeps: one sample of each service level indicator a day."""

from __future__ import annotations

from django.db import models


class SliSample(models.Model):
    """An indicator's value on a day, over the whole catalog (the Health page's trends)."""

    day = models.DateField()
    name = models.CharField(max_length=32)
    value = models.FloatField(null=True)
    target = models.FloatField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "name"], name="sli_sample_day")]
        ordering = ["day", "name"]

    def __str__(self) -> str:
        return f"{self.name} on {self.day}: {self.value}"
