"""Shared fixtures: personas (one user per role), API clients, and service tiers.

Tiers (markers ``postgres``, ``redis``, ``browser``, ``spark``) need a real
service. When one is missing the tier is skipped with one loud line — except
under CI=true, where a missing service fails the run.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
from django.contrib.auth.models import Group, User
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from catalog import actions
from catalog.auth import ADMIN, COMPLIANCE, ENGINEER, PRODUCER, STEWARD, VIEWER

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
REDIS_URL = (
    os.environ.get("TEST_REDIS_URL")
    or os.environ.get("CELERY_BROKER_URL")
    or "redis://127.0.0.1:6379/0"
)
# Tiers that the Makefile's PostgreSQL pass runs: skipped quietly in the SQLite pass.
POSTGRES_PASS_TIERS = {"postgres", "redis"}
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")

# Property tests drive the database: an example's time varies with the machine, and they
# take function-scoped fixtures (the database, users) that hold across examples.
hypothesis_settings.register_profile(
    "lineage",
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
hypothesis_settings.load_profile("lineage")


def _port_open(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or default_port), 2
        ):
            return True
    except OSError:
        return False


def _is_postgres() -> bool:
    from django.db import connection

    return connection.vendor == "postgresql"


def _java_ok() -> bool:
    if not shutil.which("java"):
        return False
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return subprocess.run(["java", "-version"], capture_output=True).returncode == 0


def _tier_status() -> dict[str, str | None]:
    """For each tier, None when available, else why not."""
    return {
        "postgres": None if _is_postgres() else "DATABASE_URL is not PostgreSQL in this pass",
        "redis": None if _port_open(REDIS_URL, 6379) else f"Redis not reachable at {REDIS_URL}",
        "browser": None if os.path.exists(CHROMIUM) else f"Chromium not found at {CHROMIUM}",
        "spark": None if _java_ok() else "Java 17 or PySpark not available",
    }


# The reason a test of a tier whose service is missing gives. Said through each test's
# outcome, so that it reaches the summary from every test process.
CANNOT_RUN = "tier cannot run: "
CI_FAILURE = pytest.StashKey[str]()


def _unique_ids(items: list[pytest.Item]) -> None:
    """Reports, reruns and pytest-xdist's grouping schedulers (which run one of the tests
    that share an id) name tests by id. pytest 9 builds a test's id from its
    parametrization, which schemathesis (4.32) does not use: its tests of the API's
    operations all have the id of the function. They get their names, which hold the
    operation (``test_x[GET /api/v1/lineage]``)."""
    for item in items:
        if isinstance(item, pytest.Function) and item.name.endswith("]"):
            params = item.name.removeprefix(item.originalname + "[")[:-1]
            if not item.nodeid.endswith(f"[{params}]"):
                assert item.parent is not None
                item._id = item.parent.id.child(item.originalname).with_params(params)
    ids = [item.nodeid for item in items]
    if len(set(ids)) != len(ids):
        shared = sorted({i for i in ids if ids.count(i) > 1})
        raise pytest.UsageError(f"tests share an id (one of them would run): {shared}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _unique_ids(items)
    status = _tier_status()
    sqlite_pass = status["postgres"] is not None
    if sqlite_pass:
        # Real workers share the database with the test process: PostgreSQL only.
        for tier in POSTGRES_PASS_TIERS:
            status[tier] = f"the {tier} tier runs in the PostgreSQL pass (make test-postgres)"
    for item in items:
        for tier, reason in status.items():
            if reason is None or not item.get_closest_marker(tier):
                continue
            if not (sqlite_pass and tier in POSTGRES_PASS_TIERS):
                reason = f"the {tier} {CANNOT_RUN}{reason}"
                if IN_CI:
                    item.stash[CI_FAILURE] = f"CI=true but {reason}"
                    continue
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_runtest_setup(item: pytest.Item) -> None:
    failure = item.stash.get(CI_FAILURE, None)
    if failure is not None:
        pytest.fail(failure, pytrace=False)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):
        return str(longrepr[2]).removeprefix("Skipped: ")
    return ""


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A test process of pytest-xdist hands its fuzzing counts to the summary's."""
    from tests.fuzz import SENT

    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["fuzz_sent"] = dict(SENT)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    from tests.fuzz import SENT

    for key, count in getattr(node, "workeroutput", {}).get("fuzz_sent", {}).items():
        SENT[key] += count


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.fuzz import SENT

    skipped = {_skip_reason(report) for report in terminalreporter.stats.get("skipped", [])}
    for reason in sorted(r for r in skipped if CANNOT_RUN in r):
        terminalreporter.write_line(f"!!! SKIPPED: {reason}", red=True, bold=True)

    if SENT["requests"]:
        terminalreporter.write_line(
            f"fuzzing tier: {SENT['requests']} requests, {SENT['server_errors']} answered >= 500"
        )
        report = os.environ.get("FUZZ_REPORT")
        if report:  # benchmarks/bench_fuzz.py reads it
            import json

            with open(report, "w", encoding="utf-8") as handle:
                json.dump(SENT, handle)


