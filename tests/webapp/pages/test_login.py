"""Logging in and out through the pages."""

from __future__ import annotations

from django.urls import reverse

from tests.conftest import PASSWORD, Personas
from tests.webapp.pages.conftest import ClientFor
from tests.webapp.pages.html import text

LOGIN = reverse("accounts:login")
HOME = reverse("dashboards:home")


def test_wrong_password_shows_an_error_and_logs_nobody_in(personas: Personas, client_for: ClientFor) -> None:
    client = client_for(None)
    response = client.post(LOGIN, {"username": personas.annotator.get_username(), "password": "wrong"})
    assert response.status_code == 200
    assert 'role="alert"' in text(response)
    assert "didn't match" in text(response)
    assert client.get(HOME).status_code == 302


def test_right_password_logs_in_and_goes_to_next(personas: Personas, client_for: ClientFor) -> None:
    client = client_for(None)
    tasks = reverse("catalog:task_list")
    response = client.post(LOGIN, {"username": "alice", "password": PASSWORD, "next": tasks})
    assert response.status_code == 302 and response["Location"] == tasks
    assert client.get(HOME).status_code == 200


def test_login_ignores_a_next_url_on_another_site(personas: Personas, client_for: ClientFor) -> None:
    client = client_for(None)
    response = client.post(
        LOGIN, {"username": "alice", "password": PASSWORD, "next": "https://evil.example/"}
    )
    assert response.status_code == 302 and response["Location"] == HOME


def test_inactive_user_cannot_log_in(personas: Personas, client_for: ClientFor) -> None:
    personas.annotator.is_active = False
    personas.annotator.save()
    response = client_for(None).post(LOGIN, {"username": "alice", "password": PASSWORD})
    assert response.status_code == 200
    assert 'role="alert"' in text(response)


def test_logged_in_user_opening_login_goes_home(client_for: ClientFor) -> None:
    response = client_for("reviewer").get(LOGIN)
    assert response.status_code == 302 and response["Location"] == HOME


def test_logout_is_post_only(client_for: ClientFor) -> None:
    client = client_for("annotator")
    assert client.get(reverse("accounts:logout")).status_code == 405
    assert client.get(HOME).status_code == 200  # still logged in

    response = client.post(reverse("accounts:logout"))
    assert response.status_code == 302 and response["Location"] == LOGIN
    assert client.get(HOME).status_code == 302


def test_every_page_offers_logout_as_a_post_form(client_for: ClientFor) -> None:
    body = text(client_for("outsider").get(HOME))
    assert f'<form method="post" action="{reverse("accounts:logout")}">' in body
    assert f'href="{reverse("accounts:logout")}"' not in body
