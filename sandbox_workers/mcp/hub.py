"""A sandbox's MCP hub: one client session (the official SDK's) per MCP server the sandbox runs.

The servers run INSIDE the sandbox (its `Spawner` starts them confined, with stdin, stdout and stderr
piped); the hub, on the host, speaks MCP to them over those pipes. A server starts on its first use;
one that has exited (killed, crashed) is started again on the next use. The SDK is async: every
session lives on one process-wide asyncio thread (`McpLoop`), as the browser sandboxes' Playwright
does, and the sandbox's worker thread waits on it with a deadline, so a step never hangs.

What is the agent's doing and what is the machinery's:
- an unknown server or tool, arguments that are not a JSON object, a call that times out, a server
  that exits during the call: `McpToolError` (a `SandboxError`; `perform` makes it an invalid step);
- a tool that reports an error (bad arguments, a tool that raises): a result with `is_error` true;
- a server that cannot be started at all (the sandbox's Python cannot import the SDK, a bind it needs
  cannot be read, no answer in time): `McpServerUnavailable`, a tool error too. The tool is missing,
  not the computer: the sandbox, its screen and its lease go on (a person sees the error in the Tools
  panel, an agent an invalid step with the reason), and the next use tries to start it again. Only the
  spawner's `EnvError` (the sandbox's own session is gone) is the machinery failing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import anyio
from mcp import ClientSession, McpError
from mcp import types as mt
from mcp.shared.message import SessionMessage

from sandbox_workers.base import ActionFailed, EnvError, SandboxError

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_LINE = 32 << 20
"""Longest JSON-RPC message (one line) a server may send."""
STDERR_TAIL = 4000
"""Characters of a server's stderr kept to explain a failed start."""
_READ_TIMEOUT = 408
"""The error code the SDK's session gives a request past its read timeout (httpx.codes.REQUEST_TIMEOUT)."""


@dataclass(frozen=True)
class ServerSpec:
    """A named MCP server: the module of `sandbox_workers.mcp.servers` that runs it, and what it offers."""

    name: str
    module: str
    summary: str


SERVERS: dict[str, ServerSpec] = {
    s.name: s
    for s in (
        ServerSpec("files", "files", "list, read, write and search workspace files"),
        ServerSpec("shell", "shell", "run a bash command in the sandbox"),
        ServerSpec("records", "records", "read-only lookup over a JSON file of records in the workspace"),
    )
}


class McpToolError(ActionFailed):
    """An MCP call refused or failed for a reason of the call's own: the agent's invalid step."""


class McpServerUnavailable(McpToolError):
    """An MCP server could not be started: its tools are unavailable, the sandbox itself is fine (the host
    must not replace it, nor the web app fail the episode for it)."""


def server_spec(name: str) -> ServerSpec:
    """The server called `name`; an unknown name raises McpToolError listing the valid ones."""
    try:
        return SERVERS[name]
    except KeyError:
        raise McpToolError(f"unknown MCP server {name!r}; valid: {', '.join(sorted(SERVERS))}") from None


Spawner = Callable[[ServerSpec], subprocess.Popen[bytes]]
"""Starts a server's process in the sandbox, with stdin, stdout and stderr piped: EnvError where the
sandbox's session is gone, McpServerUnavailable (or any other error) where this server cannot start."""


