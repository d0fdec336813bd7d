"""A disk quota per sandbox: its root directory is an ext4 volume of its own, so that a write past the
quota fails inside the sandbox (ENOSPC) and the host's disk is safe.

`attach(root, size_mb)` makes a sparse image `<root>.img` beside the root (mode 0600; on the host's disk
it takes what the sandbox writes, about 1 MiB empty), an ext4 file system in it and mounts it on the
root with `mount -o loop` (nosuid, nodev, noatime, and discard: what the sandbox deletes goes back to
the host's disk at once). Everything a sandbox keeps lives under its root, so all of it counts: the
workspace ($HOME), the desktop's shared /tmp, its logs and state, a browser's profile and downloads.
A private /tmp (a tmpfs per process) is sized by the confinement instead (bwrap --size).
The file system has no journal (a sandbox's disk never outlives a reboot) and reserves RESERVE_MB for
root: sandbox uids cannot write there, so the host's own files on it (state, logs) are still written
when the sandbox has filled its share; the host's writes on a sandbox's behalf (put_file, fetch) are
checked against the sandbox's share first (`workspace.workspace_write`).

The loop device is set up with autoclear, so unmounting frees it. `release(root)` unmounts (lazily
when something still holds the volume), detaches a loop device of the image left without its mount
and deletes the image. It works from the root alone: a sandbox's volume outlives a host process
killed with -9, and what cleans up after it (adopt failing, a stray root) needs no record.
`sweep(pool_root)` finds what no sandbox directory leads to: images whose root is not mounted on them,
loop devices of images that are gone.

Where the host cannot make volumes (not root, no loop devices: a container without /dev/loop-control,
no mkfs.ext4) sandboxes have no disk quota: `support()` says why (probed once per process with a real
mount), the host logs it once, its status and each sandbox's health detail say it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox_workers.base import DISK_MB_MAX, DISK_MB_MIN, EnvError

log = logging.getLogger(__name__)

IMAGE_SUFFIX = ".img"
MIN_MB, MAX_MB = DISK_MB_MIN, DISK_MB_MAX
RESERVE_MB = 32
"""Kept for root at most (1/64 of the volume below 2 GiB)."""
MOUNT_OPTIONS = "loop,nosuid,nodev,noatime,discard"
_LOOP_RETRIES = 3


@dataclass(frozen=True)
class Support:
    """Whether this host gives sandboxes disk quotas, and why not."""

    ok: bool
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON for the host's status."""
        return {"enabled": self.ok, "reason": self.reason}


_SUPPORT: Support | None = None
_SUPPORT_LOCK = threading.Lock()


def support() -> Support:
    """Whether this host can mount a quota volume per sandbox (probed once: a real 32 MiB volume)."""
    global _SUPPORT
    with _SUPPORT_LOCK:
        if _SUPPORT is None:
            _SUPPORT = _probe()
            if _SUPPORT.ok:
                log.info("sandbox disk quotas: on (an ext4 volume per sandbox)")
            else:
                log.warning("sandbox disk quotas are OFF: %s; a sandbox's files are limited only by "
                            "the host's disk", _SUPPORT.reason)  # fmt: skip
        return _SUPPORT


def host_report() -> dict[str, Any]:
    """The host status's word on disk quotas (`Provider.host_report` of the providers that use them)."""
    return {"disk_quota": support().to_dict()}


def known_support() -> Support | None:
    """`support()` if it was probed already (never probes: for cheap health checks)."""
    return _SUPPORT


def _probe() -> Support:
    if os.geteuid() != 0:
        return Support(False, "the sandbox host does not run as root (a volume per sandbox needs it)")
    tools = (("mkfs.ext4", "e2fsprogs"), ("mount", "mount"), ("umount", "mount"), ("losetup", "mount"))
    for tool, package in tools:
        if shutil.which(tool) is None:
            return Support(False, f"{tool} is not installed (Debian's {package})")
    if not os.path.exists("/dev/loop-control"):
        return Support(
            False, "no loop devices (/dev/loop-control is missing: a container needs it and CAP_SYS_ADMIN)"
        )
    probe = Path(tempfile.mkdtemp(prefix="flywheel-disk-probe-")) / "volume"
    try:
        _attach(probe, MIN_MB)
        if mounted_source(probe) is None:
            return Support(False, "a trial volume did not show as mounted")
        return Support(True)
    except EnvError as exc:
        return Support(False, f"a trial volume could not be made: {exc}")
    finally:
        release(probe)
        shutil.rmtree(probe.parent, ignore_errors=True)


def image_for(root: Path) -> Path:
    """The image file of the volume mounted on `root` (beside it, never inside it)."""
    return root.with_name(root.name + IMAGE_SUFFIX)


def attach(root: Path, size_mb: int) -> bool:
    """Mount a volume of `size_mb` MiB on `root` (made if missing); True if it has one now. False
    where the host gives no quotas (`support()` says why) or `size_mb` is 0; EnvError if making it
    fails on a host that can. Idempotent: a root that already has its volume keeps it."""
    if size_mb <= 0 or not support().ok:
        root.mkdir(parents=True, exist_ok=True)
        return False
    _attach(root, size_mb)
    return True


