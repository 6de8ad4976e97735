"""Each host of a multi-host PostgreSQL or Redshift namespace names its port, the default
one where it was left out (catalog.naming): ``postgres://a,b`` is
``postgres://a:5432,b:5432``. Datasets move to the canonical namespace, twins merge."""

from __future__ import annotations

import importlib

from django.db import migrations

canonical_names = importlib.import_module(
    "ingest.migrations.0009_canonical_dataset_names"
).canonical_names


class Migration(migrations.Migration):
    # Merging twins writes the fields' gaps.
    dependencies = [("catalog", "0008_field_gaps"), ("ingest", "0010_default_ports")]

    operations = [migrations.RunPython(canonical_names, migrations.RunPython.noop, elidable=True)]
