"""Sokoban: the reference player finds a shortest solution (breadth-first over the player's and the
boxes' places) and plays it move by move, saying which box it is going for and why.

Levels are small (8×8 with two boxes), picked and turned by the seed; every one is solvable well
within the 40 actions a reference player may take. Score: boxes on goals (2 solves the level).
"""

from __future__ import annotations

from collections import deque

from agent_core import actions as A
from agent_core.suites.games import GameInfo
from agent_core.suites.games.play import ACTION_CAP, ARROWS, Actions, GameOracleFailed, cell_name, game_state
from agent_core.tasks.oracles import OracleContext, register_oracle, said

INFO = GameInfo(
    name="sokoban",
    title="Sokoban",
    instruction=(
        "Play Sokoban: you are the blue circle. Walk with the arrow keys and push the orange boxes onto "
        "the red rings (a box turns green on a ring). You can push one box at a time and never pull. "
        "Each box on a ring scores a point; the level is solved when every box is on one."
    ),
    target=2,
    baseline=0,
    max_steps=60,
    step_ms=100,
    tags=("puzzle", "turn-based", "keyboard"),
)

Cell = tuple[int, int]
State = tuple[Cell, frozenset[Cell]]


def _dead(cell: Cell, walls: set[Cell], goals: set[Cell]) -> bool:
    """A box pushed into a corner off the goals can never move again."""
    if cell in goals:
        return False
    x, y = cell
    vertical = (x, y - 1) in walls or (x, y + 1) in walls
    horizontal = (x - 1, y) in walls or (x + 1, y) in walls
    return vertical and horizontal


def solve(walls: set[Cell], goals: set[Cell], boxes: frozenset[Cell], player: Cell) -> list[str] | None:
    """A shortest list of arrow keys that puts every box on a goal, or None."""
    start: State = (player, boxes)
    back: dict[State, tuple[State, str] | None] = {start: None}
    queue: deque[State] = deque([start])
    while queue:
        state = queue.popleft()
        (px, py), bs = state
        if bs <= goals:
            keys: list[str] = []
            step = back[state]
            while step is not None:
                keys.append(step[1])
                step = back[step[0]]
            return keys[::-1]
        for key, (dx, dy) in ARROWS.items():
            nxt = (px + dx, py + dy)
            if nxt in walls:
                continue
            if nxt in bs:
                pushed = (nxt[0] + dx, nxt[1] + dy)
                if pushed in walls or pushed in bs or _dead(pushed, walls, goals):
                    continue
                new: State = (nxt, (bs - {nxt}) | {pushed})
            else:
                new = (nxt, bs)
            if new not in back:
                back[new] = (state, key)
                queue.append(new)
    return None


def _next_push(keys: list[str], player: Cell, boxes: frozenset[Cell]) -> tuple[Cell, str] | None:
    """The box the plan pushes next and the way it pushes it."""
    p, bs = player, set(boxes)
    for key in keys:
        dx, dy = ARROWS[key]
        nxt = (p[0] + dx, p[1] + dy)
        if nxt in bs:
            return nxt, key
        p = nxt
    return None


@register_oracle("games/sokoban")
def play(ctx: OracleContext) -> Actions:
    """Solve the level once, then make each move of the solution, re-planning if the board differs."""
    plan: list[str] = []
    expected: State | None = None
    for _ in range(ACTION_CAP):
        state = game_state(ctx, "sokoban")
        if state["over"]:
            return
        view = state["view"]
        walls = {(int(x), int(y)) for x, y in view["walls"]}
        goals = {(int(x), int(y)) for x, y in view["goals"]}
        boxes = frozenset((int(x), int(y)) for x, y in view["boxes"])
        player = (int(view["player"][0]), int(view["player"][1]))
        if not plan or expected != (player, boxes):
            found = solve(walls, goals, boxes, player)
            if found is None:
                raise GameOracleFailed(f"no solution from {player} with boxes {sorted(boxes)}")
            plan = found
        key = plan.pop(0)
        dx, dy = ARROWS[key]
        ahead = (player[0] + dx, player[1] + dy)
        left = len(plan) + 1
        if ahead in boxes:
            to = (ahead[0] + dx, ahead[1] + dy)
            lands = " onto the ring there" if to in goals else ""
            thought = (
                f"I am at {cell_name(*player)} with the box at {cell_name(*ahead)} right {key} of me. I "
                f"push it {key} to {cell_name(*to)}{lands}; {left - 1} more moves finish the level."
            )
            expected = (ahead, (boxes - {ahead}) | {to})
        else:
            push = _next_push([key, *plan], player, boxes)
            why = (
                f"to get where I can push the box at {cell_name(*push[0])} {push[1]}" if push else "to finish"
            )
            thought = (
                f"I am at {cell_name(*player)}. I walk {key} {why}: the shortest solution I found has "
                f"{left} moves left."
            )
            expected = (ahead, boxes)
        yield said(ctx, thought, A.Press(key=key))
