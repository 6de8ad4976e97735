"""The Celery app: `celery -A lineage_site worker` starts a worker."""

import gc
import os
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")

app = Celery("lineage_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
if not app.conf.broker_url:
    # No broker: tasks run in-process (CELERY_TASK_ALWAYS_EAGER), but Celery still opens a
    # producer for each; kombu's in-memory transport keeps it off the network (the default
    # would be AMQP on localhost, with a warning at every start).
    app.conf.broker_url = "memory://localhost/"
app.autodiscover_tasks()


@worker_process_init.connect
@worker_ready.connect
def freeze_startup_objects(**kwargs: Any) -> None:
    """Keep what a worker loaded at start (Django, the app, the parsers) out of the
    collector's full passes, which otherwise walk it again every few batches."""
    gc.collect()
    gc.freeze()
