"""Whole numbers from query strings and forms, checked at the door.

`str.isdigit()` then `int()` is not a check: "²" is a digit that int() refuses, and 5,000 digits
exceed Python's conversion limit; a number past 64 bits overflows the database. Each of those was a
500. Here anything but a bounded run of ASCII digits is a 400 naming the parameter.
"""

from __future__ import annotations

from django.core.exceptions import BadRequest

# The largest value of a 64-bit signed database column (row ids, offsets).
MAX_DB_INT = 2**63 - 1


def parse_whole(raw: str, *, minimum: int = 0, maximum: int = MAX_DB_INT) -> int | None:
    """`raw` (surrounding blanks ignored) as a whole number within [minimum, maximum], else None."""
    raw = raw.strip()
    if not raw or not raw.isascii() or not raw.isdigit() or len(raw) > len(str(maximum)):
        return None
    value = int(raw)
    return value if minimum <= value <= maximum else None


def int_param(raw: str | None, *, name: str, minimum: int = 0, maximum: int = MAX_DB_INT) -> int | None:
    """An optional whole-number parameter: None when absent or blank; BadRequest naming it if invalid."""
    if raw is None or not raw.strip():
        return None
    value = parse_whole(raw, minimum=minimum, maximum=maximum)
    if value is None:
        raise BadRequest(f"{name} must be a whole number from {minimum} to {maximum}")
    return value
