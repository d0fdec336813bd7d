"""The agent loop's control gate (a person took over) and single-step proposals for annotation."""

from __future__ import annotations

from agent_core import actions as A
from agent_core.agent import propose_step, run_episode
from tests.agent_core.fakes import FakeEnv, TextPolicy, prepared


def test_the_gate_is_asked_before_every_turn_and_a_pause_means_a_fresh_look() -> None:
    env = FakeEnv()
    policy = TextPolicy(["Action: click(start_box='(1,1)')", "Action: click(start_box='(2,2)')"])
    calls: list[int] = []

    def gate() -> bool:
        calls.append(len(env.acted))
        return len(calls) == 2  # a person held control once, after the first action

    observed_before = env.observed
    outcome = run_episode(env, policy, prepared(), gate=gate, score=False)
    assert [s.action for s in outcome.steps] == [A.Click(1, 1), A.Click(2, 2), A.Finished(content="")]
    assert calls == [0, 1, 1, 2]  # asked again after the pause, before the policy's next turn
    assert env.observed == observed_before + 2  # the first look, and a fresh one after the pause
    assert len(policy.inputs) == 3


def test_a_proposal_is_parsed_into_screen_pixels_without_acting() -> None:
    env = FakeEnv(width=1280, height=720)
    policy = TextPolicy(["Thought: the OK button.\nAction: click(start_box='(640,360)')"])
    proposal = propose_step(policy, prepared(), env.observe())
    assert proposal.action == A.Click(640, 360) and proposal.thought == "the OK button."
    assert proposal.action_text == "click(start_box='(640,360)')" and not proposal.invalid_reason
    assert env.acted == []


def test_an_unparseable_proposal_says_why_and_holds_no_action() -> None:
    env = FakeEnv()
    proposal = propose_step(TextPolicy(["I would click somewhere"]), prepared(), env.observe())
    assert proposal.action is None and "Action:" in proposal.invalid_reason
    assert proposal.raw_output == "I would click somewhere"
