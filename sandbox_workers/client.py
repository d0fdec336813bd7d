"""A Python client for the sandbox host service (synchronous; one keep-alive connection per client).

    host = HostClient("http://127.0.0.1:8100", token)
    with host.acquire("desktop", holder="episode:42", ttl_s=300) as sandbox:
        obs = sandbox.act(Click(x=100, y=200))
        sandbox.exec("ls -la")

Errors come back typed: `EnvError` (the sandbox failed: record the episode as env_error),
`SandboxUnavailable`, `LeaseNotFound`, `ActionUnsupported` / `ActionFailed` (an agent's action refused:
an invalid step), `SandboxPathError`, `SandboxError`.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx

from agent_core.actions import Action, action_to_dict
from sandbox_workers.base import (
    ActionFailed,
    ActionUnsupported,
    EnvError,
    ExecResult,
    ImageFormat,
    Observation,
    OperationUnsupported,
    SandboxBrokenByAgent,
    SandboxError,
    SandboxPathError,
    Screenshot,
)
from sandbox_workers.pool import LeaseBroken, LeaseNotFound, SandboxUnavailable


class HostUnreachable(EnvError):
    """The sandbox host did not answer (down, restarting, network)."""


class HostAuthError(SandboxError):
    """The host refused the token."""


ERROR_TYPES: dict[str, type[SandboxError]] = {
    "env_error": LeaseBroken,
    "lease_not_found": LeaseNotFound,
    "sandbox_unavailable": SandboxUnavailable,
    "bad_path": SandboxPathError,
    "action_unsupported": ActionUnsupported,
    "action_failed": ActionFailed,
    "broken_by_agent": SandboxBrokenByAgent,
    "operation_unsupported": OperationUnsupported,
    "unauthorized": HostAuthError,
}


def observation_from_json(data: Mapping[str, Any]) -> Observation:
    """The inverse of the host's observation JSON."""
    shot = data["screenshot"]
    return Observation(
        screenshot=Screenshot(
            data=base64.b64decode(shot["data"]),
            format=shot["format"],
            width=int(shot["width"]),
            height=int(shot["height"]),
            captured_at=float(shot["captured_at"]),
        ),
        a11y=data.get("a11y"),
        dom=data.get("dom"),
        info=data.get("info") or {},
    )


class HostClient:
    """Talks to one sandbox host."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout, connect=5.0),
        )

    def close(self) -> None:
        """Close the connection."""
        self._http.close()

    def __enter__(self) -> HostClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request; a non-2xx answer raises the typed error the host named."""
        try:
            resp = self._http.request(method, path, **kwargs)
        except (httpx.ReadTimeout, httpx.WriteTimeout) as exc:
            # It took the request and did not answer in time: up, but busy (or the wait asked for was
            # longer than the request's time); "unreachable" would send a person looking for a dead host.
            waited = kwargs.get("timeout") or self._http.timeout.read or 0.0
            raise HostUnreachable(
                f"sandbox host {self.base_url} took the request but did not answer within {waited:g} s"
            ) from exc
        except httpx.TransportError as exc:
            raise HostUnreachable(f"sandbox host {self.base_url} unreachable: {exc}") from exc
        if resp.status_code < 300:
            return resp
        try:
            err = resp.json()["error"]
            kind, message = str(err["type"]), str(err["message"])
        except (ValueError, KeyError, TypeError):
            kind, message = "http", f"HTTP {resp.status_code}: {resp.text[:300]}"
        if resp.status_code >= 500 and kind not in ERROR_TYPES:
            raise EnvError(f"sandbox host {self.base_url} failed: {message}")
        raise ERROR_TYPES.get(kind, SandboxError)(message)

    def status(self) -> dict[str, Any]:
        """The host's pools, sandboxes, leases and recent errors."""
        data: dict[str, Any] = self.request("GET", "/v1/status").json()
        return data

    def acquire(self, profile: str, *, holder: str, ttl_s: float = 300, wait_s: float = 0) -> LeasedSandbox:
        """Lease a warm sandbox of `profile`, waiting up to `wait_s` for one (the request is given that
        long, and 30 s more, to answer)."""
        data = self.request(
            "POST",
            "/v1/leases",
            json={"profile": profile, "holder": holder, "ttl_s": ttl_s, "wait_s": wait_s},
            timeout=max(self._http.timeout.read or 0.0, float(wait_s) + 30),
        ).json()
        return LeasedSandbox(self, LeaseInfo.from_json(data))

    def lease(self, info: LeaseInfo) -> LeasedSandbox:
        """A handle on a lease acquired earlier (by this or another process)."""
        return LeasedSandbox(self, info)

    def reset_sandbox(self, sandbox_id: str) -> None:
        """Admin: reset a sandbox now (ends its lease)."""
        self.request("POST", f"/v1/sandboxes/{sandbox_id}/reset")

    def kill_sandbox(self, sandbox_id: str) -> None:
        """Admin: kill a sandbox and have the pool replace it."""
        self.request("POST", f"/v1/sandboxes/{sandbox_id}/kill")

    def mark_dirty(self, sandbox_id: str, reason: str) -> dict[str, Any]:
        """Report that something reached a sandbox outside a lease: unless it is leased, the host resets
        it before its next lease. Returns {"sandbox", "state", "marked", "dirty"}."""
        data: dict[str, Any] = self.request(
            "POST", f"/v1/sandboxes/{sandbox_id}/dirty", json={"reason": reason}
        ).json()
        return data


