"""Node documents live in the host's document file alone (graph/documents.py): the table
and the record of its passes go."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("graph", "0012_run_timeline_index"),
    ]

    operations = [
        migrations.DeleteModel(name="NodeDocument"),
        migrations.DeleteModel(name="NodeDocumentPass"),
    ]