class McpLoop:
    """A daemon thread running the asyncio loop every hub's sessions live on."""

    _instance: McpLoop | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="mcp-loop", daemon=True)
        self._thread.start()

    @classmethod
    def get(cls) -> McpLoop:
        """The process-wide loop, started on first use."""
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def run(self, coro_fn: Callable[[], Awaitable[T]], *, timeout: float) -> T:
        """`coro_fn()` run on the loop; TimeoutError (and the coroutine cancelled) after `timeout` s."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("McpLoop.run called from the loop thread (would deadlock)")

        async def bounded() -> T:
            return await asyncio.wait_for(coro_fn(), timeout)

        future = asyncio.run_coroutine_threadsafe(bounded(), self.loop)
        try:
            return future.result(timeout + 5)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer in {timeout:g} s") from None

    def soon(self, fn: Callable[[], object]) -> None:
        """Call `fn` on the loop thread."""
        self.loop.call_soon_threadsafe(fn)


@dataclass(eq=False)
class _Server:
    """One running server: its process, its session (once initialised) and the task that owns both."""

    spec: ServerSpec
    popen: subprocess.Popen[bytes]
    session: ClientSession | None = None
    tools: list[mt.Tool] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    stop: asyncio.Event | None = None
    ended: bool = False
    stderr: str = ""

    def alive(self) -> bool:
        return not self.ended and self.popen.poll() is None

    def why_gone(self) -> str:
        code = self.popen.poll()
        return f"it exited with code {code}" if code is not None else "its connection closed"


class _PipeWriter(asyncio.Protocol):
    """The write end of a server's stdin (asyncio's pipe transport; the messages are small)."""


class McpHub:
    """The MCP servers of one sandbox: started lazily, listed, called, restarted, closed."""

    def __init__(
        self,
        *,
        spawner: Spawner,
        allowed: Sequence[str],
        start_timeout: float = 20.0,
        call_timeout: float = 30.0,
        label: str = "",
    ) -> None:
        for name in allowed:
            if name not in SERVERS:
                raise SandboxError(
                    f"mcp_servers: unknown server {name!r}; valid: {', '.join(sorted(SERVERS))}"
                )
        self.allowed = tuple(allowed)
        self.start_timeout = start_timeout
        self.call_timeout = call_timeout
        self.label = label or "sandbox"
        self._spawner = spawner
        self._servers: dict[str, _Server] = {}
        self._loop = McpLoop.get()

    # --- what the provider calls ------------------------------------------------------------------
    def tools(self, servers: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Every tool of the allowed servers (of those of them in `servers` when given), as the servers
        list them: {server, name, description, input_schema}; the servers are started if they do not run."""
        out = []
        names = [n for n in self.allowed if servers is None or n in servers]
        self._start_missing(names)  # at once: each takes a second or so to import the SDK
        for name in names:
            for tool in self._running(name).tools:
                out.append(
                    {
                        "server": name,
                        "name": tool.name,
                        "description": (tool.description or "").strip(),
                        "input_schema": tool.inputSchema,
                    }
                )
        return out

    def tools_call(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The provider call `mcp_tools` {servers?: [names]} → {tools: [...]} (see `tools`)."""
        servers = params.get("servers")
        if servers is not None and not (
            isinstance(servers, list) and all(isinstance(s, str) for s in servers)
        ):
            raise SandboxError("mcp_tools: servers must be a list of server names")
        return {"tools": self.tools(servers)}

    def call(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Call `tool` of `server`: {server, tool, content (its text), is_error, structured}.

        McpToolError for an unknown or disallowed server, an unknown tool, a timeout or a server that
        exits during the call (it is started again on the next call)."""
        spec = server_spec(server)
        if server not in self.allowed:
            valid = ", ".join(self.allowed) or "none"
            raise McpToolError(f"the MCP server {server!r} is not available in this sandbox; valid: {valid}")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise McpToolError(f"arguments must be a JSON object, not {type(arguments).__name__}")
        srv = self._running(spec.name)
        names = [t.name for t in srv.tools]
        if tool not in names:
            raise McpToolError(f"the MCP server {server!r} has no tool {tool!r}; valid: {', '.join(names)}")
        limit = self.call_timeout if timeout is None else float(timeout)
        session = srv.session
        if session is None:  # it ended between the check and now
            self._stop(srv)
            raise McpToolError(
                f"{server}.{tool}: the server stopped ({srv.why_gone()}); it starts again next time"
            )
        t0 = time.monotonic()
        try:
            result = self._loop.run(
                lambda: session.call_tool(
                    tool, dict(arguments), read_timeout_seconds=timedelta(seconds=limit)
                ),
                timeout=limit + 2,
            )
        except (McpError, TimeoutError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            timed_out = isinstance(exc, TimeoutError) or (
                isinstance(exc, McpError) and exc.error.code == _READ_TIMEOUT
            )
            why = (
                f"no answer in {limit:g} s"
                if timed_out
                else f"the server stopped during the call ({srv.why_gone()})"
            )
            # A server that does not answer may be stuck in the tool: it is stopped, and starts afresh.
            self._stop(srv)
            raise McpToolError(f"{server}.{tool}: {why}; the server starts again on the next call") from None
        log.debug("%s: %s.%s in %.0f ms", self.label, server, tool, (time.monotonic() - t0) * 1000)
        texts = [c.text if isinstance(c, mt.TextContent) else f"[{c.type} content]" for c in result.content]
        return {
            "server": server,
            "tool": tool,
            "content": "\n".join(texts),
            "is_error": bool(result.isError),
            "structured": result.structuredContent,
        }

    def running(self) -> list[str]:
        """The servers whose processes run now."""
        return [name for name, srv in list(self._servers.items()) if srv.alive()]

    def pids(self) -> list[int]:
        """Host pids of the servers' processes (bwrap's; their namespaces' are the provider's to find)."""
        # A copy first: the pool's checks call this from their own thread while the sandbox's may start one.
        return [srv.popen.pid for srv in list(self._servers.values()) if srv.popen.poll() is None]

    def close(self) -> None:
        """Stop every server (safe twice); the next use starts them again."""
        for srv in list(self._servers.values()):
            self._stop(srv)

    # --- starting and stopping --------------------------------------------------------------------
    def _running(self, name: str) -> _Server:
        self._start_missing([name])
        return self._servers[name]

    def _start_missing(self, names: Sequence[str]) -> None:
        """Start those of `names` that do not run (again, for one that exited), all at once."""
        t0 = time.monotonic()
        starting: list[_Server] = []
        for name in names:
            srv = self._servers.get(name)
            if srv is not None and srv.alive() and srv.session is not None:
                continue
            if srv is not None:
                log.warning(
                    "%s: the MCP server %s is gone (%s); starting it again", self.label, name, srv.why_gone()
                )
                self._stop(srv)
            srv = _Server(SERVERS[name], self._spawn(SERVERS[name], started=starting))
            self._servers[name] = srv
            starting.append(srv)
        if not starting:
            return

        async def open_all() -> list[BaseException | None]:
            return await asyncio.gather(*(self._open(srv) for srv in starting), return_exceptions=True)

        try:
            outcomes = self._loop.run(open_all, timeout=self.start_timeout)
        except TimeoutError:
            outcomes = [None if srv.tools else TimeoutError() for srv in starting]
        failed = [(srv, exc) for srv, exc in zip(starting, outcomes, strict=True) if exc is not None]
        if failed:
            for srv in starting:
                self._stop(srv)
            srv, exc = failed[0]
            why = f"no answer in {self.start_timeout:g} s" if isinstance(exc, TimeoutError) else repr(exc)
            tail = srv.stderr.strip()[-1500:] or "(no output)"
            log.warning("%s: the MCP server %s could not start: %s", self.label, srv.spec.name, why)
            raise McpServerUnavailable(
                f"the MCP server {srv.spec.name!r} could not start: {why}; its stderr: {tail}; the next use "
                "tries to start it again"
            ) from exc
        log.info(
            "%s: MCP server(s) %s started in %.0f ms",
            self.label, ", ".join(srv.spec.name for srv in starting), (time.monotonic() - t0) * 1000,
        )  # fmt: skip

    def _spawn(self, spec: ServerSpec, *, started: Sequence[_Server]) -> subprocess.Popen[bytes]:
        """`spec`'s process from the spawner; where it cannot start, those `started` with it are stopped
        and the cause raised: EnvError as it is (the sandbox's session is gone), anything else as the
        server's being unavailable."""
        try:
            return self._spawner(spec)
        except BaseException as exc:
            for srv in started:
                self._stop(srv)
            if isinstance(exc, EnvError | McpToolError) or not isinstance(exc, Exception):
                raise
            raise McpServerUnavailable(
                f"the MCP server {spec.name!r} could not start: {exc}; the next use tries to start it again"
            ) from exc

    async def _open(self, srv: _Server) -> None:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Read even when nobody awaits it any more (a start past its timeout fails later).
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        srv.stop = asyncio.Event()
        srv.task = asyncio.ensure_future(self._serve(srv, ready))
        await asyncio.shield(ready)
        assert srv.session is not None
        srv.tools = list((await srv.session.list_tools()).tools)

    async def _serve(self, srv: _Server, ready: asyncio.Future[None]) -> None:
        """The server's lifetime: pipes ⇄ SDK streams, the session, until stopped or the server exits."""
        assert srv.stop is not None and srv.popen.stdin and srv.popen.stdout and srv.popen.stderr
        loop = asyncio.get_running_loop()
        transports: list[asyncio.BaseTransport] = []
        try:
            out = asyncio.StreamReader(limit=MAX_LINE)
            err = asyncio.StreamReader(limit=MAX_LINE)
            for reader, pipe in ((out, srv.popen.stdout), (err, srv.popen.stderr)):
                t, _ = await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r), pipe)  # type: ignore[misc]
                transports.append(t)
            stdin, _ = await loop.connect_write_pipe(_PipeWriter, srv.popen.stdin)
            transports.append(stdin)
            read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

            async def from_server() -> None:
                async with read_send:
                    while line := await out.readline():
                        try:
                            message = mt.JSONRPCMessage.model_validate_json(line)
                        except ValueError as exc:
                            await read_send.send(exc)
                            continue
                        await read_send.send(SessionMessage(message))
                # Closing the stream ends the session's receive loop, which fails the pending requests
                # ("Connection closed"); the session itself is ended by `_stop` (a call's or the next use's).
                srv.ended = True

            async def to_server() -> None:
                async with write_recv:
                    async for message in write_recv:
                        data = message.message.model_dump_json(by_alias=True, exclude_none=True)
                        stdin.write((data + "\n").encode())

            async def stderr_tail() -> None:
                while chunk := await err.read(4096):
                    srv.stderr = (srv.stderr + chunk.decode("utf-8", "replace"))[-STDERR_TAIL:]

            async def watch_exit() -> None:
                while srv.popen.poll() is None:
                    await asyncio.sleep(0.1)
                # What the server started may outlive it and hold its pipes (bwrap's init waits for all
                # its children): the whole tree goes, so its stdout ends and a pending call fails now.
                await loop.run_in_executor(None, _kill, srv.popen)

            async with anyio.create_task_group() as tg:
                tg.start_soon(from_server)
                tg.start_soon(to_server)
                tg.start_soon(stderr_tail)
                tg.start_soon(watch_exit)
                async with ClientSession(read_recv, write_send) as session:
                    await session.initialize()
                    srv.session = session
                    ready.set_result(None)
                    await srv.stop.wait()
                tg.cancel_scope.cancel()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(
                    _leaf(exc) if isinstance(exc, Exception) else EnvError("stopped while starting")
                )
            if not isinstance(exc, Exception):
                raise
            log.debug("%s: MCP server %s session ended: %r", self.label, srv.spec.name, exc)
        finally:
            srv.ended = True
            srv.session = None
            for transport in transports:
                transport.close()

    def _stop(self, srv: _Server) -> None:
        """Kill the server's process tree and end its session task (both bounded in time)."""
        if self._servers.get(srv.spec.name) is srv:
            del self._servers[srv.spec.name]
        srv.ended = True
        _kill(srv.popen)
        task, stop = srv.task, srv.stop
        if task is not None and stop is not None:
            self._loop.soon(stop.set)

            async def ended() -> None:
                await asyncio.wait([task], timeout=5)

            with contextlib.suppress(TimeoutError, RuntimeError):
                self._loop.run(ended, timeout=6)
        for pipe in (srv.popen.stdin, srv.popen.stdout, srv.popen.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _kill(popen: subprocess.Popen[bytes]) -> None:
    """SIGKILL a server's whole process tree (a sandbox process's pid namespace) and reap it."""
    kill_tree = getattr(popen, "kill_tree", None)
    with contextlib.suppress(OSError):
        if callable(kill_tree):
            kill_tree()
        elif popen.poll() is None:
            popen.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(5)


def _leaf(exc: Exception) -> Exception:
    """The first exception inside (nested) exception groups: what anyio's task groups wrap."""
    while isinstance(exc, ExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
