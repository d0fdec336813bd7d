"""Why an RL run trained its policy on nothing: the message a failed run shows, from what it counted.

RLTrainer (rl_trainer.py) counts each reason a turn or an episode went untrained as it goes; a run that
trained no turn at all, or whose rollouts stopped being of any use, fails with this text rather than
passing its starting weights off as a result.
"""

from __future__ import annotations

from collections.abc import Mapping


def why_untrained(
    algorithm: str,
    counts: Mapping[str, int],
    *,
    too_long: int,
    max_seq_len: int,
    iterations: int,
    waiting: int = 0,
) -> str:
    """Why a run's policy was updated on no turn at all in `iterations` iterations (or, `waiting`, why
    the next iteration cannot get episodes to train on: the last `waiting` were all of no use)."""
    n = counts
    reasons = []
    agreed = n.get("agreed_failed", 0) + n.get("agreed_solved", 0)
    if agreed:
        reasons.append(
            f"{agreed} group(s) of rollouts all scored alike ({n.get('agreed_failed', 0)} all failed, "
            f"{n.get('agreed_solved', 0)} all solved), so every advantage was 0: roll out on tasks the "
            "policy solves some of the time, or raise group_size"
        )
    if n.get("turnless"):
        reasons.append(
            f"{n['turnless']} episode(s) came back with no sampled turn (lost to the infrastructure, "
            "or their policy kept no token ids and logprobs)"
        )
    if n.get("stale"):
        reasons.append(f"{n['stale']} episode(s) came from policies older than max_policy_lag allows")
    if too_long:
        reasons.append(f"{too_long} turn(s) were longer than max_seq_len ({max_seq_len})")
    if n.get("rebuild_differs"):
        reasons.append(
            f"{n['rebuild_differs']} turn(s) rebuilt to a prompt other than the one their sampler read "
            "(another prompt, history_images, processor or tokenizer than the rollouts used)"
        )
    if n.get("value_pretraining"):
        reasons.append(
            f"{n['value_pretraining']} iteration(s) trained only the critic (value_pretrain_steps)"
        )
    why = "; ".join(reasons) or "no episode gave a turn to learn from"
    if waiting:
        return (
            f"{algorithm.upper()} stopped at iteration {iterations + 1}: the last {waiting} episodes were "
            f"all unusable (stale, without a turn, or in groups that all scored alike), so no batch to "
            f"train on would ever fill: {why}"
        )
    return (
        f"{algorithm.upper()} trained the policy on 0 turns in {iterations} iteration(s), "
        f"so the run learned nothing: {why}"
    )
