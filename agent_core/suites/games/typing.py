"""Typing (html/typing.js): type the falling words before they reach the floor.

The reference player types the word nearest the floor, whole, in one step (a `type` action: its
letters in order); when no word is falling it waits until the next one appears (the privileged view
knows when: the schedule is the seed's).
"""

from __future__ import annotations

from collections.abc import Iterator

from agent_core import actions as A
from agent_core.suites.games import GameInfo, started_tick_ms
from agent_core.tasks.oracles import OracleContext, register_oracle, said

TICK_MS = 100.0
INFO = GameInfo(
    name="typing",
    title="Typing",
    instruction=(
        "Type the falling words before they reach the red floor: type a word's letters in order and it "
        "clears (what you have typed shows at the bottom; Backspace takes back a letter). Twelve words "
        "fall. Score: words cleared."
    ),
    target=12,
    baseline=0,
    max_steps=40,
    step_ms=TICK_MS,
    tags=("timing", "keyboard", "typing"),
)


@register_oracle("games/typing")
def typing(ctx: OracleContext) -> Iterator[A.Action]:
    """Type the lowest falling word; wait for the next when none falls."""
    tick = started_tick_ms(ctx, TICK_MS)
    while True:
        state = ctx.env.call("game_state")
        view = state["view"]
        if state["over"] or view is None:
            return
        falling = sorted(view["falling"], key=lambda w: (-w["y"], w["x"]))
        if falling:
            word = falling[0]
            others = [w["text"] for w in falling[1:]]
            also = f" (also falling: {', '.join(others)})" if others else ""
            typed = str(view["typed"])
            if typed and not word["text"].startswith(typed):
                yield said(
                    ctx,
                    f'"{typed}" is typed already, which does not begin "{word["text"]}", the word nearest '
                    "the floor; I clear it with Escape first.",
                    A.Press(key="Escape"),
                )
                continue
            yield said(
                ctx,
                f'"{word["text"]}" is the word nearest the floor{also}; I type it before it lands.',
                A.Type(content=word["text"][len(typed) :]),
            )
        elif view["next_in"] is not None:
            yield said(
                ctx,
                f"No word is falling yet and {view['still_to_come']} are still to come, so I wait for one.",
                A.Wait(seconds=round(int(view["next_in"]) * tick / 1000, 3)),
            )
        else:
            return
