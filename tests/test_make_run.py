"""`make run` (scripts/run.sh) brings the platform up, a user can log in, Ctrl-C leaves nothing running."""

from __future__ import annotations

import contextlib
import http.cookiejar
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import psutil
import pytest

from tests.procs import ROOT, free_port, is_alive, wait_for

pytestmark = pytest.mark.slow

# A terminal starts run.sh with SIGINT at its default. A test runner started in the background by a
# non-interactive shell has SIGINT ignored, which run.sh would inherit and could not trap (bash cannot
# trap a signal ignored on entry), so reset it before exec, as the terminal would have it.
AS_FROM_A_TERMINAL = (
    "import os, signal; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv('scripts/run.sh', ['scripts/run.sh'])"
)


def test_make_run_serves_logins_and_ctrl_c_stops_everything(tmp_path):
    port, redis_port = free_port(), free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL")
    }
    env.update(PORT=str(port), REDIS_PORT=str(redis_port), FLYWHEEL_VAR_DIR=str(tmp_path / "var"), DEBUG="1",
               SANDBOX_HOST_PORT=str(free_port()))  # fmt: skip
    # A previous run's log, which this start must keep.
    logs = tmp_path / "var" / "log"
    logs.mkdir(parents=True)
    (logs / "web.log").write_text("the previous run's log\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", AS_FROM_A_TERMINAL], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    output: list[str] = []
    sandbox_pids: list[int] = []
    try:
        deadline = time.monotonic() + 300
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            if "ready in" in line or time.monotonic() > deadline:
                break
        text = "".join(output)
        assert "ready in" in text, text
        assert (logs / "web.log.1").read_text() == "the previous run's log\n"
        assert (logs / "web.log").read_text().startswith("[run] web started ")
        password = re.search(r"^\s+admin\s+(\S+)\s+admin$", text, re.M).group(1)

        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        base = f"http://127.0.0.1:{port}"
        page = opener.open(f"{base}/accounts/login/").read().decode()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        form = urllib.parse.urlencode(
            {"csrfmiddlewaretoken": csrf, "username": "admin", "password": password}
        )
        request = urllib.request.Request(
            f"{base}/accounts/login/", data=form.encode(), headers={"Referer": base}
        )
        home = opener.open(request).read().decode()
        assert 'data-testid="username">admin<' in home
        assert "role-admin" in home
        # The demo data hold a local policy, so training can be launched from the UI at once.
        training = opener.open(f"{base}/training/").read().decode()
        assert re.search(r'<select name="base_policy"[^>]*>.*?>tiny-base</option>', training, re.S), training
        # What holds sessions and secrets is the platform user's alone (a session was just written).
        var = tmp_path / "var"
        private = ["db.sqlite3", "demo-credentials.json", "log/web.log"]
        # run.sh writes the keys only when the environment does not give them.
        keys = {
            "secret_key": "SECRET_KEY",
            "sandbox-host-token": "SANDBOX_HOST_TOKEN",
            "policy-server-token": "POLICY_SERVER_TOKEN",
        }
        private += [name for name, setting in keys.items() if not env.get(setting)]
        assert {n: oct((var / n).stat().st_mode & 0o777) for n in private} == dict.fromkeys(private, "0o600")
        # SQLite's -wal and -shm exist only while a connection is open: the last one to close removes
        # them, possibly between a look and a stat, so each is checked if it is still there.
        for name in ("db.sqlite3-wal", "db.sqlite3-shm"):
            try:
                mode = (var / name).stat().st_mode & 0o777
            except FileNotFoundError:
                continue
            assert oct(mode) == "0o600", name

        # The sandbox host registered and warmed its desktop and browser pools.
        def pools_warm() -> bool:
            page = opener.open(f"{base}/sandboxes/").read().decode()
            idle = re.findall(r'data-sandbox="([^"]+)".*?status-idle', page, re.S)
            return (
                "local" in page
                and any(s.startswith("desktop-") for s in idle)
                and any(s.startswith("browser-") for s in idle)
            )

        assert wait_for(pools_warm, 120, interval=1), opener.open(f"{base}/sandboxes/").read().decode()
        # Sandbox processes run in sessions of their own (so a restarted host can adopt them):
        # the process-group check below would miss them, so remember them by ancestry.
        host_pid = int(re.search(r"^\[run\] sandbox-host \(pid (\d+),", text, re.M).group(1))
        sandbox_pids = [c.pid for c in psutil.Process(host_pid).children(recursive=True)]
        assert len(sandbox_pids) >= 4, sandbox_pids
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        pids = [int(p) for p in re.findall(r"^\[run\] \S+ \(pid (\d+),", "".join(output), re.M)]
        try:
            rest, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            # Never leave a platform running behind a failed test.
            for pid in [proc.pid, *pids]:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            raise
    assert "[run] stopped" in rest
    # Every process run.sh started (redis, web, 3 workers, beat, sandbox host) and their children are gone.
    assert len(pids) == 7, output
    wait_for(lambda: not any(is_alive(p) for p in pids), 5)
    assert [p for p in pids if is_alive(p)] == []
    groups = subprocess.run(["ps", "-eo", "pgid="], capture_output=True, text=True).stdout.split()
    assert not set(map(str, pids)) & set(groups), "a child of a started process is still running"
    assert [p for p in sandbox_pids if is_alive(p)] == [], "sandbox processes outlived make run"
