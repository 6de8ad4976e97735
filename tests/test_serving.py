"""The project's gunicorn worker: a finished connection is closed at once when everything the
client sent was read, and gracefully (gunicorn's way) when not."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gunicorn.config import Config
from gunicorn.http.parser import RequestParser

from lineage_site.serving import body_consumed, nothing_pending

ROOT = Path(__file__).resolve().parent.parent
GUNICORN = Path(sys.executable).parent / "gunicorn"


def parsed(raw: bytes) -> object:
    """gunicorn's request for ``raw``, its body not read yet."""
    return next(RequestParser(Config(), iter([raw]), ("127.0.0.1", 40000)))


def test_a_request_without_a_body_has_nothing_left_to_read():
    assert body_consumed(parsed(b"GET /api/v1/lineage HTTP/1.1\r\nHost: x\r\n\r\n"))


def test_a_body_counts_as_received_only_once_read_to_its_end():
    body = b"x" * 100_000
    req = parsed(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + body)
    assert not body_consumed(req)
    req.body.read(3)  # type: ignore[attr-defined]
    assert not body_consumed(req)
    req.body.read()  # type: ignore[attr-defined]
    assert body_consumed(req)


def test_a_chunked_body_always_gets_the_graceful_close():
    req = parsed(
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    )
    req.body.read()  # type: ignore[attr-defined]
    assert not body_consumed(req)


def test_bytes_waiting_on_the_socket_are_pending_and_stay_unread():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        assert nothing_pending(ours)
        theirs.sendall(b"GET /next HTTP/1.1\r\n")
        time.sleep(0.05)
        assert not nothing_pending(ours)
        assert ours.recv(100) == b"GET /next HTTP/1.1\r\n"  # only peeked at
        theirs.close()
        assert nothing_pending(ours)  # the peer closed: nothing more can come


def test_a_closed_socket_is_not_judged_safe():
    ours, theirs = socket.socketpair()
    theirs.close()
    ours.close()
    assert not nothing_pending(ours)


APP = """
def app(environ, start_response):
    body = environ["wsgi.input"].read() if environ["REQUEST_METHOD"] == "POST" else b""
    answer = b"ok %d" % len(body)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(answer)))])
    return [answer]
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """gunicorn with the project's worker class: one worker, so a worker that waits for a
    client holds up the next one."""
    (tmp_path / "tinyapp.py").write_text(APP)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [
            str(GUNICORN),
            "tinyapp:app",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--worker-class",
            "lineage_site.serving.SyncWorker",
            "--log-level",
            "warning",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("gunicorn did not start") from None
                time.sleep(0.1)
        yield port, process
    finally:
        process.terminate()
        process.wait(10)


def exchange(port: int, request: bytes) -> tuple[socket.socket, bytes]:
    """Send ``request`` and read the response to the server's end of it; the socket is left
    open on the client's side."""
    client = socket.create_connection(("127.0.0.1", port), 10)
    client.sendall(request)
    received = b""
    while chunk := client.recv(65536):
        received += chunk
    return client, received


def test_the_worker_serves_the_next_client_while_the_last_one_keeps_its_socket_open(server):
    port, _ = server
    get = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    first, answer = exchange(port, get)
    with first:
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok 0")
        # gunicorn's own sync worker waits here until the first client closes (up to 2 s).
        started = time.monotonic()
        second, answer = exchange(port, get)
        second.close()
        assert answer.endswith(b"ok 0")
        assert time.monotonic() - started < 1.0


def test_a_posted_body_read_by_the_app_is_answered_in_full(server):
    port, _ = server
    body = b"x" * 300_000
    client, answer = exchange(
        port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    )
    client.close()
    assert answer.endswith(b"ok 300000")
