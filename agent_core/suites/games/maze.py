"""Maze (html/maze.js): walk the dot from the top-left cell to the exit at the bottom right.

The reference player finds the way out with a breadth-first search over the maze's open sides (from
the privileged view, which holds what the page draws: the walls) and presses the arrow key of its next
cell, one cell a step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from agent_core import actions as A
from agent_core.policies.base import PolicyError
from agent_core.suites.games import GameInfo
from agent_core.tasks.oracles import OracleContext, register_oracle, said

INFO = GameInfo(
    name="maze",
    title="Maze",
    instruction=(
        "Walk the blue dot out of the maze to the green square at the bottom right with the arrow keys: "
        "each press moves it one cell, and walls block it. You have 60 moves. Score: 1 when you reach "
        "the exit."
    ),
    target=1,
    baseline=0,
    max_steps=40,
    step_ms=100.0,
    tags=("puzzle", "keyboard"),
)

STEPS = {"n": (0, -1, "ArrowUp", "up"), "s": (0, 1, "ArrowDown", "down"), "w": (-1, 0, "ArrowLeft", "left"),
         "e": (1, 0, "ArrowRight", "right")}  # fmt: skip


class NoWayOut(PolicyError):
    """The maze has no way from the dot to the exit (the page's maze is perfect: it always has one)."""


def way_out(open_sides: Sequence[Sequence[str]], start: Sequence[int], goal: Sequence[int]) -> list[str]:
    """The sides ("n", "s", "e", "w") to walk from `start` to `goal`, shortest first found."""
    begin, end = (int(start[0]), int(start[1])), (int(goal[0]), int(goal[1]))
    came: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {begin: None}
    todo = deque([begin])
    while todo:
        x, y = todo.popleft()
        if (x, y) == end:
            break
        for side in open_sides[y][x]:
            dx, dy, _, _ = STEPS[side]
            cell = (x + dx, y + dy)
            if cell not in came:
                came[cell] = ((x, y), side)
                todo.append(cell)
    if end not in came:
        raise NoWayOut(f"no way from {begin} to {end}")
    sides: list[str] = []
    cell = end
    while (link := came[cell]) is not None:
        cell, side = link
        sides.append(side)
    return sides[::-1]


def _cell(xy: Sequence[int]) -> str:
    return f"column {int(xy[0]) + 1}, row {int(xy[1]) + 1}"


@register_oracle("games/maze")
def maze(ctx: OracleContext) -> Iterator[A.Action]:
    """Follow the way out, a cell a key press."""
    while True:
        state = ctx.env.call("game_state")
        view: Mapping[str, Any] | None = state["view"]
        if state["over"] or view is None:
            return
        sides = way_out(view["open"], view["player"], view["exit"])
        if not sides:
            return
        _, _, key, word = STEPS[sides[0]]
        left = len(sides)
        yield said(
            ctx,
            f"The dot is at {_cell(view['player'])} and the exit at {_cell(view['exit'])}; the open way "
            f"there ({left} cell{'s' if left > 1 else ''} long) goes {word} from here, so I press {key}.",
            A.Press(key=key),
        )
