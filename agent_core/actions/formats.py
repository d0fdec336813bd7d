"""The text forms a policy's responses may take (its `output_format`); `compat.parse_output` reads each.

Apart from the parsers so that code which only names a format (prompt families, policy configs, the
serving agent in vLLM's environment) imports none of them.
"""

from __future__ import annotations

FORMATS: tuple[str, ...] = ("uitars", "json", "pyautogui", "computer13", "tool_calls", "xml_calls")
