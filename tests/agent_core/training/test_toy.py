"""The toy task's demonstrations: exact by default, and with `mistakes` a reproducible share of slips
(another button clicked, the thought saying so), the known-answer check that RL corrects what
demonstrations taught wrong (bench/rl_eval.py --demo-mistakes)."""

from __future__ import annotations

import re

from agent_core.training.toy import ToyPage, oracle_examples

PAGES = range(20_000, 20_200)


def clicked(example) -> tuple[str, int, int]:  # type: ignore[no-untyped-def]
    label = re.search(r"Thought: I click (.+?)\.", example.response).group(1)
    x, y = map(int, re.search(r"\((\d+),(\d+)\)", example.response).groups())
    return label, x, y


def test_demonstrations_click_the_named_button_by_default() -> None:
    examples = oracle_examples(["toy/buttons-3"], PAGES)
    assert [clicked(e) for e in examples] == [ToyPage("toy/buttons-3", s).target for s in PAGES]


def test_a_share_of_demonstrations_slip_reproducibly_and_say_what_they_did() -> None:
    examples = oracle_examples(["toy/buttons-3"], PAGES, mistakes=0.4)
    slips = 0
    for seed, example in zip(PAGES, examples, strict=True):
        page = ToyPage("toy/buttons-3", seed)
        label, x, y = clicked(example)
        assert (label, x, y) in page.buttons  # a real button, its own label in the thought
        slips += (label, x, y) != page.target
    assert 0.3 < slips / len(PAGES) < 0.5, slips
    again = oracle_examples(["toy/buttons-3"], PAGES, mistakes=0.4)
    assert [e.response for e in again] == [e.response for e in examples]
    # One button: nothing else to click, so no slip.
    one = oracle_examples(["toy/buttons-1"], PAGES, mistakes=1.0)
    assert [clicked(e) for e in one] == [ToyPage("toy/buttons-1", s).target for s in PAGES]
