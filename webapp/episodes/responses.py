"""HTTP responses shared by the episode pages and the API."""

from __future__ import annotations

import io
from pathlib import PurePosixPath

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db.models.fields.files import FieldFile
from django.http import FileResponse, HttpResponse

from webapp.episodes.models import Step

THUMBNAIL_WIDTH = 240
THUMBNAIL_QUALITY = 70
_IMMUTABLE = "private, max-age=31536000, immutable"


def screenshot_response(step: Step) -> FileResponse:
    """Stream a step's screenshot; its bytes are content-addressed, so caches may keep it for good."""
    return image_response(step.screenshot)


def image_response(file: FieldFile) -> FileResponse:
    """Stream a stored screenshot (PNG, or JPEG where the screen was captured so) for good caching."""
    jpeg = file.name.endswith((".jpg", ".jpeg"))
    response = FileResponse(file.open("rb"), content_type="image/jpeg" if jpeg else "image/png")
    response["Cache-Control"] = _IMMUTABLE
    return response


def thumbnail_name(screenshot_name: str, *, width: int = THUMBNAIL_WIDTH) -> str:
    """Where the thumbnail of a screenshot is cached: named after the screenshot's content name."""
    stem = PurePosixPath(screenshot_name).with_suffix("")
    parts = stem.parts[1:] if len(stem.parts) > 1 else stem.parts  # drop the "screens/" kind
    return str(PurePosixPath("thumbs", *parts)) + f"-w{width}.jpg"


def thumbnail_bytes(png: bytes, *, width: int = THUMBNAIL_WIDTH) -> bytes:
    """A small JPEG of a screenshot, at most `width` pixels wide (never enlarged)."""
    from PIL import Image  # only this endpoint needs Pillow; keep it off the import path of every page

    with Image.open(io.BytesIO(png)) as image:
        image = image.convert("RGB")
        if image.width > width:
            image = image.resize((width, max(1, round(image.height * width / image.width))), Image.LANCZOS)
        out = io.BytesIO()
        image.save(out, format="JPEG", quality=THUMBNAIL_QUALITY, optimize=True)
    return out.getvalue()


def thumbnail_response(step: Step) -> HttpResponse:
    """A step's thumbnail, made once per screenshot and cached in storage beside it."""
    return image_thumbnail_response(step.screenshot)


def image_thumbnail_response(file: FieldFile) -> HttpResponse:
    """A stored screenshot's thumbnail, made once per screenshot and cached in storage beside it."""
    name = thumbnail_name(file.name)
    if not default_storage.exists(name):
        with file.open("rb") as f:
            data = thumbnail_bytes(f.read())
        # Content-addressed storage renames a finished temp file into place, so two requests
        # racing to make the same thumbnail both end with one whole file.
        default_storage.save(name, ContentFile(data))
    response = FileResponse(default_storage.open(name, "rb"), content_type="image/jpeg")
    response["Cache-Control"] = _IMMUTABLE
    return response
