"""The sandbox host's download cache: mirror first, then the URL (unless offline), content-addressed,
and a file that cannot be had is an error naming its URL, never a silent skip. A task's URL is fetched
from public addresses only (never loopback, private, link-local; redirects and every resolved address
checked); the operator's mirror is trusted, and SANDBOX_FETCH_ALLOW_NETS lets a lab's own server in."""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import ipaddress
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sandbox_workers.base import SandboxError
from sandbox_workers.fetch import FetchCache, FetchFailed, fetch_for_lease, main, url_key

LAB = (ipaddress.ip_network("127.0.0.1/32"),)
"""The operator's SANDBOX_FETCH_ALLOW_NETS for these tests: the loopback server is the lab's own."""


@contextmanager
def serving(
    root: Path, address: str = "127.0.0.1"
) -> Iterator[tuple[str, list[str], dict[str, str], list[str]]]:
    """A real HTTP server on `address` serving `root`: (base URL, the paths asked, a table of redirects
    path → Location it answers 302 with, the Host headers it was sent)."""
    root.mkdir(exist_ok=True)
    asked: list[str] = []
    redirects: dict[str, str] = {}
    hosts: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kw: object) -> None:
            super().__init__(*args, directory=str(root), **kw)  # type: ignore[arg-type]

        def do_GET(self) -> None:
            asked.append(self.path)
            hosts.append(str(self.headers.get("Host")))
            if self.path in redirects:
                self.send_response(302)
                self.send_header("Location", redirects[self.path])
                self.end_headers()
                return
            super().do_GET()

        def log_message(self, *args: object) -> None:
            return

    httpd = http.server.ThreadingHTTPServer((address, 0), Handler)
    # A short poll: shutdown() waits for one (0.5 s each by default).
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{httpd.server_port}", asked, redirects, hosts
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on loopback serving tmp_path/www; yields its base URL and the paths asked."""
    with serving(tmp_path / "www") as (base, asked, _, _):
        yield base, asked


def test_the_url_is_fetched_once_and_then_served_from_the_cache(
    tmp_path: Path, server: tuple[str, list[str]]
) -> None:
    base, asked = server
    (tmp_path / "www" / "a.xlsx").write_bytes(b"sheet")
    cache = FetchCache(tmp_path / "cache", allow=LAB)
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
    # The operator's mirror is trusted, on loopback too.
    cache = FetchCache(tmp_path / "cache", mirror=base)
    assert cache.get(url)[::2] == (b"mirrored", "mirror")
    assert asked == [f"/by-url/{url_key(url)}"]
    # Not in the mirror: the URL itself, which on loopback only an operator's allowance lets through.
    other = f"{base}/original.txt?v=2"
    with pytest.raises(FetchFailed, match="127.0.0.1 is a loopback address"):
        cache.get(other)
    assert asked == [f"/by-url/{url_key(url)}", f"/by-url/{url_key(other)}"]
    assert FetchCache(tmp_path / "cache2", mirror=base, allow=LAB).get(other)[::2] == (b"original", "url")


def test_a_file_that_cannot_be_had_names_its_url_and_every_source_tried(
    tmp_path: Path, server: tuple[str, list[str]]
) -> None:
    base, _ = server
    url = f"{base}/missing.xlsx"
    with pytest.raises(FetchFailed) as err:
        FetchCache(tmp_path / "cache", mirror=str(tmp_path / "empty-mirror"), allow=LAB).get(url)
    message = str(err.value)
    assert message.startswith(f"cannot fetch {url}: ")
    assert "mirror" in message and "HTTP 404" in message
    with pytest.raises(FetchFailed, match="forbids the network"):
        FetchCache(tmp_path / "cache2", offline=True).get(url)


def test_a_file_over_the_size_limit_is_refused(tmp_path: Path, server: tuple[str, list[str]]) -> None:
    base, _ = server
    (tmp_path / "www" / "big.bin").write_bytes(b"x" * 2048)
    with pytest.raises(FetchFailed, match="larger than 1024 bytes"):
        FetchCache(tmp_path / "cache", max_bytes=1024, allow=LAB).get(f"{base}/big.bin")


def test_urls_of_loopback_private_and_link_local_hosts_are_refused_before_any_connection(
    tmp_path: Path, server: tuple[str, list[str]]
) -> None:
    base, asked = server
    (tmp_path / "www" / "a.txt").write_bytes(b"the lab's secret")
    port = base.rsplit(":", 1)[1]
    cache = FetchCache(tmp_path / "cache")
    refused = {
        f"http://127.0.0.1:{port}/a.txt": "127.0.0.1 is a loopback address",
        f"http://localhost:{port}/a.txt": "localhost resolves to",  # a name, judged by its addresses
        f"http://2130706433:{port}/a.txt": "127.0.0.1 is a loopback address",  # 127.0.0.1 as one number
        f"http://[::1]:{port}/a.txt": "::1 is a loopback address",
        f"http://[::ffff:127.0.0.1]:{port}/a.txt": "IPv4-mapped form of 127.0.0.1, a loopback address",
        "http://10.1.2.3/a.txt": "10.1.2.3 is a private address",
        "http://169.254.169.254/latest/meta-data/": "169.254.169.254 is a link-local address",
        "http://[fd00::5]/a.txt": "fd00::5 is a private address",
        "http://0.0.0.0/a.txt": "0.0.0.0 is an unspecified address",
        "http://224.0.0.1/a.txt": "224.0.0.1 is a multicast address",
    }
    for url, why in refused.items():
        with pytest.raises(FetchFailed) as err:
            cache.get(url, timeout=3)
        assert f"url {url}: refused: " in str(err.value) and why in str(err.value), (url, str(err.value))
    assert asked == [], "a refused URL must not be connected to"


def test_a_redirect_is_checked_again_and_one_to_a_private_address_is_refused(tmp_path: Path) -> None:
    (tmp_path / "inner" / "secret.txt").parent.mkdir()
    (tmp_path / "inner" / "secret.txt").write_bytes(b"inner service")
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "file.txt").write_bytes(b"public file")
    with (
        serving(tmp_path / "www") as (base, asked, redirects, _),
        serving(tmp_path / "inner", "127.0.0.2") as (inner, inner_asked, _, _),
    ):
        redirects["/moved"] = "/file.txt"  # followed: a redirect within the allowed server
        redirects["/evil"] = f"{inner}/secret.txt"  # to an address nobody allowed
        cache = FetchCache(tmp_path / "cache", allow=LAB)
        assert cache.get(f"{base}/moved")[::2] == (b"public file", "url")
        with pytest.raises(FetchFailed, match="refused: 127.0.0.2 is a loopback address"):
            cache.get(f"{base}/evil")
        assert asked == ["/moved", "/file.txt", "/evil"]
        assert inner_asked == [], "the redirect's target must not be connected to"


@pytest.fixture
def hosted(tmp_path: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """Like `server`, also yielding the Host headers it was sent."""
    with serving(tmp_path / "www") as (base, asked, _, hosts):
        yield base, asked, hosts


def test_a_name_is_resolved_once_every_address_checked_and_the_checked_one_connected_to(
    tmp_path: Path, hosted: tuple[str, list[str], list[str]]
) -> None:
    base, asked, hosts = hosted
    (tmp_path / "www" / "a.txt").write_bytes(b"by name")
    port = int(base.rsplit(":", 1)[1])
    lookups: list[str] = []

    def rebinding(host: str, _port: int) -> list[str]:
        """A DNS server that answers the allowed address first and another one afterwards."""
        lookups.append(host)
        return ["127.0.0.1"] if len(lookups) == 1 else ["127.0.0.2"]

    cache = FetchCache(tmp_path / "cache", allow=LAB, resolver=rebinding)
    url = f"http://files.lab.test:{port}/a.txt"  # a name the system resolver does not know
    assert cache.get(url)[::2] == (b"by name", "url")
    assert lookups == ["files.lab.test"], "the connection must not look the name up again"
    assert (asked, hosts) == (["/a.txt"], [f"files.lab.test:{port}"])

    def mixed(host: str, _port: int) -> list[str]:
        return ["127.0.0.1", "10.0.0.5"]

    with pytest.raises(FetchFailed, match="resolves to 10.0.0.5: 10.0.0.5 is a private address"):
        FetchCache(tmp_path / "cache2", allow=LAB, resolver=mixed).get(f"http://other.lab.test:{port}/a.txt")
    assert asked == ["/a.txt"]


def test_the_operators_allowance_is_read_from_the_environment_and_a_bad_one_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: tuple[str, list[str]]
) -> None:
    base, _ = server
    (tmp_path / "www" / "a.txt").write_bytes(b"lab file")
    monkeypatch.setenv("SANDBOX_FETCH_ALLOW_NETS", "127.0.0.0/8, fd00:1::/64")
    assert FetchCache.from_env(tmp_path / "c1").get(f"{base}/a.txt")[::2] == (b"lab file", "url")
    monkeypatch.setenv("SANDBOX_FETCH_ALLOW_NETS", "10.0.0.0/8,lab-server")
    with pytest.raises(SandboxError, match="SANDBOX_FETCH_ALLOW_NETS: 'lab-server' is not a network"):
        FetchCache.from_env(tmp_path / "c2")


def test_the_hosts_fetch_call_refuses_a_literal_loopback_url_as_the_callers_error(tmp_path: Path) -> None:
    class NoPool:
        async def run(self, *args: object) -> None:
            raise AssertionError("a refused URL must not reach the sandbox")

    cache = FetchCache(tmp_path / "cache")
    for url in (
        "http://127.0.0.1:8000/admin/",
        "http://localhost/x",
        "http://[::1]/x",
        "http://192.168.1.1/",
    ):
        with pytest.raises(SandboxError, match=re.escape(f"fetch: url {url} is refused")):
            asyncio.run(fetch_for_lease(NoPool(), "lease", cache, {"url": url}))  # type: ignore[arg-type]
