"""Minesweeper: the reference player opens only cells the numbers prove safe, and guesses when none is.

It reasons from what a player sees (the open cells and their numbers) with the two rules a person
uses: a number whose mines are all found makes its other hidden neighbours safe, and a number with
exactly as many hidden neighbours as missing mines makes them all mines; and, between two numbers
whose hidden cells nest, the difference of what they need settles the cells only the larger one
touches. Its thought names the number that proves the cell safe. The privileged view (where the mines
are) is used only to choose among cells the reasoning rates alike: among proven-safe cells it opens
one that opens an area, and when nothing is proven it guesses, among the cells least likely to hide
a mine by its count, one that is safe (a lucky guess is a guess all the same).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agent_core import actions as A
from agent_core.suites.games import GameInfo
from agent_core.suites.games.play import ACTION_CAP, Actions, GameOracleFailed, cell_name, game_state
from agent_core.tasks.oracles import OracleContext, register_oracle, said

INFO = GameInfo(
    name="minesweeper",
    title="Minesweeper",
    instruction=(
        "Play Minesweeper: the 8 by 8 field hides 10 mines. Click a cell to open it; a number tells how "
        "many of its eight neighbours hide a mine, and a cell with no mine around it opens its neighbours "
        "too. Opening a mine ends the game. Your first click is always safe. You score a point for every "
        "safe cell you open (54 clears the field); you have 40 clicks and two minutes of game time."
    ),
    target=54,
    baseline=20,
    max_steps=50,
    step_ms=300,
    tags=("puzzle", "turn-based", "mouse", "logic"),
)

Cell = tuple[int, int]


def neighbours(n: int, c: Cell) -> list[Cell]:
    """The up to eight cells around `c` on an n×n field."""
    x, y = c
    return [
        (x + dx, y + dy)
        for dy in (-1, 0, 1)
        for dx in (-1, 0, 1)
        if (dx or dy) and 0 <= x + dx < n and 0 <= y + dy < n
    ]


def _cells(cells: Iterable[Cell]) -> str:
    names = [cell_name(*c) for c in sorted(cells, key=lambda c: (c[1], c[0]))]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


@dataclass
class Deductions:
    """What the numbers prove: safe hidden cells and mines, each with the reason in words."""

    safe: dict[Cell, str] = field(default_factory=dict)
    mines: dict[Cell, str] = field(default_factory=dict)


def deduce(n: int, counts: dict[Cell, int]) -> Deductions:
    """Apply the single-number and nested-numbers rules to a fixpoint. `counts`: the open cells' numbers."""
    found = Deductions()
    while True:
        rules: list[tuple[Cell, frozenset[Cell], int]] = []
        for c, k in counts.items():
            hidden = [d for d in neighbours(n, c) if d not in counts]
            unknown = frozenset(d for d in hidden if d not in found.mines and d not in found.safe)
            need = k - sum(1 for d in hidden if d in found.mines)
            if unknown:
                rules.append((c, unknown, need))
        before = (len(found.safe), len(found.mines))
        for c, unknown, need in rules:
            k = counts[c]
            if need == 0:
                known = [d for d in neighbours(n, c) if d in found.mines]
                why = (
                    f"the {k} at {cell_name(*c)} already has its mine{'s' if k > 1 else ''} at "
                    f"{_cells(known)}, so its other hidden neighbours are safe"
                    if known
                    else f"the 0 at {cell_name(*c)} has no mine around it"
                )
                found.safe.update({d: why for d in unknown if d not in found.safe})
            elif need == len(unknown):
                many = f"{need} hidden neighbour{'s' if need > 1 else ''}"
                why = f"the {k} at {cell_name(*c)} has just {many} left for its mines"
                found.mines.update({d: why for d in unknown if d not in found.mines})
        if (len(found.safe), len(found.mines)) == before:
            for a, ua, na in rules:
                for b, ub, nb in rules:
                    if a == b or not ua < ub:
                        continue
                    rest = ub - ua
                    why = (
                        f"the {counts[a]} at {cell_name(*a)} needs {na} more mine{'s' if na != 1 else ''} "
                        f"among {_cells(ua)}, which all touch the {counts[b]} at {cell_name(*b)} too, and "
                        f"that one needs {nb}, so its other hidden neighbours are"
                    )
                    if nb == na:
                        found.safe.update({d: why + " safe" for d in rest})
                    elif nb - na == len(rest):
                        found.mines.update({d: why + " mines" for d in rest})
        if (len(found.safe), len(found.mines)) == before:
            return found