def make_user(username: str, role: str | None) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username)
    if role:
        user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def viewer(db: Any) -> User:
    return make_user("vera-viewer", VIEWER)


@pytest.fixture
def engineer(db: Any) -> User:
    return make_user("erin-engineer", ENGINEER)


@pytest.fixture
def steward(db: Any) -> User:
    return make_user("stella-steward", STEWARD)


@pytest.fixture
def compliance(db: Any) -> User:
    return make_user("carl-compliance", COMPLIANCE)


@pytest.fixture
def admin_user(db: Any) -> User:
    return make_user("ada-admin", ADMIN)


@pytest.fixture
def producer(db: Any) -> User:
    return make_user("pat-producer", PRODUCER)


@pytest.fixture
def outsider(db: Any) -> User:
    """Signed in, but in no role."""
    return make_user("olga-outsider", None)


@pytest.fixture
def api() -> Callable[[User | None], APIClient]:
    """api(user) gives an APIClient sending that user's bearer token (None: anonymous)."""

    def build(user: User | None) -> APIClient:
        client = APIClient()
        if user is not None:
            _, key = actions.issue_token(user, name="test")
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        return client

    return build


@pytest.fixture
def token_for() -> Callable[[User], str]:
    def build(user: User) -> str:
        return actions.issue_token(user, name="test")[1]

    return build


@pytest.fixture
def world(admin_user: User, api: Any, django_capture_on_commit_callbacks: Any) -> dict[str, Any]:
    """The fuzzing tier's seeded world (tests/fuzz.py)."""
    from tests.fuzz import build_world

    return build_world(admin_user, api, django_capture_on_commit_callbacks)


@pytest.fixture(autouse=True)
def _isolated_data_dir(
    tmp_path_factory: pytest.TempPathFactory, settings: Any, request: pytest.FixtureRequest
) -> Iterator[None]:
    settings.DATA_DIR = tmp_path_factory.mktemp("data")
    # The lineage's background rebuilds run as in production on PostgreSQL. SQLite's
    # in-memory test database is one shared cache, whose table locks a rebuild's reads
    # would hold against the test's writes (no busy timeout applies to them).
    settings.GRAPH_BACKGROUND_REBUILD = settings.DATABASES["default"]["ENGINE"] != (
        "django.db.backends.sqlite3"
    )
    if "_django_db_helper" in request.fixturenames or request.node.get_closest_marker("django_db"):
        request.getfixturevalue("_django_db_helper")  # the test's database, open to it
        _forget_flushed_changes()
    yield
    _wait_for_background_rebuilds()


def _wait_for_background_rebuilds() -> None:
    """The lineage's background rebuilds (GRAPH_BACKGROUND_REBUILD, on as in production)
    end within the test that started them, while its database is still open to them."""
    for thread in threading.enumerate():
        name = thread.name
        if name.startswith("lineage-") and name.endswith("-rebuild"):
            thread.join(timeout=60)


def _forget_flushed_changes() -> None:
    """On SQLite, the flush that ends a transactional test deletes rows one by one, so the
    change-log triggers fire and leave changes behind; a later test would read them as its
    own (a namespace's deletion ends the node cache's epoch). Start from an empty log."""
    from django.db import connection

    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        for table in ("graph_change", "graph_revision_log", "graph_revision"):
            cursor.execute(f"DELETE FROM {table}")


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    """Pages cache counts, auth grants, the node directory: every test starts without them."""
    from django.core.cache import cache

    from catalog.auth import forget_grants
    from graph import directory, docfile

    cache.clear()
    forget_grants()
    directory.reset()
    docfile.reset()
    yield


@pytest.fixture
def revision_reads(monkeypatch):
    """The reads of the change log's revision so far (graph.revision.read), as a list."""
    from graph import revision

    reads: list[object] = []
    read = revision.read

    def counted():
        reads.append(found := read())
        return found

    monkeypatch.setattr(revision, "read", counted)
    return reads
