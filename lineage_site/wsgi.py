"""WSGI entry point (gunicorn lineage_site.wsgi)."""

import ctypes
import os
from typing import Any

from django.conf import settings
from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")
application = get_wsgi_application()
# Import every view module now rather than in the process's first request (~350 ms).
get_resolver().resolve("/api/v1/namespaces")

if settings.GRAPH_WARM_ON_START:
    # Each server process builds its lineage snapshots and maps the host's node document
    # file before its first request (seconds at millions of edges) instead of during some
    # user's request.
    from django.db import connections

    from graph import docfile, snapshot

    snapshot.warm()
    docfile.warm()
    # Under gunicorn --preload this runs before the fork: no worker may inherit the socket.
    connections.close_all()

# After each response is sent, glibc's malloc hands the heap's free pages back. A hub's
# answer frees megabytes in pieces the heap cannot give back on its own, and a server
# process kept them: at 100,000 datasets it held 340-420 MB after a mixed load, 280 with
# this. A trim costs 0.05-0.2 ms after an ordinary answer, 0.7 ms after a hub's
# (benchmarks/README.md).
try:
    _trim_heap = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):  # not glibc
    pass
else:
    from django.core.signals import request_finished

    def _trim(**kwargs: Any) -> None:
        _trim_heap(0)

    request_finished.connect(_trim, weak=False)
