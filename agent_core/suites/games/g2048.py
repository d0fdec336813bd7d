"""2048 (module g2048: a module name cannot start with a digit): the reference player keeps its
biggest tile in a corner and, two moves ahead, picks the move that merges most and leaves most room.

The game is turn-based (a move applies at once, the new tile drawn from the seeded generator), and
ends after 60 moves or when no move is left; the score is the classic sum of the merged tiles.
"""

from __future__ import annotations

from agent_core import actions as A
from agent_core.suites.games import GameInfo
from agent_core.suites.games.play import ACTION_CAP, ARROWS, Actions, game_state
from agent_core.tasks.oracles import OracleContext, register_oracle, said

INFO = GameInfo(
    name="2048",
    title="2048",
    instruction=(
        "Play 2048: press an arrow key to slide every tile that way; two tiles with the same number "
        "that meet merge into one with their sum, and that sum is added to your score. A new tile "
        "appears after every move. You have 60 moves; score as many points as you can."
    ),
    target=300,
    baseline=100,
    max_steps=60,
    step_ms=100,
    tags=("puzzle", "turn-based", "keyboard"),
)

Board = tuple[tuple[int, ...], ...]
ORDER = ("left", "up", "right", "down")  # ties go to the moves that keep tiles in the top-left corner


def _slide(line: list[int]) -> tuple[list[int], int]:
    tiles = [v for v in line if v]
    out: list[int] = []
    points, i = 0, 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(tiles[i] * 2)
            points += tiles[i] * 2
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (len(line) - len(out)), points


def move(board: Board, key: str) -> tuple[Board, int]:
    """The board after sliding toward `key` (no new tile) and the points it scores (as the page does)."""
    n = len(board)
    dx, dy = ARROWS[key]
    grid = [list(r) for r in board]
    points = 0
    for i in range(n):
        if dx == -1:
            cells = [(j, i) for j in range(n)]
        elif dx == 1:
            cells = [(n - 1 - j, i) for j in range(n)]
        elif dy == -1:
            cells = [(i, j) for j in range(n)]
        else:
            cells = [(i, n - 1 - j) for j in range(n)]
        line, p = _slide([board[y][x] for x, y in cells])
        for (x, y), v in zip(cells, line, strict=True):
            grid[y][x] = v
        points += p
    return tuple(tuple(r) for r in grid), points


def _shape(board: Board) -> float:
    """How promising a board is: room to move, and the biggest tiles lined up in the top-left corner."""
    empty = sum(v == 0 for r in board for v in r)
    biggest = max(v for r in board for v in r)
    corner = biggest if board[0][0] == biggest else 0
    row = board[0]
    ordered = sum(min(a, b) for a, b in zip(row, row[1:], strict=False) if a >= b)
    return 12.0 * empty + 0.5 * corner + 0.25 * ordered


def _value(board: Board, depth: int) -> float:
    best = None
    for key in ORDER:
        nxt, points = move(board, key)
        if nxt == board:
            continue
        v = points + (_value(nxt, depth - 1) if depth > 1 else _shape(nxt))
        best = v if best is None or v > best else best
    return _shape(board) - 50.0 if best is None else best


def choose(board: Board) -> tuple[str, int, int] | None:
    """The move to make (key, points it scores now, empty cells after it), or None if none moves."""
    best: tuple[float, str, int, Board] | None = None
    for key in ORDER:
        nxt, points = move(board, key)
        if nxt == board:
            continue
        v = points + _value(nxt, 1)
        if best is None or v > best[0]:
            best = (v, key, points, nxt)
    if best is None:
        return None
    return best[1], best[2], sum(v == 0 for r in best[3] for v in r)


@register_oracle("games/2048")
def play(ctx: OracleContext) -> Actions:
    """Slide toward the move that scores most now and next, keeping the big tiles in the corner."""
    for _ in range(ACTION_CAP):
        state = game_state(ctx, "2048")
        if state["over"]:
            return
        board: Board = tuple(tuple(int(v) for v in r) for r in state["view"]["board"])
        picked = choose(board)
        if picked is None:
            return
        key, points, empty = picked
        biggest = max(v for r in board for v in r)
        merge = f"merges tiles for {points} points" if points else "merges nothing yet but lines tiles up"
        thought = (
            f"My biggest tile is {biggest}. Sliding {key} {merge} and leaves {empty} empty cells, the best "
            f"of the moves I looked at two ahead, so I press {key}."
        )
        yield said(ctx, thought, A.Press(key=key))
