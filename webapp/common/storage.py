"""Content-addressed file storage for screenshots and other observation files."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, default_storage

from webapp.env import private_dir


class ContentAddressedStorage(FileSystemStorage):
    """Files are named by the SHA-256 of their bytes; saving the same bytes twice stores one file.

    Writes go to a temporary file in the same folder and are renamed into place, so a reader
    never sees a half-written screenshot and a killed writer leaves no partial file under the name.
    Files and folders are the platform user's alone (FILE_UPLOAD_PERMISSIONS, 0700 folders).
    """

    def get_available_name(self, name: str, max_length: int | None = None) -> str:
        return name  # the name is the content's hash: an existing file already holds these bytes

    def _save(self, name: str, content: object) -> str:
        full = Path(self.path(name))
        if full.exists():
            return name
        private_dir(full.parent)
        fd, tmp = tempfile.mkstemp(dir=full.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in content.chunks():  # type: ignore[attr-defined]
                    out.write(chunk)
            os.chmod(tmp, self.file_permissions_mode or 0o600)
            os.replace(tmp, full)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return name


def content_name(data: bytes, *, kind: str, ext: str) -> str:
    """The storage name for `data`: <kind>/<aa>/<bb>/<sha256>.<ext>."""
    digest = hashlib.sha256(data).hexdigest()
    return f"{kind}/{digest[:2]}/{digest[2:4]}/{digest}.{ext.lstrip('.')}"


def blob_store(data: bytes, *, kind: str, ext: str) -> str:
    """Store `data` once under its hash and return the storage name."""
    name = content_name(data, kind=kind, ext=ext)
    return default_storage.save(name, ContentFile(data))
