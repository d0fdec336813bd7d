"""The validator V(s) and the routing rule on hand-built trajectories."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agent_core.flywheel import (
    CHECKS,
    StepView,
    TrajectoryView,
    Verdict,
    find_loops,
    review_verdict,
    route,
    validate,
)


def step(index: int, *, x: int | None = None, screen: str | None = None, **kw: object) -> StepView:
    """A parsed click at (x, 10) on its own screen unless told otherwise."""
    x = index * 10 if x is None else x
    fields: dict[str, object] = {
        "index": index,
        "actor": "agent",
        "screenshot": f"screens/aa/bb/{index:064x}.png" if screen is None else screen,
        "screen": (1280, 720),
        "thought": f"thought {index}",
        "action": {"type": "click", "x": x, "y": 10},
        "action_text": f"click(start_box='({x},10)')",
    }
    fields.update(kw)
    return StepView(**fields)  # type: ignore[arg-type]


def traj(steps: list[StepView] | None = None, **kw: object) -> TrajectoryView:
    fields: dict[str, object] = {
        "episode_id": 7,
        "task": "miniwob/click-button",
        "instruction": "Click the button.",
        "platform": "browser",
        "source": "agent",
        "policy_version": "tiny-1",
        "reward": 1.0,
        "max_steps": 15,
        "review": "",
        "steps": tuple(steps if steps is not None else [step(0), step(1), step(2)]),
    }
    fields.update(kw)
    return TrajectoryView(**fields)  # type: ignore[arg-type]


def test_good_trajectory_is_v1_and_goes_to_sft():
    verdict = validate(traj())
    assert verdict.v == 1
    assert verdict.reasons == ()
    assert dict(verdict.checks) == {
        "has_steps": True,
        "checker": True,
        "parsed": True,
        "no_loop": True,
        "within_budget": True,
        "review": None,
        "not_superseded": True,
    }
    assert set(verdict.checks) == set(CHECKS)
    assert route(verdict) == "sft"


def test_failed_checker_is_v0_and_goes_to_ct():
    verdict = validate(traj(reward=0.0))
    assert verdict.v == 0
    assert verdict.checks["checker"] is False
    assert verdict.reasons == ("checker failed (reward 0 < 1)",)
    assert route(verdict) == "ct"


def test_threshold_is_configurable():
    assert validate(traj(reward=0.5)).v == 0
    assert validate(traj(reward=0.5), success_threshold=0.5).v == 1


def test_nan_reward_counts_as_a_failure():
    verdict = validate(traj(reward=float("nan")))
    assert verdict.v == 0
    assert verdict.checks["checker"] is False


def test_unparsed_step_is_v0_and_named():
    bad = step(3, action=None, action_text="", invalid_reason="no 'Action:' in the response")
    verdict = validate(traj([step(0), step(1), step(2), bad, step(4)]))
    assert verdict.v == 0
    assert verdict.checks["parsed"] is False
    assert verdict.reasons == ("step 3 did not parse: no 'Action:' in the response",)


def test_step_with_an_action_but_an_invalid_reason_counts_as_unparsed():
    refused = step(1, invalid_reason="the environment rejected the action")
    verdict = validate(traj([step(0), refused]))
    assert verdict.v == 0
    assert "step 1 did not parse: the environment rejected the action" in verdict.reasons


def test_loop_of_three_on_an_unchanged_screen_is_v0_and_names_the_steps():
    same = "screens/aa/bb/" + "f" * 64 + ".png"
    steps = [step(0), step(1)] + [step(i, x=99, screen=same) for i in (2, 3, 4)] + [step(5)]
    verdict = validate(traj(steps))
    assert verdict.v == 0
    assert verdict.checks["no_loop"] is False
    assert verdict.reasons == (
        "loop: click(start_box='(99,10)') repeated 3 times on an unchanged screen at steps 2–4",
    )
    assert find_loops(tuple(steps)) == [(2, 4)]


def test_same_action_on_a_changing_screen_is_no_loop():
    steps = [step(i, x=99) for i in range(5)]  # each step has its own screenshot
    assert validate(traj(steps)).v == 1


def test_two_repeats_are_no_loop_but_loop_repeats_two_catches_them():
    same = "screens/aa/bb/" + "e" * 64 + ".png"
    steps = [step(0), step(1, x=5, screen=same), step(2, x=5, screen=same), step(3)]
    assert validate(traj(steps)).v == 1
    verdict = validate(traj(steps), loop_repeats=2)
    assert verdict.v == 0
    assert "at steps 1–2" in verdict.reasons[0]


def test_steps_without_screenshots_never_loop():
    steps = [step(i, x=5, screen="") for i in range(4)]
    assert validate(traj(steps)).checks["no_loop"] is True


def test_different_actions_on_one_screen_are_no_loop():
    same = "screens/aa/bb/" + "d" * 64 + ".png"
    steps = [step(i, screen=same) for i in range(4)]  # x differs per step
    assert validate(traj(steps)).v == 1


def test_over_budget_is_v0():
    steps = [step(i) for i in range(16)]
    verdict = validate(traj(steps, max_steps=15))
    assert verdict.v == 0
    assert verdict.checks["within_budget"] is False
    assert verdict.reasons == ("over budget: 16 steps > 15",)


def test_exactly_at_budget_is_fine():
    steps = [step(i) for i in range(15)]
    verdict = validate(traj(steps, max_steps=15))
    assert verdict.v == 1
    assert verdict.checks["within_budget"] is True


def test_reviewer_reject_overrides_a_checker_success():
    verdict = validate(traj(review="rejected"))
    assert verdict.v == 0
    assert verdict.checks["checker"] is True
    assert verdict.checks["review"] is False
    assert verdict.reasons == ("rejected by a reviewer",)


def test_accepting_review_stands_in_for_a_missing_checker():
    verdict = validate(traj(reward=None, review="accepted"))
    assert verdict.v == 1
    assert verdict.checks["checker"] is None
    assert verdict.checks["review"] is True


def test_no_checker_and_no_accepting_review_is_v0():
    verdict = validate(traj(reward=None))
    assert verdict.v == 0
    assert verdict.reasons == ("no checker verdict and no accepting review",)


def test_accepting_review_does_not_override_a_checker_failure():
    verdict = validate(traj(reward=0.0, review="accepted"))
    assert verdict.v == 0
    assert verdict.checks["review"] is True
    assert verdict.reasons == ("checker failed (reward 0 < 1)",)


def test_no_steps_is_v0():
    verdict = validate(traj([]))
    assert verdict.v == 0
    assert verdict.checks["has_steps"] is False
    assert "no steps" in verdict.reasons


def test_every_reason_is_reported():
    bad = step(1, action=None, invalid_reason="bad")
    verdict = validate(traj([step(0), bad, step(2)], reward=0.0, max_steps=2, review="rejected"))
    assert verdict.v == 0
    assert len(verdict.reasons) == 4


def test_a_sent_back_trajectory_is_v0_whatever_the_checker_says():
    verdict = validate(traj(review="sent_back"))
    assert (verdict.v, route(verdict), verdict.checks["review"]) == (0, "ct", False)
    assert verdict.reasons == ("sent back by a reviewer to be fixed, and not accepted since",)


def test_a_trajectory_superseded_by_its_fork_is_v0():
    verdict = validate(traj(superseded_by=42))
    assert (verdict.v, verdict.checks["not_superseded"]) == (0, False)
    assert verdict.reasons == ("superseded by its corrected fork, episode 42",)


@pytest.mark.parametrize(
    ("reviews", "verdict"),
    [
        ([], ""),
        ([("assigned", False)], ""),
        ([("in_progress", False)], ""),
        ([("accepted", False)], "accepted"),
        ([("rejected", False)], "rejected"),
        ([("sent_back", True)], "sent_back"),
        ([("assigned", True)], "sent_back"),  # resubmitted, not decided again
        ([("in_progress", True)], "sent_back"),
        ([("accepted", True)], "accepted"),  # accepted after the fix
        ([("accepted", False), ("sent_back", True)], "sent_back"),
        ([("accepted", False), ("assigned", False)], "accepted"),
        ([("sent_back", True), ("rejected", False), ("accepted", False)], "rejected"),
    ],
)
def test_review_verdict_folds_every_review_state(reviews, verdict):
    assert review_verdict(reviews) == verdict


def test_unknown_review_verdict_raises():
    with pytest.raises(ValueError, match="unknown review verdict"):
        validate(traj(review="maybe"))


def test_verdict_json_round_trip():
    verdict = validate(traj(reward=0.25, review="rejected"))
    data = json.loads(json.dumps(verdict.to_json()))
    assert Verdict.from_json(data) == dataclasses.replace(verdict, checks=dict(verdict.checks))
    assert Verdict.from_json(data).to_json() == verdict.to_json()


@pytest.mark.parametrize(
    "data",
    [
        {"v": 2, "reasons": [], "checks": {}},
        {"v": True, "reasons": [], "checks": {}},
        {"v": 0, "reasons": "x", "checks": {}},
        {"v": 0, "reasons": [], "checks": {"checker": "yes"}},
        [],
    ],
)
def test_verdict_from_json_refuses_malformed_data(data: object):
    with pytest.raises(ValueError):
        Verdict.from_json(data)  # type: ignore[arg-type]
