"""A disk quota per sandbox: its root is an ext4 volume of its own (providers.confine.disk), so a write
past the quota fails inside the sandbox, the host's disk holds no more than the quota, and the sandbox
goes on once the file is gone; the volumes are gone after a stop, and after a host killed with -9
(tests/sandbox_workers/test_host_service.py restarts a killed host and finds nothing left)."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_core import actions as A
from sandbox_workers.base import ActionFailed, DiskFull, Profile, perform
from sandbox_workers.providers.browser import BrowserProvider
from sandbox_workers.providers.confine import bwrap, disk, spawning
from tests.procs import wait_for, worker_slot
from tests.sandbox_workers.conftest import reachable

QUOTA_MB = 64
HAVE_QUOTAS = disk.support().ok  # a real probe: root, loop devices, mkfs.ext4 and a trial mount
needs_quota = pytest.mark.skipif(
    not HAVE_QUOTAS, reason=f"no disk quotas on this host: {disk.support().reason}"
)


def allocated(path: Path) -> int:
    """Bytes of the host's disk a (sparse) file takes."""
    return os.stat(path).st_blocks * 512


def leftovers(pool_root: Path) -> list[str]:
    """Every sandbox volume, image or loop device of `pool_root` still there."""
    prefix = str(pool_root.resolve()) + "/"
    mounts = [point for point, _, _ in disk._mounts() if point.startswith(prefix)]
    loops = [f"{dev} ({backing})" for dev, backing in disk._loop_devices() if backing.startswith(prefix)]
    return mounts + loops + [str(p) for p in pool_root.glob(f"*{disk.IMAGE_SUFFIX}")]


@pytest.mark.slow
@needs_quota
def test_a_desktop_that_writes_past_its_quota_fails_inside_and_the_host_keeps_only_the_quota(
    xdesktop_factory: Callable[..., Any],
) -> None:
    sb = xdesktop_factory("quota", disk_mb=QUOTA_MB)
    root, image = sb.root, disk.image_for(sb.root)
    assert disk.mounted_source(root) is not None and os.stat(root).st_dev != os.stat(root.parent).st_dev
    assert allocated(image) < 4 << 20, "an empty volume takes (almost) nothing of the host's disk"

    # Three times the quota, from the sandbox's shell: the write fails there, with ENOSPC.
    res = sb.exec("dd if=/dev/zero of=$HOME/big bs=1M count=192")
    assert res.exit_code != 0 and "No space left on device" in res.stderr, res
    assert allocated(image) <= QUOTA_MB << 20, "the host's disk took more than the quota"
    # /tmp is the sandbox's too.
    res = sb.exec("dd if=/dev/zero of=/tmp/more bs=1M count=8")
    assert res.exit_code != 0 and "No space left on device" in res.stderr, res
    # The host writes for the sandbox (an agent's file_write, a task's download) within its share only:
    # the agent's action is an invalid step, never an env error, and nothing is left half written.
    with pytest.raises(DiskFull, match="the sandbox's disk has"):
        sb.put_file("note.txt", b"x" * (1 << 20))
    with pytest.raises(ActionFailed):
        perform(sb, A.FileWrite(path="note.txt", content="y" * (1 << 20)))
    assert sb.exec("test -e note.txt").exit_code == 1

    # The sandbox works again once the file is gone, and what it deleted goes back to the host's disk.
    assert sb.exec("rm $HOME/big /tmp/more").exit_code == 0
    assert wait_for(lambda: allocated(image) < 16 << 20, 10, interval=0.1), allocated(image)
    assert sb.exec("echo fine > $HOME/small && cat $HOME/small").stdout == "fine\n"
    sb.put_file("note.txt", b"x" * (1 << 20))
    assert len(sb.get_file("note.txt")) == 1 << 20

    # What the sandbox's processes print goes to the host's logs in its root, on its disk: a reset cuts
    # them back, so a full disk never reaches the next lease.
    with open(root / "session.log", "ab") as log:
        log.write(b"spam\n" * (2 << 20) + b"the last line\n")
    sb.reset()
    assert disk.mounted_source(root) is not None and sb.exec("ls $HOME").stdout == ""
    kept = (root / "session.log").read_bytes()
    assert len(kept) < 1 << 20 and b"the last line\n" in kept
    # A host killed with -9 leaves the volume mounted; what cleans up a sandbox it cannot adopt works
    # from the root alone (a stop's teardown: the host tests).
    sb.detach()
    type(sb).cleanup(root=root, state={})
    assert disk.mounted_source(root) is None and not image.exists() and not root.exists()
    assert disk.loop_devices_of(image) == []


