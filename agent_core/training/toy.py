"""A toy rollout source with no sandbox: "click the named button" on a page described as element lines.

For tests and the training benchmark's tokens-per-second figures: episodes are real samples of the
published policy (LocalPolicy, sampling, with token ids and logprobs), parsed by the project's parser,
over several turns (a miss lets the policy try again, with the history in the prompt, as the agent loop
does). It is not a benchmark of GUI skill; the MiniWoB sources are (the in-process browser pool).
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from agent_core import actions as A
from agent_core.actions.compat import parse_output
from agent_core.actions.grammar import ActionParseError
from agent_core.data.trajectory import StepRecord
from agent_core.env import Obs
from agent_core.prompts import system_prompt
from agent_core.training.episodes import rl_episode

_WORDS = ("ONE", "TWO", "THREE", "OK", "Submit", "Cancel", "Yes", "No")
SCREEN = (160, 210)
SYSTEM = system_prompt("browser")


def _png(width: int, height: int) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(buf, "PNG")
    return buf.getvalue()


class ToyPage:
    """Buttons at seeded positions; the task names one."""

    def __init__(self, task_id: str, seed: int) -> None:
        r = random.Random(f"{task_id}:{seed}")  # noqa: S311 - a toy page layout
        n = int(task_id.rsplit("-", 1)[-1]) if task_id[-1].isdigit() else 2
        labels = r.sample(_WORDS, n)
        self.buttons = [(label, r.randint(15, 145), r.randint(60, 195)) for label in labels]
        self.target = r.choice(self.buttons)
        self.instruction = f'Click on the "{self.target[0]}" button.'

    def a11y(self) -> str:
        return "\n".join(f'button "{label}" @({x},{y})' for label, x, y in self.buttons)

    def hit(self, action: A.Action | None) -> bool:
        if not isinstance(action, A.Click):
            return False
        _, x, y = self.target
        return abs(action.x - x) <= 8 and abs(action.y - y) <= 6


def oracle_examples(tasks: list[str], seeds: range, *, mistakes: float = 0.0) -> list[Any]:
    """SFT examples of the right click on each (task, seed) page, as a demonstrator would give.

    `mistakes`: the share of pages (with more than one button; drawn per page, reproducibly) on which
    the demonstrator clicks another button than the one named, with a thought that says so, as a hurried
    person does. Imitation learns that slip with the rest, and only the checker's reward can tell it
    apart: the known-answer check of whether RL corrects what demonstrations taught wrong."""
    from agent_core.training.episodes import sft_examples

    png = _png(*SCREEN)
    out = []
    for task_id in tasks:
        for seed in seeds:
            page = ToyPage(task_id, seed)
            label, x, y = page.target
            slip = random.Random(f"slip:{task_id}:{seed}")  # noqa: S311 - which demonstrations slip
            others = [b for b in page.buttons if b != page.target]
            if others and slip.random() < mistakes:
                label, x, y = slip.choice(others)
            step = StepRecord(
                index=0,
                observation=Obs(png, *SCREEN, a11y=page.a11y()),
                thought=f"I click {label}.",
                action=A.Click(x=x, y=y),
                action_text=f"click(start_box='({x},{y})')",
            )
            out += sft_examples(page.instruction, "browser", [step])
    return out


class ToySource:
    """A RolloutSource over ToyPage tasks ("toy/buttons-2", "toy/buttons-3", …), run in `poll`."""

    def __init__(self, tasks: list[str], *, policy: dict[str, Any] | None = None, seed_base: int = 0) -> None:
        self._tasks = list(tasks)
        self.policy_config = {
            "temperature": 1.0,
            "max_new_tokens": 32,
            "coords": "absolute",
            **(policy or {}),
        }
        self._queue: deque[tuple[str, int, int]] = deque()
        self._seed = seed_base
        self._version = -1
        self._dir: Path | None = None
        self._policy: Any = None
        self._lock = threading.Lock()
        self._png = _png(*SCREEN)
        self.published: list[tuple[int, Path]] = []
        self._busy = 0.0
        self._window = time.monotonic()

    def tasks(self) -> list[str]:
        return list(self._tasks)

    def publish(self, version: int, model_dir: Path) -> None:
        from agent_core.policies.local import LocalPolicy

        with self._lock:
            if self._policy is not None:
                self._policy.close()
            self._version, self._dir = version, Path(model_dir)
            self._policy = LocalPolicy(model_path=model_dir, seed=None, **self.policy_config)
            self.published.append((version, Path(model_dir)))

    def request(self, task_id: str, n: int, *, max_steps: int) -> int:
        seed = self._seed
        self._seed += 1
        self._queue.extend([(task_id, seed, max_steps)] * n)
        return seed

    def pending(self) -> int:
        return len(self._queue)

    def poll(self, timeout: float) -> list[Any]:
        out: list[Any] = []
        started = time.monotonic()
        while self._queue and (not out or time.monotonic() - started < timeout):
            task_id, seed, max_steps = self._queue.popleft()
            out.append(self.episode(task_id, seed, max_steps))
        self._busy += time.monotonic() - started
        return out

    def episode(self, task_id: str, seed: int, max_steps: int) -> Any:
        """One episode of the current policy on the page of (task_id, seed)."""
        return toy_episode(self._policy, task_id, seed, max_steps, version=self._version, png=self._png)

    def utilisation(self) -> float | None:
        now = time.monotonic()
        share = self._busy / max(now - self._window, 1e-9)
        self._busy, self._window = 0.0, now
        return min(1.0, share)

    def close(self) -> None:
        self._queue.clear()
        if self._policy is not None:
            self._policy.close()


def toy_episode(
    policy: Any, task_id: str, seed: int, max_steps: int, *, version: int = -1, png: bytes | None = None
) -> Any:
    """One episode of `policy` on the page of (task_id, seed): an RLEpisode, reward 1 on a hit.

    A miss lets the policy try again with the history in the prompt, as the agent loop does."""
    from agent_core.memory import build_messages
    from agent_core.policies.base import PolicyInput

    page = ToyPage(task_id, seed)
    obs = Obs(png or _png(*SCREEN), *SCREEN, a11y=page.a11y())
    steps: list[StepRecord] = []
    reward = 0.0
    for i in range(max_steps):
        messages = build_messages(
            system=SYSTEM, instruction=page.instruction, observation=obs, history=steps, images=3
        )
        out = policy.act(
            PolicyInput(page.instruction, obs, i, tuple(steps), messages=messages, screen=SCREEN)
        )
        thought, action_text = out.thought, ""
        if out.actions:  # a structured policy (the random baseline)
            action, reason = out.actions[0], ""
        else:
            try:
                parsed = parse_output(
                    out.text, fmt="uitars", screen=SCREEN, coords="absolute", platform="browser"
                )
                action = parsed.actions[0] if parsed.actions else None
                reason = "" if action else "the response holds no action"
                if action:
                    thought, action_text = parsed.thought, parsed.action_texts[0]
            except ActionParseError as exc:
                action, reason = None, exc.reason or str(exc)
        steps.append(
            StepRecord(
                index=i,
                observation=obs,
                thought=thought if action else "",
                action=action,
                action_text=action_text,
                raw_output=out.text,
                invalid_reason=reason,
                token_ids=out.token_ids,
                logprobs=out.logprobs,
            )
        )
        if page.hit(action):
            reward = 1.0
            break
    return rl_episode(
        task_id,
        seed,
        reward,
        page.instruction,
        "browser",
        steps,
        policy_version=version,
        episode_id=f"{task_id}:{seed}",
    )
