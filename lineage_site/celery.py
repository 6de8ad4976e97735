"""The Celery app: `celery -A lineage_site worker` starts a worker."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")

app = Celery("lineage_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
