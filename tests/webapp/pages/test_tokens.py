"""The API tokens page: a secret shown once, only its hash stored, revocation of one's own tokens only."""

from __future__ import annotations

import hashlib
import re

from django.test import Client
from django.urls import reverse

from tests.conftest import Personas
from tests.webapp.pages.conftest import ClientFor
from tests.webapp.pages.html import text
from webapp.accounts.models import ApiToken
from webapp.accounts.services import api_token_create

TOKENS = reverse("accounts:tokens")


def revoke_url(token: ApiToken) -> str:
    return reverse("accounts:token_revoke", args=[token.pk])


def test_create_shows_the_token_once_and_stores_only_its_hash(
    personas: Personas, client_for: ClientFor
) -> None:
    client = client_for("annotator")
    response = client.post(reverse("accounts:token_create"), {"name": "rollout script"})
    assert response.status_code == 200
    shown = re.search(r'<code data-testid="new-token">([^<]+)</code>', text(response))
    assert shown is not None
    raw = shown[1]

    token = ApiToken.objects.get(user=personas.annotator)
    assert token.name == "rollout script"
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert token.prefix == raw[: len(token.prefix)] and len(token.prefix) < len(raw)
    stored = [str(v) for v in ApiToken.objects.filter(pk=token.pk).values().get().values()]
    assert not any(raw in value for value in stored)

    again = client.get(TOKENS)
    assert raw not in text(again)
    assert 'data-testid="new-token"' not in text(again)
    assert f"{token.prefix}…" in text(again)


def test_create_without_a_name_is_refused(personas: Personas, client_for: ClientFor) -> None:
    response = client_for("annotator").post(reverse("accounts:token_create"), {"name": "  "}, follow=True)
    assert "Give the token a name" in text(response)
    assert not ApiToken.objects.exists()


def test_revoke_own_token(personas: Personas, client_for: ClientFor) -> None:
    token, _ = api_token_create(user=personas.researcher, name="notebook")
    client = client_for("researcher")
    assert f'action="{revoke_url(token)}"' in text(client.get(TOKENS))

    response = client.post(revoke_url(token))
    assert response.status_code == 302 and response["Location"] == TOKENS
    token.refresh_from_db()
    assert token.revoked_at is not None
    page = text(client.get(TOKENS))
    assert "Revoked notebook" in page
    assert f'action="{revoke_url(token)}"' not in page


def test_cannot_revoke_another_users_token(personas: Personas, client_for: ClientFor) -> None:
    token, _ = api_token_create(user=personas.researcher, name="notebook")
    for persona in ("annotator", "admin"):
        assert client_for(persona).post(revoke_url(token)).status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_anonymous_cannot_create_or_revoke(personas: Personas, client_for: ClientFor) -> None:
    token, _ = api_token_create(user=personas.researcher, name="notebook")
    anonymous = client_for(None)
    assert anonymous.post(reverse("accounts:token_create"), {"name": "x"}).status_code == 302
    assert anonymous.post(revoke_url(token)).status_code == 302
    assert ApiToken.objects.count() == 1
    token.refresh_from_db()
    assert token.revoked_at is None


def test_page_lists_only_the_users_own_tokens(personas: Personas, client_for: ClientFor) -> None:
    api_token_create(user=personas.annotator, name="mine")
    api_token_create(user=personas.researcher, name="theirs")
    page = text(client_for("annotator").get(TOKENS))
    assert "<td>mine</td>" in page
    assert "theirs" not in page


def test_token_forms_need_a_csrf_token(personas: Personas) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(personas.annotator)
    assert client.post(reverse("accounts:token_create"), {"name": "x"}).status_code == 403
    assert not ApiToken.objects.exists()
