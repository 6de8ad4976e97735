"""The gaps in the fields' lives (catalog.FieldGap) from the schema versions stored before
they were kept: a field that left a dataset's schema and came back is absent in between."""

from __future__ import annotations

from itertools import groupby
from typing import Any

from django.db import migrations
from django.db.models import Count


def field_gaps(apps: Any, schema_editor: Any) -> None:
    from ingest.normalizer import field_gaps as gaps_of

    DatasetVersion = apps.get_model("catalog", "DatasetVersion")
    DatasetField = apps.get_model("catalog", "DatasetField")
    FieldGap = apps.get_model("catalog", "FieldGap")
    # A gap needs a version before, one without the field and one after.
    ids = list(
        DatasetVersion.objects.values("dataset_id")
        .annotate(n=Count("id"))
        .filter(n__gte=3)
        .values_list("dataset_id", flat=True)
    )
    for start in range(0, len(ids), 1000):
        chunk = ids[start : start + 1000]
        versions = (
            DatasetVersion.objects.filter(dataset_id__in=chunk)
            .order_by("dataset_id", "created_at", "schema_hash")
            .values_list("dataset_id", "created_at", "fields")
        )
        found = {
            dataset_id: gaps
            for dataset_id, rows in groupby(versions.iterator(), key=lambda row: row[0])
            if (gaps := gaps_of([(at, [f["name"] for f in fields]) for _, at, fields in rows]))
        }
        if not found:
            continue
        fields = {
            (ds, name): pk
            for pk, ds, name in DatasetField.objects.filter(dataset_id__in=list(found)).values_list(
                "pk", "dataset_id", "name"
            )
        }
        FieldGap.objects.bulk_create(
            FieldGap(field_id=fields[(ds, name)], removed_at=begin, returned_at=end)
            for ds, by_name in found.items()
            for name, spans in by_name.items()
            if (ds, name) in fields
            for begin, end in spans
        )


class Migration(migrations.Migration):
    dependencies = [("catalog", "0008_field_gaps"), ("ingest", "0011_multi_host_ports")]

    operations = [migrations.RunPython(field_gaps, migrations.RunPython.noop, elidable=True)]
