"""The flywheel's validator V(s) and routing rule, over plain views of trajectories.

V(s) = 1 when a trajectory is good enough to imitate: the checker succeeded (or, with no checker
verdict, a reviewer accepted it), every step parsed, it did not loop, it kept to its step budget, no
reviewer rejected it or sent it back, and no corrected fork of it supersedes it. V=1 trajectories go to
the SFT data, the rest to continual pre-training (CT). The Django side turns Episode/Step/Review rows
into `TrajectoryView`s; nothing here touches a database or a file.

Review states, as `review_verdict` folds an episode's reviews into one (the README has this table):

- no review, or one still assigned / in progress that was never sent back: "" (no person has judged
  it yet; the other checks decide, and a later decision moves it in a later round);
- accepted: "accepted" (stands in for a missing checker verdict; every other check still applies);
- rejected (by any reviewer): "rejected" (V=0: a reject overrides a checker's success and accepts);
- sent back, or resubmitted after a send-back and not decided since: "sent_back" (V=0: a reviewer
  asked for it to be fixed; only an accept lets it back into SFT);
- superseded: a finished fork of it exists (`superseded_by`): V=0, its correction is the one to imitate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

CHECKS: tuple[str, ...] = (
    "has_steps",
    "checker",
    "parsed",
    "no_loop",
    "within_budget",
    "review",
    "not_superseded",
)
ROUTES: tuple[str, ...] = ("sft", "ct")
REVIEW_VERDICTS: tuple[str, ...] = ("accepted", "rejected", "sent_back", "")
OPEN_REVIEW_STATES: tuple[str, ...] = ("assigned", "in_progress")
STEP_LABELS: tuple[str, ...] = ("correct", "redundant", "wrong", "")


@dataclass(frozen=True)
class StepView:
    """One recorded step, as the validator and the exporters see it."""

    index: int
    actor: str
    """"human" or "agent"."""
    screenshot: str
    """Storage name of the screenshot observed before acting ("" if none); same name = same screen."""
    screen: tuple[int, int] | None
    """(width, height) of that screenshot."""
    thought: str
    action: Mapping[str, Any] | None
    """`action_to_dict` form; None when the output did not parse."""
    action_text: str
    """The UI-TARS text of the action in screen pixels, as recorded."""
    invalid_reason: str = ""
    raw_output: str = ""
    label: str = ""
    """A reviewer's label: "correct", "redundant", "wrong" or ""."""
    corrected_thought: str = ""
    corrected_action: Mapping[str, Any] | None = None
    result: str = ""
    """What the step's SDK action gave back (an MCP tool's result, a terminal's output), as the model read
    it beside the next screen (agent_core.memory.sdk_result_text); "" for GUI input."""

    @property
    def parsed(self) -> bool:
        """Whether the step holds a valid recorded action."""
        return self.action is not None and not self.invalid_reason


