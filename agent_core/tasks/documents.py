"""JSON documents taken from outside (task files, task specs): what they may hold, checked once.

PostgreSQL's text and jsonb cannot hold NUL, so a NUL anywhere in a task document was a 500 there (and
stored as it was on SQLite). JSON nested 100,000 deep exhausts Python's recursion in the parser, and
short of that in whatever walks the document later (a page's pprint, json.dumps). NaN and Infinity
parse in Python but are not JSON, and jsonb refuses them. A document is read and checked here (the
walk is iterative, so no depth exhausts it), and a problem names the field where it was found.
"""

from __future__ import annotations

import json
import math
from typing import Any

from agent_core.tasks.errors import TaskSpecError

# OSWorld's deepest task file nests 9 levels and the built-in suites' 5; a task spec holds an OSWorld
# file two levels down (origin.osworld).
MAX_DEPTH = 32
WHOLE = "document"
"""The field named for a problem of the document as a whole (not JSON, not text)."""


class DocumentError(TaskSpecError):
    """A document that cannot be stored: `field` says where (dotted, list items as [i]), `problem` why."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field, self.problem = field, problem


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]" if path else f"[{key}]"
    return f"{path}.{key}" if path else key


def document_problem(doc: Any, *, max_depth: int = MAX_DEPTH) -> tuple[str, str] | None:
    """The first (field, problem) in `doc` that no database column may hold: a NUL in a string or a
    key, a number that is not finite, nesting deeper than `max_depth`; None when there is none."""
    stack: list[tuple[Any, str, int]] = [(doc, "", 0)]
    while stack:
        item, path, level = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return path or WHOLE, "may not contain NUL characters"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path or WHOLE, f"must be a finite number, not {item}"
        elif isinstance(item, dict | list):
            if level >= max_depth:
                top = path.split(".", 1)[0].split("[", 1)[0] or WHOLE
                return top, f"nests more than {max_depth} levels deep"
            if isinstance(item, dict):
                for key in item:
                    if "\x00" in str(key):
                        return _child(path, repr(str(key))), "the key may not contain NUL characters"
                children = [(v, _child(path, str(k)), level + 1) for k, v in item.items()]
            else:
                children = [(v, _child(path, i), level + 1) for i, v in enumerate(item)]
            stack.extend(reversed(children))  # depth-first in document order: the first problem is named
    return None


def document_check(doc: Any, *, max_depth: int = MAX_DEPTH) -> None:
    """DocumentError naming the first field of `doc` that no database column may hold."""
    problem = document_problem(doc, max_depth=max_depth)
    if problem is not None:
        raise DocumentError(*problem)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads_document(data: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document in `data` (UTF-8 if bytes), checked by `document_check`; DocumentError naming
    the field otherwise (the whole document's problems name `document`)."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DocumentError(WHOLE, f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        doc = json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise DocumentError(WHOLE, f"nests more than {max_depth} levels deep") from None
    except ValueError as exc:
        raise DocumentError(WHOLE, f"is not JSON: {exc}") from None
    document_check(doc, max_depth=max_depth)
    return doc
