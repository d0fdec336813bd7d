"""Refusals that say why: 400 naming what was wrong, 413 for a body over the size limit.

Django answers a request it refuses (a BadRequest, a body over DATA_UPLOAD_MAX_MEMORY_SIZE, too many
fields) with a bare "Bad Request (400)", and a body over the limit deserves 413. Pages get the base
template with the message; the JSON API gets {"detail": …} like its other errors.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import BadRequest, RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

API_PREFIX = "/api/"


def body_too_large_message() -> str:
    return f"the request body is larger than the {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes accepted"


def refusal(
    request: HttpRequest, message: str, *, status: int = 400, errors: list[dict[str, Any]] | None = None
) -> HttpResponse:
    """`message` as a 4xx response: JSON under the API, the error page elsewhere."""
    if request.path.startswith(API_PREFIX):
        body: dict[str, Any] = {"detail": message}
        if errors:
            body["errors"] = errors
        return JsonResponse(body, status=status)
    context = {"status": status, "message": message}
    if not hasattr(request, "user"):  # refused before authentication: no navigation to draw
        return HttpResponse(f"{status}: {message}\n", status=status, content_type="text/plain; charset=utf-8")
    return HttpResponse(render_to_string("400.html", context, request=request), status=status)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler400: a body over the limit is 413; our own BadRequest messages are shown."""
    if isinstance(exception, RequestDataTooBig):
        return refusal(request, body_too_large_message(), status=413)
    if isinstance(exception, BadRequest) and str(exception):
        return refusal(request, str(exception))
    return refusal(request, "the request could not be read (malformed, or too many fields)")
