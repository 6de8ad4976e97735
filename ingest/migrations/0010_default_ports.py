"""A PostgreSQL or Redshift namespace stored without its port names the default one
(catalog.naming): its datasets move to the canonical namespace, twins merge."""

from __future__ import annotations

import importlib

from django.db import migrations

canonical_names = importlib.import_module(
    "ingest.migrations.0009_canonical_dataset_names"
).canonical_names


class Migration(migrations.Migration):
    dependencies = [("ingest", "0009_canonical_dataset_names")]

    operations = [migrations.RunPython(canonical_names, migrations.RunPython.noop, elidable=True)]
