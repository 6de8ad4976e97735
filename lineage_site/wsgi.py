"""WSGI entry point (gunicorn lineage_site.wsgi)."""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")
application = get_wsgi_application()
# Import every view module now rather than in the process's first request (~350 ms).
get_resolver().resolve("/api/v1/namespaces")

if settings.GRAPH_WARM_ON_START:
    # Each server process builds its lineage snapshots and node directory before its
    # first request (seconds at millions of edges) instead of during some user's request.
    from django.db import connections

    from graph import directory, docfile, snapshot

    snapshot.warm()
    directory.warm()
    docfile.warm()
    # Under gunicorn --preload this runs before the fork: no worker may inherit the socket.
    connections.close_all()
