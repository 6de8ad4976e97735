"""Datasets under their canonical names (catalog.naming), and a dataset's symlinked names
its aliases: twins merge, nothing is lost."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def canonical_names(apps: Any, schema_editor: Any) -> None:
    from catalog.naming import canonical, canonical_namespace

    Dataset = apps.get_model("catalog", "Dataset")
    DatasetRead = apps.get_model("ingest", "DatasetRead")
    DatasetAlias = apps.get_model("catalog", "DatasetAlias")
    names = Dataset.objects.values_list("namespace__name", "name").iterator()
    reads = DatasetRead.objects.values_list("namespace", "name").iterator()
    aliases = DatasetAlias.objects.values_list("namespace__name", "name").iterator()
    spaces = set(apps.get_model("catalog", "Namespace").objects.values_list("name", flat=True))
    respelled = any(canonical_namespace(n) != n and canonical_namespace(n) in spaces for n in spaces)
    symlinked = (
        Dataset.objects.filter(alias_of__isnull=False).exclude(lifecycle_state="RENAMED").exists()
    )
    if (
        not symlinked
        and not respelled
        and all(canonical(*key) == key for key in names)
        and all(canonical(*key) == key for key in reads)
        and all(canonical(*key) == key for key in aliases)
    ):
        return  # a new install, or names stored canonical already
    # Merging re-derives lineage as the normaliser does: it needs the current models, which
    # this migration's dependencies have brought about.
    from ingest.normalizer import canonicalise_names

    report = canonicalise_names()
    print(
        f"  {len(report.renamed)} datasets renamed, {len(report.merged)} twins merged, "
        f"{len(report.aliased)} symlinked datasets made aliases"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0006_dataset_alias"),
        ("graph", "0010_node_document_info"),
        ("ingest", "0008_event_warnings"),
    ]

    operations = [migrations.RunPython(canonical_names, migrations.RunPython.noop, elidable=True)]
