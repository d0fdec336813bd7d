"""Where a mirror keeps the file of a URL that tasks download: `<mirror>/by-url/<url_key(url)>`.

The sandbox host reads mirrors (its fetch cache); task suites that ship their own files write them."""

from __future__ import annotations

import hashlib


def url_key(url: str) -> str:
    """The name of a URL's file in a mirror (and in a fetch cache's URL index)."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()