@pytest.mark.slow
@needs_quota
def test_a_browsers_profile_and_downloads_are_on_its_volume_and_a_stop_frees_it(tmp_path: Path) -> None:
    root = reachable(tmp_path) / "sb"
    sb = BrowserProvider(
        sandbox_id="quota-browser", profile=Profile(name="b", provider="browser", disk_mb=QUOTA_MB), root=root
    )
    sb.slot = worker_slot(473)
    sb.start()
    dev = os.stat(root).st_dev
    assert disk.mounted_source(root) is not None and dev != os.stat(root.parent).st_dev
    assert os.stat(root / "home").st_dev == dev and os.stat(sb.downloads).st_dev == dev
    used, size = disk.usage_mb(root) or (0.0, 0.0)
    assert 0 < used < size <= QUOTA_MB
    sb.reset()
    sb.stop()
    assert disk.mounted_source(root) is None and not disk.image_for(root).exists()


def test_a_private_tmp_and_dev_shm_are_sized_and_a_write_past_them_fails(tmp_path: Path) -> None:
    if not Path("/usr/bin/bwrap").exists():
        pytest.skip("bwrap is not installed")
    profile = Profile(name="tmpfs", provider="test", memory_mb=256, disk_mb=QUOTA_MB)
    conf = bwrap.confinement_for(profile, reachable(tmp_path) / "sb", slot=worker_slot(475))
    assert (conf.tmpfs_mb(tmp=True), conf.tmpfs_mb(tmp=False)) == (QUOTA_MB, 128)
    script = "df -m --output=size /tmp /dev/shm | tail -2; dd if=/dev/zero of=/tmp/x bs=1M count=100"
    proc = spawning.spawn(
        conf, ["bash", "-c", script], cgroup=None,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    res = spawning.collect_output(proc, timeout=30, output_cap=1 << 16)
    assert [int(x) for x in res.stdout.split()] == [QUOTA_MB, 128], res
    assert res.exit_code != 0 and "No space left on device" in res.stderr, res


@needs_quota
def test_release_frees_the_volume_from_the_root_alone_and_sweep_finds_what_no_root_leads_to(
    tmp_path: Path,
) -> None:
    pool = reachable(tmp_path) / "pool"
    root = pool / "sb-1"
    assert disk.attach(root, QUOTA_MB) and disk.attach(root, QUOTA_MB)  # twice: it keeps its volume
    assert len([p for p, _, _ in disk._mounts() if p == str(root)]) == 1
    (root / "file").write_bytes(b"x" * 4096)
    # A process still in it: released all the same (lazily), and the loop device goes with its last user.
    holder = subprocess.Popen(["sleep", "30"], cwd=root)  # noqa: S607
    try:
        disk.release(root)
        assert disk.mounted_source(root) is None and not disk.image_for(root).exists()
    finally:
        holder.kill()
        holder.wait()
    assert wait_for(lambda: not leftovers(pool), 10, interval=0.05), leftovers(pool)

    # What a host killed at the wrong moment leaves: an image attached to a loop device but never
    # mounted, and a loop device whose image was deleted.
    planted = plant_stray_loops(pool)
    assert len(leftovers(pool)) == 3, leftovers(pool)
    assert disk.sweep(pool) == len(planted)
    assert not leftovers(pool), leftovers(pool)


def plant_stray_loops(pool: Path) -> list[str]:
    """Two loop devices on images in `pool` that no sandbox root leads to (one image deleted)."""
    devices = []
    for name in ("stray-a", "stray-b"):
        image = pool / f"{name}{disk.IMAGE_SUFFIX}"
        image.write_bytes(b"")
        os.truncate(image, QUOTA_MB << 20)
        out = subprocess.run(
            ["losetup", "-f", "--show", str(image)], capture_output=True, text=True, check=True
        )
        devices.append(out.stdout.strip())
    (pool / f"stray-b{disk.IMAGE_SUFFIX}").unlink()
    return devices


def test_a_host_that_cannot_make_volumes_says_why_and_its_sandboxes_run_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(disk.os, "geteuid", lambda: 1000)  # an unprivileged host
    monkeypatch.setattr(disk, "_SUPPORT", None)
    with caplog.at_level(logging.WARNING, logger=disk.__name__):
        support = disk.support()
    assert not support.ok and "does not run as root" in support.reason
    assert "sandbox disk quotas are OFF" in caplog.text and support.reason in caplog.text
    assert disk.known_support() == support and support.to_dict() == {
        "enabled": False,
        "reason": support.reason,
    }
    root = tmp_path / "sb"
    assert disk.attach(root, QUOTA_MB) is False and root.is_dir() and not disk.image_for(root).exists()
    disk.release(root)  # nothing to release: no error
