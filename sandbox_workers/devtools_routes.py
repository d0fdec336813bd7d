"""A leased desktop's Chromium DevTools as an endpoint OSWorld's getters can `connect_over_cdp` to.

The holder of a lease asks for it (`POST /v1/leases/<lease>/call {"method": "devtools"}`) and gets
`{"endpoint": "<host url>/v1/devtools/<ticket>"}`: a random ticket, good while that lease holds its
sandbox (and an hour at most). Under it, as Chromium's own HTTP endpoint has them:

    GET <endpoint>/json/version   → {"Browser", "Protocol-Version", "webSocketDebuggerUrl"}
    GET <endpoint>/browser        → the WebSocket, bridged to the browser's pipe (sandbox_workers.devtools)

The ticket is the credential (a DevTools client such as Playwright sends no bearer token), so these
paths skip the host token; the ticket is only ever handed to the lease's holder. {"endpoint": null,
"reason"} when the desktop has no Chromium the host started.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

from sandbox_workers.base import OperationUnsupported, Provider
from sandbox_workers.devtools import DevToolsBusy, DevToolsPipe
from sandbox_workers.pool import Pool
from sandbox_workers.pool_upkeep import State

PREFIX = "/v1/devtools/"
TICKET_S = 3600.0
routes = web.RouteTableDef()


@dataclass
class _Ticket:
    pipe: DevToolsPipe
    holds: Callable[[], bool]  # the lease (or the local sandbox) still holds the browser
    expires: float

    def valid(self) -> bool:
        return time.monotonic() < self.expires and self.pipe.alive and self.holds()


TICKETS: web.AppKey[dict[str, _Ticket]] = web.AppKey("devtools_tickets", dict)


def setup_devtools(app: web.Application) -> None:
    app[TICKETS] = {}
    app.add_routes(routes)


def _issue(app: web.Application, pipe: DevToolsPipe, holds: Callable[[], bool], base_url: str) -> str:
    tickets = app[TICKETS]
    for key in [k for k, t in tickets.items() if not t.valid()]:
        del tickets[key]
    ticket = secrets.token_urlsafe(24)
    tickets[ticket] = _Ticket(pipe, holds, time.monotonic() + TICKET_S)
    return f"{base_url.rstrip('/')}{PREFIX}{ticket}"


async def devtools_ticket(app: web.Application, pool: Pool, lease_id: str, base_url: str) -> dict[str, Any]:
    """The lease's DevTools endpoint (the host's `devtools` call)."""
    try:
        pipe = await pool.run(lease_id, "call:devtools", lambda p: p.devtools())
    except OperationUnsupported as exc:
        return {"endpoint": None, "reason": str(exc)}
    sandbox_id = pool.lease(lease_id).sandbox_id

    def holds() -> bool:
        m = pool.sandboxes.get(sandbox_id)
        return m is not None and m.lease_id == lease_id and m.state == State.LEASED

    return {"endpoint": _issue(app, pipe, holds, base_url)}


class _LocalServer:
    """The same endpoints for sandboxes driven in this process (no sandbox host between: tests, local
    rollouts), on loopback, from a thread of their own."""

    _instance: _LocalServer | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.app = web.Application()
        setup_devtools(self.app)
        self.loop = asyncio.new_event_loop()
        started: concurrent.futures.Future[str] = concurrent.futures.Future()
        threading.Thread(target=self._main, args=(started,), name="devtools-local", daemon=True).start()
        self.url = started.result(timeout=30)

    def _main(self, started: concurrent.futures.Future[str]) -> None:
        asyncio.set_event_loop(self.loop)
        runner = web.AppRunner(self.app)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        port = runner.addresses[0][1]
        started.set_result(f"http://127.0.0.1:{port}")
        self.loop.run_forever()

    @classmethod
    def get(cls) -> _LocalServer:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance


def local_devtools(provider: Provider) -> dict[str, Any]:
    """`devtools` for a sandbox driven in this process: its endpoint on a loopback server of ours,
    good until the sandbox resets or stops."""
    try:
        pipe = provider.devtools()
    except OperationUnsupported as exc:
        return {"endpoint": None, "reason": str(exc)}
    server = _LocalServer.get()
    endpoint = asyncio.run_coroutine_threadsafe(
        _issue_async(server.app, pipe, lambda: pipe.alive, server.url), server.loop
    ).result(timeout=30)
    return {"endpoint": endpoint}


async def _issue_async(
    app: web.Application, pipe: DevToolsPipe, holds: Callable[[], bool], base_url: str
) -> str:
    return _issue(app, pipe, holds, base_url)


def _pipe(request: web.Request) -> DevToolsPipe:
    ticket = request.app[TICKETS].get(request.match_info["ticket"])
    if ticket is None or not ticket.valid():
        message = "no such DevTools ticket (or its lease ended)"
        raise web.HTTPNotFound(
            text=json.dumps({"error": {"type": "not_found", "message": message}}),
            content_type="application/json",
        )
    return ticket.pipe


@routes.get(PREFIX + "{ticket}/json/version")
@routes.get(PREFIX + "{ticket}/json/version/")
async def version(request: web.Request) -> web.Response:
    _pipe(request)
    scheme = "wss" if request.scheme == "https" else "ws"
    ws_url = f"{scheme}://{request.host}{PREFIX}{request.match_info['ticket']}/browser"
    return web.json_response(
        {"Browser": "Chromium", "Protocol-Version": "1.3", "webSocketDebuggerUrl": ws_url}
    )


@routes.get(PREFIX + "{ticket}/browser")
async def browser(request: web.Request) -> web.WebSocketResponse:
    """The DevTools WebSocket: text frames of JSON both ways, one client at a time."""
    pipe = _pipe(request)
    ws = web.WebSocketResponse(max_msg_size=64 << 20)
    await ws.prepare(request)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def deliver(message: dict[str, Any] | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closing
            loop.call_soon_threadsafe(queue.put_nowait, message)

    try:
        client = pipe.connect(deliver)
    except (DevToolsBusy, BrokenPipeError) as exc:
        await ws.close(code=1013, message=str(exc).encode()[:120])
        return ws

    async def forward() -> None:
        while (message := await queue.get()) is not None:
            await ws.send_str(json.dumps(message, separators=(",", ":")))
        await ws.close(code=1011, message=b"the browser's DevTools pipe closed")

    sender = asyncio.create_task(forward())
    try:
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                break
            with contextlib.suppress(ValueError):
                data = json.loads(msg.data)
                if isinstance(data, dict):
                    await loop.run_in_executor(None, client.command, data)
    except OSError:
        pass
    finally:
        sender.cancel()
        await loop.run_in_executor(None, client.close)
    return ws
