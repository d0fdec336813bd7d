"""The guard of an inference server's process group (agent_core/serving/guard.py), with real processes:
Engine runs the server under it. The stand-in server behaves as an aborted vLLM server did: on SIGTERM
it stops answering but keeps its connections open, and it has a worker of its own in the group."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from agent_core.serving.engine import GUARD

SERVER = textwrap.dedent(
    """
    import os, signal, socket, subprocess, sys, time
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    signal.signal(signal.SIGTERM, lambda *a: print("draining", flush=True))  # and never exits
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    print(srv.getsockname()[1], worker.pid, flush=True)
    conns = []
    while True:
        conn, _ = srv.accept()
        conns.append(conn)  # read, never answered: a request in flight
    """
)


def group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (a zombie its parent has not reaped does not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def wait_until(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def start_under_a_parent(tmp_path: Path, grace_s: float) -> tuple[subprocess.Popen[bytes], int, int]:
    """A parent (the serving agent's stand-in) that starts the guarded server as Engine does; the guard's
    pid (its group) and the server's port."""
    (tmp_path / "server.py").write_text(SERVER)
    parent_code = textwrap.dedent(
        f"""
        import subprocess, sys, time
        p = subprocess.Popen([sys.executable, {str(GUARD)!r}, "{grace_s}", sys.executable,
                              {str(tmp_path / "server.py")!r}],
                             stdout=subprocess.PIPE, start_new_session=True)
        print(p.pid, p.stdout.readline().decode().strip(), flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    guard_pid, port, _worker = parent.stdout.readline().decode().split()
    return parent, int(guard_pid), int(port)


def in_flight(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=30)
    conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    return conn


def closed(conn: socket.socket) -> bool:
    """Whether the server closed the connection (blocks until it does or the socket times out)."""
    try:
        return conn.recv(1) == b""
    except ConnectionResetError:  # closed with our request unread: a reset, as good as a close
        return True


def test_a_killed_agent_takes_its_server_down_at_once_and_requests_in_flight_see_it(tmp_path: Path):
    parent, guard, port = start_under_a_parent(tmp_path, grace_s=30)
    conn = in_flight(port)
    try:
        parent.kill()  # the serving agent, kill -9
        parent.wait()
        t0 = time.monotonic()
        assert closed(conn)  # the connection closes: the client fails over now, not at its timeout
        assert time.monotonic() - t0 < 10
        assert wait_until(lambda: not group_alive(guard), 10), "the server's group outlived its agent"
    finally:
        conn.close()
        if group_alive(guard):
            os.killpg(guard, signal.SIGKILL)


def test_a_stopped_server_that_will_not_exit_is_killed_after_its_grace(tmp_path: Path):
    parent, guard, port = start_under_a_parent(tmp_path, grace_s=1)
    conn = in_flight(port)
    try:
        t0 = time.monotonic()
        os.killpg(guard, signal.SIGTERM)  # Engine.stop
        assert closed(conn)
        assert 0.8 < time.monotonic() - t0 < 10  # the grace was given, then no more
        assert wait_until(lambda: not group_alive(guard), 10)
    finally:
        conn.close()
        parent.kill()
        parent.wait()
        if group_alive(guard):
            os.killpg(guard, signal.SIGKILL)


def test_the_guard_exits_with_the_servers_status():
    done = subprocess.run([sys.executable, str(GUARD), "5", sys.executable, "-c", "raise SystemExit(3)"])
    assert done.returncode == 3
    killed = subprocess.run(
        [sys.executable, str(GUARD), "5", sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"]
    )
    assert killed.returncode == 128 + 9


def test_a_stopped_server_that_exits_ends_its_guard_at_once_with_its_status():
    # It exits at the first SIGTERM (both Engine.stop's and the guard's reach it).
    polite = "import os, signal, time; signal.signal(signal.SIGTERM, lambda *a: os._exit(0)); print('up', flush=True); time.sleep(600)"  # noqa: E501
    guard = subprocess.Popen(
        [sys.executable, str(GUARD), "30", sys.executable, "-c", polite],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert guard.stdout is not None and guard.stdout.readline() == b"up\n"
    t0 = time.monotonic()
    os.killpg(guard.pid, signal.SIGTERM)  # Engine.stop
    assert guard.wait(timeout=10) == 0
    assert time.monotonic() - t0 < 5  # not the 30 s grace
