"""The sandbox host service: one per machine, an HTTP + WebSocket API over the pool.

    python -m sandbox_workers.host --port 8100 --name host-a --web-url http://127.0.0.1:8000

Every request carries `Authorization: Bearer <SANDBOX_HOST_TOKEN>`. Errors are JSON
`{"error": {"type": …, "message": …}}`; `type` "env_error" means the sandbox machinery failed and a
rollout must record the episode as an env error, not an agent failure.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import hmac
import logging
import os
import signal
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from agent_core.actions import ActionError, action_from_dict
from sandbox_workers import reaper
from sandbox_workers.base import (
    ActionFailed,
    ActionUnsupported,
    EnvError,
    Observation,
    OperationUnsupported,
    SandboxBrokenByAgent,
    SandboxError,
    SandboxPathError,
    perform,
)
from sandbox_workers.devtools_routes import PREFIX as DEVTOOLS_PREFIX
from sandbox_workers.devtools_routes import devtools_ticket, setup_devtools
from sandbox_workers.fetch import FetchCache, fetch_for_lease
from sandbox_workers.heartbeat import heartbeat_forever
from sandbox_workers.host_bodies import MAX_UPLOAD, body, upload
from sandbox_workers.live.relay import (
    live_sockets_track,
    live_streams,
    relay_screencast,
    relay_vnc,
    screencast_params,
)
from sandbox_workers.pool import LeaseBroken, LeaseNotFound, Pool, SandboxUnavailable
from sandbox_workers.profiles import load_pool_configs
from sandbox_workers.providers import host_files

log = logging.getLogger("sandbox_workers.host")
VERSION = "1"
POOL: web.AppKey[Pool] = web.AppKey("pool", Pool)
CONFIG: web.AppKey[dict[str, Any]] = web.AppKey("config", dict)

# Error type → (HTTP status, JSON type). Order matters: subclasses first.
ERRORS: list[tuple[type[Exception], int, str]] = [
    (LeaseBroken, 410, "env_error"),
    (EnvError, 502, "env_error"),
    (LeaseNotFound, 404, "lease_not_found"),
    (SandboxUnavailable, 503, "sandbox_unavailable"),
    (SandboxPathError, 400, "bad_path"),
    (ActionUnsupported, 422, "action_unsupported"),
    (ActionFailed, 422, "action_failed"),
    (SandboxBrokenByAgent, 409, "broken_by_agent"),
    (OperationUnsupported, 422, "operation_unsupported"),
    (ActionError, 400, "bad_action"),
    (SandboxError, 400, "sandbox_error"),
]


def error_response(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"error": {"type": kind, "message": message}}, status=status)


@web.middleware
async def auth_and_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Check the bearer token (except /health), and turn typed errors into JSON answers."""
    if request.path != "/health" and not request.path.startswith(DEVTOOLS_PREFIX):  # a ticket instead
        token: str = request.app[CONFIG]["token"]
        given = request.headers.get("Authorization", "")
        if not given.startswith("Bearer ") or not hmac.compare_digest(given[7:].encode(), token.encode()):
            return error_response(
                401, "unauthorized", "a valid 'Authorization: Bearer <host token>' is required"
            )
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as exc:
        for cls, status, kind in ERRORS:
            if isinstance(exc, cls):
                return error_response(status, kind, str(exc))
        log.exception("%s %s failed", request.method, request.path)
        return error_response(500, "internal", f"{type(exc).__name__}: {exc}")


def number(data: Mapping[str, Any], key: str, default: float, *, low: float, high: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise SandboxError(f"{key} must be a number in [{low:g}, {high:g}]")
    return float(value)


def observation_json(obs: Observation) -> dict[str, Any]:
    shot = obs.screenshot
    return {
        "screenshot": {
            "format": shot.format,
            "width": shot.width,
            "height": shot.height,
            "captured_at": shot.captured_at,
            "data": base64.b64encode(shot.data).decode("ascii"),
        },
        "a11y": obs.a11y,
        "dom": obs.dom,
        "info": dict(obs.info),
    }


def observe_args(data: Mapping[str, Any]) -> dict[str, Any]:
    fmt = data.get("fmt", "png")
    if fmt not in ("png", "jpeg"):
        raise SandboxError("fmt must be 'png' or 'jpeg'")
    return {
        "fmt": fmt,
        "a11y": bool(data.get("a11y", False)),
        "quality": int(number(data, "quality", 80, low=1, high=100)),
    }


# --- routes --------------------------------------------------------------------------------------

routes = web.RouteTableDef()


@routes.get("/health")
async def health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "name": request.app[CONFIG]["name"], "version": VERSION})


