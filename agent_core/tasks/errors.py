"""The task format's error (its own module: the spec and its templates both raise it)."""

from __future__ import annotations


class TaskSpecError(ValueError):
    """A task document is invalid; the message names the field and why."""
