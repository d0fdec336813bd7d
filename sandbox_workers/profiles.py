"""Sandbox profiles a host serves: built-in defaults, or JSON given on the command line."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sandbox_workers.base import DISK_MB_MAX, DISK_MB_MIN, Profile, SandboxError
from sandbox_workers.pool_upkeep import PoolConfig
from sandbox_workers.registry import provider_class

PROFILE_FIELDS = {"provider", "width", "height", "network", "memory_mb", "max_pids", "disk_mb", "options"}
POOL_FIELDS = {"min_idle", "max_total"}
WHOLE_NUMBERS = {
    "width": (16, 16384),
    "height": (16, 16384),
    "memory_mb": (16, 1 << 22),
    "max_pids": (1, 1 << 22),
    "disk_mb": (0, DISK_MB_MAX),
    "min_idle": (0, 10000),
    "max_total": (0, 10000),
}
"""The profile's numbers: field → the range its whole number must be in."""

DEFAULT_PROFILES: dict[str, dict[str, Any]] = {
    "desktop": {"provider": "xdesktop", "min_idle": 1, "max_total": 8, "options": {"apps": ["xterm"]}},
    "browser": {"provider": "browser", "min_idle": 1, "max_total": 8},
}


OFFICE_PROFILE: dict[str, Any] = {
    # OSWorld's tasks: its applications (scripts/setup.sh office installs them) on its 1920×1080 screen.
    "provider": "xdesktop",
    "width": 1920,
    "height": 1080,
    "memory_mb": 3072,
    "min_idle": 1,
    "max_total": 4,
    # LibreOffice draws a step's result in bursts over ~100 ms, and runs some keys' commands (a cell
    # cursor's arrows) from its idle loop a moment after the key: a step waits until nothing was drawn
    # for 40 ms (at most 0.5 s) and its main thread slept 20 ms, not the desktop's 4 and 3 ms, and the
    # next input waits for the same (display.settle).
    "options": {
        "apps": [],
        "locale": "en_US.UTF-8",
        "settle_first_ms": 60,
        "settle_quiet_ms": 40,
        "settle_max_ms": 500,
        "settle_idle_ms": 20,
    },
}


def default_profiles() -> dict[str, dict[str, Any]]:
    """The built-in profiles, plus an Android one when ANDROID_SERIAL names a device and the office
    one (OSWorld's applications) with SANDBOX_OFFICE=1."""
    profiles: dict[str, dict[str, Any]] = json.loads(json.dumps(DEFAULT_PROFILES))
    if os.environ.get("SANDBOX_OFFICE", "") not in ("", "0"):
        profiles["office"] = json.loads(json.dumps(OFFICE_PROFILE))
    serial = os.environ.get("ANDROID_SERIAL")
    if serial:
        profiles["android"] = {
            "provider": "android",
            "min_idle": 0,
            "max_total": 1,
            "options": {"serial": serial},
        }
    return profiles


def parse_profiles(data: Mapping[str, Any]) -> list[PoolConfig]:
    """Pool configs from {name: {"provider": …, "min_idle": …, …}}; an error names the field."""
    if not isinstance(data, Mapping) or not data:
        raise SandboxError("profiles must be a non-empty JSON object of name → settings")
    configs = []
    for name, spec in data.items():
        if not isinstance(spec, Mapping):
            raise SandboxError(f"profile {name!r}: settings must be an object")
        unknown = set(spec) - PROFILE_FIELDS - POOL_FIELDS
        if unknown:
            raise SandboxError(f"profile {name!r}: unknown field(s) {', '.join(sorted(unknown))}")
        provider_class(str(spec.get("provider", "")))  # raises, listing the valid providers
        _check_numbers(name, spec)
        try:
            profile = Profile(name=name, **{k: v for k, v in spec.items() if k in PROFILE_FIELDS})
            configs.append(
                PoolConfig(
                    profile=profile,
                    min_idle=int(spec.get("min_idle", 1)),
                    max_total=int(spec.get("max_total", 4)),
                )
            )
        except (TypeError, ValueError) as exc:
            raise SandboxError(f"profile {name!r}: {exc}") from None
    return configs


def _check_numbers(name: str, spec: Mapping[str, Any]) -> None:
    """SandboxError naming the field whose value is not a whole number in its range."""
    for key, (low, high) in WHOLE_NUMBERS.items():
        if key not in spec:
            continue
        value = spec[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise SandboxError(
                f"profile {name!r}: {key} must be a whole number in [{low}, {high}], got {value!r}"
            )
    size = spec.get("disk_mb", DISK_MB_MIN)
    if 0 < size < DISK_MB_MIN:
        raise SandboxError(
            f"profile {name!r}: disk_mb must be 0 (no quota) or at least {DISK_MB_MIN}, got {size}"
        )
    if "network" in spec and not isinstance(spec["network"], bool):
        raise SandboxError(f"profile {name!r}: network must be true or false, got {spec['network']!r}")
    if "options" in spec and not isinstance(spec["options"], Mapping):
        raise SandboxError(f"profile {name!r}: options must be an object")


def load_pool_configs(source: str | None) -> list[PoolConfig]:
    """Parse `source` (a JSON file path or JSON text); None gives the defaults."""
    if not source:
        return parse_profiles(default_profiles())
    text = source
    if not source.lstrip().startswith("{"):
        try:
            text = Path(source).read_text()
        except OSError as exc:
            raise SandboxError(f"cannot read profiles file {source}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SandboxError(f"profiles are not valid JSON: {exc}") from None
    return parse_profiles(data)
