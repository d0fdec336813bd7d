"""Print the AT-SPI accessibility tree of the desktop as indented text (one node per line).

Run INSIDE the sandbox with the system /usr/bin/python3 (which has pyatspi); the provider passes
this file's text with `python3 -c`. Each line: `role "name" @x,y wxh [states] = text/value`.
Only showing nodes are printed; limits on nodes, depth and time keep a huge page from hanging it.
Exit status 0 with the tree on stdout; 3 when AT-SPI is unreachable (reason on stderr).
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

MAX_NODES = 4000
MAX_DEPTH = 40
MAX_SECONDS = 8.0
MAX_TEXT = 200

try:
    import pyatspi  # type: ignore[import-not-found]
except ImportError as exc:  # the host's venv imports this module too (the layout test); only main() needs it
    pyatspi = None
    _MISSING = str(exc)


def _clip(text: object) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _line(node: Any, depth: int) -> str:
    role = node.getRoleName()
    name = node.name or ""
    parts = ["  " * depth + role.replace(" ", "-")]
    if name:
        parts.append('"' + _clip(name) + '"')
    with contextlib.suppress(NotImplementedError):
        ext = node.queryComponent().getExtents(pyatspi.DESKTOP_COORDS)
        parts.append(f"@{ext.x},{ext.y} {ext.width}x{ext.height}")
    states = node.getState()
    flags = [
        label
        for state, label in (
            (pyatspi.STATE_FOCUSED, "focused"),
            (pyatspi.STATE_SELECTED, "selected"),
            (pyatspi.STATE_CHECKED, "checked"),
            (pyatspi.STATE_EDITABLE, "editable"),
        )
        if states.contains(state)
    ]
    if not states.contains(pyatspi.STATE_ENABLED) and role not in ("application", "frame"):
        flags.append("disabled")
    if flags:
        parts.append("[" + ",".join(flags) + "]")
    value: object = None
    with contextlib.suppress(NotImplementedError):
        if states.contains(pyatspi.STATE_EDITABLE) or role in ("text", "entry", "paragraph"):
            text = node.queryText()
            value = text.getText(0, min(text.characterCount, MAX_TEXT + 1))
    if value is None:
        with contextlib.suppress(NotImplementedError):
            value = node.queryValue().currentValue
    if value not in (None, "") and _clip(value) != _clip(name):
        parts.append("= " + _clip(value))
    return " ".join(parts)


def main() -> int:
    deadline = time.monotonic() + MAX_SECONDS
    try:
        desktop = pyatspi.Registry.getDesktop(0)
        apps = [desktop.getChildAtIndex(i) for i in range(desktop.childCount)]
    except Exception as exc:  # noqa: BLE001
        sys.stderr.write(f"AT-SPI registry unreachable: {exc}\n")
        return 3
    count = 0
    out: list[str] = []
    cut = ""
    stack = [(app, 0) for app in reversed(apps) if app is not None]
    while stack:
        node, depth = stack.pop()
        if count >= MAX_NODES or time.monotonic() > deadline:
            cut = f"… (cut at {count} nodes)"
            break
        try:
            states = node.getState()
            if depth > 0 and not states.contains(pyatspi.STATE_SHOWING):
                continue
            out.append(_line(node, depth))
            count += 1
            if depth < MAX_DEPTH:
                kids = [node.getChildAtIndex(i) for i in range(min(node.childCount, 500))]
                stack.extend((k, depth + 1) for k in reversed(kids) if k is not None)
        except Exception:  # noqa: BLE001, S112 (a node that vanished while we walked)
            continue
    if cut:
        out.append(cut)
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    if pyatspi is None:
        sys.stderr.write(f"pyatspi missing: {_MISSING}\n")
        sys.exit(3)
    sys.exit(main())
