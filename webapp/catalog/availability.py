"""Whether a task can be started now: a sandbox host serves its profile.

A task names the sandbox profile it runs on. The built-in profiles (desktop, browser) are what every
sandbox host serves unless told otherwise, so a task on them waits for a sandbox while a host restarts,
as it always did. Any other profile exists only where a host was started with it (office:
`SANDBOX_OFFICE=1`; android: `ANDROID_SERIAL`), so a task on it is *unavailable* while no alive host
serves it: it is still imported and listed, marked so with the reason, but a demonstration or a
rollout batch of it is refused (`TaskUnavailable`, naming the profile) rather than left waiting for a
sandbox that cannot come. The hosts are the sandboxes app's (a floor above): it sets the reader here
when Django starts (`profiles_served_source_set`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from webapp.catalog.models import Task

_served_source: list[Callable[[], Iterable[str]]] = []


class TaskUnavailable(Exception):
    """A task that cannot be started now: no sandbox host serves its profile (the message says which)."""


def profiles_served_source_set(source: Callable[[], Iterable[str]]) -> None:
    """Set where the profiles a task can start on now come from (the sandboxes app's alive hosts)."""
    _served_source[:] = [source]


def profiles_served() -> frozenset[str]:
    """The profiles a task can start on now (empty until the sandboxes app sets its source)."""
    return frozenset(name for source in _served_source for name in source())


def profiles_served_once(request: Any) -> frozenset[str]:
    """`profiles_served()`, read once per request (a page or an API list asks for each of its tasks)."""
    served = getattr(request, "_profiles_served", None)
    if served is None:
        served = profiles_served()
        if request is not None:
            request._profiles_served = served
    return served  # type: ignore[no-any-return]


def profile_unavailable_reason(profile: str, *, served: frozenset[str] | None = None) -> str:
    """Why a task on `profile` cannot be started now, or "" when it can."""
    served = profiles_served() if served is None else served
    if profile in served:
        return ""
    hint = " (a host started with SANDBOX_OFFICE=1 serves it)" if profile == "office" else ""
    return f"no sandbox host serves profile {profile!r} now{hint}"


def task_unavailable_reason(*, task: Task, served: frozenset[str] | None = None) -> str:
    """Why `task` cannot be started now, or "" when it can; `served` saves a query per task in a list."""
    return profile_unavailable_reason(task.env_profile, served=served)


def task_require_available(*, task: Task, served: frozenset[str] | None = None) -> None:
    """TaskUnavailable when `task` cannot be started now (see `task_unavailable_reason`)."""
    reason = task_unavailable_reason(task=task, served=served)
    if reason:
        raise TaskUnavailable(f"task {task.slug} is unavailable: {reason}")


def tasks_unavailable(tasks: Iterable[Task]) -> str:
    """Why some of `tasks` cannot be started now ("unavailable (why): their slugs"), or "" if all can."""
    served = profiles_served()
    unavailable = [t for t in tasks if t.env_profile not in served]
    if not unavailable:
        return ""
    why = profile_unavailable_reason(unavailable[0].env_profile, served=served)
    return f"unavailable ({why}): {', '.join(t.slug for t in unavailable[:5])}"
