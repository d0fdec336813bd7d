"""Scripted policies: the task's oracle, a seeded random baseline, and do-nothing."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

from agent_core import actions as A
from agent_core.policies.base import (
    EpisodeContext,
    Policy,
    PolicyError,
    PolicyInput,
    PolicyOutput,
    register_policy,
)
from agent_core.tasks.oracles import OracleContext, get_oracle


@register_policy("oracle")
class OraclePolicy(Policy):
    """Plays the task's scripted solution (privileged: it may read the environment)."""

    privileged = True
    wants_messages = False

    def __init__(self, oracle: str = "", think_s: float = 0.0) -> None:
        if not 0.0 <= think_s <= 60.0:
            raise PolicyError("think_s must be between 0 and 60 seconds")
        self.fixed = oracle
        self.think_s = think_s
        """Simulated think time per action (benchmarks and tests of slow policies)."""
        self._gen: Iterator[A.Action] | None = None
        self._ctx: OracleContext | None = None

    def reset(self, ctx: EpisodeContext) -> None:
        name = self.fixed or ctx.task_id
        if ctx.env is None:
            raise PolicyError("the oracle needs privileged access to the environment")
        try:
            oracle = get_oracle(name)
        except KeyError as exc:
            raise PolicyError(str(exc.args[0])) from None
        self._ctx = OracleContext(
            env=ctx.env, params=ctx.params, setup=ctx.setup, instruction=ctx.instruction
        )
        self._gen = oracle(self._ctx)

    def act(self, inp: PolicyInput) -> PolicyOutput:
        if self._gen is None or self._ctx is None:
            raise PolicyError("the oracle policy was not reset for an episode")
        self._ctx.observation = inp.observation
        if self.think_s:
            time.sleep(self.think_s)  # stands in for a model's generation time
        self._ctx.take_thought()  # a thought said for no action is not carried to the next one
        try:
            action = next(self._gen)
            thought = self._ctx.take_thought()
        except StopIteration:
            action = A.Finished(content="")
            asked = " ".join(self._ctx.instruction.split())
            asked = asked if len(asked) <= 160 else asked[:159] + "…"
            thought = f'I have done what the task asked ("{asked}"), so I finish.'
        # An action the oracle said nothing about has no thought: never a stand-in ("oracle step 3").
        return PolicyOutput(actions=(action,), thought=thought)


@register_policy("noop")
class NoopPolicy(Policy):
    """Does nothing: declares the task finished at once (a solved-by-default task scores 1 under it)."""

    wants_messages = False

    def act(self, inp: PolicyInput) -> PolicyOutput:
        return PolicyOutput(actions=(A.Finished(content=""),), thought="")  # a baseline, nothing to teach


@register_policy("random")
class RandomPolicy(Policy):
    """Uniformly random actions of the platform's action space, on screen, reproducible from its seed."""

    wants_messages = False
    DESKTOP_KEYS = ("enter", "tab", "escape", "backspace", "up", "down", "left", "right", "space")

    def __init__(self, seed: int = 0, finish_prob: float = 0.02) -> None:
        self.base_seed = seed
        self.finish_prob = finish_prob
        self.rng = random.Random(seed)  # noqa: S311 - a baseline, not security

    def reset(self, ctx: EpisodeContext) -> None:
        self.rng = random.Random(f"{self.base_seed}:{ctx.task_id}:{ctx.seed}")  # noqa: S311
        self.mobile = ctx.platform == "android"

    def act(self, inp: PolicyInput) -> PolicyOutput:
        w, h = inp.screen if inp.screen != (0, 0) else (inp.observation.width, inp.observation.height)
        r = self.rng
        if r.random() < self.finish_prob:
            return PolicyOutput(actions=(A.Finished(content=""),), thought="")
        x, y = r.randrange(max(w, 1)), r.randrange(max(h, 1))
        choices: list[Any] = [
            lambda: A.Click(x=x, y=y),
            lambda: A.Scroll(x=x, y=y, direction=r.choice(A.SCROLL_DIRECTIONS)),
            lambda: A.Type(content="".join(r.choice("abcdefgh ") for _ in range(r.randint(1, 8)))),
            lambda: A.Drag(x1=x, y1=y, x2=r.randrange(max(w, 1)), y2=r.randrange(max(h, 1))),
        ]
        if getattr(self, "mobile", False):
            choices += [lambda: A.LongPress(x=x, y=y), lambda: A.PressBack()]
        else:
            choices += [
                lambda: A.LeftDouble(x=x, y=y),
                lambda: A.RightSingle(x=x, y=y),
                lambda: A.Press(key=r.choice(self.DESKTOP_KEYS)),
            ]
        return PolicyOutput(actions=(r.choice(choices)(),), thought="")  # chance has no reasons
