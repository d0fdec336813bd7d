"""`{{name}}` templates of task documents: filled from the drawn parameters and saved setup results."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from agent_core.tasks.errors import TaskSpecError

INDEX = re.compile(r"-?[0-9]+")
TEMPLATE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*\}\}")


def render(value: Any, context: Mapping[str, Any]) -> Any:
    """Fill `{{name}}` / `{{save.field}}` in every string of `value` (lists and mappings included).

    A string that is exactly one placeholder keeps the value's type (an int stays an int)."""
    if isinstance(value, str):
        whole = TEMPLATE.fullmatch(value)
        if whole:
            return _lookup(context, whole.group(1))
        return TEMPLATE.sub(lambda m: _as_text(_lookup(context, m.group(1))), value)
    if isinstance(value, Mapping):
        return {k: render(v, context) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [render(v, context) for v in value]
    return value


def select_path(value: Any, path: str) -> Any:
    """`value` followed along a dotted path (mapping keys, list indices); missing parts give None."""
    for part in path.split(".") if path else ():
        if isinstance(value, Mapping):
            value = value.get(part)
        elif isinstance(value, list | tuple) and INDEX.fullmatch(part):
            idx = int(part)
            value = value[idx] if -len(value) <= idx < len(value) else None
        else:
            return None
    return value


def _lookup(context: Mapping[str, Any], dotted: str) -> Any:
    head, _, rest = dotted.partition(".")
    if head not in context:
        raise TaskSpecError(
            f"template names {{{{{dotted}}}}} but there is no parameter or saved result {head!r}"
        )
    return select_path(context[head], rest)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return " ".join(_as_text(v) for v in value)
    return json.dumps(value) if isinstance(value, Mapping) else str(value)
