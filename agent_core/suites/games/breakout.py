"""Breakout: the reference player works out where the ball will come down and puts the paddle there.

The page's physics is in whole pixels a tick (html/breakout.js), so the player simulates it exactly
from the privileged view: the ball's flight, the walls and the bricks it will break on the way, up to
the tick its bottom reaches the paddle's line. It then presses an arrow key (each press slides the
paddle 50 px and lets 0.1 s of game time pass) until the paddle's centre is within 40 px of that
point, and waits until the ball has bounced off it. A round costs a wait and a press or two, so the
40 actions the suite allows keep about fifteen balls in play (13 to 15 bricks on seeds 1..5).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_core import actions as A
from agent_core.suites.games import GameInfo
from agent_core.suites.games.play import ACTION_CAP, Actions, GameOracleFailed, game_state
from agent_core.tasks.oracles import OracleContext, register_oracle, said

TICK_MS = 25
STEP_MS = 100
REACH = 40
"""How far from the paddle's centre the player lets the ball land (the paddle takes it up to 44 px)."""
MAX_FLIGHT = 20_000
"""Ticks the player simulates ahead at most (a ball bouncing above the bricks can stay up a while)."""

INFO = GameInfo(
    name="breakout",
    title="Breakout",
    instruction=(
        "Play Breakout: move the paddle at the bottom with the Left and Right arrow keys (each press slides "
        "it a little more than half its width) to keep the ball in play, and break the coloured bricks "
        "with it: each brick scores a point. Where the ball meets the paddle sets its angle. Missing the "
        "ball costs a life; you have 3, and the game lasts 60 seconds of game time. Every action lets "
        "0.1 s pass; waiting lets the ball fly on."
    ),
    target=12,
    baseline=1,
    max_steps=60,
    step_ms=STEP_MS,
    tags=("arcade", "realtime", "keyboard"),
)


@dataclass(frozen=True)
class Board:
    """The page's constants, as its view reports them."""

    width: int
    cols: int
    rows: int
    brick_w: int
    brick_h: int
    top: int
    r: int
    paddle_w: int
    paddle_y: int
    step: int

    @classmethod
    def of(cls, view: Mapping[str, Any]) -> Board:
        return cls(**{f: int(view[f]) for f in cls.__dataclass_fields__})

    def hits(self, x: int, y: int) -> list[int]:
        """The brick slots a ball box centred at (x, y) overlaps (as the page's `hits`)."""
        r, bw, bh = self.r, self.brick_w, self.brick_h
        c0, c1 = (x - r) // bw, (x + r - 1) // bw
        r0, r1 = (y - r - self.top) // bh, (y + r - 1 - self.top) // bh
        return [
            row * self.cols + col
            for row in range(max(r0, 0), min(r1, self.rows - 1) + 1)
            for col in range(max(c0, 0), min(c1, self.cols - 1) + 1)
        ]


@dataclass(frozen=True)
class Flight:
    """Where the ball will meet the paddle's line: after `ticks` more ticks, at x, breaking `broken`."""

    ticks: int
    x: int
    broken: tuple[int, ...]


def flight(board: Board, bricks: list[int], ball: Mapping[str, Any]) -> Flight | None:
    """Simulate the ball tick by tick (as the page does) until its bottom would cross the paddle's top.

    None when it never will (it is already below the paddle, or stays up longer than MAX_FLIGHT)."""
    alive = [bool(b) for b in bricks]
    x, y, vx, vy = (int(ball[k]) for k in ("x", "y", "vx", "vy"))
    r, py = board.r, board.paddle_y
    broken: list[int] = []

    def breaks(bx: int, by: int) -> bool:
        live = [i for i in board.hits(bx, by) if alive[i]]
        for i in live:
            alive[i] = False
            broken.append(i)
        return bool(live)

    if y + r > py:
        return None
    for t in range(MAX_FLIGHT):
        ny = y + vy
        if vy > 0 and y + r <= py < ny + r:
            return Flight(ticks=t, x=x, broken=tuple(broken))
        if ny - r < 0 or breaks(x, ny):
            vy = -vy
        else:
            y = ny
        nx = x + vx
        if nx - r < 0 or nx + r > board.width or breaks(nx, y):
            vx = -vx
        else:
            x = nx
    return None


def paddle_goal(board: Board, paddle_x: int, land: int) -> int:
    """The spot the presses reach, nearest the paddle, from which it takes a ball landing at `land`."""
    half = board.paddle_w // 2
    lo, hi = half, board.width - half
    options, pos = [], paddle_x
    while True:  # every spot the left presses reach, then every spot the right presses reach
        options.append(pos)
        if pos == lo:
            break
        pos = max(lo, pos - board.step)
    pos = paddle_x
    while pos != hi:
        pos = min(hi, pos + board.step)
        options.append(pos)
    good = [p for p in options if abs(land - p) <= REACH]
    if not good:
        raise GameOracleFailed(f"no paddle spot within {REACH} px of x={land} from {paddle_x}")
    return min(good, key=lambda p: (abs(p - paddle_x), abs(land - p)))


def _bricks_said(board: Board, broken: tuple[int, ...]) -> str:
    if not broken:
        return ""
    names = [f"row {i // board.cols + 1}, column {i % board.cols + 1}" for i in broken[:3]]
    more = f" and {len(broken) - 3} more" if len(broken) > 3 else ""
    return f" after breaking the brick{'s' if len(broken) > 1 else ''} at {'; '.join(names)}{more}"


@register_oracle("games/breakout")
def play(ctx: OracleContext) -> Actions:
    """Predict the ball's landing spot, slide the paddle under it, wait for the bounce; again."""
    for _ in range(ACTION_CAP):
        state = game_state(ctx, "breakout")
        if state["over"]:
            return
        view = state["view"]
        board = Board.of(view)
        ball, px = view["ball"], int(view["paddle_x"])
        where = f"The ball is at x={int(ball['x'])}, y={int(ball['y'])}, moving {_heading(ball)}"
        fl = flight(board, list(view["bricks"]), ball)
        if fl is None:
            thought = f"{where}, past the paddle: it is lost. I wait for the next serve."
            yield said(ctx, thought, A.Wait(seconds=0.5))
            continue
        when = fl.ticks * TICK_MS / 1000
        comes = f"it will come down at x={fl.x}{_bricks_said(board, fl.broken)}, in {when:.2f} s"
        goal = paddle_goal(board, px, fl.x)
        if goal != px:
            key = "left" if goal < px else "right"
            presses = -(-abs(goal - px) // board.step)
            thought = (
                f"{where}; {comes}. The paddle's centre is at x={px}, too far from there, so I move it "
                f"{key} ({presses} press{'es' if presses > 1 else ''} to x={goal})."
            )
            yield said(ctx, thought, A.Press(key=key))
            continue
        # Wait until the bounce has happened (one tick more, so the next look sees it going up).
        seconds = round((fl.ticks + 1) * TICK_MS / 1000, 3)
        thought = (
            f"{where}; {comes}. The paddle's centre at x={px} is within {abs(fl.x - px)} px of that, so it "
            f"will take the ball: I wait {seconds:.2f} s for the bounce."
        )
        yield said(ctx, thought, A.Wait(seconds=seconds))


def _heading(ball: Mapping[str, Any]) -> str:
    up = "up" if int(ball["vy"]) < 0 else "down"
    side = "right" if int(ball["vx"]) > 0 else "left"
    return f"{up} and to the {side}"
