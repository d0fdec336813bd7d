"""What the agent loop reads and keeps around one policy turn, beside the loop itself (agent.py).

`sandbox_pointer`: where the mouse pointer is for a turn, so a model's "where it is" actions (Qwen's
``left_click_drag`` with only its end, a click or scroll without coordinates) mean what they mean on
the model's own computer. `sampled` / `served_by`: what a turn's steps keep of how it was sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent_core.actions.pointer import end_point
from agent_core.data.trajectory import StepRecord, prompt_stamp
from agent_core.env import Obs
from agent_core.policies.base import Policy, PolicyOutput


def sandbox_pointer(obs: Obs, history: Sequence[StepRecord]) -> tuple[int, int] | None:
    """Where the sandbox's mouse pointer is, for the actions a model means "where it is" (Qwen's
    ``left_click_drag`` with only its end, a ``scroll`` or ``click`` without coordinates): as the sandbox
    reports it with the screenshot (`info["pointer"]`, the X desktop's), else where the episode's last
    executed pointer action left it (a browser sandbox's mouse is only ever moved by them), else
    unknown (the first turn of a sandbox that does not say)."""
    reported = obs.info.get("pointer")
    if (
        isinstance(reported, list | tuple)
        and len(reported) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in reported)
    ):
        return min(reported[0], obs.width - 1), min(reported[1], obs.height - 1)
    for step in reversed(history):
        end = end_point(step.action) if step.action is not None else None
        if end is not None:
            return end
    return None


def sampled(out: PolicyOutput, policy: Policy) -> dict[str, Any]:
    """What a turn's first step keeps of how it was sampled: who answered (`served_by`) and, where the
    policy gave the prompt's token ids, their `prompt_stamp` with the prompt family and coordinate
    space the prompt was written for (`prompt`), so a trainer rebuilds that prompt and can tell
    whether it is the one the engine read."""
    info = served_by(out)
    if out.prompt_token_ids and out.token_ids:
        stamp = prompt_stamp(out.prompt_token_ids)
        info["prompt"] = {**stamp, "family": policy.prompt, "coords": policy.coords}
    return info


def served_by(out: PolicyOutput) -> dict[str, Any]:
    """Which inference server and which weights answered a turn (the server's base URL and the model it
    named), kept with each of the turn's steps so a rollout shows where every action came from. Policies
    run in this process answer for themselves (the episode's policy version): nothing is added."""
    meta = out.meta or {}
    if not isinstance(meta.get("server"), str) or not meta["server"]:
        return {}
    return {k: meta[k] for k in ("server", "model") if isinstance(meta.get(k), str) and meta[k]}
