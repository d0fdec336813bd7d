"""Authentication: bearer tokens for scripts, the session cookie for the browser."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.webapp.api.helpers import API, send, task_body
from webapp.accounts.services import api_token_create, api_token_revoke
from webapp.catalog.models import Task

pytestmark = pytest.mark.django_db


def test_bearer_token_authenticates_as_its_user(personas):
    token, raw = api_token_create(user=personas.researcher, name="script")
    response = Client().get(f"{API}/me", headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 200
    assert response.json() == {"username": "carol", "roles": ["researcher"]}
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_revoked_token_gets_401(personas):
    token, raw = api_token_create(user=personas.researcher, name="script")
    api_token_revoke(token=token)
    response = Client().get(f"{API}/tasks", headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 401
    assert response.json()["detail"].startswith("authentication required")


def test_token_of_deactivated_user_gets_401(personas):
    _, raw = api_token_create(user=personas.researcher, name="script")
    personas.researcher.is_active = False
    personas.researcher.save()
    response = Client().get(f"{API}/tasks", headers={"Authorization": f"Bearer {raw}"})
    assert response.status_code == 401


@pytest.mark.parametrize(
    "header",
    ["Bearer fw_not-a-real-token", "Bearer garbage", "Bearer", "Basic Y2Fyb2w6cGFzc3dvcmQ=", "fw_abc", ""],
)
def test_garbage_authorization_header_gets_401(personas, header):
    response = Client().get(f"{API}/tasks", headers={"Authorization": header})
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_missing_credentials_get_401(personas):
    response = Client().get(f"{API}/me")
    assert response.status_code == 401
    assert response.json() == {"detail": "authentication required: send Authorization: Bearer <token>"}


def test_session_cookie_authenticates_the_browser(client_for):
    response = client_for("reviewer").get(f"{API}/me")
    assert response.status_code == 200
    assert response.json()["username"] == "bob"


def test_token_wins_over_a_session_of_another_user(client_for, personas):
    _, raw = api_token_create(user=personas.researcher, name="script")
    response = client_for("annotator").get(f"{API}/me", headers={"Authorization": f"Bearer {raw}"})
    assert response.json()["username"] == "carol"


def test_session_write_without_csrf_token_is_refused_and_nothing_is_written(personas):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(personas.researcher)
    response = send(browser, "POST", "/tasks", task_body())
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    assert not Task.objects.filter(slug=task_body()["slug"]).exists()


def test_session_write_with_csrf_token_succeeds(world, personas):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(personas.researcher)
    browser.get("/accounts/tokens/")  # a page with a form sets the CSRF cookie
    csrf = browser.cookies["csrftoken"].value
    response = browser.post(
        f"{API}/tasks", data=task_body(), content_type="application/json", headers={"X-CSRFToken": csrf}
    )
    assert response.status_code == 201, response.content


def test_token_write_needs_no_csrf_token(world, personas):
    _, raw = api_token_create(user=personas.researcher, name="script")
    script = Client(enforce_csrf_checks=True, headers={"Authorization": f"Bearer {raw}"})
    response = send(script, "POST", "/tasks", task_body())
    assert response.status_code == 201, response.content


def test_revoked_token_write_gets_401_not_a_csrf_error(personas):
    """A script has no CSRF cookie; a bad token must still say 'authenticate', not 'CSRF failed'."""
    token, raw = api_token_create(user=personas.researcher, name="script")
    api_token_revoke(token=token)
    script = Client(enforce_csrf_checks=True, headers={"Authorization": f"Bearer {raw}"})
    response = send(script, "POST", "/tasks", task_body())
    assert response.status_code == 401
    assert not Task.objects.filter(slug=task_body()["slug"]).exists()