@dataclass(frozen=True)
class Verdict:
    """V(s) with the checks behind it; `reasons` say why V=0 and name the steps."""

    v: int
    reasons: tuple[str, ...]
    checks: Mapping[str, bool | None]
    """Per check in CHECKS: passed, failed, or None when it does not apply."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form: {"v": 0|1, "reasons": [...], "checks": {...}}."""
        return {"v": self.v, "reasons": list(self.reasons), "checks": dict(self.checks)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        """Read the JSON form back; raises ValueError naming what is malformed."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a verdict must be an object, got {type(data).__name__}")
        v, reasons, checks = data.get("v"), data.get("reasons", []), data.get("checks", {})
        if v not in (0, 1) or isinstance(v, bool):
            raise ValueError(f"verdict v must be 0 or 1, got {v!r}")
        if not isinstance(reasons, list | tuple) or not all(isinstance(r, str) for r in reasons):
            raise ValueError("verdict reasons must be a list of strings")
        if not isinstance(checks, Mapping) or not all(
            isinstance(k, str) and (c is None or isinstance(c, bool)) for k, c in checks.items()
        ):
            raise ValueError("verdict checks must map names to true, false or null")
        return cls(v=v, reasons=tuple(reasons), checks=dict(checks))


@dataclass(frozen=True)
class TrajectoryView:
    """One episode with its steps, outcome and review, as the validator and the exporters see it."""

    episode_id: int
    task: str
    """The task's slug."""
    instruction: str
    platform: str
    """A task platform ("desktop", "browser", "android") or an action platform ("mobile")."""
    source: str
    """"human", "agent" or "mixed"."""
    policy_version: str
    """"" for human episodes."""
    reward: float | None
    """The checker's reward; None when there is no checker verdict."""
    max_steps: int
    review: str
    """The episode's review verdict (see `review_verdict`): "accepted", "rejected", "sent_back" or ""."""
    steps: tuple[StepView, ...]
    suites: tuple[str, ...] = ()
    annotator: str = ""
    final_answer: str = ""
    verdict: Verdict | None = None
    """V(s) where already decided; the CT export writes its v."""
    superseded_by: int | None = None
    """The id of a finished fork that corrects this trajectory, if any."""
    tools: tuple[Mapping[str, Any], ...] = ()
    """The MCP tools the episode's prompt listed ({server, name, description, input_schema} each)."""


def review_verdict(reviews: Iterable[tuple[str, bool]]) -> str:
    """One verdict from an episode's reviews, each given as (state, ever sent back): a reject wins,
    then a send-back not accepted since (sent back, or reopened after one), then an accept; open
    reviews that were never sent back are no verdict yet ("")."""
    reviews = list(reviews)
    states = {state for state, _ in reviews}
    if "rejected" in states:
        return "rejected"
    if any(s == "sent_back" or (s in OPEN_REVIEW_STATES and back) for s, back in reviews):
        return "sent_back"
    if "accepted" in states:
        return "accepted"
    return ""


def _action_name(step: StepView) -> str:
    if step.action_text:
        return step.action_text
    kind = step.action.get("type") if step.action is not None else None
    return f"{kind}(...)" if isinstance(kind, str) else "the same action"


def find_loops(steps: tuple[StepView, ...], *, repeats: int = 3) -> list[tuple[int, int]]:
    """(first, last) positions of runs of >= `repeats` equal actions on an unchanged screen."""
    if repeats < 2:
        raise ValueError(f"repeats must be >= 2, got {repeats}")
    runs: list[tuple[int, int]] = []
    start = 0
    for k in range(1, len(steps) + 1):
        prev = steps[k - 1]
        same = (
            k < len(steps)
            and prev.parsed
            and steps[k].parsed
            and prev.screenshot != ""
            and steps[k].screenshot == prev.screenshot
            and dict(steps[k].action or {}) == dict(prev.action or {})
        )
        if not same:
            if k - start >= repeats:
                runs.append((start, k - 1))
            start = k
    return runs


def validate(traj: TrajectoryView, *, success_threshold: float = 1.0, loop_repeats: int = 3) -> Verdict:
    """V(s) of a trajectory, with the checks behind it and, for V=0, the reasons naming the steps."""
    reasons: list[str] = []
    checks: dict[str, bool | None] = {}
    steps = traj.steps

    checks["has_steps"] = bool(steps)
    if not steps:
        reasons.append("no steps")

    reward = traj.reward
    if reward is None:
        checks["checker"] = None
    else:
        checks["checker"] = math.isfinite(reward) and reward >= success_threshold
        if not checks["checker"]:
            reasons.append(f"checker failed (reward {reward:g} < {success_threshold:g})")

    unparsed = [s for s in steps if not s.parsed]
    checks["parsed"] = not unparsed if steps else None
    for s in unparsed:
        why = s.invalid_reason or "no action"
        reasons.append(f"step {s.index} did not parse: {why}")

    loops = find_loops(steps, repeats=loop_repeats) if steps else []
    checks["no_loop"] = not loops if steps else None
    for first, last in loops:
        a, b = steps[first], steps[last]
        reasons.append(
            f"loop: {_action_name(a)} repeated {last - first + 1} times on an unchanged screen "
            f"at steps {a.index}–{b.index}"
        )

    checks["within_budget"] = len(steps) <= traj.max_steps
    if not checks["within_budget"]:
        reasons.append(f"over budget: {len(steps)} steps > {traj.max_steps}")

    if traj.review not in REVIEW_VERDICTS:
        raise ValueError(
            f"unknown review verdict {traj.review!r}; valid: accepted, rejected, sent_back or ''"
        )
    checks["review"] = {"accepted": True, "rejected": False, "sent_back": False}.get(traj.review)
    if traj.review == "rejected":
        reasons.append("rejected by a reviewer")  # a reject overrides a checker's success
    elif traj.review == "sent_back":
        reasons.append("sent back by a reviewer to be fixed, and not accepted since")
    elif reward is None and traj.review != "accepted":
        reasons.append("no checker verdict and no accepting review")

    checks["not_superseded"] = traj.superseded_by is None
    if traj.superseded_by is not None:
        reasons.append(f"superseded by its corrected fork, episode {traj.superseded_by}")

    return Verdict(v=0 if reasons else 1, reasons=tuple(reasons), checks=checks)


def route(verdict: Verdict) -> str:
    """Where a trajectory's data goes: "sft" for V=1, "ct" for V=0."""
    return "sft" if verdict.v == 1 else "ct"


__all__ = [
    "CHECKS",
    "ROUTES",
    "STEP_LABELS",
    "StepView",
    "TrajectoryView",
    "Verdict",
    "find_loops",
    "review_verdict",
    "route",
    "validate",
]
