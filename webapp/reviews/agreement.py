"""Agreement between two raters: Cohen's κ on a binary verdict, and first-error-step agreement.

Pure functions over plain values (no Django), so the maths is tested on hand-computed inputs. A
"rater" is anything hashable (a user id), an "item" is what both judged (an episode, a task).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Generic, TypeVar

V = TypeVar("V")


@dataclass(frozen=True)
class Kappa:
    """Cohen's κ over `n` shared items; `kappa` is None where it is undefined, and `note` says why."""

    n: int
    observed: float | None  # p_o, the share of items both put in the same class
    expected: float | None  # p_e, the agreement chance alone would give with these marginals
    kappa: float | None
    note: str = ""


@dataclass(frozen=True)
class FirstErrorAgreement:
    """How two raters' first-error steps compare over `n` shared items (None = "no error")."""

    n: int
    exact: float | None  # share of items with the same first-error step (both None counts as equal)
    n_both: int  # items where both marked a first error
    mean_abs_diff: float | None  # mean |a - b| over those items, in steps
    note: str = ""


def cohen_kappa(pairs: Sequence[tuple[Hashable, Hashable]]) -> Kappa:
    """κ = (p_o − p_e) / (1 − p_e) for two raters' labels of the same items, one pair per item."""
    n = len(pairs)
    if n == 0:
        return Kappa(n=0, observed=None, expected=None, kappa=None, note="no shared items")
    observed = sum(1 for a, b in pairs if a == b) / n
    first = Counter(a for a, _ in pairs)
    second = Counter(b for _, b in pairs)
    expected = sum(first[c] * second[c] for c in first) / (n * n)
    if expected >= 1.0:
        # Both raters used one and the same class throughout: they agree, but κ is 0/0.
        only = next(iter(first))
        return Kappa(
            n=n,
            observed=observed,
            expected=expected,
            kappa=None,
            note=f"undefined: every judgement was {only!s}",
        )
    return Kappa(n=n, observed=observed, expected=expected, kappa=(observed - expected) / (1.0 - expected))


def first_error_agreement(pairs: Sequence[tuple[int | None, int | None]]) -> FirstErrorAgreement:
    """Exact-match rate of first-error steps, and their mean absolute difference where both marked one."""
    n = len(pairs)
    if n == 0:
        return FirstErrorAgreement(n=0, exact=None, n_both=0, mean_abs_diff=None, note="no shared items")
    exact = sum(1 for a, b in pairs if a == b) / n
    both = [(a, b) for a, b in pairs if a is not None and b is not None]
    if not both:
        return FirstErrorAgreement(
            n=n, exact=exact, n_both=0, mean_abs_diff=None, note="no item where both marked a first error"
        )
    mad = sum(abs(a - b) for a, b in both) / len(both)
    return FirstErrorAgreement(n=n, exact=exact, n_both=len(both), mean_abs_diff=mad)


@dataclass(frozen=True)
class PairJudgements(Generic[V]):
    """Two raters and their judgements of the items both judged, in the same order."""

    first: Hashable
    second: Hashable
    items: tuple[Hashable, ...]
    values: tuple[tuple[V, V], ...]


def rater_pairs(judgements: Iterable[tuple[Hashable, Hashable, V]]) -> list[PairJudgements[V]]:
    """Group (item, rater, value) triples into every pair of raters over their shared items.

    A rater who judged an item twice counts with the last value given. Pairs with no shared item are
    left out; raters are ordered by their sorted string form so a pair always reads the same way.
    """
    by_item: dict[Hashable, dict[Hashable, V]] = defaultdict(dict)
    for item, rater, value in judgements:
        by_item[item][rater] = value
    shared: dict[tuple[Hashable, Hashable], list[tuple[Hashable, tuple[V, V]]]] = defaultdict(list)
    for item, by_rater in by_item.items():
        for a, b in combinations(sorted(by_rater, key=str), 2):
            shared[(a, b)].append((item, (by_rater[a], by_rater[b])))
    out = []
    for (a, b), rows in sorted(shared.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        out.append(
            PairJudgements(
                first=a, second=b, items=tuple(i for i, _ in rows), values=tuple(v for _, v in rows)
            )
        )
    return out


def pooled(pairs: Iterable[PairJudgements[V]]) -> list[tuple[V, V]]:
    """Every pair's judgements in one list: the overall agreement across all pairs of raters."""
    return [v for p in pairs for v in p.values]