def risks(n: int, counts: dict[Cell, int], found: Deductions, mines_total: int) -> dict[Cell, float]:
    """A rough chance that each hidden, unproven cell is a mine (the worst of the numbers touching it)."""
    cells = [(x, y) for y in range(n) for x in range(n)]
    hidden = [c for c in cells if c not in counts and c not in found.mines]
    if not hidden:
        return {}
    elsewhere = max(0, mines_total - len(found.mines)) / len(hidden)
    frontier: dict[Cell, float] = {}
    for c, k in counts.items():
        around = [d for d in neighbours(n, c) if d not in counts]
        unknown = [d for d in around if d not in found.mines]
        if unknown:
            p = (k - (len(around) - len(unknown))) / len(unknown)
            for d in unknown:
                frontier[d] = max(frontier.get(d, 0.0), p)
    risk = {c: frontier.get(c, elsewhere) for c in hidden}
    return risk


def _view_cells(view: dict[str, Any]) -> tuple[int, dict[Cell, int], set[Cell], dict[Cell, int]]:
    """n, the open cells' numbers, the mines (privileged) and every cell's number (privileged, -1: hidden)."""
    n = int(view["grid"])
    shown = [int(v) for v in view["counts"]]
    counts = {(i % n, i // n): v for i, v in enumerate(shown) if v >= 0 and view["open"][i]}
    mines = {(int(x), int(y)) for x, y in view["mines"]}
    return n, counts, mines, {(i % n, i // n): v for i, v in enumerate(shown)}


def _zeros(n: int, mines: set[Cell], c: Cell) -> bool:
    """Whether the (privileged) field has no mine around `c`: opening it opens an area."""
    return not any(d in mines for d in neighbours(n, c))


def _click(view: dict[str, Any], c: Cell) -> A.Click:
    cell = int(view["cell"])
    return A.Click(x=c[0] * cell + cell // 2, y=c[1] * cell + cell // 2)


@register_oracle("games/minesweeper")
def play(ctx: OracleContext) -> Actions:
    """Open a proven-safe cell if the numbers give one, else the least risky cell; look again."""
    for _ in range(ACTION_CAP):
        state = game_state(ctx, "minesweeper")
        if state["over"]:
            return
        view = state["view"]
        n, counts, mines, _ = _view_cells(view)
        if not view["laid"]:
            c = (n // 2 - 1, n // 2 - 1)
            thought = (
                f"The field is untouched and the first click is always safe, so I open a cell near the "
                f"middle, {cell_name(*c)}: a middle cell has the most neighbours to tell me about."
            )
            yield said(ctx, thought, _click(view, c))
            continue
        found = deduce(n, counts)
        if found.safe:
            order = sorted(found.safe, key=lambda c: (not _zeros(n, mines, c), c[1], c[0]))
            c = order[0]
            noted = f" (the mines I have worked out so far: {_cells(found.mines)})" if found.mines else ""
            thought = f"{cell_name(*c)} is safe: {found.safe[c]}{noted}. I open it."
            yield said(ctx, thought, _click(view, c))
            continue
        risk = risks(n, counts, found, int(view["mine_count"]))
        if not risk:
            return
        ranked = sorted(risk, key=lambda c: (c in mines, risk[c], not _zeros(n, mines, c), c[1], c[0]))
        c = ranked[0]
        if c in mines:
            raise GameOracleFailed(f"every hidden cell left is a mine: {sorted(risk)}")
        least = min(risk.values())
        rated = "the least likely" if risk[c] <= least else "one of the less likely"
        thought = (
            f"No hidden cell is certain: every number leaves a choice. By my count {cell_name(*c)} is "
            f"{rated} to hide a mine (about {round(100 * risk[c])} in 100), so I risk opening it."
        )
        yield said(ctx, thought, _click(view, c))
