"""Interactive annotation on a real desktop: the policy proposes, the person accepts, edits or overrides."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from django.test import override_settings

from agent_core.policies.base import Policy, PolicyInput, PolicyOutput
from agent_core.policies.local import text_only_messages
from tests.conftest import Personas
from tests.sandbox_workers.hostproc import TOKEN
from tests.webapp.annotation.conftest import note_reads, note_task
from tests.webapp.annotation.test_demo_real import keys
from webapp.annotation.services import DemoError, demo_prepare, demo_start
from webapp.annotation.session import LiveSession
from webapp.catalog.models import Task
from webapp.catalog.services import suite_load
from webapp.episodes.models import Step
from webapp.policies.models import PolicyVersion

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


class Scripted(Policy):
    """Answers with the next text of `replies` (UI-TARS form), like a model would."""

    wants_messages = True

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []

    def act(self, inp: PolicyInput) -> PolicyOutput:
        assert inp.messages, "an interactive proposal gets the model prompt"
        self.prompts.append(str(inp.messages))
        return PolicyOutput(text=self.replies.pop(0))


def test_proposals_are_accepted_edited_or_overridden_and_kept_beside_the_final_step(
    desktop_host: Any, personas: Personas, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = Scripted(
        [
            "Thought: type the command.\nAction: type(content='echo hello > note.txt\\n')",
            "Thought: click the terminal.\nAction: click(start_box='(10,10)')",
            "this is not an action at all",
            "Thought: now write it.\nAction: type(content='echo hello > note.txt\\n')",
            "Thought: the note is written.\nAction: finished(content='')",
        ]
    )
    monkeypatch.setattr("webapp.policies.runtime.policy_for", lambda version, **_: policy)
    monkeypatch.setattr("webapp.annotation.services._enqueue_prepare", lambda episode_id: None)
    version = PolicyVersion.objects.create(name="scripted-proposer", backend="noop")
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        episode = demo_start(task=note_task(), annotator=personas.annotator, policy_version=version)
        assert episode.source == "mixed"
        episode = demo_prepare(episode_id=episode.pk)
        assert episode is not None and episode.status == "running", episode and episode.error
        session = LiveSession(episode_id=episode.pk, user=personas.annotator)

        # 1. Edit: the person corrects the proposed typing into a click on the terminal first.
        proposal = session.propose()
        assert proposal["action"]["type"] == "type" and proposal["thought"] == "type the command."
        with pytest.raises(DemoError, match="does not parse"):
            session.edit("clik(start_box='(640,360)')")
        session.edit("click(start_box='(640,360)')")
        # 2. Override: the next proposal is ignored; the person acts on the screen themselves.
        assert session.propose()["action"]["type"] == "click"
        session.input([{"kind": "key", "key": "l", "text": "l", "t": time.monotonic()}])
        session.input([{"kind": "key", "key": "backspace", "t": time.monotonic() + 0.1}])
        session.input([{"kind": "key", "key": "right", "t": time.monotonic() + 0.2}])  # its own step
        # 3. An invalid proposal cannot be accepted; 4. a valid one is accepted as it is.
        assert "no 'Action:'" in session.propose()["invalid_reason"]
        with pytest.raises(DemoError, match="no valid proposal"):
            session.accept()
        session.propose()
        assert session.accept() is None
        note_reads(episode, "hello")
        # 5. A proposed finished() accepted ends the demonstration: its last step, then the checker.
        assert session.propose()["action"]["type"] == "finished"
        done = session.accept()
        session.close()
    assert done is not None and done.status == "finished" and done.reward == 1.0, done and done.check_details
    steps = list(Step.objects.filter(episode=episode).order_by("index"))
    rows = [(s.actor, s.action["type"], (s.proposed_action or {}).get("type")) for s in steps]
    assert rows == [
        ("human", "click", "type"),  # edited: the proposal stays beside the final choice
        ("human", "press", "click"),  # overridden by the person's own key
        ("agent", "type", "type"),  # accepted
        ("agent", "finished", "finished"),  # accepted: the final action, kept as a step
    ]
    assert steps[3].thought == "the note is written."
    assert steps[0].proposed_thought == "type the command." and steps[0].action["x"] == 640
    assert steps[2].action["content"] == "echo hello > note.txt\n" and steps[2].thought == "now write it."


def test_keys_typed_while_paused_are_refused_and_never_reach_the_sandbox(
    desktop_host: Any, personas: Personas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pausing stops recording, so it stops input too: what was typed while paused would otherwise be in
    the outcome (the old rule scored this episode 1 on a note no step wrote)."""
    monkeypatch.setattr("webapp.annotation.services._enqueue_prepare", lambda episode_id: None)
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        episode = demo_start(task=note_task(), annotator=personas.annotator)
        demo_prepare(episode_id=episode.pk)
        session = LiveSession(episode_id=episode.pk, user=personas.annotator)
        session.pause()
        with pytest.raises(DemoError, match="paused"):
            session.input(keys("echo hello > note.txt\n", time.monotonic()))
        session.resume()
        session.input(keys("ls\n", time.monotonic() + 5))
        note_reads(episode, None, timeout=2)  # nothing typed while paused was run
        done = session.submit()
    steps = list(Step.objects.filter(episode=episode))
    assert [s.action["content"] for s in steps] == ["ls\n"]
    assert steps[0].info["paused_before_s"] >= 0
    assert done.reward == 0.0


