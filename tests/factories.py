"""Small builders for rows the tests need (plain functions over the services, no factory library)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from webapp.catalog.models import Task
from webapp.catalog.services import task_create
from webapp.common.live import broadcast_flush
from webapp.episodes.models import Episode
from webapp.episodes.services import episode_create, episode_finish, episode_start, step_record

_counter = iter(range(1, 1_000_000))

# A real 1×1 PNG (the smallest valid image), for steps that need a screenshot file.
PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082"
)


def make_task(**overrides: Any) -> Task:
    n = next(_counter)
    fields: dict[str, Any] = {
        "slug": f"test/task-{n}",
        "title": f"Test task {n}",
        "instruction": "Click the OK button.",
        "platform": "browser",
        "env_profile": "browser",
    }
    # A spec says where the task runs; the row must agree with it (Task.clean checks).
    spec = overrides.get("spec") or {}
    fields["platform"] = spec.get("platform", fields["platform"])
    fields["env_profile"] = spec.get("profile") or overrides.get("platform") or fields["platform"]
    fields.update(overrides)
    if fields.get("spec"):
        # ...and its id with the slug (the slug wins: tests share one spec among several tasks).
        fields["spec"] = {**fields["spec"], "id": fields["slug"]}
    return task_create(**fields)


def make_episode(
    *,
    task: Task | None = None,
    annotator: AbstractBaseUser | None = None,
    source: str | None = None,
    steps: int = 0,
    reward: float | None = None,
    finish: bool = True,
) -> Episode:
    """An episode with `steps` recorded steps; finished with `reward` unless finish=False."""
    source = source or ("human" if annotator else "agent")
    episode = episode_create(task=task or make_task(), source=source, annotator=annotator)
    episode_start(episode=episode)
    for i in range(steps):
        step_record(
            episode=episode,
            actor="human" if annotator else "agent",
            action={"type": "click", "x": 10 * i, "y": 5},
            action_text=f"click(start_box='({10 * i},5)')",
            thought=f"step {i}",
            screenshot_png=PNG_1X1,
            screen_size=(1, 1),
        )
    if finish:
        episode_finish(episode=episode, reward=reward)
    episode.refresh_from_db()
    # Its live events are sent by a background thread: without this, a socket a test opens next can
    # receive this episode's own "running" status in place of the reply the test waits for.
    broadcast_flush()
    return episode
