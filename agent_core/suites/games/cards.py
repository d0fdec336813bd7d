"""Cards (html/cards.js): Elevens, a patience game on a 3×3 table of face-up cards.

The reference player plays the page's own rule (the one every deal is shuffled to be clearable by):
take a jack, a queen and a king if the table has all three, else the first pair by place (top left to
bottom right) whose values add up to 11. It clicks the set's cards one a step and reads only the table
(the face-up cards), never the deck.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from agent_core import actions as A
from agent_core.policies.base import PolicyError
from agent_core.suites.games import GameInfo
from agent_core.tasks.oracles import OracleContext, register_oracle, said

STEP_MS = 500.0
"""Game time an action takes: 500 ms (five ticks; the game's pace and its baseline were set with it)."""
INFO = GameInfo(
    name="cards",
    title="Elevens",
    instruction=(
        "Play Elevens: nine cards lie face up. Click two cards whose values add up to 11 (an ace counts "
        "1), or a jack, a queen and a king, to clear them; the deck fills their places. A choice that "
        "cannot make such a set costs a point; clicking a chosen card again un-chooses it. The deck has "
        "26 cards. Score: cards cleared minus wrong choices."
    ),
    target=26,
    baseline=0,
    max_steps=40,
    step_ms=STEP_MS,
    tags=("puzzle", "mouse", "cards"),
)

Table = Sequence[Mapping[str, Any] | None]


class NoSet(PolicyError):
    """The table holds no set (the page ends the game then; the player should not be asked)."""


def rule_set(table: Table) -> list[int]:
    """The places of the set the rule takes: jack-queen-king, else the first pair adding up to 11."""

    def at(rank: int) -> int:
        return next((i for i, c in enumerate(table) if c is not None and c["rank"] == rank), -1)

    faces = [at(11), at(12), at(13)]
    if min(faces) >= 0:
        return faces
    numbers = [(i, int(c["rank"])) for i, c in enumerate(table) if c is not None and c["rank"] <= 10]
    for i, a in numbers:
        for j, b in numbers:
            if j > i and a + b == 11:
                return [i, j]
    raise NoSet("no two cards add up to 11 and no jack, queen and king lie on the table")


@register_oracle("games/cards")
def cards(ctx: OracleContext) -> Iterator[A.Action]:
    """Click the rule's set, card by card."""
    while True:
        state = ctx.env.call("game_state")
        view = state["view"]
        if state["over"] or view is None:
            return
        table: Table = view["table"]
        chosen: list[int] = list(view["chosen"])
        chosen_set = rule_set(table)
        if any(i not in chosen_set for i in chosen):  # a choice the rule would not make: take it back
            i = next(i for i in chosen if i not in chosen_set)
            card = table[i]
            assert card is not None
            yield said(ctx, f"{card['name']} is chosen but is not part of a set here; I click it again to "
                       "un-choose it.", A.Click(x=int(card["x"]), y=int(card["y"])))  # fmt: skip
            continue
        names = {i: str(c["name"]) for i, c in enumerate(table) if c is not None}
        i = next(i for i in chosen_set if i not in chosen)
        card = table[i]
        assert card is not None
        if len(chosen_set) == 3:
            what = "a jack, a queen and a king make a set"
        else:
            what = f"{names[chosen_set[0]]} and {names[chosen_set[1]]} add up to 11"
        if not chosen:
            on_table = ", ".join(names.values())
            thought = f"On the table: {on_table}. {what[0].upper() + what[1:]}, so I choose {names[i]}."
        else:
            have = ", ".join(names[j] for j in chosen)
            thought = f"{have} chosen; {what}, so I choose {names[i]} next."
        yield said(ctx, thought, A.Click(x=int(card["x"]), y=int(card["y"])))
