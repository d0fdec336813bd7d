"""The long sweeps and their samples: `make test` runs a fixed, representative sample of each sweep;
`make verify-suites` (FULL_SWEEPS=1) runs every task of every suite, every seed, every cycle."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TypeVar

import pytest

T = TypeVar("T")

FULL = os.environ.get("FULL_SWEEPS") == "1"


def sample(items: Iterable[T], keep: Callable[[T], bool]) -> list[T]:
    """All of `items` in a full sweep, else those `keep` picks (a fixed choice, the same every run)."""
    return list(items) if FULL else [i for i in items if keep(i)]


def every_nth(items: Iterable[T], n: int) -> list[T]:
    """All of `items` in a full sweep, else every n-th (from the first): spread over the whole list."""
    return list(items) if FULL else list(items)[::n]


def full_only(covered_by: str) -> pytest.MarkDecorator:
    """A sweep with no sample of its own: `make verify-suites` runs it, `make test` skips it saying
    which test covers it there (the `sweep` mark alone selects a test for verify-suites; it does not
    keep it out of make test)."""
    return pytest.mark.skipif(not FULL, reason=f"verify-suites only; {covered_by}")
