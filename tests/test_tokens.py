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
