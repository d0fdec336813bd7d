"""Breakout's and Minesweeper's reference players without a browser: the ball's flight, where the paddle
goes, and what the numbers prove (the real games are played in tests/sandbox_workers/test_games_real.py)."""

from __future__ import annotations

from typing import Any

import pytest

from agent_core import actions as A
from agent_core.suites.games import breakout, minesweeper
from agent_core.suites.games.play import GameOracleFailed
from agent_core.tasks.oracles import OracleContext, get_oracle
from tests.agent_core.fakes import FakeEnv

BOARD = {
    "width": 400, "cols": 8, "rows": 5, "brick_w": 50, "brick_h": 16, "top": 40, "r": 5,
    "paddle_w": 80, "paddle_y": 370, "step": 50,
}  # fmt: skip


class GameEnv(FakeEnv):
    """Answers game_state from a given state."""

    platform = "browser"

    def __init__(self, state: dict[str, Any]) -> None:
        super().__init__()
        self.state = state

    def call(self, method: str, **params: Any) -> Any:
        assert method == "game_state"
        return self.state


def _ctx(game: str, view: dict[str, Any]) -> OracleContext:
    state = {"game": game, "over": False, "score": 0, "tick": 0, "view": view, "inputs": []}
    return OracleContext(env=GameEnv(state), params={}, setup={}, instruction="play")  # type: ignore[arg-type]


def test_breakout_flight_bounces_off_a_wall_and_a_brick() -> None:
    board = breakout.Board.of(BOARD)
    # Straight down from y=150: (365 - 150) / 5 = 43 ticks to the paddle's line, x unchanged.
    down = breakout.flight(board, [1] * 40, {"x": 200, "y": 150, "vx": 0, "vy": 5})
    assert down == breakout.Flight(ticks=43, x=200, broken=())
    # Down and right from x=390: the right wall turns it back after one step.
    wall = breakout.flight(board, [1] * 40, {"x": 390, "y": 150, "vx": 2, "vy": 5})
    assert wall is not None and wall.ticks == 43 and wall.x == 390 + 2 * 2 - 2 * 40
    # Straight up from the paddle: it breaks the bottom brick of column 5 (index 36) and comes back.
    up = breakout.flight(board, [1] * 40, {"x": 225, "y": 365, "vx": 0, "vy": -5})
    assert up is not None and up.broken == (36,) and up.x == 225
    assert breakout.flight(board, [1] * 40, {"x": 225, "y": 380, "vx": 0, "vy": 5}) is None  # already past


def test_breakout_paddle_goes_to_the_nearest_spot_that_takes_the_ball() -> None:
    board = breakout.Board.of(BOARD)
    assert breakout.paddle_goal(board, 200, 230) == 200  # within 40 px: stay
    assert breakout.paddle_goal(board, 200, 330) == 300
    assert breakout.paddle_goal(board, 100, 5) == 40  # the wall stops the paddle at its half width
    with pytest.raises(GameOracleFailed):
        breakout.paddle_goal(board, 200, 1000)


def test_breakout_player_moves_toward_the_landing_spot_and_says_where() -> None:
    view = {**BOARD, "bricks": [1] * 40, "paddle_x": 200, "ball": {"x": 100, "y": 150, "vx": 0, "vy": 5}}
    ctx = _ctx("breakout", view)
    assert next(get_oracle("games/breakout")(ctx)) == A.Press(key="left")
    assert "come down at x=100" in ctx.thought and "x=200" in ctx.thought
    view["paddle_x"] = 100
    ctx = _ctx("breakout", view)
    assert next(breakout.play(ctx)) == A.Wait(seconds=1.1)  # 43 ticks and one more, of 25 ms each
    assert "wait" in ctx.thought


def _grid(rows: list[str]) -> dict[tuple[int, int], int]:
    """Open cells' numbers from a picture: digits open, '.' hidden."""
    return {(x, y): int(ch) for y, row in enumerate(rows) for x, ch in enumerate(row) if ch.isdigit()}


def test_minesweeper_single_numbers_prove_mines_and_safe_cells() -> None:
    # Three open 1s in the top-left corner of a 3x3 field: the corner's 1 has one hidden neighbour,
    # (column 2, row 2): a mine; that mine is the other two 1s' mine too, so the rest is safe.
    counts = {(0, 0): 1, (1, 0): 1, (0, 1): 1}
    found = minesweeper.deduce(3, counts)
    assert set(found.mines) == {(1, 1)}
    assert set(found.safe) == {(2, 0), (2, 1), (0, 2), (1, 2)}
    assert "the 1 at column 2, row 1 already has its mine at column 2, row 2" in found.safe[(2, 0)]
    assert minesweeper.deduce(3, {(0, 0): 1}).safe == {}  # one number, three cells: nothing certain


def test_minesweeper_nested_numbers_settle_the_difference() -> None:
    # The classic 1-2-2-1 under a hidden row: the mines are above the 2s, the corners are safe.
    counts = _grid(["....", "1221", "0000", "0000"])
    found = minesweeper.deduce(4, counts)
    assert set(found.mines) == {(1, 0), (2, 0)} and set(found.safe) == {(0, 0), (3, 0)}


def test_minesweeper_player_opens_a_proven_cell_and_guesses_only_when_stuck() -> None:
    n = 8
    view = {"grid": n, "cell": 50, "mine_count": 10, "laid": False, "mines": [], "open": [False] * 64,
            "counts": [-1] * 64}  # fmt: skip
    ctx = _ctx("minesweeper", view)
    assert next(get_oracle("games/minesweeper")(ctx)) == A.Click(x=175, y=175)
    assert "first click is always safe" in ctx.thought
    # One open 1 at the top-left corner: three hidden neighbours, nothing certain: a guess, never a mine.
    mines = [[1, 0], [7, 7], [6, 7], [5, 7], [4, 7], [3, 7], [2, 7], [1, 7], [0, 7], [7, 6]]
    opened = [i == 0 for i in range(64)]
    counts = [1 if i == 0 else -1 for i in range(64)]
    view = {**view, "laid": True, "mines": mines, "open": opened, "counts": counts}
    ctx = _ctx("minesweeper", view)
    click = next(minesweeper.play(ctx))
    assert isinstance(click, A.Click) and [click.x // 50, click.y // 50] not in mines
    assert "No hidden cell is certain" in ctx.thought
