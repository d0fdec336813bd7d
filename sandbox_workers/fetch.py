"""Files a task's setup downloads (OSWorld's `download`, its `cloud_file` references), fetched by the
sandbox host, never by a sandbox: one content-addressed cache per host, shared by all its sandboxes,
with an offline mirror looked at first.

    <cache>/blobs/<sha256 of the content>     the bytes, written once (atomically)
    <cache>/urls/<sha256 of the URL>          the content's sha256 for that URL

A mirror (`SANDBOX_FETCH_MIRROR`: a folder, or an http(s) base URL) holds each file at
`by-url/<sha256 of the URL>`; `python -m sandbox_workers.fetch add MIRROR URL FILE` puts one there.
With `SANDBOX_FETCH_OFFLINE=1` the original URL is never tried. A file that cannot be had raises
`FetchFailed` naming the URL and what each source answered: the task cannot start (an env error),
it is never skipped silently.

The URL itself is fetched from public addresses only (`fetch_net`: every address its name resolves to
is checked, the connection goes to a checked one, redirects are checked again): never loopback,
private, link-local or multicast ones, unless the operator's `SANDBOX_FETCH_ALLOW_NETS` names their
network (a lab's own file server). The mirror is the operator's and is trusted (it may be on loopback).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent_core.tasks.mirror import url_key
from agent_core.tasks.public_urls import IPNetwork, allowed_networks, literal_refusal
from sandbox_workers.base import EnvError, SandboxError
from sandbox_workers.fetch_net import AddressPolicy, Resolver, download, system_resolver

if TYPE_CHECKING:
    from sandbox_workers.pool import Pool

MAX_BYTES = 512 * 1024 * 1024
TIMEOUT_S = 120.0


class FetchFailed(EnvError):
    """A file could not be had from the cache, the mirror or its URL; the message names the URL."""


class FetchCache:
    """The host's download cache (thread-safe: one fetch per URL at a time)."""

    def __init__(
        self,
        root: Path,
        *,
        mirror: str = "",
        offline: bool = False,
        max_bytes: int = MAX_BYTES,
        allow: Sequence[IPNetwork] = (),
        resolver: Resolver = system_resolver,
    ) -> None:
        self.root = root
        self.mirror = mirror.rstrip("/")
        self.offline = offline
        self.max_bytes = max_bytes
        self.policy = AddressPolicy(allow=tuple(allow), resolver=resolver)
        """Where the URLs themselves may be fetched from (public addresses, and `allow`)."""
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        for sub in ("blobs", "urls", "tmp"):
            (root / sub).mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_env(cls, root: Path) -> FetchCache:
        """The cache under `root` configured by SANDBOX_FETCH_MIRROR, SANDBOX_FETCH_OFFLINE and
        SANDBOX_FETCH_ALLOW_NETS (SandboxError naming a bad entry of the last)."""
        try:
            allow = allowed_networks()
        except ValueError as exc:
            raise SandboxError(str(exc)) from None
        return cls(
            root,
            mirror=os.environ.get("SANDBOX_FETCH_MIRROR", ""),
            offline=os.environ.get("SANDBOX_FETCH_OFFLINE", "") not in ("", "0"),
            allow=allow,
        )

    def get(self, url: str, *, timeout: float = TIMEOUT_S) -> tuple[bytes, str, str]:
        """(content, its sha256, where it came from: cache, mirror or url)."""
        key = url_key(url)
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            cached = self._cached(key)
            if cached is not None:
                return cached, hashlib.sha256(cached).hexdigest(), "cache"
            tried = []
            sources = []
            if self.mirror:
                sources.append(("mirror", f"{self.mirror}/by-url/{key}"))
            if not self.offline:
                sources.append(("url", url))
            for name, source in sources:
                try:
                    data = self._read(source, timeout, checked=name == "url")
                except (OSError, ValueError) as exc:
                    tried.append(f"{name} {source}: {exc}")
                    continue
                digest = self._store(key, data)
                return data, digest, name
            if not sources:
                tried.append("no mirror is configured and SANDBOX_FETCH_OFFLINE forbids the network")
            raise FetchFailed(f"cannot fetch {url}: " + "; ".join(tried))

    def _cached(self, key: str) -> bytes | None:
        try:
            digest = (self.root / "urls" / key).read_text().strip()
            data = (self.root / "blobs" / digest).read_bytes()
        except OSError:
            return None
        return data if hashlib.sha256(data).hexdigest() == digest else None

    def _read(self, source: str, timeout: float, *, checked: bool) -> bytes:
        """The bytes of a mirror's file or URL (`checked`: the address policy applies, for a task's URL)."""
        if not source.startswith(("http://", "https://")):
            path = Path(source.removeprefix("file://"))
            if path.stat().st_size > self.max_bytes:
                raise ValueError(f"larger than {self.max_bytes} bytes")
            return path.read_bytes()
        return download(
            source, timeout=timeout, max_bytes=self.max_bytes, policy=self.policy if checked else None
        )

    def _store(self, key: str, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        for target, content in (
            (self.root / "blobs" / digest, data),
            (self.root / "urls" / key, digest.encode()),
        ):
            if target.parent.name == "blobs" and target.exists():
                continue
            fd, tmp = tempfile.mkstemp(dir=self.root / "tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            os.replace(tmp, target)
        return digest


async def fetch_for_lease(
    pool: Pool, lease: str, cache: FetchCache, params: Mapping[str, Any]
) -> dict[str, Any]:
    """The host's `fetch {url, path?, timeout?}` call on a lease: the file fetched (cache, mirror, then the
    URL) and written into the sandbox at `path`, or, without a path, returned (base64) to the caller."""
    url, path = params.get("url"), params.get("path")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise SandboxError("fetch: url must be an http(s) URL")
    why = literal_refusal(url, cache.policy.allow)
    if why:
        raise SandboxError(f"fetch: url {url} is refused: {why} (a task's files come from public hosts only)")
    if path is not None and (not isinstance(path, str) or not path):
        raise SandboxError("fetch: path must be a non-empty string")
    timeout = params.get("timeout", TIMEOUT_S)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 1 <= timeout <= 600:
        raise SandboxError("fetch: timeout must be a number of seconds in [1, 600]")
    await pool.run(lease, "call:fetch", lambda p: None)  # the lease is valid before the network is used
    data, digest, source = await asyncio.get_running_loop().run_in_executor(
        None, lambda: cache.get(url, timeout=float(timeout))
    )
    result: dict[str, Any] = {"url": url, "size": len(data), "sha256": digest, "source": source}
    if path is None:
        return {**result, "content_b64": base64.b64encode(data).decode("ascii")}
    await pool.run(lease, "call:fetch", lambda p: p.put_file(path, data))
    return {**result, "path": path}


def mirror_add(mirror: Path, url: str, file: Path) -> Path:
    """Put `file` in a mirror folder as the content of `url`."""
    target = mirror / "by-url" / url_key(url)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(file, target)
    return target


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m sandbox_workers.fetch", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    add = sub.add_parser("add", help="put a file in a mirror folder as the content of a URL")
    add.add_argument("mirror", type=Path)
    add.add_argument("url")
    add.add_argument("file", type=Path)
    args = p.parse_args(argv)
    print(mirror_add(args.mirror, args.url, args.file))


if __name__ == "__main__":
    main()
