"""Checks at the door that no view has to repeat: the body's size, and NUL characters in any input.

PostgreSQL's text and jsonb columns cannot hold NUL, so a NUL typed into any field (a title, a name,
a comment, a task spec) became a 500 on save; in a file path it became a ValueError. Every request's
path, query parameters, form fields and JSON body are checked once here, and a NUL is refused with a
400 naming the field. A JSON body nested past MAX_BODY_DEPTH (100,000 deep exhausted the parser's
recursion: a 500) or holding NaN or Infinity (which jsonb refuses) is a 400 too, and so is a form with
more files or fields than Django reads (DATA_UPLOAD_MAX_NUMBER_FILES / _FIELDS: a bare error page). A
body over DATA_UPLOAD_MAX_MEMORY_SIZE is refused outright with 413, before anything reads it. What an
uploaded file holds is the view's to read: the OSWorld upload reads its files with
agent_core.tasks.documents, which refuses the same things naming the file and the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.core.exceptions import TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse

from agent_core.tasks.documents import document_problem
from webapp.common.errors import body_too_large_message, refusal

NUL = "\x00"
# A task spec may nest 32 levels (agent_core.tasks.documents); the body around one, a few more.
MAX_BODY_DEPTH = 64


def _nul_fields(value: Any, where: str = "") -> Iterator[str]:
    """The dotted names (list items by index) of the strings or keys in `value` that hold a NUL."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if NUL in item:
                yield path or "body"
        elif isinstance(item, dict):
            for key, child in item.items():
                name = f"{path}.{key}" if path else str(key)
                if NUL in str(key):
                    yield name
                stack.append((child, name))
        elif isinstance(item, list):
            stack.extend((child, f"{path}.{i}" if path else str(i)) for i, child in enumerate(item))


def _content_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


class RequestGuardMiddleware:
    """413 for a body over the limit; 400 naming the field for a NUL in the path, query, form or JSON, a
    JSON body nested too deep or holding NaN, or a form with too many files or fields."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and _content_length(request) > limit:
            return refusal(request, body_too_large_message(), status=413)
        try:
            problem = self._problem(request)
        except TooManyFilesSent:
            count = settings.DATA_UPLOAD_MAX_NUMBER_FILES
            problem = "files", f"files: at most {count} may be sent at once"
        except TooManyFieldsSent:
            count = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
            problem = "form", f"a form may send at most {count} fields at once"
        if problem is not None:
            field, message = problem
            return refusal(request, message, errors=[{"field": field, "message": message}])
        return self.get_response(request)

    @classmethod
    def _problem(cls, request: HttpRequest) -> tuple[str, str] | None:
        """(field, message) of what this door refuses in `request`, or None."""
        field = cls._nul_field(request)
        if field is not None:
            return field, f"{field} may not contain NUL characters"
        if request.method in ("GET", "HEAD", "OPTIONS") or not _content_length(request):
            return None
        content_type = request.content_type or ""
        if content_type == "application/json" or content_type.endswith("+json"):
            return _json_problem(request.body)
        return None

    @staticmethod
    def _nul_field(request: HttpRequest) -> str | None:
        if NUL in request.path:
            return "the address"
        for key, values in request.GET.lists():
            if NUL in key or any(NUL in v for v in values):
                return f"query parameter {key if NUL not in key else repr(key)}"
        if request.method in ("GET", "HEAD", "OPTIONS") or not _content_length(request):
            return None
        content_type = request.content_type or ""
        if content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            for key, values in request.POST.lists():
                if NUL in key or any(NUL in v for v in values):
                    return key
            return None
        if content_type == "application/json" or content_type.endswith("+json"):
            raw = request.body
            if b"\\u0000" not in raw and b"\x00" not in raw:
                return None
            try:
                doc = json.loads(raw)
            except (ValueError, RecursionError):
                return None  # not JSON (the view says so), or too deep (_json_problem says so)
            return next(_nul_fields(doc), None)
        return None


def _json_problem(raw: bytes) -> tuple[str, str] | None:
    """(field, message) for a JSON body nested past MAX_BODY_DEPTH or holding NaN or Infinity; None
    otherwise (malformed JSON is the view's to refuse). Only a body that could hold one is parsed."""
    brackets = raw.count(b"[") + raw.count(b"{")
    if brackets <= MAX_BODY_DEPTH and b"NaN" not in raw and b"Infinity" not in raw:
        return None
    try:
        doc = json.loads(raw)
    except RecursionError:
        return "body", f"the JSON body nests more than {MAX_BODY_DEPTH} levels deep"
    except ValueError:
        return None
    problem = document_problem(doc, max_depth=MAX_BODY_DEPTH)
    if problem is None:
        return None
    field, why = problem
    return field, f"{field}: {why}"
