"""gunicorn's sync worker, closing a finished connection at once when nothing is left unread.

A sync worker serves one request per connection and then closes it. gunicorn
27 (as pinned) closes "gracefully": it half-closes, then waits on the socket for
the client to close its side (up to 2 s) so that unread request bytes cannot
make the kernel reset the connection and cut the response short. Meanwhile
the worker accepts nothing. A client closes only once it has read the whole
response and the scheduler has run it: at 4 clients on 2 cores that is
0.2 ms per request on average, and the other clients queue behind it.

That wait protects only against unread bytes. When the request's body was
read to its end (or there was none) and no further bytes are waiting on the
socket, :class:`SyncWorker` closes at once: the kernel then sends the whole
response and a normal FIN. Otherwise — a body left unread or in chunks, a
pipelined request — gunicorn's graceful close runs as before.

Serve with ``gunicorn lineage_site.wsgi -k lineage_site.serving.SyncWorker``.
"""

from __future__ import annotations

import socket
from typing import Any

from gunicorn.http.body import LengthReader
from gunicorn.workers import sync


def body_consumed(req: Any) -> bool:
    """Whether the request's body was read off the socket to its end (true of a request
    without one)."""
    reader = getattr(getattr(req, "body", None), "reader", None)
    return isinstance(reader, LengthReader) and reader.length == 0


def nothing_pending(client: socket.socket) -> bool:
    """Whether no bytes wait unread on ``client`` (the peer may have closed)."""
    try:
        return client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return True
    except OSError:
        return False


class SyncWorker(sync.SyncWorker):
    """gunicorn's sync worker that does not wait for the client to close first when it
    has read everything the client sent."""

    def handle_request(self, listener: Any, req: Any, client: socket.socket, addr: Any) -> None:
        super().handle_request(listener, req, client, addr)
        if body_consumed(req) and nothing_pending(client):
            # gunicorn's graceful close, which follows, finds the socket closed and returns.
            client.close()