@routes.get("/v1/status")
async def status(request: web.Request) -> web.Response:
    cfg = request.app[CONFIG]
    status = request.app[POOL].status()
    return web.json_response({"name": cfg["name"], "api_url": cfg["url"], **status, "live": live_streams()})


@routes.post("/v1/leases")
async def lease_acquire(request: web.Request) -> web.Response:
    data = await body(request)
    holder = data.get("holder")
    if not isinstance(holder, str) or not holder:
        raise SandboxError("holder must be a non-empty string")
    lease = await request.app[POOL].acquire(
        str(data.get("profile", "")),
        holder=holder,
        ttl_s=number(data, "ttl_s", 300, low=0.1, high=86400),
        wait_s=number(data, "wait_s", 0, low=0, high=600),
    )
    m = request.app[POOL].sandboxes[lease.sandbox_id]
    return web.json_response(
        {**lease.to_dict(), "provider": m.config.profile.provider, "endpoints": m.provider.endpoints()},
        status=201,
    )


@routes.post("/v1/leases/{lease}/renew")
async def lease_renew(request: web.Request) -> web.Response:
    data = await body(request) if request.can_read_body else {}
    ttl = number(data, "ttl_s", 0, low=0, high=86400) if "ttl_s" in data else None
    lease = await request.app[POOL].renew(request.match_info["lease"], ttl_s=ttl or None)
    return web.json_response(lease.to_dict())


@routes.delete("/v1/leases/{lease}")
async def lease_release(request: web.Request) -> web.Response:
    recycle = request.query.get("recycle") in ("1", "true")
    await request.app[POOL].release(request.match_info["lease"], recycle=recycle)
    return web.Response(status=204)


@routes.post("/v1/leases/{lease}/observe")
async def observe(request: web.Request) -> web.Response:
    args = observe_args(await body(request) if request.can_read_body else {})
    obs = await request.app[POOL].run(request.match_info["lease"], "observe", lambda p: p.observe(**args))
    return web.json_response(observation_json(obs))


@routes.post("/v1/leases/{lease}/act")
async def act(request: web.Request) -> web.Response:
    """Perform one action and answer with the screen after it, in the same response."""
    data = await body(request)
    action = action_from_dict(data.get("action"))  # type: ignore[arg-type]
    args = observe_args(data.get("observe") or {})

    def step(p: Any) -> Observation:
        # SDK actions have a result of their own; it rides along in the observation's info.
        result = perform(p, action)
        obs: Observation = p.observe(**args)
        if result is not None:
            obs = dataclasses.replace(obs, info={**obs.info, "result": result})
        return obs

    obs = await request.app[POOL].run(request.match_info["lease"], "act", step)
    return web.json_response(observation_json(obs))


@routes.post("/v1/leases/{lease}/exec")
async def exec_command(request: web.Request) -> web.Response:
    data = await body(request)
    command = data.get("command")
    if not (isinstance(command, str) and command) and not (
        isinstance(command, list) and command and all(isinstance(a, str) for a in command)
    ):
        raise SandboxError("command must be a non-empty string or a list of strings")
    timeout = number(data, "timeout", 30, low=0.1, high=3600)
    cap = int(number(data, "output_cap", 65536, low=1, high=16 * 1024 * 1024))
    result = await request.app[POOL].run(
        request.match_info["lease"], "exec", lambda p: p.exec(command, timeout=timeout, output_cap=cap)
    )
    return web.json_response(
        {
            "exit_code": result.exit_code,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "timed_out": result.timed_out,
            "truncated": result.truncated,
            "duration_s": result.duration_s,
        }
    )


@routes.put("/v1/leases/{lease}/files")
async def file_put(request: web.Request) -> web.Response:
    path = request.query.get("path", "")
    if not path:
        raise SandboxError("the query parameter 'path' is required")
    data = await upload(request, what="uploads")
    await request.app[POOL].run(request.match_info["lease"], "put_file", lambda p: p.put_file(path, data))
    return web.json_response({"path": path, "size": len(data)}, status=201)


