"""The host client's own checks, against a fake host at the HTTP boundary (the real host is in
test_host_service.py)."""

from __future__ import annotations

import httpx
import pytest

from sandbox_workers.base import EnvError
from sandbox_workers.client import HostClient, LeaseInfo


def leased(handler: httpx.MockTransport) -> tuple[HostClient, LeaseInfo]:
    client = HostClient("http://host.test", "token-0123456789abcdef")
    client._http = httpx.Client(base_url="http://host.test", transport=handler)
    info = LeaseInfo(
        id="L1", sandbox_id="s1", profile="desktop", provider="xdesktop", expires_at=0, endpoints={}
    )
    return client, info


def test_an_upload_the_host_kept_only_part_of_is_an_env_error():
    seen: list[int] = []

    def truncating_host(request: httpx.Request) -> httpx.Response:
        seen.append(len(request.read()))
        return httpx.Response(201, json={"path": request.url.params["path"], "size": 128_000})

    client, info = leased(httpx.MockTransport(truncating_host))
    with pytest.raises(EnvError, match="kept 128000 of the 1048576 bytes"):
        client.lease(info).put_file("big.bin", b"\0" * (1 << 20))
    assert seen == [1 << 20]


def test_an_upload_kept_whole_passes():
    def host(request: httpx.Request) -> httpx.Response:
        return httpx.Response(201, json={"path": "a", "size": len(request.read())})

    client, info = leased(httpx.MockTransport(host))
    client.lease(info).put_file("a", b"x" * 5000)
