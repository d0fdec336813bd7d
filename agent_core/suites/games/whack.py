"""Whack (html/whack.js): click the moles while they are out; a click that whacks nothing costs a point.

The reference player clicks the mole that will hide soonest, at the centre of its hole; when no mole is
out it waits until the next one comes up (the privileged view knows when: the schedule is the seed's).
"""

from __future__ import annotations

from collections.abc import Iterator

from agent_core import actions as A
from agent_core.suites.games import GameInfo, started_tick_ms
from agent_core.tasks.oracles import OracleContext, register_oracle, said

TICK_MS = 100.0
STEP_MS = 500.0
"""Game time an action takes: 500 ms (five ticks; a mole stays up for a few actions, not one)."""
INFO = GameInfo(
    name="whack",
    title="Whack-a-mole",
    instruction=(
        "Whack the moles: click a mole while it is out of its hole (+1 point); it hides again after a "
        "moment. A click that hits no mole costs a point. Twelve moles come. Score: moles whacked minus "
        "missed clicks."
    ),
    target=12,
    baseline=0,
    max_steps=40,
    step_ms=STEP_MS,
    tags=("timing", "mouse"),
)

HOLE_NAMES = ("top left", "top middle", "top right", "middle left", "centre", "middle right", "bottom left",
              "bottom middle", "bottom right")  # fmt: skip


@register_oracle("games/whack")
def whack(ctx: OracleContext) -> Iterator[A.Action]:
    """Whack the mole hiding soonest; wait for the next when none is out."""
    tick = started_tick_ms(ctx, TICK_MS)
    while True:
        state = ctx.env.call("game_state")
        view = state["view"]
        if state["over"] or view is None:
            return
        out = sorted(view["out"], key=lambda m: (m["hides_in"], m["hole"]))
        if out:
            mole = out[0]
            others = f" ({len(out) - 1} more out)" if len(out) > 1 else ""
            yield said(
                ctx,
                f"A mole is out of the {HOLE_NAMES[mole['hole']]} hole{others}; I whack it before it hides.",
                A.Click(x=int(mole["x"]), y=int(mole["y"])),
            )
        elif view["next_in"] is not None:
            ticks = int(view["next_in"])
            yield said(
                ctx,
                f"No mole is out and {view['still_to_come']} are still to come; clicking an empty hole would "
                "cost a point, so I wait for the next one.",
                A.Wait(seconds=round(ticks * tick / 1000, 3)),
            )
        else:
            return
