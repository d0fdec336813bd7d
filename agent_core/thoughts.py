"""Which recorded thoughts a model may learn from.

A thought teaches when it says what the actor sees and why it acts. Scripted policies once wrote
stand-ins ("oracle step 3", "random", "do nothing") and a policy trained on them answered
"Action: oracle step 000…"; a person may type nothing. Exports and trainers pass every recorded
thought through `learnable_thought`: a stand-in becomes "" and the target keeps only its action (the
UI-TARS grammar allows a response without a Thought section), and they count what they dropped.
"""

from __future__ import annotations

import re

_PLACEHOLDER = re.compile(
    r"""
    (?:oracle|scripted|script|random|noop|no-op|policy|agent|human|bot|baseline|auto)?  # who
    [\s:_-]*
    (?:step|turn|action|thought|move|stop|done|finish(?:ed)?|nothing|do\ nothing|none)?  # what
    [\s:#_-]*
    \d*  # a counter
    """,
    re.VERBOSE | re.IGNORECASE,
)
_NOTHING = frozenset({"n/a", "na", "tbd", "todo", "...", "…", "-", "?", "null", "no thought"})


def is_placeholder_thought(text: str | None) -> bool:
    """Whether `text` is no thought a model should learn: empty, a bare counter or label ("oracle step
    3", "random: stop", "do nothing", "step 12", "Thought 4"), or a filler ("n/a", "...")."""
    value = (text or "").strip().strip(".").strip()
    if not value:
        return True
    if value.lower() in _NOTHING or re.fullmatch(r"[\W\d_]+", value):
        return True
    return _PLACEHOLDER.fullmatch(value) is not None


def learnable_thought(text: str | None) -> str:
    """`text` stripped, or "" where it is a placeholder (then a target teaches only the action)."""
    return "" if is_placeholder_thought(text) else (text or "").strip()


__all__ = ["is_placeholder_thought", "learnable_thought"]
