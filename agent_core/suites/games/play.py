"""What the reference players of G1's games share: reading the game's state, the action budget.

A reference player reads the privileged `game_state` before every move (the board, hidden things)
and answers with keys and clicks at screen pixels only (the canvas sits at the page's top left, so
canvas pixels are screen pixels); it never runs JavaScript on the page.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agent_core import actions as A
from agent_core.policies.base import PolicyError
from agent_core.tasks.oracles import OracleContext

Actions = Iterator[A.Action]
ACTION_CAP = 40
"""A reference player finishes within this many actions (the suite's contract)."""
ARROWS = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}
"""Arrow keys (the action grammar's names) and the grid step each means: (dx, dy), y down."""


class GameOracleFailed(PolicyError):
    """The game does not look the way its reference player expects."""


def game_state(ctx: OracleContext, game: str) -> dict[str, Any]:
    """The game's privileged state now: {score, over, tick, view, ...}."""
    state = ctx.env.call("game_state")
    if not isinstance(state, dict) or state.get("game") != game or not isinstance(state.get("view"), dict):
        raise GameOracleFailed(f"the page is not the game {game}: {str(state)[:200]}")
    return state


def cell_name(x: int, y: int) -> str:
    """A grid cell as a player says it: column and row, counted from 1 at the top left."""
    return f"column {x + 1}, row {y + 1}"
