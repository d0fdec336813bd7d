"""The MiniWoB++ suite: one task for every MiniWoB++ page the installed `miniwob` package ships.

Each task starts an episode with the setup op `miniwob` (the browser sandbox's `miniwob_start`,
seeded with the episode's seed) and scores the sandbox's own verdict (`miniwob_reward`'s `success`:
done with the package's full raw reward), so a wrong answer, a time-out and doing nothing all score 0.

Timing: episodes start with virtual time paused (`paused: true`). The page's clock only moves when
the agent waits (a `wait` action advances page time instead of sleeping), so however long a policy
thinks, MiniWoB's own episode timer does not run out, and the time-scaled reward stays near 1. The
other side: nothing that runs on a page timer happens between actions, not even a 0 ms one, so
animations (jQuery UI accordions, date pickers), autocomplete's lookup and the delayed tasks' timers
move only during a wait. Tasks tagged `timed` are those known to need one.

The task list is read from the package's html/ folder without importing the package (its import
registers Gymnasium environments); agent_core does not depend on the sandbox layer.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from typing import Any

from agent_core.tasks.spec import TaskSpec, parse_task

# Where every MiniWoB++ page draws (CSS pixels are screen pixels in a browser sandbox): the task itself
# (#wrap, 160×210 at the top left, from the package's core.css) and its reward and timer panel beside it
# (#reward-display, from x 165 to 325); the rest of the viewport is empty. Live views zoom to this.
VIEW_AREA = {"x": 0, "y": 0, "width": 330, "height": 215}

PREFIX = "miniwob/"


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


EASY = _names(
    """
    click-button click-button-sequence click-checkboxes click-collapsible-nodelay click-color click-dialog
    click-dialog-2 click-link click-option click-tab click-test click-test-2 click-test-transfer click-widget
    enter-password enter-text enter-text-2 focus-text focus-text-2 grid-coordinate identify-shape
    login-user simple-arithmetic unicode-test choose-list click-collapsible navigate-tree odd-or-even
    """
)
HARD = _names(
    """
    bisect-angle book-flight book-flight-nodelay chase-circle choose-date choose-date-medium
    circle-center click-checkboxes-soft click-menu click-menu-2 click-scroll-list copy-paste-2 count-shape
    count-sides daily-calendar drag-cube drag-items drag-items-grid drag-shapes drag-shapes-2
    drag-sort-numbers draw-circle draw-line email-inbox email-inbox-forward-nl email-inbox-forward-nl-turk
    email-inbox-nl-turk email-inbox-star-reply find-midpoint highlight-text highlight-text-2 hot-cold
    moving-items multi-orderings right-angle search-engine simon-says social-media-all social-media-some
    stock-market terminal text-editor tic-tac-toe use-colorwheel use-colorwheel-2 use-slider-2
    visual-addition
    """
)
TIMED = _names(
    """
    book-flight button-delay chase-circle choose-date choose-date-easy choose-date-medium
    click-collapsible click-collapsible-2 click-menu click-menu-2 click-pie hover-shape moving-items
    simon-says stock-market use-autocomplete use-autocomplete-nodelay
    """
)
"""Tasks whose pages animate or work on timers (page time must pass between actions: a `wait`)."""
STEPS = {"easy": 10, "medium": 20, "hard": 30}
LONG = _names("click-checkboxes-large number-checkboxes book-flight book-flight-nodelay")
"""Tasks that take many steps (more allowed)."""


class MiniWobUnavailable(RuntimeError):
    """The miniwob package (with its html/ folder) is not installed here."""


@cache
def html_dir() -> Path:
    """The miniwob package's html/ folder (found without importing the package)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise MiniWobUnavailable("the miniwob package is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "html"
    if not (path / "miniwob").is_dir():
        raise MiniWobUnavailable(f"the miniwob package has no html/miniwob folder under {path}")
    return path


@cache
def task_names() -> tuple[str, ...]:
    """Every MiniWoB++ task the package ships (its pages under html/miniwob), sorted."""
    return tuple(sorted(p.stem for p in (html_dir() / "miniwob").glob("*.html")))


def difficulty(name: str) -> str:
    """easy, medium or hard: a rough grading by the number and kind of steps a solution takes."""
    return "easy" if name in EASY else "hard" if name in HARD else "medium"


def task_doc(name: str, *, oracle: bool = False) -> dict[str, Any]:
    """The `flywheel-task/1` document of MiniWoB++ task `name`."""
    level = difficulty(name)
    steps = STEPS[level] + (20 if name in LONG else 0)
    tags = ["miniwob", level] + (["timed"] if name in TIMED else [])
    doc: dict[str, Any] = {
        "id": PREFIX + name,
        "title": f"MiniWoB++ {name}",
        "description": f"The MiniWoB++ task {name}: the instruction is the page's own utterance.",
        "instruction": "{{start.utterance}}",
        "platform": "browser",
        "profile": "browser",
        "family": "miniwob",
        "setup": [{"op": "miniwob", "task": name, "paused": True, "save_as": "start"}],
        "limits": {"max_steps": steps, "max_seconds": max(120, 10 * steps)},
        "checker": {
            "checks": [
                {
                    "probe": {"op": "call", "method": "miniwob_reward"},
                    "select": "success",
                    "metric": "is_true",
                }
            ]
        },
        "tags": tags,
    }
    if oracle:
        doc["oracle"] = PREFIX + name
    return doc


def tasks() -> list[TaskSpec]:
    """One validated task per MiniWoB++ page, with the oracle named where one is registered."""
    from agent_core.tasks.oracles import oracle_names

    solved = set(oracle_names())
    return [parse_task(task_doc(name, oracle=PREFIX + name in solved)) for name in task_names()]
