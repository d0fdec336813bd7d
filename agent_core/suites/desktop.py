"""The Linux desktop suite: terminal, editor, file manager, browser and hybrid tasks on an X desktop.

One task per YAML file in the `desktop/` folder beside this module (`flywheel-task/1`, see
`agent_core.tasks.spec`). Every task runs on the `desktop` profile (Xvfb + openbox + xterm); its setup
writes the workspace and launches what else it needs (mousepad, pcmanfm, Chromium on local file://
pages, no network). Hybrid tasks move information between the GUI and the shell: read something
only a window shows, work on it in the terminal, and put the result back through the GUI. A few
tasks are infeasible on purpose (`infeasible: true`): the right answer is to say so.

The scripted solutions are in `agent_core.suites.desktop_oracles` (and `desktop_oracles_web`).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from agent_core.tasks.spec import TaskSpec, load_task_file

TASK_DIR = Path(__file__).resolve().parent / "desktop"
PREFIX = "desktop/"
CATEGORIES = ("terminal", "editor", "files", "browser", "hybrid")
"""The second part of every task id (desktop/<category>/<name>), which is also the task's family."""


def task_files() -> list[Path]:
    """The suite's task documents."""
    return sorted(TASK_DIR.glob("*.yaml"))


@cache
def _load() -> tuple[TaskSpec, ...]:
    return tuple(sorted((load_task_file(p) for p in task_files()), key=lambda t: t.id))


def tasks() -> list[TaskSpec]:
    """Every task of the suite, sorted by id."""
    return list(_load())


def category(task: TaskSpec) -> str:
    """The task's category: terminal, editor, files, browser or hybrid."""
    return task.id.removeprefix(PREFIX).split("/", 1)[0]
