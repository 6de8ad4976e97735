"""The beat schedule without Celery beat.

With in-process tasks (no broker: the embedded default that ``make run`` serves with
runserver) no scheduler runs: the SLI trend, the notices of stale datasets, the compaction
of old events and run detail, the privacy sweep would never happen. There the server
process runs each scheduled task itself, on a thread of its own so that no request waits:
the first time after its first response, then once per its interval (counted from the
process's start: a restart runs them again).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

from django.conf import settings
from django.core.signals import request_finished
from django.db import connection

from lineage_site import dispatch

log = logging.getLogger(__name__)

_next_run: dict[str, float] = {}
_running = threading.Lock()


def embedded() -> bool:
    """Whether this process serves without a broker through runserver."""
    return bool(settings.CELERY_TASK_ALWAYS_EAGER) and "runserver" in sys.argv


def run_due(now: float | None = None) -> list[str]:
    """Run the scheduled tasks that are due (one thread at a time; another finds none
    due); returns their schedule names. A task that fails is logged and tried again at
    its next turn."""
    now = time.monotonic() if now is None else now
    ran: list[str] = []
    if not _running.acquire(blocking=False):
        return ran
    try:
        schedule: dict[str, dict[str, Any]] = settings.CELERY_BEAT_SCHEDULE
        for name, entry in schedule.items():
            if now < _next_run.get(name, 0.0):
                continue
            _next_run[name] = now + float(entry["schedule"])
            try:
                dispatch.send(entry["task"], list(entry.get("args", ())))
            except Exception:
                log.exception("scheduled task %s failed", entry["task"])
            ran.append(name)
    finally:
        _running.release()
    return ran


def _run_due_and_close() -> None:
    try:
        run_due()
    finally:
        connection.close()  # this thread's


def _after_response(**_: Any) -> None:
    now = time.monotonic()
    due = any(now >= _next_run.get(name, 0.0) for name in settings.CELERY_BEAT_SCHEDULE)
    if due and not _running.locked():
        threading.Thread(target=_run_due_and_close, name="embedded-beat", daemon=True).start()


def connect() -> None:
    if embedded():
        request_finished.connect(_after_response, dispatch_uid="ops.schedule")
