"""Flappy (html/flappy.js): tap to flap the bird through the gaps of five pipes.

The reference player simulates the page's physics exactly (whole pixels a tick: a flap sets the
vertical speed, gravity adds to it each tick, the pipes move left) from the privileged view, and plans
the flight with the fewest flaps that passes every pipe a margin inside its gap: a breadth-first search
over (height, speed) states tick by tick. It then either flaps now or waits until the plan's next flap.
The plan is kept while the bird is where the plan said it would be and made again when it is not.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from agent_core import actions as A
from agent_core.policies.base import PolicyError
from agent_core.suites.games import GameInfo
from agent_core.tasks.oracles import OracleContext, register_oracle, said

TICK_MS = 100.0
FLAP = A.Press(key=" ")
MARGIN = 8
"""Pixels the planned flight keeps from a pipe's edges (room for a tick of difference)."""

INFO = GameInfo(
    name="flappy",
    title="Flappy",
    instruction=(
        "Fly the bird through the gaps between the pipes. Press Space (or ArrowUp, or click) to flap: the "
        "bird jumps up, then falls until the next flap. Touching a pipe, the ground or the top of the sky "
        "ends the flight. Score: pipes passed (5 in all)."
    ),
    target=5,
    baseline=0,
    max_steps=40,
    step_ms=TICK_MS,
    tags=("timing", "keyboard"),
)


class FlappyPlanFailed(PolicyError):
    """No flight from the bird's state passes every pipe (the bird is already doomed)."""


@dataclass(frozen=True)
class Physics:
    """The page's constants, as its view reports them."""

    bx: int
    r: int
    ground: int
    gravity: int
    flap: int
    vmax: int
    speed: int
    pipe_w: int

    @classmethod
    def of(cls, view: Mapping[str, Any]) -> Physics:
        bird = view["bird"]
        return cls(
            bx=int(bird["x"]),
            r=int(bird["r"]),
            ground=int(view["ground"]),
            gravity=int(view["gravity"]),
            flap=int(view["flap"]),
            vmax=int(view["vmax"]),
            speed=int(view["speed"]),
            pipe_w=int(view["pipe_width"]),
        )


@dataclass(frozen=True)
class Plan:
    """From tick `start`: the bird's (y, vy) after each tick (`path[k]`: after tick start+k+1), the flaps."""

    start: int
    path: tuple[tuple[int, int], ...]
    flaps: tuple[int, ...]
    """Offsets k: flap just before tick start+k+1 runs (i.e. when k ticks of the plan have passed)."""


def _safe(ph: Physics, y: int, pipes: list[tuple[int, int, int]], k: int, margin: int) -> bool:
    """Whether the bird at height y after k more ticks keeps `margin` from the sky, ground and pipes."""
    if y + ph.r >= ph.ground - margin // 2 or y - ph.r <= margin:
        return False
    for x0, top, bottom in pipes:
        x = x0 - ph.speed * k
        beside = x - margin < ph.bx + ph.r and x + ph.pipe_w + margin > ph.bx - ph.r
        if beside and (y - ph.r < top + margin or y + ph.r > bottom - margin):
            return False
    return True


def plan(view: Mapping[str, Any], tick: int, *, margin: int = MARGIN) -> Plan:
    """The flight with the fewest flaps from the bird's state that passes every pipe still ahead."""
    ph = Physics.of(view)
    pipes = [(int(p["x"]), int(p["top"]), int(p["bottom"])) for p in view["pipes"] if not p["passed"]]
    if not pipes:
        return Plan(start=tick, path=(), flaps=())
    # ticks until the last pipe's right edge is behind the bird (then it counts as passed)
    horizon = max((x + ph.pipe_w - (ph.bx - ph.r)) // ph.speed + 1 for x, _, _ in pipes)
    start = (int(view["bird"]["y"]), int(view["bird"]["vy"]))
    layers: list[dict[tuple[int, int], tuple[int, tuple[int, int], bool]]] = []
    frontier: dict[tuple[int, int], int] = {start: 0}
    for k in range(1, horizon + 1):
        layer: dict[tuple[int, int], tuple[int, tuple[int, int], bool]] = {}
        for (y, vy), cost in frontier.items():
            for flap in (False, True):
                v = min((ph.flap if flap else vy) + ph.gravity, ph.vmax)
                state = (y + v, v)
                c = cost + flap
                if not _safe(ph, state[0], pipes, k, margin):
                    continue
                if state not in layer or layer[state][0] > c:
                    layer[state] = (c, (y, vy), flap)
        if not layer:
            raise FlappyPlanFailed(f"no safe flight from y={start[0]}, vy={start[1]} past the pipes")
        layers.append(layer)
        frontier = {s: v[0] for s, v in layer.items()}
    end = min(frontier, key=lambda s: (frontier[s], abs(s[1])))
    path: list[tuple[int, int]] = []
    flaps: list[int] = []
    state = end
    for k in range(len(layers) - 1, -1, -1):
        path.append(state)
        _, parent, flapped = layers[k][state]
        if flapped:
            flaps.append(k)
        state = parent
    return Plan(start=tick, path=tuple(reversed(path)), flaps=tuple(sorted(flaps)))


def _next_pipe(view: Mapping[str, Any]) -> Mapping[str, Any] | None:
    ahead = [p for p in view["pipes"] if not p["passed"]]
    return min(ahead, key=lambda p: p["x"]) if ahead else None


def _where(view: Mapping[str, Any]) -> str:
    bird = view["bird"]
    going = "rising" if bird["vy"] < 0 else "falling" if bird["vy"] > 0 else "level"
    pipe = _next_pipe(view)
    where = f"The bird is at y={bird['y']}, {going}"
    if pipe is None:
        return where + ", and every pipe is behind it"
    dx = int(pipe["x"]) - (int(bird["x"]) + int(bird["r"]))
    ahead = f"{dx} px ahead" if dx > 0 else "around it"
    return where + f"; the next pipe's gap spans y={pipe['top']} to y={pipe['bottom']}, {ahead}"


@register_oracle("games/flappy")
def flappy(ctx: OracleContext) -> Iterator[A.Action]:
    """Flap on the planned ticks, wait between them."""
    tick_ms = float(ctx.setup.get("start", {}).get("tick_ms", TICK_MS)) if ctx.setup else TICK_MS
    current: Plan | None = None
    while True:
        state = ctx.env.call("game_state")
        view, tick = state["view"], int(state["tick"])
        if state["over"] or view is None:
            return
        here = (int(view["bird"]["y"]), int(view["bird"]["vy"]))
        k = tick - current.start if current is not None else -1
        if current is None or not (k == 0 or 0 < k <= len(current.path) and current.path[k - 1] == here):
            current = plan(view, tick)
            k = 0
        upcoming = [f for f in current.flaps if f >= k]
        if not upcoming:
            wait = len(current.path) - k
            yield said(
                ctx,
                f"{_where(view)}. Without another flap it glides past the last pipe, so I wait.",
                A.Wait(seconds=round(max(wait, 1) * tick_ms / 1000, 3)),
            )
            continue
        if upcoming[0] == k:
            yield said(
                ctx, f"{_where(view)}. It must go up now to stay in line with the gap, so I flap.", FLAP
            )
        else:
            ticks = upcoming[0] - k
            yield said(
                ctx,
                f"{_where(view)}. It can fall {ticks * tick_ms / 1000:g} s before it must flap, so I wait.",
                A.Wait(seconds=round(ticks * tick_ms / 1000, 3)),
            )
