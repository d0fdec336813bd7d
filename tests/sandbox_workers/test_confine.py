"""Confinement (bubblewrap, cgroups, rlimits) through real sandboxed processes."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from sandbox_workers.base import EnvError, ExecResult, Profile, SandboxPathError
from sandbox_workers.providers.confine import bwrap, spawning, workspace
from sandbox_workers.providers.confine.cgroups import SandboxCgroup
from tests.procs import worker_slot
from tests.sandbox_workers.conftest import reachable

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")
AS_ROOT = os.geteuid() == 0


class Box:
    """A confinement, its cgroup (when the host has them) and a netns holder, for one test."""

    def __init__(self, root: Path, slot: int, name: str, **profile: Any) -> None:
        self.conf = bwrap.confinement_for(
            Profile(name=name, provider="test", **profile), root, slot=worker_slot(slot), shared_tmp=True
        )
        self.cgroup = (
            SandboxCgroup.create(
                f"confine-test-{name}-{os.getpid()}", self.conf.memory_mb, self.conf.max_pids
            )
            if SandboxCgroup.available()
            else None
        )
        self.procs: list[spawning.SandboxProcess] = []
        self.holder: int | None = None

    def join(self) -> int:
        if self.holder is None:
            proc, self.holder = spawning.start_netns_holder(self.conf, cgroup=self.cgroup)
            self.procs.append(proc)
        return self.holder

    def run(self, command: str, *, timeout: float = 20, join: bool = False, cap: int = 1 << 20) -> ExecResult:
        proc = spawning.spawn(
            self.conf, ["bash", "-c", command], cgroup=self.cgroup, join=self.join() if join else None,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.procs.append(proc)
        return spawning.collect_output(proc, timeout=timeout, output_cap=cap)

    def close(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill_all()
            self.cgroup.remove()
        for p in self.procs:
            p.kill_tree()
            p.wait()


@pytest.fixture
def confine_box(tmp_path: Path) -> Iterator[Callable[..., Box]]:
    """make(**profile) → a Box under tmp_path (closed at the end)."""
    boxes: list[Box] = []

    def make(**profile: Any) -> Box:
        n = len(boxes)
        box = Box(reachable(tmp_path) / f"box{n}", 7000 + (os.getpid() % 500) * 4 + n, f"b{n}", **profile)
        boxes.append(box)
        return box

    yield make
    for b in boxes:
        b.close()


def test_bwrap_argv_shape(tmp_path: Path) -> None:
    conf = bwrap.Confinement(
        root=tmp_path, workspace=tmp_path / "home", uid=None, network=False, memory_mb=100, max_pids=10,
        binds=(("/srv/data", "/data", False),), env={"FOO": "bar"},
    )  # fmt: skip
    argv = bwrap.bwrap_argv(conf, ["echo", "hi"], cwd="/home/user/x")
    assert argv[:2] == ["bwrap", "--unshare-all"] and "--share-net" not in argv
    assert "--die-with-parent" not in argv and "--new-session" in argv and "--clearenv" in argv
    assert argv[-3:] == ["--", "echo", "hi"]
    joined = " ".join(argv)
    assert "--ro-bind /usr /usr" in joined and "--ro-bind /etc /etc" in joined
    assert f"--bind {tmp_path / 'home'} /home/user" in joined and "--ro-bind /srv/data /data" in joined
    assert "--setenv FOO bar" in joined and "--chdir /home/user/x" in joined and "--tmpfs /tmp" in joined
    for hidden in ("/root", "/work", "/opt", "/var/lib", "/home "):
        assert f"--bind {hidden}" not in joined and f"--ro-bind {hidden}" not in joined
    assert "--share-net" in bwrap.bwrap_argv(bwrap.Confinement(**{**conf.__dict__, "network": True}), ["x"])
    shared = bwrap.bwrap_argv(conf, ["x"], joined_net=True)
    assert "--unshare-all" not in shared and "--unshare-net" not in shared and "--unshare-pid" in shared


def test_confinement_for_makes_an_owned_workspace(tmp_path: Path) -> None:
    root = reachable(tmp_path) / "sb"
    conf = bwrap.confinement_for(Profile(name="p", provider="t", memory_mb=123, max_pids=45), root, slot=7)
    assert conf.workspace == root / "home" and conf.workspace.is_dir()
    assert (conf.memory_mb, conf.max_pids, conf.network) == (123, 45, False)
    if AS_ROOT:
        assert conf.uid == bwrap.UID_BASE + 7
        assert conf.workspace.stat().st_uid == conf.uid
    else:
        assert conf.uid is None


@pytest.mark.skipif(not AS_ROOT, reason="only a sandbox uid needs to traverse the root's parents")
def test_unreachable_root_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    with pytest.raises(EnvError, match="not reachable by the sandbox uid"):
        bwrap.confinement_for(Profile(name="p", provider="t"), private / "sb", slot=8)


def test_the_host_is_invisible_and_read_only(
    confine_box: Callable[..., Box], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLYWHEEL_TEST_SECRET", "s3cret-value")
    box = confine_box()
    res = box.run(
        """
        for f in /root/.bashrc /work/main/pyproject.toml /etc/shadow; do
          cat "$f" >/dev/null 2>&1 && echo "READ $f"; done
        for f in /root /work /opt /var/lib/apt /var/log /home/user/../../root; do
          ls "$f" >/dev/null 2>&1 && echo "SEE $f"; done
        echo "VARLIB $(ls /var/lib | tr '\\n' ' ')"
        for f in /usr/x /etc/x /x /bin/x /proc/x; do touch "$f" 2>/dev/null && echo "WROTE $f"; done
        echo inside > ~/made-inside.txt && echo ok-home
        echo tmp > /tmp/t.txt && echo ok-tmp
        env; tr '\\0' '\\n' < /proc/1/environ; id -u; ps -eo comm=
        """
    )
    out = res.stdout
    assert "READ" not in out and "WROTE" not in out and "SEE" not in out, out
    assert "ok-home" in out and "ok-tmp" in out
    assert "VARLIB dpkg \n" in out, out  # of the host's state, only the package database
    assert "s3cret-value" not in out and "SECRET_KEY" not in out and "DJANGO" not in out
    assert (box.conf.workspace / "made-inside.txt").read_text() == "inside\n"
    assert box.conf.tmp is not None and (box.conf.tmp / "t.txt").read_text() == "tmp\n"
    assert "pytest" not in out and "python" not in out  # no host process is visible
    if AS_ROOT:
        assert str(box.conf.uid) in out.split()
        assert (box.conf.workspace / "made-inside.txt").stat().st_uid == box.conf.uid


@pytest.fixture
def host_server() -> Iterator[int]:
    """A TCP server on the host's loopback that answers b"hello"; yields its port."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    stop = False

    def serve() -> None:
        while not stop:
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"hello")

    import threading

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield int(srv.getsockname()[1])
    stop = True
    t.join(2)
    srv.close()


