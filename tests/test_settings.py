"""Settings: embedded default, environment knobs, production checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # Browser tests set DJANGO_ALLOW_ASYNC_UNSAFE in this process; a deployment never has it.
    dropped = {
        "DATABASE_URL",
        "CELERY_BROKER_URL",
        "DEBUG",
        "SECRET_KEY",
        "DJANGO_ALLOW_ASYNC_UNSAFE",
    }
    clean = {k: v for k, v in os.environ.items() if k not in dropped}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_passes_the_deploy_check_with_production_settings():
    result = run_manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DEBUG="false",
        SECRET_KEY="x" * 64 + "-production-secret-key-value",
        ALLOWED_HOSTS="lineage.example.com",
    )
    # HSTS preload (W021) is silenced until the operator opts in (SECURE_HSTS_PRELOAD=true).
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_it_refuses_to_start_without_a_secret_key_when_debug_is_off():
    for key in (None, "", "short", "a" * 80):
        result = run_manage("check", DEBUG="false", **({} if key is None else {"SECRET_KEY": key}))
        assert result.returncode != 0, key
        assert "SECRET_KEY must be set" in result.stderr


def test_it_defaults_to_sqlite_and_in_process_tasks():
    code = (
        "from django.conf import settings;"
        "print(settings.DATABASES['default']['ENGINE'], settings.CELERY_TASK_ALWAYS_EAGER)"
    )
    result = run_manage("shell", "--no-imports", "-c", code)
    assert result.stdout.split() == ["django.db.backends.sqlite3", "True"], result.stderr


def test_it_uses_postgres_and_a_broker_from_the_environment():
    code = (
        "from django.conf import settings;"
        "print(settings.DATABASES['default']['ENGINE'], settings.CELERY_TASK_ALWAYS_EAGER)"
    )
    result = run_manage(
        "shell",
        "--no-imports",
        "-c",
        code,
        DATABASE_URL="postgres://u@db.example:5432/lineage",
        CELERY_BROKER_URL="redis://cache.example:6379/0",
    )
    # Django's PostgreSQL backend with psycopg's C timestamp loader (lineage_site/postgresql).
    assert result.stdout.split() == ["lineage_site.postgresql", "False"], result.stderr


def test_a_malformed_number_in_the_environment_is_named():
    result = run_manage("check", GRAPH_DOCUMENTS_INTERVAL="soon")
    assert result.returncode != 0
    assert "GRAPH_DOCUMENTS_INTERVAL must be a whole number, got 'soon'" in result.stderr
    result = run_manage("check", GRAPH_DOCUMENTS_INTERVAL="0")
    assert "GRAPH_DOCUMENTS_INTERVAL must be at least 1, got 0" in result.stderr
    result = run_manage("check", GRAPH_DOCUMENTS_INTERVAL="5")
    assert result.returncode == 0, result.stderr


def test_without_a_broker_tasks_run_here_off_the_network(tmp_path):
    """Celery opens a producer even for in-process tasks: on kombu's memory transport,
    without the warning (and the AMQP address) its default brought to every start."""
    code = (
        "from lineage_site import dispatch; from lineage_site.celery import app; "
        "print(app.conf.task_always_eager, app.connection_for_write().transport_cls); "
        "dispatch.send('privacy.sweep_runs', [])"
    )
    result = run_manage("migrate", "-v0", LINEAGE_DATA_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    result = run_manage("shell", "--no-imports", "-c", code, LINEAGE_DATA_DIR=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "memory"]
    assert "No hostname was supplied" not in result.stderr


def test_a_run_must_miss_several_heartbeats_before_it_is_given_up():
    result = run_manage("check", PRIVACY_RUN_STALE_SECONDS="60")
    assert result.returncode != 0
    assert "PRIVACY_RUN_STALE_SECONDS (60) must be at least three" in result.stderr
    ok = run_manage("check", PRIVACY_RUN_STALE_SECONDS="60", PRIVACY_RUN_HEARTBEAT_SECONDS="20")
    assert ok.returncode == 0, ok.stderr
