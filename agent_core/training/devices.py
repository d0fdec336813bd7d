"""The devices this machine trains on, with their memory: what a training worker reports of itself.

`local_devices()` lists every CUDA device (torch.cuda.get_device_properties) and the host's RAM
(psutil), which CPU runs use. A Celery prefork worker must not initialise CUDA in its parent process
(the forked child could no longer use it), so the worker asks a child process instead:
`probe_devices()` runs `python -m agent_core.training.devices`, which prints the list as JSON. On a
machine without a GPU driver's device files it reports the RAM alone without importing torch.
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import subprocess
import sys
from typing import Any

PROBE_TIMEOUT_S = 120.0


def _cpu() -> dict[str, Any]:
    import psutil

    return {"kind": "cpu", "name": "cpu", "memory": int(psutil.virtual_memory().total)}


def local_devices() -> list[dict[str, Any]]:
    """[{"kind": "cuda" | "cpu", "name", "memory": bytes}]: the CUDA devices (none without torch or
    CUDA), then the host's RAM. Initialises CUDA in this process where there is one."""
    devices = []
    try:
        torch: Any = importlib.import_module("torch")
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            devices.append({"kind": "cuda", "name": str(props.name), "memory": int(props.total_memory)})
    return [*devices, _cpu()]


class DeviceProbeError(RuntimeError):
    """The child process that measures the devices failed; the message says how."""


def gpu_driver_present() -> bool:
    """Whether a GPU driver's device files are here (NVIDIA's, or ROCm's, which torch.cuda also uses)."""
    return (
        os.path.exists("/dev/nvidiactl") or bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/kfd")
    )


def probe_devices(timeout: float = PROBE_TIMEOUT_S) -> list[dict[str, Any]]:
    """`local_devices()` measured in a child process (so this one never initialises CUDA); the RAM
    alone, measured here, where no GPU driver is present."""
    if not gpu_driver_present():
        return [_cpu()]
    try:
        done = subprocess.run(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "agent_core.training.devices"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
        devices = json.loads(done.stdout.strip().splitlines()[-1])
    except subprocess.CalledProcessError as exc:
        tail = (exc.stderr or "").strip().splitlines()[-1:] or ["no output"]
        raise DeviceProbeError(f"the device probe exited with {exc.returncode}: {tail[0]}") from None
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as exc:
        raise DeviceProbeError(f"the device probe failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
        raise DeviceProbeError(f"the device probe printed {devices!r}, not a list of devices")
    return devices


if __name__ == "__main__":
    print(json.dumps(local_devices()))
