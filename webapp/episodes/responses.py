"""HTTP responses shared by the episode pages and the API."""

from __future__ import annotations

from django.http import FileResponse

from webapp.episodes.models import Step


def screenshot_response(step: Step) -> FileResponse:
    """Stream a step's PNG; its bytes are content-addressed, so caches may keep it for good."""
    response = FileResponse(step.screenshot.open("rb"), content_type="image/png")
    response["Cache-Control"] = "private, max-age=31536000, immutable"
    return response