def test_an_interactive_episode_observes_as_its_policy_does_and_records_that_text(
    browser_host: Any, personas: Personas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A text policy (observation "elements") proposes from the page's element list, as in its rollouts,
    and every recorded step keeps that list, so the episode trains it on the prompts it will see."""
    suite_load(name="miniwob")
    task = Task.objects.get(slug="miniwob/click-test")
    Task.objects.filter(pk=task.pk).update(is_published=True)

    class ClickTheButton(Scripted):
        """Reads the button's centre from the element list in its prompt, as the tiny policy must."""

        def act(self, inp: PolicyInput) -> PolicyOutput:
            # The prompt as a text model gets it (screenshots replaced by the observation's text).
            prompt = str(text_only_messages(inp.messages, inp.observation.a11y))
            self.prompts.append(prompt)
            m = re.search(r"button \"Click Me!\" @\((\d+),(\d+)\)", prompt)
            assert m, f"no button with its centre in the prompt's text: {prompt}"
            return PolicyOutput(text=f"Thought: press it.\nAction: click(start_box='({m[1]},{m[2]})')")

    policy = ClickTheButton([])
    monkeypatch.setattr("webapp.policies.runtime.policy_for", lambda version, **_: policy)
    monkeypatch.setattr("webapp.annotation.services._enqueue_prepare", lambda episode_id: None)
    elements = {"observation": "elements"}
    version = PolicyVersion.objects.create(name="text-proposer", backend="noop", config=elements)
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        episode = demo_start(task=task, annotator=personas.annotator, policy_version=version)
        episode = demo_prepare(episode_id=episode.pk)
        assert episode is not None and episode.status == "running", episode and episode.error
        session = LiveSession(episode_id=episode.pk, user=personas.annotator)
        session.propose()
        session.accept()
        done = session.submit()
        session.close()
    assert done.reward == 1.0, done.check_details
    (step,) = Step.objects.filter(episode=episode)
    assert step.actor == "agent" and step.a11y_tree.name
    with step.a11y_tree.open("rb") as f:
        recorded = f.read().decode()
    assert "Click Me" in recorded and "Click Me" in policy.prompts[0]

    # A policy whose observation is not one the platform knows is refused by name, before it runs.
    PolicyVersion.objects.filter(pk=version.pk).update(config={"observation": "smell"})
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        episode = demo_start(task=task, annotator=personas.annotator, policy_version=version)
        demo_prepare(episode_id=episode.pk)
        session = LiveSession(episode_id=episode.pk, user=personas.annotator)
        with pytest.raises(DemoError, match="observation must be one of"):
            session.propose()
        session.close()