@routes.get("/v1/leases/{lease}/files")
async def file_get(request: web.Request) -> web.Response:
    path = request.query.get("path", "")
    if not path:
        raise SandboxError("the query parameter 'path' is required")
    data = await request.app[POOL].run(request.match_info["lease"], "get_file", lambda p: p.get_file(path))
    return web.Response(body=data, content_type="application/octet-stream")


@routes.post("/v1/leases/{lease}/call")
async def call(request: web.Request) -> web.Response:
    data = await body(request)
    method, params = data.get("method"), data.get("params") or {}
    if not isinstance(method, str) or not isinstance(params, dict):
        raise SandboxError("method must be a string and params an object")
    if method == "fetch":  # by the host, never the sandbox: sandbox_workers.fetch
        pool, cache = request.app[POOL], request.app[CONFIG]["fetch_cache"]
        result = await fetch_for_lease(pool, request.match_info["lease"], cache, params)
        return web.json_response({"result": result})
    if method == "devtools":  # Chromium's DevTools, for the lease's holder: sandbox_workers.devtools_routes
        lease, url = request.match_info["lease"], request.app[CONFIG]["url"]
        result = await devtools_ticket(request.app, request.app[POOL], lease, url)
        return web.json_response({"result": result})
    result = await request.app[POOL].run(
        request.match_info["lease"], f"call:{method}", lambda p: p.call(method, params)
    )
    return web.json_response({"result": result})


@routes.post("/v1/leases/{lease}/snapshot")
async def snapshot(request: web.Request) -> web.Response:
    blob = await request.app[POOL].run(request.match_info["lease"], "snapshot", lambda p: p.snapshot())
    return web.Response(body=blob, content_type="application/octet-stream")


@routes.post("/v1/leases/{lease}/restore")
async def restore(request: web.Request) -> web.Response:
    blob = await upload(request, what="snapshots")
    await request.app[POOL].run(request.match_info["lease"], "restore", lambda p: p.restore(blob))
    return web.Response(status=204)


@routes.post("/v1/sandboxes/{sandbox}/reset")
async def admin_reset(request: web.Request) -> web.Response:
    await request.app[POOL].admin_reset(request.match_info["sandbox"])
    return web.Response(status=204)


@routes.post("/v1/sandboxes/{sandbox}/kill")
async def admin_kill(request: web.Request) -> web.Response:
    await request.app[POOL].admin_kill(request.match_info["sandbox"])
    return web.Response(status=204)


@routes.post("/v1/sandboxes/{sandbox}/dirty")
async def touched(request: web.Request) -> web.Response:
    """Something reached the sandbox outside a lease ({"reason"}): reset before its next lease."""
    data = await body(request)
    return web.json_response(request.app[POOL].touched(request.match_info["sandbox"], data.get("reason")))


@routes.get("/v1/sandboxes/{sandbox}/vnc")
async def vnc(request: web.Request) -> web.StreamResponse:
    """The sandbox's RFB stream over a WebSocket (binary both ways); see `relay_vnc` for its input."""
    pool = request.app[POOL]
    m = pool.managed(request.match_info["sandbox"])
    endpoint = m.provider.endpoints().get("vnc")
    if not endpoint:
        raise OperationUnsupported(f"{m.config.profile.provider} sandboxes have no VNC server")
    return await relay_vnc(request, Path(endpoint["socket"]), pool.live_input(m.id))


@routes.get("/v1/sandboxes/{sandbox}/screencast")
async def screencast(request: web.Request) -> web.StreamResponse:
    """JPEG frames of the sandbox's screen as binary WebSocket messages (?fps=, and ?width= for a
    thumbnail scaled to that many pixels wide)."""
    m = request.app[POOL].managed(request.match_info["sandbox"])
    fps, width = screencast_params(request.query)
    return await relay_screencast(request, m, fps=fps, width=width)


# --- the process ---------------------------------------------------------------------------------


