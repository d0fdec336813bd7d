"""Strict parsing of settings from the environment.

Every reader raises ImproperlyConfigured naming the variable and what it expected, so a typo in a
deployment fails at start-up instead of silently falling back to a default.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_UNSET: Any = object()


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    value = (os.environ if environ is None else environ).get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def env_str(name: str, default: Any = _UNSET, *, environ: Mapping[str, str] | None = None) -> Any:
    """A non-empty string; raises when missing and no default is given."""
    value = _raw(name, environ)
    if value is None:
        if default is _UNSET:
            raise ImproperlyConfigured(f"{name} must be set")
        return default
    return value


def env_bool(name: str, default: bool, *, environ: Mapping[str, str] | None = None) -> bool:
    """One of 1/0, true/false, yes/no, on/off (any case)."""
    value = _raw(name, environ)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name}={value!r} is not a boolean (use one of 1/0, true/false, yes/no, on/off)"
    )


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """A base-10 integer within [minimum, maximum]."""
    value = _raw(name, environ)
    if value is None:
        return default
    try:
        number = int(value, 10)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer")
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum {minimum}")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={number} is above the maximum {maximum}")
    return number


def env_list(name: str, default: list[str], *, environ: Mapping[str, str] | None = None) -> list[str]:
    """A comma-separated list; blanks between commas are an error, not silently dropped."""
    value = _raw(name, environ)
    if value is None:
        return list(default)
    items = [item.strip() for item in value.split(",")]
    if any(not item for item in items):
        raise ImproperlyConfigured(f"{name}={value!r} has an empty item")
    return items


def env_url(
    name: str,
    default: str,
    *,
    schemes: tuple[str, ...],
    environ: Mapping[str, str] | None = None,
) -> str:
    """A URL whose scheme is one of `schemes`."""
    value = _raw(name, environ) or default
    parts = urlsplit(value)
    if parts.scheme not in schemes:
        raise ImproperlyConfigured(
            f"{name}={value!r} has scheme {parts.scheme!r}; expected one of {', '.join(schemes)}"
        )
    if parts.scheme not in ("sqlite", "unix") and not parts.hostname:
        raise ImproperlyConfigured(f"{name}={value!r} has no host")
    return value


ICE_SCHEMES = ("stun:", "turn:", "turns:")


def env_ice_servers(name: str, *, environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """WebRTC ICE servers as JSON, the browser's RTCIceServer list: [{"urls": "stun:host:3478"},
    {"urls": ["turn:host:3478?transport=udp", "turns:host:5349"], "username": "u", "credential": "p"}].
    Unset: none (host candidates only: loopback and the LAN)."""
    value = _raw(name, environ)
    if value is None:
        return []
    try:
        servers = json.loads(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not JSON: {exc}") from None
    if not isinstance(servers, list):
        raise ImproperlyConfigured(f"{name} must be a JSON list of ICE servers")
    out = []
    for i, server in enumerate(servers):
        if not isinstance(server, dict) or "urls" not in server:
            raise ImproperlyConfigured(f"{name}[{i}] must be an object with urls")
        urls = server["urls"] if isinstance(server["urls"], list) else [server["urls"]]
        if not urls or not all(isinstance(u, str) and u.startswith(ICE_SCHEMES) for u in urls):
            raise ImproperlyConfigured(f"{name}[{i}].urls must be stun:, turn: or turns: URLs")
        unknown = set(server) - {"urls", "username", "credential"}
        if unknown:
            raise ImproperlyConfigured(f"{name}[{i}] has unknown keys {sorted(unknown)}")
        turn = any(u.startswith(("turn:", "turns:")) for u in urls)
        creds = {k: server[k] for k in ("username", "credential") if k in server}
        if turn and not (isinstance(creds.get("username"), str) and isinstance(creds.get("credential"), str)):
            raise ImproperlyConfigured(f"{name}[{i}]: a TURN server needs a username and a credential")
        out.append({"urls": urls, **creds})
    return out


def private_dir(path: Path) -> None:
    """Create `path` and any missing parent as folders only this user may open (0700)."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)


def private_sqlite(path: Path) -> None:
    """The SQLite database (sessions and all) and its -wal and -shm files, readable by this user only.

    SQLite creates a database with the process's umask (0644 under the usual 022) and gives its -wal
    and -shm files the database's mode: creating the empty database 0600 before the first connection
    makes all three private, and an existing one (an older install) is made private here.
    """
    if str(path) in ("", ":memory:") or str(path).startswith("file:"):
        return
    private_dir(path.parent)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError, PermissionError):  # absent, or not ours to change
            if file.stat().st_mode & 0o077:
                file.chmod(0o600)


def database_config(url: str, *, var_dir: Any, conn_max_age: int) -> dict[str, Any]:
    """Django DATABASES['default'] for a sqlite:/// or postgres:// URL.

    `sqlite:///` alone means var/db.sqlite3; `sqlite:///rel/path` is relative to the working
    directory and `sqlite:////abs/path` absolute.
    """
    import dj_database_url

    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
        name = path or str(var_dir / "db.sqlite3")
        private_sqlite(Path(name))
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            "OPTIONS": {
                # WAL lets the web process read while workers write; IMMEDIATE avoids
                # "database is locked" on read-then-write upgrades.
                "init_command": (
                    "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;"
                ),
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
            # Tests start worker processes that must share the test database, so it lives in a file.
            "TEST": {"NAME": str(var_dir / "test-db.sqlite3")},
        }
    config = dj_database_url.parse(url, conn_max_age=conn_max_age, conn_health_checks=True)
    config["ENGINE"] = "django.db.backends.postgresql"
    return dict(config)
