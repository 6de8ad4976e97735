"""The fuzzing tier, generated half: schemathesis sends what the OpenAPI schema at
``/api/schema/`` describes, valid and not, to every operation of the API, and checks each
answer against that schema: no 5xx, a documented status, content type and headers, a body
of the documented shape (the error shape included), and bad input refused.

Runs on SQLite and on PostgreSQL (the Makefile's two passes), as an admin, on the seeded
world of ``tests.fuzz``. Examples are derandomised so that CI runs the same requests each
time; ``benchmarks/bench_fuzz.py`` runs the long, random version.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, settings
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from ingest.models import EventState, RawEvent
from tests import fuzz

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
DERANDOMIZE = os.environ.get("FUZZ_RANDOM", "") == ""
# Operations whose on-commit work runs (normalising events, replays, SQL logs); privacy's
# would start Spark jobs, which have their own tier.
RUN_ON_COMMIT = ("/api/v1/lineage", "/api/v1/ingestion/", "/api/v1/sql-logs")
# Bodies naming a subject kind, which the schema cannot list (stewards define them): a valid
# shape with an unknown kind is a 400 naming subjectKind, so "valid data is accepted" does
# not apply there.
NAMES_A_SUBJECT_KIND = (
    "/api/v1/privacy/subject-search",
    "/api/v1/privacy/scans",
    "/api/v1/privacy/erasure-plans",
)


@contextmanager
def in_the_tests_transaction() -> Iterator[None]:
    """As Django's test client does around each request: the test's transaction must outlive
    it (Django closes old connections when a request starts and ends)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


# Bodies that may carry keys of their own choosing (facets, extra keys), which OpenAPI 3.0
# cannot say must not hold NUL (it has no propertyNames): such a key is refused with a 400.
TAKES_ANY_KEYS = ("/api/v1/lineage", "/api/v1/taints")


def _excluded(case: Any) -> list[Any]:
    if case.path.startswith(NAMES_A_SUBJECT_KIND) or (
        case.method == "POST" and case.path.startswith(TAKES_ANY_KEYS)
    ):
        return [positive_data_acceptance]
    if case.path == "/api/v1/lineage/batch":
        # A batch with some bad events stores the others (207): schema-violating, accepted.
        return [negative_data_rejection]
    if case.path == "/api/v1/sql-logs" and case.method == "POST":
        # A body that is not a form is sent without a form's content type, and this endpoint
        # takes such a body as the raw log it documents (application/octet-stream).
        excluded = [negative_data_rejection]
        if case.media_type == "multipart/form-data":
            # A form may carry fields of its own choosing, whose names OpenAPI 3.0 cannot
            # say must not hold NUL (the generator ignores propertyNames): a 400.
            excluded.append(positive_data_acceptance)
        return excluded
    return []


# The project's OpenAPI schema, as the app serves it (in-process, through WSGI).
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", WSGIHandler())
# The admin's token of the running test (its database is the test's own).
BEARER: dict[str, str] = {}


@pytest.fixture(autouse=True)
def _bearer(admin_user: Any) -> None:
    from catalog import actions as catalog_actions

    BEARER["token"] = catalog_actions.issue_token(admin_user, name="schemathesis")[1]


@schema.auth(refresh_interval=None)
class AdminToken:
    """Schemathesis sends the admin's bearer token where the schema asks for one (and mutates
    it where it tests that authentication is enforced)."""

    def get(self, case: Any, context: Any) -> str:
        return BEARER.get("token", "")

    def set(self, case: Any, data: str, context: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=DERANDOMIZE,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],
)
def test_the_api_answers_what_its_schema_says(
    case: Any, world: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    execute = case.path.startswith(RUN_ON_COMMIT)
    with django_capture_on_commit_callbacks(execute=execute), in_the_tests_transaction():
        response = case.call_and_validate(excluded_checks=_excluded(case))
    fuzz.SENT["requests"] += 1
    if response.status_code >= 500:
        fuzz.SENT["server_errors"] += 1
    stuck = RawEvent.objects.exclude(state__in=[EventState.DONE, EventState.FAILED])
    assert not stuck.exists(), f"accepted but not processed: {list(stuck.values('pk', 'state'))}"
