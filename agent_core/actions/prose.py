"""The free text around a model's calls (`tool_calls`, `xml_calls`): its thought and action summary.

Thinking models wrap their reasoning in tags (``<think>…</think>``, Seed's ``<seed:think>`` or
``<thinkt>``; a served model may leave only the closing one): the tags go, their text stays. A
leading ``Thought:`` header goes too. Qwen3-VL writes ``Action: <what it does>`` before its call:
the text after such a line is the action summary (UI-TARS-1.0's Action_Summary), so a thought never
holds a line that would read as a UI-TARS ``Action:`` when the step is exported.
"""

from __future__ import annotations

import re

_THINK_TAG = re.compile(r"</?(?:seed:)?think[A-Za-z0-9_]*>")
_THOUGHT_HEAD = re.compile(r"\A\s*Thought[ \t]*:")
_ACTION_LINE = re.compile(r"^[ \t]*Action[ \t]*:", re.M)


def split_prose(prose: str) -> tuple[str, str]:
    """(thought, action_summary) of the text around a response's calls."""
    text = _THINK_TAG.sub("\n", prose)
    summary = ""
    marker = _ACTION_LINE.search(text)
    if marker is not None:
        summary = text[marker.end() :].strip()
        text = text[: marker.start()]
    return _THOUGHT_HEAD.sub("", text).strip(), summary
