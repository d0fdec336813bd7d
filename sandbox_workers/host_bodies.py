"""Request bodies of the sandbox host's API: JSON objects and uploads, refused with a clear 4xx."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import http_exceptions as aiohttp_http_exceptions
from aiohttp import web

MAX_UPLOAD = 64 * 1024 * 1024


def error_json(kind: str, message: str) -> str:
    """The body of an error answer."""
    return json.dumps({"error": {"type": kind, "message": message}})


async def body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, or a 400 (413 past the size limit) saying why not."""
    try:
        data = await request.json()
    except web.HTTPRequestEntityTooLarge:
        raise web.HTTPRequestEntityTooLarge(
            max_size=MAX_UPLOAD, text=error_json("too_large", f"bodies are limited to {MAX_UPLOAD} bytes"),
            content_type="application/json",
        ) from None  # fmt: skip
    except ValueError:
        raise web.HTTPBadRequest(
            text=error_json("bad_request", "the body must be JSON"),
            content_type="application/json",
        ) from None
    if not isinstance(data, dict):
        raise web.HTTPBadRequest(
            text=error_json("bad_request", "the body must be a JSON object"),
            content_type="application/json",
        )
    return data


async def upload(request: web.Request, *, what: str) -> bytes:
    """The whole request body, or a refusal: 413 past MAX_UPLOAD, 400 when it ends before its
    Content-Length. One `read(n)` returns what has arrived so far, not n bytes: read to the end."""
    too_large = web.HTTPRequestEntityTooLarge(
        max_size=MAX_UPLOAD, text=error_json("too_large", f"{what} are limited to {MAX_UPLOAD} bytes"),
        content_type="application/json",
    )  # fmt: skip
    declared = request.content_length
    if declared is not None and declared > MAX_UPLOAD:
        raise too_large
    data = bytearray()
    try:
        async for chunk in request.content.iter_any():
            data += chunk
            if len(data) > MAX_UPLOAD:
                raise too_large
    except (ConnectionError, aiohttp_http_exceptions.HttpProcessingError) as exc:
        # The client went away or the body broke off mid-way: nothing of it is kept.
        message = f"the body ended before it was complete: {exc}"
        raise web.HTTPBadRequest(text=error_json("incomplete_body", message), content_type="application/json")
    if declared is not None and len(data) != declared:
        message = f"the body has {len(data)} bytes, its Content-Length says {declared}"
        raise web.HTTPBadRequest(text=error_json("incomplete_body", message), content_type="application/json")
    return bytes(data)
