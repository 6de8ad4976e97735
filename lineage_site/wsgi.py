"""WSGI entry point (gunicorn lineage_site.wsgi)."""

import os

import django
from django.conf import settings
from django.urls import get_resolver

from lineage_site import collector

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "lineage_site.settings")
# What django.core.wsgi.get_wsgi_application does, with the project's handler (whose
# module reaches models, so it is imported once the apps are ready).
django.setup(set_prefix=False)

from lineage_site.handler import LineageWSGIHandler  # noqa: E402

application = LineageWSGIHandler()
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

# Keep what the process loaded to serve (Django, the views, the snapshots' and directory's
# objects), and then what its caches keep, out of the cycle collector's full passes: each
# would otherwise walk it all again, pausing whichever request triggered it.
collector.install()
