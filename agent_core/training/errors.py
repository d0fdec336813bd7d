"""What a training run raises for its user to fix, and the on-first-use import of torch and transformers.

Every module of agent_core.training imports torch and transformers through `lazy`, so importing the
package (as the web process does) never loads them.
"""

from __future__ import annotations

import importlib
from typing import Any


class TrainingError(ValueError):
    """The run cannot go on as asked (no usable data, an unsupported model, a missing checkpoint)."""


def lazy(module: str) -> Any:
    """`module` (torch, transformers) imported on first use; TrainingError where it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise TrainingError(
            f"training needs torch and transformers: pip install '.[train]' ({exc})"
        ) from None
