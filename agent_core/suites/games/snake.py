"""Snake: the reference player steers along a shortest safe path to the apple.

The grid is 10×10 cells of 40 px; one tick (100 ms of game time) moves the snake one cell, and every
action costs one tick. A key press turns the snake and moves it one cell; a wait of k ticks carries it
k cells straight on. So the player plans a breadth-first path around its own body and spends one
action per straight stretch: a turn, then a wait as long as the stretch.
"""

from __future__ import annotations

from collections import deque

from agent_core import actions as A
from agent_core.suites.games import GameInfo
from agent_core.suites.games.play import ACTION_CAP, ARROWS, Actions, cell_name, game_state
from agent_core.tasks.oracles import OracleContext, register_oracle, said

TICK_S = 0.1
INFO = GameInfo(
    name="snake",
    title="Snake",
    instruction=(
        "Play Snake: steer the snake with the arrow keys to eat the red apples; each apple scores a "
        "point and makes the snake longer. Do not run into the walls or the snake's own body. The game "
        "ends after 30 seconds of game time; every action you take lets 0.1 s pass, and waiting lets "
        "the snake run straight on. Eat as many apples as you can."
    ),
    target=8,
    baseline=0,
    max_steps=60,
    step_ms=100,
    tags=("arcade", "realtime", "keyboard"),
)

Cell = tuple[int, int]


def _path(n: int, body: list[Cell], start_dir: Cell, goal: Cell) -> list[str] | None:
    """The arrow keys of a shortest path from the head to `goal` that avoids walls and the body.

    A body cell frees up as the tail moves on: the cell k from the end is free after k+1 moves."""
    head = body[0]
    free_after = {cell: len(body) - i for i, cell in enumerate(body)}
    seen = {head}
    queue: deque[tuple[Cell, list[str]]] = deque([(head, [])])
    while queue:
        (x, y), keys = queue.popleft()
        for key, (dx, dy) in ARROWS.items():
            if not keys and (dx, dy) == (-start_dir[0], -start_dir[1]):
                continue
            nxt = (x + dx, y + dy)
            if not (0 <= nxt[0] < n and 0 <= nxt[1] < n) or nxt in seen:
                continue
            if free_after.get(nxt, 0) > len(keys) + 1:
                continue
            if nxt == goal:
                return [*keys, key]
            seen.add(nxt)
            queue.append((nxt, [*keys, key]))
    return None


def _room(n: int, body: list[Cell], cell: Cell) -> int:
    """How many cells the snake could still reach from `cell` (a flood fill around its body)."""
    blocked, seen, todo = set(body[:-1]), {cell}, [cell]
    while todo:
        x, y = todo.pop()
        for dx, dy in ARROWS.values():
            nxt = (x + dx, y + dy)
            if 0 <= nxt[0] < n and 0 <= nxt[1] < n and nxt not in blocked and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return len(seen)


def _direction_key(d: Cell) -> str:
    return next(k for k, v in ARROWS.items() if v == d)


@register_oracle("games/snake")
def play(ctx: OracleContext) -> Actions:
    """Turn onto the next straight stretch of a shortest safe path to the apple, then ride it out."""
    for _ in range(ACTION_CAP):
        state = game_state(ctx, "snake")
        if state["over"]:
            return
        view = state["view"]
        n = int(view["grid"])
        body: list[Cell] = [(int(p[0]), int(p[1])) for p in view["snake"]]
        d: Cell = (int(view["dir"][0]), int(view["dir"][1]))
        heading = _direction_key(d)
        apple = (int(view["apple"][0]), int(view["apple"][1]))
        head = body[0]
        keys = _path(n, body, d, apple)
        where = f"The snake's head is at {cell_name(*head)}, heading {heading}"
        if keys is None:
            # No way to the apple now: go where there is most room, and look again.
            options = []
            for key, (dx, dy) in ARROWS.items():
                nxt = (head[0] + dx, head[1] + dy)
                if (dx, dy) == (-d[0], -d[1]) or not (0 <= nxt[0] < n and 0 <= nxt[1] < n):
                    continue
                if nxt in body[:-1]:
                    continue
                options.append((_room(n, body, nxt), key))
            if not options:
                return
            _, key = max(options)
            thought = (
                f"{where}, and its body cuts it off from the apple at {cell_name(*apple)}: I go {key}, "
                "where there is most room."
            )
            yield said(ctx, thought, A.Wait(seconds=TICK_S) if key == heading else A.Press(key=key))
            continue
        first, run = keys[0], 1
        while run < len(keys) and keys[run] == first:
            run += 1
        target = "the apple" if run == len(keys) else "the next turn"
        if first != heading:
            thought = (
                f"{where}; the apple is at {cell_name(*apple)}. The shortest safe way there starts {run} "
                f"cell{'s' if run > 1 else ''} {first}, so I turn {first}."
            )
            yield said(ctx, thought, A.Press(key=first))
        else:
            thought = (
                f"{where}; the apple is at {cell_name(*apple)}. The way there goes {run} cell"
                f"{'s' if run > 1 else ''} straight on to {target}, so I let it run {run * TICK_S:.1f} s."
            )
            yield said(ctx, thought, A.Wait(seconds=round(run * TICK_S, 3)))