def _connect(port: int) -> str:
    return (
        f"python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {port}), 2); "
        f"print('GOT', s.recv(5).decode())\" 2>&1; tail -n +3 /proc/net/dev | cut -d: -f1"
    )


def test_no_network_by_default(confine_box: Callable[..., Box], host_server: int) -> None:
    res = confine_box().run(_connect(host_server))
    assert "GOT hello" not in res.stdout
    assert res.stdout.split()[-1] == "lo" and "Connection refused" in res.stdout


def test_network_profile_reaches_the_host(confine_box: Callable[..., Box], host_server: int) -> None:
    res = confine_box(network=True).run(_connect(host_server))
    assert "GOT hello" in res.stdout


def test_joined_processes_share_their_loopback(confine_box: Callable[..., Box]) -> None:
    box = confine_box()
    server = spawning.spawn(
        box.conf, ["python3", "-m", "http.server", "8123", "--bind", "127.0.0.1"], cgroup=box.cgroup,
        join=box.join(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    box.procs.append(server)
    fetch = "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8123/').status)\""
    deadline = time.monotonic() + 10
    while True:
        res = box.run(fetch, join=True)
        if res.stdout.strip() == "200" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert res.stdout.strip() == "200", res
    # An unjoined process has a loopback of its own.
    assert box.run(fetch).stdout.strip() != "200"


def test_timeout_kills_the_whole_namespace_and_cap_truncates(confine_box: Callable[..., Box]) -> None:
    box = confine_box()
    t0 = time.monotonic()
    res = box.run("(sleep 1234 &); sleep 1235", timeout=0.5)
    assert res.timed_out and res.exit_code is None and time.monotonic() - t0 < 5
    time.sleep(0.2)
    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if p.info["cmdline"] in (["sleep", "1234"], ["sleep", "1235"])
    ]
    assert not left
    res = box.run("yes | head -c 5000; echo e >&2", cap=100)
    assert res.truncated and len(res.stdout) == 100 and res.stderr == "e\n" and res.exit_code == 0


@pytest.mark.slow
def test_process_limit_holds_without_hurting_the_host(confine_box: Callable[..., Box]) -> None:
    box = confine_box(max_pids=40)
    bomb = """python3 - <<'EOF'
import os, time
n = 0
try:
    while n < 1000:
        if os.fork() == 0:
            time.sleep(3)
            os._exit(0)
        n += 1
except OSError as e:
    print("stopped at", n, e.errno)
EOF"""
    res = box.run(bomb, timeout=30)
    assert "stopped at" in res.stdout, res
    assert int(res.stdout.split()[2]) < 40
    # The host still forks fine.
    assert subprocess.run(["true"], check=False).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not SandboxCgroup.available(), reason="no cgroup on this host")
