"""What every WebSocket consumer does with a frame it cannot use: say why, and keep the socket open.

A consumer that let a malformed frame raise closed the socket with 1011 (a live view or a
demonstration lost for one bad message). Frames are decoded here with limits a page never reaches
(size, nesting, number range), so anything past them is refused with a message naming the limit.
"""

from __future__ import annotations

import json
import math
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

MAX_MESSAGE_CHARS = 256 * 1024  # a session's largest message (500 input events) is far smaller
MAX_DEPTH = 16
MAX_INT_DIGITS = 16  # JavaScript's safe integers (2**53) have 16 digits


class MessageError(ValueError):
    """A frame that is not a message this socket takes; the text is sent back to the client."""


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise MessageError(f"numbers in messages have at most {MAX_INT_DIGITS} digits")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise MessageError(f"number {text[:20]} is out of range")
    return value


def _parse_constant(name: str) -> Any:
    raise MessageError(f"{name} is not a number JSON allows")


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in `value` (iteratively: no recursion to exhaust)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:
                stack.extend(
                    (child, level + 1) for child in (item.values() if isinstance(item, dict) else item)
                )
    return deepest


def message_decode(text_data: str | None, bytes_data: bytes | None = None) -> Any:
    """The JSON value of a text frame; MessageError saying what is wrong with any other frame."""
    if text_data is None:
        raise MessageError("this socket takes JSON text frames, not binary ones")
    if len(text_data) > MAX_MESSAGE_CHARS:
        raise MessageError(f"a message may be at most {MAX_MESSAGE_CHARS} characters")
    try:
        value = json.loads(
            text_data, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
        )
    except MessageError:
        raise
    except RecursionError:
        raise MessageError(f"messages may nest at most {MAX_DEPTH} levels deep") from None
    except ValueError as exc:
        raise MessageError(f"not valid JSON: {exc}") from None
    if _depth(value) > MAX_DEPTH:
        raise MessageError(f"messages may nest at most {MAX_DEPTH} levels deep")
    return value


class JsonSocketConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """A JSON consumer that answers a malformed frame with {"type": "error", "message"} and stays open."""

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        try:
            content = message_decode(text_data, bytes_data)
        except MessageError as exc:
            await self.send_json({"type": "error", "message": str(exc)})
            return
        await self.receive_json(content, **kwargs)
