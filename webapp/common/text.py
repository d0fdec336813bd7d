"""Text people type into the platform: how long it may be, and what it may not hold.

A TextField has no length of its own, so without a cap a form or an API call could store megabytes in
a title's neighbour; PostgreSQL refuses NUL in text and jsonb. Services check what they store with
`text_problem` and raise their own error naming the field.
"""

from __future__ import annotations

from typing import Any

MAX_NAME = 200  # names and titles
MAX_NOTE = 10_000  # comments, notes, reasons, thoughts, answers
MAX_INSTRUCTION = 20_000  # a task's instruction


def text_problem(value: Any, *, max_length: int) -> str | None:
    """What is wrong with `value` as stored text ("must be text", too long, NUL), or None."""
    if not isinstance(value, str):
        return "must be text"
    if len(value) > max_length:
        return f"may be at most {max_length} characters (got {len(value)})"
    if "\x00" in value:
        return "may not contain NUL characters"
    return None
