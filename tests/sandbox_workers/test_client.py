"""The host client's own checks, against a fake host at the HTTP boundary (the real host is in
test_host_service.py): a mock transport, or a real HTTP server on loopback that answers slowly."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from agent_core.actions import Terminal
from sandbox_workers.base import EnvError
from sandbox_workers.client import HostClient, HostUnreachable, LeaseInfo


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


# --- a host that is up but slow to answer (issue 34: "unreachable: timed out" while it was up) ------


@pytest.fixture
def slow_host() -> Iterator[tuple[str, dict[str, float]]]:
    """A real HTTP server on loopback that answers each path after the delay set for it (seconds)."""
    delays: dict[str, float] = {}
    lease = {"id": "L1", "sandbox_id": "s1", "profile": "desktop", "provider": "xdesktop",
             "expires_at": time.time() + 60, "endpoints": {}}  # fmt: skip
    shot = {
        "data": base64.b64encode(b"png").decode(),
        "format": "png",
        "width": 1,
        "height": 1,
        "captured_at": 0,
    }

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            time.sleep(delays.get(self.path, 0.0))
            body = json.dumps(lease if self.path == "/v1/leases" else {"screenshot": shot}).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except BrokenPipeError:  # the client gave up on it (what one test wants)
                pass

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", delays
    server.shutdown()
    server.server_close()


def test_a_lease_request_gets_the_wait_it_asks_for_and_more(slow_host: tuple[str, dict[str, float]]) -> None:
    url, delays = slow_host
    delays["/v1/leases"] = 1.5  # the host waited for a sandbox to free up, within the wait asked for
    with HostClient(url, "token-0123456789abcdef", timeout=1.0) as client:
        assert client.acquire("desktop", holder="t", wait_s=1.2).info.id == "L1"


def test_a_command_action_gets_its_own_time_to_answer(slow_host: tuple[str, dict[str, float]]) -> None:
    url, delays = slow_host
    delays["/v1/leases/L1/act"] = 1.5
    with HostClient(url, "token-0123456789abcdef", timeout=1.0) as client:
        sandbox = client.acquire("desktop", holder="t")
        assert sandbox.act(Terminal(command="sleep 1", timeout=1.2)).screenshot.width == 1


def test_a_host_that_answers_too_late_is_not_called_unreachable(
    slow_host: tuple[str, dict[str, float]],
) -> None:
    url, delays = slow_host
    delays["/v1/leases/L1/observe"] = 2.0
    with HostClient(url, "token-0123456789abcdef", timeout=0.5) as client:
        sandbox = client.acquire("desktop", holder="t")
        with pytest.raises(HostUnreachable) as info:
            sandbox.observe()
    assert "took the request but did not answer within 0.5 s" in str(info.value)
    assert "unreachable" not in str(info.value)
