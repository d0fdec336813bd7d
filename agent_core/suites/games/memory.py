"""Memory: the reference player plays with a perfect memory of the cards it has seen turned over.

It reads the privileged view for the faces but only ever uses the faces of cards that have been
face up before (the view's `seen`), as a player with a perfect memory would: a known pair is taken
at once; otherwise it turns an unseen card, and then its partner if that was seen, else another
unseen card. Eight pairs take at most 16 turns (32 clicks) that way, within the 18 allowed.
"""

from __future__ import annotations

from typing import Any

from agent_core import actions as A
from agent_core.suites.games import GameInfo
from agent_core.suites.games.play import ACTION_CAP, Actions, cell_name, game_state
from agent_core.tasks.oracles import OracleContext, register_oracle, said

INFO = GameInfo(
    name="memory",
    title="Memory",
    instruction=(
        "Play Memory: sixteen cards lie face down, eight pairs of letters. Click a card to turn it "
        "over, then a second one; if they match they stay up and score a point, if not they stay up "
        "until your next click turns them back down. Remember what you saw. You have 18 turns (a turn "
        "is two cards); find as many pairs as you can."
    ),
    target=8,
    baseline=1,
    max_steps=50,
    step_ms=300,
    tags=("puzzle", "turn-based", "mouse", "memory"),
)


def _click(view: dict[str, Any], i: int) -> A.Click:
    n, cell = int(view["grid"]), int(view["cell"])
    return A.Click(x=(i % n) * cell + cell // 2, y=(i // n) * cell + cell // 2)


def _where(view: dict[str, Any], i: int) -> str:
    n = int(view["grid"])
    return cell_name(i % n, i // n)


@register_oracle("games/memory")
def play(ctx: OracleContext) -> Actions:
    """Take known pairs, else turn an unseen card and match it from memory if its partner was seen."""
    for _ in range(ACTION_CAP):
        state = game_state(ctx, "memory")
        if state["over"]:
            return
        view = state["view"]
        faces, matched, seen = view["faces"], view["matched"], view["seen"]
        up = [int(i) for i in view["up"]] if len(view["up"]) == 1 else []
        known: dict[str, list[int]] = {}
        for i, face in enumerate(faces):
            if seen[i] and not matched[i]:
                known.setdefault(face, []).append(i)
        unseen = [i for i, s in enumerate(seen) if not s]
        if up:
            first = up[0]
            partner = [i for i in known.get(faces[first], []) if i != first]
            if partner:
                i = partner[0]
                thought = (
                    f"The card I turned at {_where(view, first)} is {faces[first]}, and I saw the other "
                    f"{faces[first]} at {_where(view, i)}: I turn that one to make the pair."
                )
            else:
                i = unseen[0]
                thought = (
                    f"The card at {_where(view, first)} is {faces[first]}, and I have not seen its partner "
                    f"yet: I try a card I have not seen, at {_where(view, i)}."
                )
        else:
            pairs = [cards for cards in known.values() if len(cards) == 2]
            if pairs:
                i = pairs[0][0]
                thought = (
                    f"I remember both {faces[i]} cards, at {_where(view, pairs[0][0])} and "
                    f"{_where(view, pairs[0][1])}: I turn the first of them."
                )
            else:
                i = unseen[0]
                thought = (
                    f"No pair I have seen is complete yet, so I turn a new card, at {_where(view, i)} "
                    f"({len(unseen)} cards still unseen)."
                )
        yield said(ctx, thought, _click(view, i))
