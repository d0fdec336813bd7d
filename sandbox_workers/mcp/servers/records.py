"""The `records` MCP server: a read-only lookup over a JSON object in a workspace file.

A task's setup writes the records (``records.json`` by default: an object of key → value), and the
agent can only reach a value through the tool: "look it up through the tool, type it through the GUI".
Nothing is cached: each call reads the file as it is now. Run inside the sandbox:
``python3 -m flywheel_mcp_servers.records`` (stdio).
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server.fastmcp import FastMCP

from ._workspace import PathRefused, read_text

DEFAULT_FILE = "records.json"
MAX_KEYS = 1000

server = FastMCP("records", log_level="WARNING")


def _records(file: str) -> dict[str, Any]:
    _, text = read_text(file)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PathRefused(f"{file!r} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PathRefused(f"{file!r} holds a JSON {type(data).__name__}, not an object of records")
    return data


@server.tool()
def list_keys(file: str = DEFAULT_FILE) -> dict[str, Any]:
    """The keys of the records in a workspace JSON file (records.json by default), sorted."""
    keys = sorted(_records(file))
    return {"file": file, "keys": keys[:MAX_KEYS], "count": len(keys)}


@server.tool()
def lookup(key: str, file: str = DEFAULT_FILE) -> dict[str, Any]:
    """The record stored under `key` (exactly; case-insensitively when no exact key matches)."""
    records = _records(file)
    if key in records:
        return {"key": key, "value": records[key]}
    folded = [k for k in records if k.casefold() == key.casefold()]
    if len(folded) == 1:
        return {"key": folded[0], "value": records[folded[0]]}
    near = sorted(k for k in records if key.casefold() in k.casefold())[:10]
    hint = f"; keys containing it: {', '.join(near)}" if near else "; list_keys() shows them all"
    raise LookupError(f"no record {key!r} in {file}{hint}")


if __name__ == "__main__":
    server.run("stdio")
