"""`manage.py run_demo`: run the demo lakehouse on Spark against this app, over real HTTP.

Serves the app's WSGI handler on a free 127.0.0.1 port in a background thread, issues a
temporary producer token for the ``demo-producer`` user, and runs ``python -m pipelines.demo``
in a subprocess (this interpreter, ``SPARK_MASTER`` from settings) whose OpenLineage events go
through ``POST /api/v1/lineage`` like any producer's. Then it stops the server, revokes the
token, applies the demo's catalog file (owners, PII, retention) and loads the SQL query
log of the Spark SQL the jobs ran (``manage.py ingest_sql_log``).

A rerun is harmless: run ids and event times are deterministic, so the same events come
again and are stored once.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.core.wsgi import get_wsgi_application
from django.db import connections, transaction
from tqdm import tqdm

from catalog import actions
from catalog.auth import PRODUCER
from pipelines.lineage.facets import SESSION_CATALOG

DEMO_PRODUCER = "demo-producer"
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _host_fixing(app: WSGIApp) -> WSGIApp:
    """Present requests under a host the settings allow (the server listens on 127.0.0.1)."""
    allowed = [h for h in settings.ALLOWED_HOSTS if h and not h.startswith(".")]
    if not allowed or "*" in allowed or "127.0.0.1" in allowed:
        return app
    host = allowed[0]

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        environ["HTTP_HOST"] = host
        return app(environ, start_response)

    return wrapped


def _in_memory_sqlite(conn: Any) -> bool:
    return conn.vendor == "sqlite" and bool(conn.is_in_memory_db())


@contextmanager
def serve_app() -> Iterator[str]:
    """Serve the app on a free local port in a background thread; yield its base URL."""
    # An in-memory SQLite database (tests) exists only in this thread's connection: share it
    # with the request threads, as Django's live test server does.
    shared = {conn.alias: conn for conn in connections.all() if _in_memory_sqlite(conn)}
    for conn in shared.values():
        conn.inc_thread_sharing()
    server = ThreadedWSGIServer(
        ("127.0.0.1", 0), _QuietHandler, allow_reuse_address=False, connections_override=shared
    )
    server.set_app(_host_fixing(get_wsgi_application()))
    thread = threading.Thread(target=server.serve_forever, name="run-demo-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        for conn in shared.values():
            conn.dec_thread_sharing()


@contextmanager
def quieter(names: Iterable[str], level: int = logging.WARNING) -> Iterator[None]:
    """Raise the level of some loggers for a while (one line per ingested event is noise here)."""
    loggers = [logging.getLogger(name) for name in names]
    before = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(max(level, logger.getEffectiveLevel()))
    try:
        yield
    finally:
        for logger, old in zip(loggers, before, strict=True):
            logger.setLevel(old)


def _producer_token() -> tuple[Any, str]:
    with transaction.atomic():
        user, created = User.objects.get_or_create(username=DEMO_PRODUCER)
        if created:
            user.set_unusable_password()
            user.save()
        user.groups.add(Group.objects.get(name=PRODUCER))
        return actions.issue_token(user, name="run_demo")


class Command(BaseCommand):
    help = "Run the demo Spark lakehouse and send its OpenLineage to this app over HTTP."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=4, help="simulated days (default 4)")
        parser.add_argument(
            "--data-dir", help="lakehouse folder (default: <LINEAGE_DATA_DIR>/lakehouse)"
        )
        parser.add_argument(
            "--timeout", type=int, default=1800, help="give up on the pipeline after N seconds"
        )
        parser.add_argument(
            "--skip-catalog", action="store_true", help="do not apply the demo's catalog file"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        data_dir = Path(options["data_dir"] or Path(settings.DATA_DIR) / "lakehouse").resolve()
        token, key = _producer_token()
        self.stdout.write(f"Running the demo lakehouse on Spark ({settings.SPARK_MASTER})…")
        noisy = ("celery", "ingest", "graph", "catalog") if options["verbosity"] < 2 else ()
        try:
            with quieter(noisy), serve_app() as url:
                summary = self._run_pipeline(url, key, data_dir, options)
        finally:
            actions.revoke_token(token)
        self.stdout.write(
            f"Demo pipeline: {summary['jobs_run']} job runs over {len(summary['days'])} days, "
            f"{summary['events_sent']} events sent in {summary['seconds']} s."
        )
        if summary["events_spooled"]:
            self.stderr.write(
                f"{summary['events_spooled']} events could not be delivered and wait in "
                f"{summary['spool_path']}; load them with: manage.py ingest_events "
                f"{summary['spool_path']}"
            )
        catalog_file = Path(summary["catalog_path"])
        if not options["skip_catalog"] and catalog_file.exists():
            call_command("catalog_import", str(catalog_file), stdout=self.stdout)
        # The Spark SQL the jobs ran, as a query log: its tables are the ones Spark's
        # events named through their symlinks, so its lineage lands on the same datasets.
        sql_log = Path(summary.get("sql_log_path") or "")
        if sql_log.is_file():
            with quieter(noisy):
                call_command(
                    "ingest_sql_log",
                    str(sql_log),
                    namespace=SESSION_CATALOG,
                    dialect="spark",
                    fmt="jsonl",
                    no_progress=True,
                    stdout=self.stdout,
                    stderr=self.stderr,
                )

    def _run_pipeline(
        self, url: str, key: str, data_dir: Path, options: dict[str, Any]
    ) -> dict[str, Any]:
        if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
            raise CommandError("the demo pipeline needs Java 17 (no java on PATH, no JAVA_HOME)")
        command = [
            sys.executable,
            "-m",
            "pipelines.demo",
            "--lineage-url",
            url,
            "--data-dir",
            str(data_dir),
            "--days",
            str(options["days"]),
            "--progress",
        ]
        # The token travels in the environment, never on a command line others can list.
        env = {**os.environ, "LINEAGE_API_KEY": key, "SPARK_MASTER": settings.SPARK_MASTER}
        summary: dict[str, Any] | None = None
        with tempfile.TemporaryFile("w+", encoding="utf-8") as errors:
            process = subprocess.Popen(
                command,
                cwd=settings.BASE_DIR,
                env=env,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
            timer = threading.Timer(options["timeout"], process.kill)
            timer.start()
            try:
                summary = self._follow(process, options["verbosity"] > 0)
                returncode = process.wait()
            finally:
                timer.cancel()
            if returncode != 0:
                errors.seek(0)
                tail = "\n".join(errors.read().strip().splitlines()[-25:])
                raise CommandError(f"the demo pipeline failed (exit {returncode}):\n{tail}")
        if summary is None:
            raise CommandError("the demo pipeline printed no summary")
        return summary

    def _follow(self, process: subprocess.Popen[str], show: bool) -> dict[str, Any] | None:
        """Show the pipeline's progress lines as a bar; return its final summary."""
        summary = None
        assert process.stdout is not None
        with tqdm(unit=" jobs", disable=not show, file=self.stderr) as bar:
            for line in process.stdout:
                if not line.startswith("{"):
                    continue
                message = json.loads(line)
                if "progress" in message:
                    bar.total = message["total"]
                    bar.set_description(f"{message['day']} {message['job']}"[:48])
                    bar.update(message["progress"] - bar.n)
                else:
                    summary = message
        return summary
