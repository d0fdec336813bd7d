"""Taking over a live agent rollout on a real desktop: the agent waits, the person acts, then hands back."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import close_old_connections
from django.test import override_settings

from agent_core import actions as A
from agent_core.policies.base import Policy, PolicyInput, PolicyOutput
from tests.conftest import Personas
from tests.procs import wait_for
from tests.sandbox_workers.hostproc import TOKEN
from tests.webapp.annotation.conftest import note_task
from tests.webapp.annotation.test_demo_real import keys
from webapp.annotation.session import LiveSession
from webapp.episodes.models import Episode, Step
from webapp.episodes.services import episode_create
from webapp.policies.models import PolicyVersion
from webapp.rollouts.services import episode_run
from webapp.sandboxes.control import ControlError, control_release, control_request
from webapp.sandboxes.models import ControlToken

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


class Hoverer(Policy):
    """A harmless, slow agent: hovers for `n` turns, then says it is done."""

    wants_messages = False

    def __init__(self, n: int = 12) -> None:
        self.n = n

    def act(self, inp: PolicyInput) -> PolicyOutput:
        time.sleep(0.2)
        if inp.step_index >= self.n:
            return PolicyOutput(actions=(A.Finished(content=""),), thought="done")
        return PolicyOutput(actions=(A.Hover(20 + inp.step_index, 20),), thought="looking around")


def test_a_researcher_takes_over_a_rollout_and_hands_it_back(
    desktop_host: Any, personas: Personas, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("webapp.rollouts.policy_pick.policy_for", lambda version, **_: Hoverer())
    version = PolicyVersion.objects.create(name="hoverer", backend="noop")
    episode = episode_create(task=note_task(), source="agent", policy_version=version)
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
                done["episode"] = episode_run(episode_id=episode.pk)
        finally:
            close_old_connections()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert wait_for(lambda: Step.objects.filter(episode=episode).count() >= 2, timeout=60, interval=0.1)
        episode.refresh_from_db()
        with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
            with pytest.raises(ControlError):  # an annotator with no part in this rollout
                control_request(sandbox=episode.sandbox, user=personas.annotator)
            token = control_request(sandbox=episode.sandbox, user=personas.researcher)
            assert token.holder == "human" and token.user == personas.researcher
            time.sleep(1.0)  # the agent finishes the turn it was in, then waits at the gate
            before = Step.objects.filter(episode=episode).count()
            time.sleep(1.5)
            assert Step.objects.filter(episode=episode).count() == before, "the agent kept acting"
            session = LiveSession(episode_id=episode.pk, user=personas.researcher)
            session.input(
                [
                    {"kind": "down", "x": 640, "y": 360, "t": 1.0},
                    {"kind": "up", "x": 640, "y": 360, "t": 1.05},
                ]
            )
            session.input(keys("echo hello > note.txt\n", 3.0))
            session.flush()
            human = list(Step.objects.filter(episode=episode, actor="human").order_by("index"))
            assert [s.action["type"] for s in human] == ["click", "type"]
            control_release(sandbox=episode.sandbox, user=personas.researcher)
            assert ControlToken.objects.get(sandbox=episode.sandbox).holder == "agent"
            session.close()
        thread.join(timeout=120)
        assert not thread.is_alive()
    finally:
        thread.join(timeout=1)
    episode = Episode.objects.get(pk=episode.pk)
    assert episode.status == "finished" and episode.reward == 1.0, episode.error
    assert episode.source == "mixed" and episode.annotator == personas.researcher
    actors = list(Step.objects.filter(episode=episode).order_by("index").values_list("actor", flat=True))
    first_human = actors.index("human")
    assert actors[first_human : first_human + 2] == ["human", "human"]
    assert "agent" in actors[first_human + 2 :], "the agent did not resume after the hand-back"
    assert ControlToken.objects.get(sandbox_id=episode.sandbox_id).holder == ""