def _attach(root: Path, size_mb: int) -> None:
    t0 = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    if mounted_source(root) is not None:
        return
    image = image_for(root)
    reserve_mb = min(RESERVE_MB, max(1, size_mb // 64))
    try:
        fd = os.open(image, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, size_mb << 20)  # sparse: blocks come as the sandbox writes
        finally:
            os.close(fd)
        pct = f"{reserve_mb * 100 / size_mb:.4f}"
        _run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", pct, "-L", "sandbox", str(image)])
        for attempt in range(_LOOP_RETRIES):
            try:
                # Another process may take the free loop device mount picked (other hosts, tests).
                _run(["mount", "-t", "ext4", "-o", MOUNT_OPTIONS, str(image), str(root)])
                break
            except EnvError:
                if attempt == _LOOP_RETRIES - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))
        root.chmod(0o755)  # the volume's own root: sandbox uids traverse it to their workspace
    except BaseException:
        release(root)
        raise
    log.debug("disk of %d MiB on %s in %.0f ms", size_mb, root, (time.monotonic() - t0) * 1000)


def release(root: Path) -> None:
    """Unmount `root`'s volume, free its loop device and delete its image; safe when it has none."""
    image = image_for(root)
    for _ in range(3):  # a volume mounted twice on the root (never by us, but unmount all of ours)
        if mounted_source(root) is None:
            break
        try:
            _run(["umount", str(root)])
        except EnvError:
            # Something still holds it (a process not yet reaped): detach it now, the kernel frees the
            # volume (and autoclear the loop device) when the last user goes.
            with contextlib.suppress(EnvError):
                _run(["umount", "-l", str(root)])
    if (source := mounted_source(root)) is not None:
        log.warning("the disk on %s (%s) could not be unmounted", root, source)
    for device in loop_devices_of(image):
        with contextlib.suppress(EnvError):
            _run(["losetup", "-d", device])
    with contextlib.suppress(FileNotFoundError):
        image.unlink()


def sweep(pool_root: Path) -> int:
    """Release what killed hosts left under `pool_root` that no sandbox directory leads to: an image
    whose root is not mounted on it, a loop device whose image is gone. Returns how many."""
    found = 0
    for image in pool_root.glob(f"*{IMAGE_SUFFIX}"):
        root = image.with_name(image.name.removesuffix(IMAGE_SUFFIX))
        if mounted_source(root) is None:
            log.warning("deleting %s, a sandbox disk left without its mount", image)
            release(root)
            found += 1
    prefix = str(pool_root.resolve()) + "/"
    mounted = {m[1] for m in _mounts()}
    for device, backing in _loop_devices():
        if backing.startswith(prefix) and device not in mounted:
            log.warning("detaching %s (%s), a sandbox disk left without its mount", device, backing)
            with contextlib.suppress(EnvError):
                _run(["losetup", "-d", device])
            found += 1
    return found


def usage_mb(root: Path) -> tuple[float, float] | None:
    """(used, size) of `root`'s volume in MiB, None if it has none."""
    if mounted_source(root) is None:
        return None
    st = os.statvfs(root)
    return (st.f_blocks - st.f_bfree) * st.f_frsize / 2**20, st.f_blocks * st.f_frsize / 2**20


# --- the kernel's view -------------------------------------------------------------------------


def _unescape(field: str) -> str:
    r"""/proc/self/mountinfo writes space, tab, newline and backslash as \040, \011, \012, \134."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, source, fs type) of every mount this process sees, in mount order."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 2:
                out.append((_unescape(fields[4]), tail[1], tail[0]))
    return out


def mounted_source(root: Path) -> str | None:
    """The loop device of the ext4 volume mounted on `root`, None if none is (the top mount counts)."""
    target = os.path.realpath(root)
    top = [(src, fstype) for point, src, fstype in _mounts() if point == target]
    if not top:
        return None
    src, fstype = top[-1]
    return src if fstype == "ext4" and src.startswith("/dev/loop") else None


def _loop_devices() -> list[tuple[str, str]]:
    """(device, backing file) of every attached loop device ("(deleted)" stripped from the file)."""
    out = []
    for entry in Path("/sys/block").glob("loop*"):
        with contextlib.suppress(OSError):
            backing = (entry / "loop" / "backing_file").read_text().strip()
            out.append((f"/dev/{entry.name}", backing.removesuffix(" (deleted)")))
    return out


def loop_devices_of(image: Path) -> list[str]:
    """The loop devices attached to `image` (also after it was deleted)."""
    path = os.path.realpath(image)
    return [device for device, backing in _loop_devices() if backing == path]


def _run(argv: list[str]) -> None:
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"{argv[0]}: {exc}") from exc
    if res.returncode != 0:
        said = (res.stderr or res.stdout).strip() or f"exit {res.returncode}"
        raise EnvError(f"{' '.join(argv[:2])}: {said}")


class DiskVolumes:
    """The Provider hooks of a provider whose sandboxes each get a disk volume (this module): put it
    before Provider among the bases."""

    @classmethod
    def sweep(cls, *, pool_root: Path) -> int:
        """Free the sandbox disks no sandbox directory under `pool_root` leads to."""
        return sweep(pool_root)

    @classmethod
    def host_report(cls) -> dict[str, Any]:
        """Whether this host gives sandboxes' disks a quota, and why not."""
        return host_report()
