"""Print the desktop's AT-SPI accessibility tree as XML, in the form OSWorld's metrics and getters read.

Run INSIDE the sandbox with the system /usr/bin/python3 (which has pyatspi), as a11y_dump.py is; argv[1],
if given, is a JSON object of application names to show under another name (OSWorld's image runs Google
Chrome where our desktops run Chromium, and its x86 selector names "Google Chrome").

The form (what `check_accessibility_tree` and `get_active_url_from_accessTree` select in): a
`desktop-frame` root; one element per showing node, named by its role with spaces as dashes
(`push-button`), its accessible name as `name`; its states as `st:<state>="true"`, its object
attributes as `attr:<key>`, its place and size as `cp:screencoord="(x, y)"` and `cp:size="(w, h)"`, its
value as `val:value`, and its text (the Text interface's content) as the element's text. The namespaces
are those of desktop-env's `_accessibility_ns_map["ubuntu"]`. Limits on nodes, depth and time keep a
huge page from hanging it. Exit status 0 with the XML on stdout; 3 when AT-SPI is unreachable.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
import xml.etree.ElementTree as ET
from typing import Any

MAX_NODES = 20000
MAX_DEPTH = 60
MAX_SECONDS = 20.0
MAX_TEXT = 20000
BASE = "https://accessibility.ubuntu.example.org/ns/"
NS = {
    "st": BASE + "state",
    "attr": BASE + "attributes",
    "cp": BASE + "component",
    "doc": BASE + "document",
    "docattr": BASE + "document/attributes",
    "txt": BASE + "text",
    "val": BASE + "value",
    "act": BASE + "action",
}
_NOT_NAME = re.compile(r"[^A-Za-z0-9_.-]")

try:
    import pyatspi  # type: ignore[import-not-found]
except ImportError as exc:  # the host's venv imports this module too (the layout test); only main() needs it
    pyatspi = None
    _MISSING = str(exc)


def _xml_name(text: str) -> str:
    name = _NOT_NAME.sub("-", text.strip()) or "unknown"
    return name if name[0].isalpha() or name[0] == "_" else "_" + name


def _clean(text: object) -> str:
    """Text as XML can hold it: no object-replacement marks, no control characters."""
    text = str(text).replace("\ufffc", "")
    return "".join(c for c in text if c in "\t\n\r" or ord(c) >= 0x20)[:MAX_TEXT]


def _element(node: Any, parent: ET.Element, renames: dict[str, str]) -> ET.Element:
    # A node without an interface raises (NotImplementedError, or a D-Bus error from an app that went
    # away): that part of it is left out, the rest kept.
    role = node.getRoleName() or "unknown"
    el = ET.SubElement(parent, _xml_name(role.replace(" ", "-")))
    name = node.name or ""
    if role == "application":
        name = renames.get(name, name)
    el.set("name", _clean(name))
    for state in node.getState().getStates():
        el.set(f"{{{NS['st']}}}{_xml_name(pyatspi.stateToString(state))}", "true")
    with contextlib.suppress(Exception):
        for pair in node.getAttributes() or []:
            key, _, value = str(pair).partition(":")
            el.set(f"{{{NS['attr']}}}{_xml_name(key)}", _clean(value))
    with contextlib.suppress(Exception):
        component = node.queryComponent()
        x, y = component.getPosition(pyatspi.DESKTOP_COORDS)
        w, h = component.getSize()
        el.set(f"{{{NS['cp']}}}screencoord", f"({x}, {y})")
        el.set(f"{{{NS['cp']}}}size", f"({w}, {h})")
    with contextlib.suppress(Exception):
        text = node.queryText()
        content = text.getText(0, min(text.characterCount, MAX_TEXT))
        if content:
            el.text = _clean(content)
    with contextlib.suppress(Exception):
        el.set(f"{{{NS['val']}}}value", str(node.queryValue().currentValue))
    return el


def main(renames: dict[str, str]) -> int:
    deadline = time.monotonic() + MAX_SECONDS
    try:
        desktop = pyatspi.Registry.getDesktop(0)
        apps = [desktop.getChildAtIndex(i) for i in range(desktop.childCount)]
    except Exception as exc:  # noqa: BLE001
        sys.stderr.write(f"AT-SPI registry unreachable: {exc}\n")
        return 3
    for prefix, uri in NS.items():
        ET.register_namespace(prefix, uri)
    root = ET.Element("desktop-frame", {"name": "main"})
    count = 0
    stack = [(app, root, 0) for app in reversed(apps) if app is not None]
    while stack and count < MAX_NODES and time.monotonic() < deadline:
        node, parent, depth = stack.pop()
        try:
            if depth > 0 and not node.getState().contains(pyatspi.STATE_SHOWING):
                continue
            el = _element(node, parent, renames)
            count += 1
            if depth < MAX_DEPTH:
                kids = [node.getChildAtIndex(i) for i in range(min(node.childCount, 2000))]
                stack.extend((k, el, depth + 1) for k in reversed(kids) if k is not None)
        except Exception:  # noqa: BLE001, S112 (a node that vanished while we walked)
            continue
    sys.stdout.write(ET.tostring(root, encoding="unicode") + "\n")
    return 0


if __name__ == "__main__":
    if pyatspi is None:
        sys.stderr.write(f"pyatspi missing: {_MISSING}\n")
        sys.exit(3)
    sys.exit(main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}))
