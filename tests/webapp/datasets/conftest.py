"""Hand-built trajectories for the flywheel: each kind of episode the router must place."""

from __future__ import annotations

import io
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from PIL import Image

from tests.factories import make_task
from webapp.catalog.models import Task
from webapp.episodes.models import Episode
from webapp.episodes.services import episode_create, episode_finish, episode_start, step_record


def png(seed: int, size: tuple[int, int] = (64, 36)) -> bytes:
    """A small distinct PNG (a different colour per seed)."""
    image = Image.new("RGB", size, ((seed * 37) % 256, (seed * 91) % 256, (seed * 53) % 256))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def click(x: int, y: int = 20) -> dict[str, Any]:
    return {"type": "click", "x": x, "y": y}


def build_episode(
    *,
    task: Task | None = None,
    steps: list[dict[str, Any]],
    reward: float | None = 1.0,
    annotator: AbstractBaseUser | None = None,
    source: str | None = None,
    env_error: bool = False,
) -> Episode:
    """An episode from step specs: {"action": {...} or None, "screen": seed, "invalid": reason}."""
    task = task or make_task(platform="desktop", env_profile="desktop", max_steps=6)
    source = source or ("human" if annotator else "agent")
    episode = episode_create(task=task, source=source, annotator=annotator)
    episode_start(episode=episode)
    for i, spec in enumerate(steps):
        action = spec.get("action")
        step_record(
            episode=episode,
            actor="human" if source == "human" else "agent",
            action=action or {"type": "invalid"},
            action_text="" if action is None else f"click(start_box='({action.get('x')},{action.get('y')})')",
            thought=spec.get("thought", f"The form wants its control {i}; I click it."),
            screenshot_png=png(spec.get("screen", i), size=(64, 36)),
            screen_size=(64, 36),
            invalid_reason=spec.get("invalid", "" if action is not None else "no Action: line"),
            raw_output=spec.get("raw", ""),
        )
    if env_error:
        episode_finish(episode=episode, reward=None, env_error=True, error="sandbox died")
    else:
        episode_finish(episode=episode, reward=reward)
    episode.refresh_from_db()
    return episode


GOOD = [{"action": click(10)}, {"action": click(20)}, {"action": {"type": "finished", "content": ""}}]
LOOP = [
    {"action": click(10), "screen": 7},
    {"action": click(10), "screen": 7},
    {"action": click(10), "screen": 7},
]