@dataclass(frozen=True)
class LeaseInfo:
    """What the host answered when it granted a lease."""

    id: str
    sandbox_id: str
    profile: str
    provider: str
    expires_at: float
    endpoints: Mapping[str, Any]
    clean: Mapping[str, Any] = field(default_factory=dict)
    """How the host made the sandbox clean for this lease: {"by": "start" | "reset", "why", "dirty"
    (what had touched it outside a lease, or None), "at", "ms"}."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LeaseInfo:
        return cls(
            id=str(data["id"]),
            sandbox_id=str(data["sandbox_id"]),
            profile=str(data["profile"]),
            provider=str(data.get("provider", "")),
            expires_at=float(data["expires_at"]),
            endpoints=data.get("endpoints") or {},
            clean=data.get("clean") or {},
        )


class LeasedSandbox:
    """A leased sandbox: step it, run commands, move files; release when done (or use `with`)."""

    def __init__(self, client: HostClient, info: LeaseInfo) -> None:
        self.client = client
        self.info = info
        self._path = f"/v1/leases/{info.id}"

    def __enter__(self) -> LeasedSandbox:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Already ended (expired, broken and reaped) or the host is gone: nothing left to give back.
        with contextlib.suppress(LeaseNotFound, HostUnreachable):
            self.release(recycle=isinstance(exc, EnvError))

    def observe(self, *, fmt: ImageFormat = "png", a11y: bool = False, quality: int = 80) -> Observation:
        """The screen now."""
        resp = self.client.request(
            "POST", f"{self._path}/observe", json={"fmt": fmt, "a11y": a11y, "quality": quality}
        )
        return observation_from_json(resp.json())

    def act(
        self, action: Action, *, fmt: ImageFormat = "png", a11y: bool = False, quality: int = 80
    ) -> Observation:
        """Perform `action`; returns the screen after it (one round trip). An action that runs for a
        time of its own (a terminal command's `timeout`) gets that long, and 30 s more, to answer."""
        extra = {}
        run_for = getattr(action, "timeout", None)
        if isinstance(run_for, int | float) and not isinstance(run_for, bool):
            extra["timeout"] = max(60.0, float(run_for) + 30)
        resp = self.client.request(
            "POST",
            f"{self._path}/act",
            json={
                "action": action_to_dict(action),
                "observe": {"fmt": fmt, "a11y": a11y, "quality": quality},
            },
            **extra,
        )
        return observation_from_json(resp.json())

    def exec(
        self, command: str | Sequence[str], *, timeout: float = 30.0, output_cap: int = 65536
    ) -> ExecResult:
        """Run a command inside the sandbox."""
        cmd = command if isinstance(command, str) else list(command)
        data = self.client.request(
            "POST",
            f"{self._path}/exec",
            json={"command": cmd, "timeout": timeout, "output_cap": output_cap},
            timeout=timeout + 30,
        ).json()
        return ExecResult(**data)

    def put_file(self, path: str, data: bytes) -> None:
        """Upload `data` to `path` in the sandbox; EnvError if the host kept other than all of it."""
        resp = self.client.request("PUT", f"{self._path}/files", params={"path": path}, content=data)
        try:
            kept = int(resp.json()["size"])
        except (ValueError, KeyError, TypeError):
            kept = -1
        if kept != len(data):
            raise EnvError(f"the sandbox host kept {kept} of the {len(data)} bytes uploaded to {path}")

    def get_file(self, path: str) -> bytes:
        """Download `path` from the sandbox."""
        return self.client.request("GET", f"{self._path}/files", params={"path": path}).content

    def call(self, method: str, **params: Any) -> Any:
        """A provider-specific operation (goto, miniwob_start, virtual_time, launch, fetch, …). One
        that takes a `timeout` (launch, fetch) gets that long, and 30 s more, to answer."""
        extra = {}
        if isinstance(params.get("timeout"), int | float) and not isinstance(params.get("timeout"), bool):
            extra["timeout"] = max(60.0, float(params["timeout"]) + 30)
        return self.client.request(
            "POST", f"{self._path}/call", json={"method": method, "params": params}, **extra
        ).json()["result"]

    def snapshot(self) -> bytes:
        """An opaque snapshot of the sandbox, where its provider can take one."""
        return self.client.request("POST", f"{self._path}/snapshot").content

    def restore(self, blob: bytes) -> None:
        """Return to a snapshot."""
        self.client.request("POST", f"{self._path}/restore", content=blob)

    def renew(self, ttl_s: float | None = None) -> float:
        """Heartbeat the lease; returns the new expiry (epoch seconds)."""
        data = self.client.request(
            "POST", f"{self._path}/renew", json={"ttl_s": ttl_s} if ttl_s else {}
        ).json()
        return float(data["expires_at"])

    def release(self, *, recycle: bool = False) -> None:
        """Give the sandbox back (reset in the background, or replaced with `recycle`)."""
        self.client.request("DELETE", self._path, params={"recycle": "1"} if recycle else None)
