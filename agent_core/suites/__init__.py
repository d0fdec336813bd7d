"""Task suites, by name: each module gives `tasks() -> list[TaskSpec]` (oracles live beside them)."""

from __future__ import annotations

import importlib

from agent_core.tasks.spec import TaskSpec

SUITES: dict[str, tuple[str, str, str]] = {
    # name → (module, title, description)
    "miniwob": (
        "agent_core.suites.miniwob",
        "MiniWoB++",
        "The web tasks the miniwob package ships, in a browser sandbox.",
    ),
    "desktop": (
        "agent_core.suites.desktop",
        "Linux desktop",
        "Terminal, editor, file manager and browser tasks on an Xvfb desktop, hybrid GUI + shell ones too.",
    ),
    "games": (
        "agent_core.suites.games",
        "Games",
        "Twelve HTML5 games in a browser sandbox, scored 0 (doing nothing) to 1 (the reference player).",
    ),
}


def suite_names() -> list[str]:
    """Every suite name."""
    return sorted(SUITES)


def suite_tasks(name: str) -> list[TaskSpec]:
    """The tasks of suite `name`; an unknown name raises KeyError listing the valid ones."""
    if name not in SUITES:
        raise KeyError(f"unknown suite {name!r}; valid: {', '.join(suite_names())}")
    module = importlib.import_module(SUITES[name][0])
    tasks: list[TaskSpec] = module.tasks()
    return tasks