def build_app(
    pool: Pool, *, name: str, url: str, token: str, fetch_cache: FetchCache | None = None
) -> web.Application:
    """The aiohttp application over a pool (the caller starts and stops the pool)."""
    app = web.Application(middlewares=[auth_and_errors], client_max_size=MAX_UPLOAD + 1024)
    app[POOL] = pool
    if fetch_cache is None:
        fetch_cache = FetchCache.from_env(Path(tempfile.mkdtemp(prefix="flywheel-fetch-")))
    app[CONFIG] = {"name": name, "url": url, "token": token, "fetch_cache": fetch_cache}
    app.add_routes(routes)
    setup_devtools(app)
    live_sockets_track(app)
    return app


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sandbox_workers.host", description=__doc__.splitlines()[0])
    p.add_argument("--bind", default=os.environ.get("SANDBOX_HOST_BIND", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("SANDBOX_HOST_PORT", "8100")))
    p.add_argument("--name", default=os.environ.get("SANDBOX_HOST_NAME", os.uname().nodename))
    p.add_argument(
        "--url", default=os.environ.get("SANDBOX_HOST_URL"), help="how the web app reaches this host"
    )
    p.add_argument(
        "--web-url", default=os.environ.get("FLYWHEEL_WEB_URL"), help="the web app to register with"
    )
    p.add_argument("--var-dir", default=os.environ.get("SANDBOX_HOST_VAR_DIR"))
    p.add_argument("--profiles", default=os.environ.get("SANDBOX_PROFILES"), help="JSON file or JSON text")
    p.add_argument("--slot-base", type=int, default=int(os.environ.get("SANDBOX_SLOT_BASE", "0")))
    p.add_argument("--heartbeat", type=float, default=5.0, help="seconds between heartbeats")
    p.add_argument(
        "--keep-sandboxes-on-exit",
        action="store_true",
        help="leave sandboxes running at exit so the next host process adopts them (rolling restart)",
    )
    p.add_argument(
        "--orphan-grace",
        type=float,
        default=float(os.environ.get("SANDBOX_ORPHAN_GRACE_S", "30")),
        help="seconds a host that died has for a restart to adopt its sandboxes before they are reaped",
    )
    return p.parse_args(argv)


async def serve(args: argparse.Namespace) -> None:
    token = os.environ.get("SANDBOX_HOST_TOKEN", "")
    if len(token) < 16:
        raise SystemExit("SANDBOX_HOST_TOKEN must be set to a secret of at least 16 characters")
    var = Path(args.var_dir or Path(os.environ.get("FLYWHEEL_VAR_DIR", "var")) / "sandbox-host" / args.name)
    var.mkdir(parents=True, exist_ok=True)
    # One host process per var dir, and none while the previous one's sandboxes are being reaped; the
    # watchdog reaps this one's if it dies without a restart taking over (reaper's docstring).
    await asyncio.to_thread(reaper.hold_host_lock, var)
    watchdog = reaper.start_watchdog(var, grace_s=args.orphan_grace)
    url = args.url or f"http://{args.bind}:{args.port}"
    started = time.monotonic()
    # Sandboxes run as uids of their own: the project's files they bind must be readable by them
    # whatever umask the checkout and the venv were made with (what cannot be fixed is logged here and
    # named by each sandbox's start error).
    await asyncio.to_thread(host_files.make_readable)
    pool = Pool(
        load_pool_configs(args.profiles),
        reaper.sandbox_root(var),
        slot_base=args.slot_base,
        state_file=var / "pool-state.json",
    )
    await pool.start()
    app = build_app(
        pool, name=args.name, url=url, token=token, fetch_cache=FetchCache.from_env(var / "fetch-cache")
    )
    # Viewer sockets are closed at shutdown; a request still running then gets 10 s to finish.
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=10)
    await runner.setup()
    await web.TCPSite(runner, args.bind, args.port).start()
    log.info("sandbox host %s listening on %s (%.0f ms)", args.name, url, (time.monotonic() - started) * 1000)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    beat = None
    if args.web_url:
        beat = asyncio.create_task(
            heartbeat_forever(
                pool,
                name=args.name,
                url=url,
                web_url=args.web_url,
                token=token,
                interval=args.heartbeat,
                version=VERSION,
            )
        )
    await stop.wait()
    log.info(
        "sandbox host %s stopping (%s sandboxes)",
        args.name,
        "keeping" if args.keep_sandboxes_on_exit else "stopping",
    )
    if beat:
        beat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beat
    await runner.cleanup()
    await pool.shutdown(stop_sandboxes=not args.keep_sandboxes_on_exit)
    # A rolling restart: the next host process adopts them; else what a start still running leaves goes.
    os.write(watchdog, reaper.KEEP if args.keep_sandboxes_on_exit else reaper.STOP)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