def test_memory_limit_kills_what_exceeds_it(confine_box: Callable[..., Box]) -> None:
    box = confine_box(memory_mb=128)
    res = box.run("python3 -c \"x = b'a' * (400 * 1024 * 1024); print('survived', len(x))\"", timeout=30)
    assert "survived" not in res.stdout and res.exit_code not in (0, None), res
    assert box.run("python3 -c \"x = b'a' * (20 * 1024 * 1024); print('fine')\"").stdout == "fine\n"


@pytest.mark.skipif(not SandboxCgroup.available(), reason="no cgroup on this host")
def test_cgroup_holds_every_process_until_killed(confine_box: Callable[..., Box]) -> None:
    box = confine_box()
    assert box.cgroup is not None
    proc = spawning.spawn(box.conf, ["bash", "-c", "sleep 100 & sleep 100"], cgroup=box.cgroup)
    box.procs.append(proc)
    deadline = time.monotonic() + 5
    while len(box.cgroup.pids()) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    pids = box.cgroup.pids()
    assert proc.pid in pids and len(pids) >= 4  # bwrap, its pid 1, bash, two sleeps
    box.cgroup.kill_all()
    assert box.cgroup.pids() == []
    proc.wait(5)
    box.cgroup.remove()
    assert not any(d.exists() for d in box.cgroup.dirs)
    box.cgroup.remove()  # twice is fine
    box.cgroup = None
    state = SandboxCgroup.create("confine-test-state", 64, 16).to_state()
    again = SandboxCgroup.from_state(state)
    assert again is not None and again.pids() == []
    again.remove()


def test_workspace_file_helpers_refuse_escapes(confine_box: Callable[..., Box]) -> None:
    box = confine_box()
    workspace.workspace_write(box.conf, "a/b/c.txt", b"data")
    assert workspace.workspace_read(box.conf, "/home/user/a/b/c.txt") == b"data"
    os.symlink("/etc", box.conf.workspace / "etc")
    for bad in ("../x", "/etc/passwd", "etc/passwd", "a/../../x", "/home/user"):
        with pytest.raises(SandboxPathError):
            workspace.workspace_read(box.conf, bad)
        with pytest.raises(SandboxPathError):
            workspace.workspace_write(box.conf, bad, b"x")
