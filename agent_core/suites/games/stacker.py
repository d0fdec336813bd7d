"""Stacker (html/stacker.js): ten falling pieces in a well 6 wide; full rows clear.

The reference player places each piece where a classic stacking evaluation (rows cleared, holes,
height, bumpiness; looking one piece ahead, as the page shows the next piece) likes it best, among the
places the keys can reach from where the piece is: it simulates the page's turns (with the same
shifts when a turn is blocked) and moves. Then it turns the piece (ArrowUp), moves it (ArrowLeft /
ArrowRight) and drops it (Space), one key a step, re-reading the piece after each key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_core import actions as A
from agent_core.suites.games import GameInfo
from agent_core.tasks.oracles import OracleContext, register_oracle, said

INFO = GameInfo(
    name="stacker",
    title="Stacker",
    instruction=(
        "Stack the falling pieces to fill whole rows of the well; a full row clears. ArrowLeft and "
        "ArrowRight move the piece, ArrowUp turns it, ArrowDown moves it down one row and Space drops it. "
        "The next piece is shown beside the well. Ten pieces fall. Score: rows cleared."
    ),
    target=5,
    baseline=1,
    max_steps=45,
    step_ms=100.0,
    tags=("puzzle", "keyboard"),
)

Board = tuple[str, ...]
Cells = Sequence[Sequence[int]]
WEIGHTS = {"lines": 3.4, "holes": -1.0, "height": -0.5, "bumps": -0.2, "top": -0.3}


@dataclass(frozen=True)
class Placement:
    """Where a piece lands: its turn, its column, the keys that get it there, the board after it."""

    rot: int
    x: int
    keys: tuple[str, ...]
    board: Board
    lines: int


def _fits(board: Board, cells: Cells, x: int, y: int) -> bool:
    rows, cols = len(board), len(board[0])
    for cx, cy in cells:
        c, r = x + cx, y + cy
        if not (0 <= c < cols and 0 <= r < rows) or board[r][c] != ".":
            return False
    return True


def _land(board: Board, cells: Cells, x: int, y: int) -> tuple[Board, int]:
    """The board after the piece drops from (x, y) and locks, full rows cleared; and the rows cleared."""
    while _fits(board, cells, x, y + 1):
        y += 1
    grid = [list(row) for row in board]
    for cx, cy in cells:
        grid[y + cy][x + cx] = "#"
    kept = ["".join(row) for row in grid if "." in row]
    cleared = len(board) - len(kept)
    width = len(board[0])
    return tuple(["." * width] * cleared + kept), cleared


def placements(
    board: Board, rotations: Sequence[Cells], rot: int, x: int, y: int, kicks: Sequence[int]
) -> list[Placement]:
    """Every place the keys reach from (rot, x, y): turns first (as the page does them), then moves."""
    out: dict[tuple[int, int], Placement] = {}
    cur_rot, cur_x = rot, x
    turns: list[str] = []
    for _ in range(4):
        for dx in (-1, 1):
            keys = list(turns)
            px = cur_x
            while True:
                cells = rotations[cur_rot]
                if (cur_rot, px) not in out and _fits(board, cells, px, y):
                    after, lines = _land(board, cells, px, y)
                    out[(cur_rot, px)] = Placement(cur_rot, px, (*keys, " "), after, lines)
                if not _fits(board, rotations[cur_rot], px + dx, y):
                    break
                px += dx
                keys.append("ArrowLeft" if dx < 0 else "ArrowRight")
        nxt = (cur_rot + 1) % 4
        for k in kicks:
            if _fits(board, rotations[nxt], cur_x + k, y):
                cur_rot, cur_x = nxt, cur_x + k
                turns.append("ArrowUp")
                break
        else:
            break
    return list(out.values())


def evaluate(board: Board, lines: int) -> float:
    """The stacking evaluation of a board (higher is better)."""
    rows, cols = len(board), len(board[0])
    heights = []
    holes = 0
    for c in range(cols):
        column = [board[r][c] for r in range(rows)]
        top = next((r for r, v in enumerate(column) if v != "."), rows)
        heights.append(rows - top)
        holes += sum(1 for v in column[top:] if v == ".")
    bumps = sum(abs(a - b) for a, b in zip(heights, heights[1:], strict=False))
    w = WEIGHTS
    return (
        w["lines"] * lines
        + w["holes"] * holes
        + w["height"] * sum(heights)
        + w["bumps"] * bumps
        + w["top"] * max(heights)
    )


def best(view: Mapping[str, Any]) -> Placement:
    """The placement of the falling piece that evaluates best, looking one piece ahead."""
    board: Board = tuple(view["board"])
    piece = view["piece"]
    kicks = view["kicks"]
    options = placements(board, view["rotations"], piece["rot"], piece["x"], piece["y"], kicks)
    nxt = view.get("next_rotations")

    def value(p: Placement) -> float:
        if not nxt:
            return evaluate(p.board, p.lines)
        later = placements(p.board, nxt, 0, int(view["next_x"]), 0, kicks)
        if not later:
            return evaluate(p.board, p.lines) - 100
        return max(evaluate(q.board, p.lines + q.lines) for q in later)

    return max(options, key=lambda p: (value(p), -len(p.keys)))


NAMES = {
    "ArrowUp": "turn it (ArrowUp)",
    "ArrowLeft": "move it left",
    "ArrowRight": "move it right",
    " ": "drop it (Space)",
}


def _columns(cells: Cells, x: int) -> str:
    cols = sorted({x + c[0] + 1 for c in cells})
    return f"column {cols[0]}" if len(cols) == 1 else f"columns {cols[0]}-{cols[-1]}"


@register_oracle("games/stacker")
def stacker(ctx: OracleContext) -> Iterator[A.Action]:
    """Choose each piece's place when it appears; turn, move and drop it there one key at a time."""
    target: Placement | None = None
    landed = -1
    keys_for_piece = 0
    while True:
        state = ctx.env.call("game_state")
        view = state["view"]
        if state["over"] or view is None or view["piece"] is None:
            return
        piece = view["piece"]
        if view["landed"] != landed:
            landed, keys_for_piece = view["landed"], 0
            target = best(view)
        assert target is not None
        keys_for_piece += 1
        cells = view["rotations"][target.rot]
        goal = _columns(cells, target.x)
        if target.lines:
            goal += f", clearing {target.lines} row{'s' if target.lines > 1 else ''}"
        if piece["rot"] != target.rot and keys_for_piece <= len(target.keys) + 4:
            key, why = "ArrowUp", "it needs another turn to fit there"
        elif piece["x"] != target.x and keys_for_piece <= len(target.keys) + 6:
            key = "ArrowLeft" if piece["x"] > target.x else "ArrowRight"
            why = f"it is at {_columns(view['rotations'][piece['rot']], piece['x'])} now"
        else:
            key, why = " ", "it is above its place"
        yield said(
            ctx,
            f"The falling piece is {'an' if piece['type'] in 'IOSL' else 'a'} {piece['type']}; it fits best "
            f"at {goal}; {why}, so I {NAMES[key]}.",
            A.Press(key=key),
        )
