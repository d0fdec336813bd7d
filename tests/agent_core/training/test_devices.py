"""What a training worker reports of its devices: the host's RAM always, CUDA devices measured in a
child process (so the worker's own process never initialises CUDA), and a failed child said as such."""

from __future__ import annotations

import sys

import psutil
import pytest

from agent_core.training import devices


def test_the_host_ram_is_always_reported_last():
    found = devices.local_devices()
    assert found[-1] == {"kind": "cpu", "name": "cpu", "memory": psutil.virtual_memory().total}
    assert all(d["kind"] == "cuda" and d["memory"] > 0 for d in found[:-1])


@pytest.mark.slow  # the child imports torch: several seconds on a busy machine
def test_the_child_process_reports_what_this_process_would(monkeypatch):
    monkeypatch.setattr(devices, "gpu_driver_present", lambda: True)
    assert devices.probe_devices() == devices.local_devices()


def test_a_failed_probe_says_so(monkeypatch):
    monkeypatch.setattr(devices, "gpu_driver_present", lambda: True)
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(devices.DeviceProbeError, match="exited with 1"):
        devices.probe_devices()
