"""Training data from the database: stored steps back into StepRecords, prompts rebuilt exactly as the
agent loop built them, SFT examples of a dataset version with its reviews applied."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from agent_core import actions as A
from agent_core.agent import AgentConfig, run_episode
from agent_core.env import ActionRejected, Obs
from agent_core.policies.base import Policy, PolicyInput, PolicyOutput
from agent_core.tasks.runner import PreparedTask
from agent_core.tasks.spec import parse_task
from tests.agent_core.fakes import FakeEnv
from tests.conftest import Personas
from tests.factories import make_task
from tests.webapp.datasets.conftest import GOOD, build_episode
from webapp.datasets.models import Dataset
from webapp.datasets.services import dataset_version_create
from webapp.episodes.models import Episode
from webapp.episodes.services import episode_create, episode_finish, episode_start
from webapp.reviews.services import review_assign, review_correct_step, review_decide, review_label_step
from webapp.rollouts.services import _sink
from webapp.training.data import DataError, rl_episode_of, sft_examples_for, step_records_of

pytestmark = pytest.mark.django_db


def image(seed: int, size: tuple[int, int], fmt: str = "PNG") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (seed * 40 % 256, seed * 70 % 256, 90)).save(out, format=fmt)
    return out.getvalue()


class PageEnv(FakeEnv):
    """A browser page whose screen and element list change with every action; scrolls are refused."""

    platform = "browser"

    def _obs(self) -> Obs:
        n = len(self.acted)
        return Obs(
            screenshot=image(n, (160 + n, 210)),
            width=160 + n,
            height=210,
            a11y=f'button "Next {n}" @(40,{50 + n})\ninput[type=text] "" @(80,20)',
        )

    def observe(self) -> Obs:
        return self._obs()

    def act(self, action: A.Action) -> Obs:
        if isinstance(action, A.Scroll):
            raise ActionRejected("this page does not scroll")
        self.acted.append(action)
        return self._obs()


class ScriptedModel(Policy):
    """Answers the scripted texts with made-up token ids and logprobs, and keeps what it was shown."""

    coords = "absolute"

    def __init__(self, texts: list[str]) -> None:
        self.texts = list(texts)
        self.inputs: list[PolicyInput] = []

    def act(self, inp: PolicyInput) -> PolicyOutput:
        self.inputs.append(inp)
        n = len(self.inputs)
        text = self.texts.pop(0)
        ids = tuple(range(n, n + 3 + n % 2))
        return PolicyOutput(text=text, token_ids=ids, logprobs=tuple(-0.1 * (i + 1) for i in range(len(ids))))


SCRIPT = [
    "Thought: the first button\nAction: click(start_box='(40,50)')",
    "no action here",  # does not parse: an invalid step that stays in the history
    "Thought: two at once\nAction: click(start_box='(40,51)')\n\nAction: type(content='hi')",
    "Thought: scroll\nAction: scroll(start_box='(10,10)', direction='down')",  # refused by the page
    "Thought: next\nAction: click(start_box='(40,53)')",
    "Thought: done\nAction: finished(content='ok')",
]


def prepared_task(task_slug: str) -> PreparedTask:
    spec = parse_task(
        {
            "id": task_slug,
            "instruction": "Click the buttons (template)",
            "platform": "browser",
            "limits": {"max_steps": 20, "max_seconds": 60},
            "checker": {"checks": [{"probe": {"op": "answer"}, "metric": "exact_match", "expected": "ok"}]},
        }
    )
    return PreparedTask(spec=spec, seed=7, params={}, instruction="Click Next 0, then Next 2, then Next 3.")


@pytest.fixture
def rollout() -> tuple[Episode, ScriptedModel]:
    """An agent episode run by the real loop and persisted by the rollout worker's own step sink."""
    task = make_task(platform="browser", env_profile="browser")
    episode = episode_create(task=task, source="agent")
    episode_start(episode=episode)
    prepared = prepared_task(task.slug)
    Episode.objects.filter(pk=episode.pk).update(prepared={"instruction": prepared.instruction, "seed": 7})
    model = ScriptedModel(SCRIPT)
    config = AgentConfig(history_images=2, episodic_k=0)
    outcome = run_episode(PageEnv(), model, prepared, config=config, on_step=_sink(episode))
    episode_finish(episode=episode, reward=outcome.reward, stop_reason=outcome.stop_reason)
    episode.refresh_from_db()
    return episode, model


