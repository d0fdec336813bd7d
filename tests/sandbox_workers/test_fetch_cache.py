"""The sandbox host's download cache: mirror first, then the URL (unless offline), content-addressed,
and a file that cannot be had is an error naming its URL, never a silent skip."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox_workers.fetch import FetchCache, FetchFailed, main, url_key


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on loopback serving tmp_path/www; yields its base URL and the paths asked."""
    root = tmp_path / "www"
    root.mkdir()
    asked: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kw: object) -> None:
            super().__init__(*args, directory=str(root), **kw)  # type: ignore[arg-type]

        def do_GET(self) -> None:
            asked.append(self.path)
            super().do_GET()

        def log_message(self, *args: object) -> None:
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}", asked
    httpd.shutdown()
    httpd.server_close()


def test_the_url_is_fetched_once_and_then_served_from_the_cache(
    tmp_path: Path, server: tuple[str, list[str]]
) -> None:
    base, asked = server
    (tmp_path / "www" / "a.xlsx").write_bytes(b"sheet")
    cache = FetchCache(tmp_path / "cache")
    url = f"{base}/a.xlsx"
    assert cache.get(url) == (b"sheet", hashlib.sha256(b"sheet").hexdigest(), "url")
    (tmp_path / "www" / "a.xlsx").write_bytes(b"changed upstream")
    assert cache.get(url)[::2] == (b"sheet", "cache")
    assert asked == ["/a.xlsx"]
    # Content-addressed: the bytes live once, under their own hash.
    assert (tmp_path / "cache" / "blobs" / hashlib.sha256(b"sheet").hexdigest()).read_bytes() == b"sheet"


def test_a_mirror_folder_serves_urls_that_cannot_be_reached(tmp_path: Path) -> None:
    url = "https://huggingface.co/datasets/x/resolve/main/totals.xlsx?download=true"
    (tmp_path / "totals.xlsx").write_bytes(b"from the mirror")
    main(["add", str(tmp_path / "mirror"), url, str(tmp_path / "totals.xlsx")])
    assert (tmp_path / "mirror" / "by-url" / url_key(url)).exists()
    cache = FetchCache(tmp_path / "cache", mirror=str(tmp_path / "mirror"), offline=True)
    assert cache.get(url)[::2] == (b"from the mirror", "mirror")


def test_an_http_mirror_is_asked_before_the_url(tmp_path: Path, server: tuple[str, list[str]]) -> None:
    base, asked = server
    url = f"{base}/original.txt"
    (tmp_path / "www" / "original.txt").write_bytes(b"original")
    (tmp_path / "www" / "by-url").mkdir()
    (tmp_path / "www" / "by-url" / url_key(url)).write_bytes(b"mirrored")
    cache = FetchCache(tmp_path / "cache", mirror=base)
    assert cache.get(url)[::2] == (b"mirrored", "mirror")
    assert asked == [f"/by-url/{url_key(url)}"]
    # Not in the mirror: the URL itself.
    other = f"{base}/original.txt?v=2"
    assert cache.get(other)[::2] == (b"original", "url")


def test_a_file_that_cannot_be_had_names_its_url_and_every_source_tried(
    tmp_path: Path, server: tuple[str, list[str]]
) -> None:
    base, _ = server
    url = f"{base}/missing.xlsx"
    with pytest.raises(FetchFailed) as err:
        FetchCache(tmp_path / "cache", mirror=str(tmp_path / "empty-mirror")).get(url)
    message = str(err.value)
    assert message.startswith(f"cannot fetch {url}: ")
    assert "mirror" in message and "HTTP 404" in message
    with pytest.raises(FetchFailed, match="forbids the network"):
        FetchCache(tmp_path / "cache2", offline=True).get(url)


def test_a_file_over_the_size_limit_is_refused(tmp_path: Path, server: tuple[str, list[str]]) -> None:
    base, _ = server
    (tmp_path / "www" / "big.bin").write_bytes(b"x" * 2048)
    with pytest.raises(FetchFailed, match="larger than 1024 bytes"):
        FetchCache(tmp_path / "cache", max_bytes=1024).get(f"{base}/big.bin")
