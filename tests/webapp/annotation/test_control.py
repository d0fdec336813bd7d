"""The control token: who may take it, asking vs taking, handing back, and the agent's gate."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from tests.conftest import Personas
from tests.factories import make_episode
from webapp.episodes.models import Episode
from webapp.sandboxes.control import (
    ControlError,
    control_agent_gate,
    control_assign,
    control_clear,
    control_release,
    control_request,
)
from webapp.sandboxes.models import ControlToken, Sandbox, SandboxHost


@pytest.fixture
def sandbox(db: None) -> Sandbox:
    host = SandboxHost.objects.create(name="h", api_url="http://127.0.0.1:1")
    return Sandbox.objects.create(
        host=host, external_id="s1", provider="xdesktop", profile="desktop", state="leased"
    )


def running(sandbox: Sandbox, **kwargs) -> Episode:  # type: ignore[no-untyped-def]
    episode = make_episode(finish=False, **kwargs)
    Episode.objects.filter(pk=episode.pk).update(sandbox=sandbox)
    episode.refresh_from_db()
    return episode


def test_a_researcher_takes_an_agent_held_sandbox_at_once_and_hands_back_to_the_agent(
    sandbox: Sandbox, personas: Personas
) -> None:
    episode = running(sandbox)
    control_assign(sandbox=sandbox, episode=episode, holder="agent")
    token = control_request(sandbox=sandbox, user=personas.researcher)
    assert (token.holder, token.user) == ("human", personas.researcher)
    token = control_release(sandbox=sandbox, user=personas.researcher)
    assert (token.holder, token.user) == ("agent", None)


def test_a_held_sandbox_is_only_asked_for_and_the_asker_gets_it_on_release(
    sandbox: Sandbox, personas: Personas
) -> None:
    episode = running(sandbox, annotator=personas.annotator)
    control_assign(sandbox=sandbox, episode=episode, holder="human", user=personas.annotator)
    token = control_request(sandbox=sandbox, user=personas.researcher)
    assert token.user == personas.annotator and token.requested_by == personas.researcher
    token = control_release(sandbox=sandbox, user=personas.annotator)
    assert token.user == personas.researcher and token.requested_by is None


def test_only_administrators_force_and_strangers_cannot_take_or_release(
    sandbox: Sandbox, personas: Personas
) -> None:
    episode = running(sandbox, annotator=personas.annotator)
    control_assign(sandbox=sandbox, episode=episode, holder="human", user=personas.annotator)
    with pytest.raises(ControlError):
        control_request(sandbox=sandbox, user=personas.researcher, force=True)
    for stranger in (personas.reviewer, personas.outsider):
        with pytest.raises(ControlError):
            control_request(sandbox=sandbox, user=stranger)
        with pytest.raises(ControlError):
            control_release(sandbox=sandbox, user=stranger)
    token = control_request(sandbox=sandbox, user=personas.admin, force=True)
    assert token.user == personas.admin
    assert ControlToken.objects.get(sandbox=sandbox).user == personas.admin


@pytest.mark.django_db(transaction=True)
def test_the_agent_gate_waits_while_a_person_holds_control(sandbox: Sandbox, personas: Personas) -> None:
    episode = running(sandbox)
    control_assign(sandbox=sandbox, episode=episode, holder="agent")
    gate = control_agent_gate(sandbox_id=sandbox.pk, poll_s=0.02)
    assert gate() is False  # nobody took it: the agent goes on at once
    control_request(sandbox=sandbox, user=personas.researcher)
    released_at: list[float] = []

    def hand_back() -> None:
        try:
            time.sleep(0.3)
            released_at.append(time.monotonic())
            control_release(sandbox=sandbox, user=personas.researcher)
        finally:
            connection.close()

    thread = threading.Thread(target=hand_back)
    thread.start()
    assert gate() is True
    passed_at = time.monotonic()
    thread.join()
    assert released_at and passed_at >= released_at[0]


def test_clearing_leaves_nobody_in_control(sandbox: Sandbox, personas: Personas) -> None:
    episode = running(sandbox, annotator=personas.annotator)
    control_assign(sandbox=sandbox, episode=episode, holder="human", user=personas.annotator)
    control_clear(sandbox_id=sandbox.pk)
    token = ControlToken.objects.get(sandbox=sandbox)
    assert (token.holder, token.user) == ("", None)