def test_step_records_of_gives_back_what_the_loop_recorded(rollout):
    episode, model = rollout
    instruction, platform, steps = step_records_of(episode)
    assert instruction == "Click Next 0, then Next 2, then Next 3." and platform == "browser"
    assert [s.index for s in steps] == list(range(7))
    first = steps[0]
    seen = model.inputs[0].observation
    assert first.observation.screenshot == seen.screenshot and first.observation.a11y == seen.a11y
    assert (first.observation.width, first.observation.height, first.observation.mime) == (
        160,
        210,
        "image/png",
    )
    assert first.action == A.Click(x=40, y=50) and first.token_ids == (1, 2, 3, 4)
    assert first.logprobs == pytest.approx((-0.1, -0.2, -0.3, -0.4))
    assert steps[1].action is None and steps[1].raw_output == "no action here" and steps[1].invalid_reason
    # Two actions of one response: the second is marked as its continuation, with no tokens of its own.
    assert steps[3].action == A.Type(content="hi") and steps[3].info.get("continued") is True
    assert steps[3].token_ids is None and steps[3].raw_output == ""
    assert steps[4].action is None and "rejected" in steps[4].invalid_reason
    assert isinstance(steps[6].action, A.Finished)


def test_rl_turns_carry_the_prompts_the_policy_was_shown(rollout):
    episode, model = rollout
    rl = rl_episode_of(episode, policy_version=3, history_images=2)
    assert (rl.task_id, rl.seed, rl.policy_version, rl.episode_id) == (
        episode.task.slug,
        0,
        3,
        str(episode.pk),
    )
    assert rl.steps == 7 and rl.reward == 1.0
    # One turn per policy response (the continued step shares its response's turn).
    assert len(rl.turns) == len(model.inputs) == 6
    for turn, seen in zip(rl.turns, model.inputs, strict=True):
        assert list(turn.messages) == list(seen.messages)
        assert turn.a11y == seen.observation.a11y
    assert [t.parsed for t in rl.turns] == [True, False, True, True, True, True]
    assert rl.turns[2].response_ids == (3, 4, 5, 6)


def test_sft_examples_rebuild_the_same_prompts(rollout, personas: Personas):
    episode, model = rollout
    dataset = Dataset.objects.create(name="rollouts", kind=Dataset.Kind.SFT)
    version = dataset_version_create(dataset=dataset, episodes=[episode], created_by=personas.admin)
    examples = list(sft_examples_for(version, history_images=2))
    # Valid turns only: the unparsed response and the refused scroll teach nothing.
    assert [e.source for e in examples] == [f"episode {episode.pk}#{i}" for i in (0, 2, 5, 6)]
    shown = {0: 0, 2: 2, 5: 4, 6: 5}
    for example in examples:
        seen = model.inputs[shown[int(example.source.rsplit("#", 1)[1])]]
        assert list(example.messages) == list(seen.messages)
    assert examples[0].response == SCRIPT[0]


def test_sft_examples_follow_the_review(personas: Personas):
    task = make_task(platform="desktop", env_profile="desktop", max_steps=6)
    reviewed = build_episode(task=task, steps=GOOD, annotator=personas.annotator)
    plain = build_episode(task=task, steps=GOOD, annotator=personas.annotator)
    review = review_assign(episode=reviewed, reviewer=personas.reviewer, assigned_by=personas.admin)
    review_label_step(review=review, actor=personas.reviewer, step_index=0, label="wrong")
    review_correct_step(
        review=review,
        actor=personas.reviewer,
        step_index=1,
        thought="aim better",
        action_text="click(start_box='(30,20)')",
    )
    review_decide(review=review, actor=personas.reviewer, verdict="accept", quality=4)
    dataset = Dataset.objects.create(name="demos", kind=Dataset.Kind.SFT)
    version = dataset_version_create(dataset=dataset, episodes=[plain, reviewed], created_by=personas.admin)

    examples = list(sft_examples_for(version, history_images=3))
    by_source = {e.source: e for e in examples}
    assert sorted(by_source) == sorted(
        [f"episode {plain.pk}#{i}" for i in range(3)] + [f"episode {reviewed.pk}#{i}" for i in (1, 2)]
    )
    assert (
        by_source[f"episode {plain.pk}#1"].response
        == "Thought: The form wants its control 1; I click it.\nAction: click(start_box='(20,20)')"
    )
    assert (
        by_source[f"episode {reviewed.pk}#1"].response
        == "Thought: aim better\nAction: click(start_box='(30,20)')"
    )
    # The history of later steps stays as it happened.
    later = by_source[f"episode {reviewed.pk}#2"].messages
    said = "Thought: The form wants its control 1; I click it.\nAction: click(start_box='(20,20)')"
    assert any(m.get("content") == said for m in later)


def test_a_missing_screenshot_file_is_a_data_error(rollout):
    episode, _ = rollout
    episode.steps.filter(index=2).update(screenshot="screens/00/00/missing.png")
    with pytest.raises(DataError, match="screenshot screens/00/00/missing.png"):
        step_records_of(episode)
