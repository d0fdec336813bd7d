"""Which recorded thoughts a model may learn from, and the oracles' own thoughts."""

from __future__ import annotations

import pytest

from agent_core import actions as A
from agent_core.agent import run_episode
from agent_core.policies.base import make_policy
from agent_core.tasks.oracles import OracleContext, register_oracle, said
from agent_core.thoughts import is_placeholder_thought, learnable_thought
from agent_core.training.episodes import sft_examples
from tests.agent_core.fakes import FakeEnv, prepared


@pytest.mark.parametrize(
    "text",
    ["", "  ", "oracle step 3", "Oracle step 12.", "random", "random: stop", "do nothing", "step 7",
     "Thought 2", "n/a", "...", "42", "noop", "human"],
)  # fmt: skip
def test_stand_ins_are_placeholders(text: str) -> None:
    assert is_placeholder_thought(text) and learnable_thought(text) == ""


@pytest.mark.parametrize(
    "text",
    ['The dialog asks me to close it; the "x" is at its top right, so I click it.', "open the menu",
     "Step 1 of 3: the form needs my name.", "I type 42 into the answer field."],
)  # fmt: skip
def test_real_thoughts_are_learnable(text: str) -> None:
    assert not is_placeholder_thought(text) and learnable_thought(f"  {text} ") == text


@register_oracle("test/thoughtful")
def _thoughtful(ctx: OracleContext):  # type: ignore[no-untyped-def]
    yield said(ctx, 'The file "out.txt" must say hi; I write it.', A.FileWrite(path="out.txt", content="hi"))
    yield A.Click(x=1, y=2)  # said nothing: recorded with no thought, not a stand-in


def test_the_oracle_policy_records_what_its_oracle_said_and_nothing_else() -> None:
    task = prepared(id="test/thoughtful", oracle="test/thoughtful")
    out = run_episode(FakeEnv(), make_policy("oracle"), task)
    assert [s.thought for s in out.steps[:2]] == ['The file "out.txt" must say hi; I write it.', ""]
    assert out.steps[2].action == A.Finished(content="")
    assert out.steps[2].thought.startswith("I have done what the task asked (")
    assert not any(is_placeholder_thought(s.thought) for s in out.steps if s.thought)


def test_baselines_record_no_stand_in_thoughts() -> None:
    for name in ("noop", "random"):
        out = run_episode(FakeEnv(), make_policy(name), prepared(limits={"max_steps": 5}))
        assert all(s.thought == "" for s in out.steps), name


def test_sft_targets_leave_placeholders_out_and_say_so() -> None:
    """The trainer's examples from recorded steps: a placeholder thought is masked (the action is still
    taught) and flagged, so the trainer can report how many."""
    from dataclasses import replace

    steps = list(
        run_episode(
            FakeEnv(), make_policy("oracle"), prepared(id="test/thoughtful", oracle="test/thoughtful")
        ).steps
    )
    steps[0] = replace(steps[0], thought="oracle step 0")
    examples = sft_examples("Write hi.", "desktop", steps)
    assert examples[0].response.startswith("Action: file_write(") and examples[0].placeholder_thought
    assert not examples[1].placeholder_thought and examples[1].response.startswith("Action: click(")
    assert examples[2].response.startswith("Thought: I have done what the task asked")
    # Nor does a placeholder appear in the history a later prompt shows.
    assert "oracle step" not in str(examples[2].messages)
