"""API tokens: issued by command, stored hashed, listed and revoked."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from rest_framework.test import APIClient

from catalog.models import ApiToken

pytestmark = pytest.mark.django_db


def issue(*args: str) -> str:
    out = StringIO()
    call_command("issue_token", *args, stdout=out)
    return out.getvalue().strip().splitlines()[-1]


def test_it_creates_the_user_and_prints_the_token_last():
    key = issue("--user", "spark-jobs", "--role", "producer")
    user = User.objects.get(username="spark-jobs")
    assert list(user.groups.values_list("name", flat=True)) == ["producer"]
    assert not user.has_usable_password()
    assert key.startswith("le_")


def test_it_stores_only_a_hash_of_the_token():
    key = issue("--user", "spark-jobs", "--role", "producer")
    token = ApiToken.objects.get()
    assert token.key_hash == ApiToken.hash_key(key)
    assert key not in (token.key_hash, token.prefix)


def test_it_authenticates_a_bearer_token():
    key = issue("--user", "vic", "--role", "viewer")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/v1/namespaces").status_code == 200


def test_it_lists_and_revokes_tokens():
    key = issue("--user", "vic", "--role", "viewer")
    token = ApiToken.objects.get()
    out = StringIO()
    call_command("list_tokens", stdout=out)
    assert token.prefix in out.getvalue() and key not in out.getvalue()
    call_command("revoke_token", str(token.pk), stdout=StringIO())
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/v1/namespaces").status_code == 401


def test_it_lets_a_user_revoke_their_own_token_over_the_api():
    key = issue("--user", "vic", "--role", "viewer")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    token_id = client.get("/api/v1/tokens").json()["tokens"][0]["id"]
    assert client.delete(f"/api/v1/tokens/{token_id}").status_code == 204
    assert client.get("/api/v1/tokens").status_code == 401


def test_it_rejects_a_malformed_authorization_header():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer a b")
    response = client.get("/api/v1/namespaces")
    assert response.status_code == 401
    assert response.json()["field"] == "Authorization"


def test_it_refuses_an_unknown_role():
    with pytest.raises(Exception, match="role"):
        issue("--user", "x", "--role", "wizard")


# -- the grants cache ---------------------------------------------------------------------


def bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def test_a_cached_token_costs_no_query_after_the_first_request(django_assert_num_queries):
    client = bearer(issue("--user", "vic", "--role", "viewer"))
    assert client.get("/api/v1/namespaces").status_code == 200
    with django_assert_num_queries(1):  # the namespaces themselves
        assert client.get("/api/v1/namespaces").status_code == 200


def test_revoking_in_this_process_refuses_the_token_at_once():
    key = issue("--user", "vic", "--role", "viewer")
    client = bearer(key)
    assert client.get("/api/v1/namespaces").status_code == 200
    call_command("revoke_token", str(ApiToken.objects.get().pk), stdout=StringIO())
    assert client.get("/api/v1/namespaces").status_code == 401


def test_a_change_made_elsewhere_is_seen_within_the_cache_time(settings, monkeypatch):
    """Another process's change sends no signal here: the cache entry runs out instead."""
    import time

    from django.utils import timezone

    settings.AUTH_CACHE_SECONDS = 5
    key = issue("--user", "vic", "--role", "viewer")
    client = bearer(key)
    assert client.get("/api/v1/namespaces").status_code == 200
    ApiToken.objects.update(revoked_at=timezone.now())  # an UPDATE sends no signal
    assert client.get("/api/v1/namespaces").status_code == 200
    later = time.monotonic() + 6
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert client.get("/api/v1/namespaces").status_code == 401


def test_a_role_change_takes_effect_at_once(viewer, api):
    from django.contrib.auth.models import Group

    client = api(viewer)
    assert client.post("/api/v1/lineage", {}, format="json").status_code == 403
    viewer.groups.add(Group.objects.get(name="producer"))
    response = client.post("/api/v1/lineage", {}, format="json")
    assert response.status_code in (400, 422), response.content
