"""Celery tasks sent by name, so that no module needs the module that defines a task.

``send("ingest.tasks.process_batch", [ids])`` goes to the broker when one is
configured (``CELERY_BROKER_URL``), and runs in this process otherwise
(``CELERY_TASK_ALWAYS_EAGER``), with the same JSON-safe arguments either way.
"""

from __future__ import annotations

from typing import Any

from lineage_site.celery import app


def task(name: str) -> Any:
    """The registered task called ``name``; the apps' ``tasks`` modules are imported once,
    on first use."""
    if name not in app.tasks:
        app.loader.import_default_modules()
    return app.tasks[name]


def send(name: str, args: list[Any], **options: Any) -> None:
    """Queue the task ``name`` with ``args`` (``apply_async``'s options pass through);
    without a broker, run it here and now."""
    task(name).apply_async(args=args, **options)
