"""OSWorld's own metric functions (desktop-env 1.0.2), run in their own environment and process.

desktop-env's pins clash with ours (torch 2.5, transformers 4.35, numpy<2), so its metrics run under
`.venv-osworld/bin/python` (scripts/osworld-env.sh; OSWORLD_PYTHON names another interpreter) in one
long-lived worker, `osworld_worker.py`, which this module starts on first use, starts again when it
died, and kills when a request runs past its timeout.

`score(func, result, expected, options)` calls `func(result, expected, **options)` as
`DesktopEnv.evaluate()` does, so the caller does what OSWorld's getters would: a file is
`file_value(data, name)` (the worker writes it to a temporary folder and hands the metric its path),
a file that is not there is None, a `rule` expected is the rule's `rules` mapping (`get_rule`), and an
evaluator without `expected` is `NO_EXPECTED` (the metric is then called as `func(result, **options)`).
"""

from __future__ import annotations

import atexit
import base64
import collections
import enum
import json
import logging
import os
import select
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("osworld_worker.py")
DEFAULT_TIMEOUT = 120.0
# The worker stops a metric at the timeout itself; past this much more, it is killed.
KILL_GRACE = 5.0


class _Missing(enum.Enum):
    NO_EXPECTED = "no expected"


NO_EXPECTED = _Missing.NO_EXPECTED
"""`expected` of an evaluator that has none: the metric is called as `func(result, **options)`."""


class OSWorldEnvError(RuntimeError):
    """The OSWorld metrics environment or its worker is unusable: not installed, died, timed out."""


class OSWorldMetricError(Exception):
    """An OSWorld metric raised (or failed to load); the message names the function and the error."""

    def __init__(self, func: str, error: str, traceback: str = "") -> None:
        super().__init__(f"OSWorld metric {func}: {error}")
        self.func = func
        self.error = error
        self.traceback = traceback


@dataclass(frozen=True)
class MetricProbe:
    """Where an OSWorld metric loads from, and the left-out libraries (easyocr, librosa) it needs."""

    func: str
    module: str
    missing: tuple[str, ...]


def osworld_python() -> Path:
    """The interpreter of the OSWorld metrics environment (OSWORLD_PYTHON, else .venv-osworld's)."""
    return Path(os.environ.get("OSWORLD_PYTHON") or REPO / ".venv-osworld/bin/python")


def available() -> str | None:
    """None when the OSWorld metrics environment is usable, else why not."""
    python = osworld_python()
    if not python.exists():
        if os.environ.get("OSWORLD_PYTHON"):
            return f"OSWORLD_PYTHON={python} does not exist"
        return "the OSWorld metrics environment is not installed: run scripts/osworld-env.sh"
    check = "import importlib.util, sys; sys.exit(importlib.util.find_spec('desktop_env') is None)"
    try:
        found = subprocess.run([str(python), "-I", "-c", check], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python} does not run: {exc}"
    if found.returncode != 0:
        return f"{python} has no desktop_env: run scripts/osworld-env.sh"
    return None


def file_value(data: bytes, name: str) -> dict[str, str]:
    """A file argument: the worker hands the metric the path of these bytes, saved as `name`."""
    return {"__file__": base64.b64encode(data).decode("ascii"), "name": name}


class OSWorldMetrics:
    """One worker process running OSWorld's metrics, started on first use; requests are serialized."""

    def __init__(self, python: str | Path | None = None) -> None:
        self.python = Path(python) if python else osworld_python()
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._stderr: collections.deque[str] = collections.deque(maxlen=40)
        self._lock = threading.Lock()
        self._drainer: threading.Thread | None = None
        self._scratch: str | None = None

    @property
    def pid(self) -> int | None:
        """The running worker's process id (None before the first request or after close)."""
        return self._proc.pid if self._proc and self._proc.poll() is None else None

    def score(
        self,
        func: str,
        result: Any,
        expected: Any = NO_EXPECTED,
        options: Mapping[str, Any] | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        getter: Mapping[str, Any] | None = None,
        expected_getter: Mapping[str, Any] | None = None,
    ) -> float:
        """OSWorld's `func(result, expected, **options)`; OSWorldMetricError when the metric raised.
        With `getter` ({name, config, files}), `result` is the files OSWorld's getter get_<name> reads,
        and the metric gets what that getter makes of them (osworld_worker.py)."""
        request: dict[str, Any] = {"func": func, "result": result, "options": dict(options or {})}
        if getter is not None:
            request["getter"] = dict(getter)
        if expected_getter is not None:
            request["expected_getter"] = dict(expected_getter)
        if expected is not NO_EXPECTED:
            request["expected"] = expected
        started = time.monotonic()
        reply = self._request(request, timeout)
        if "score" not in reply:
            raise OSWorldMetricError(func, str(reply.get("error")), str(reply.get("traceback", "")))
        value = float(reply["score"])
        log.debug("OSWorld metric %s: %s in %.2f s", func, value, time.monotonic() - started)
        return value

    def setup(
        self, step: str, params: Mapping[str, Any], endpoint: str | None, *, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        """OSWorld's own setup step `step` (chrome_open_tabs, chrome_close_tabs) on the browser behind
        the DevTools `endpoint`; OSWorldMetricError with OSWorld's own exception when it fails."""
        request = {"func": step, "setup": step, "params": dict(params), "devtools": endpoint}
        reply = self._request(request, timeout)
        if not reply.get("ok"):
            raise OSWorldMetricError(step, str(reply.get("error")), str(reply.get("traceback", "")))

    def probe(self, func: str, *, timeout: float = DEFAULT_TIMEOUT) -> MetricProbe:
        """Load `func` in the worker; OSWorldMetricError when it does not load."""
        reply = self._request({"func": func, "probe": True}, timeout)
        if "module" not in reply:
            raise OSWorldMetricError(func, str(reply.get("error")), str(reply.get("traceback", "")))
        return MetricProbe(func, str(reply["module"]), tuple(reply.get("missing", ())))

    def close(self) -> None:
        """Stop the worker (a later request starts a new one)."""
        with self._lock:
            self._stop()

    def __enter__(self) -> OSWorldMetrics:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the worker process ---

    def _request(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        line = (json.dumps({**request, "timeout": timeout}) + "\n").encode()
        func = request["func"]
        with self._lock:
            try:
                proc = self._ensure()
                try:
                    self._send(proc, line)
                except BrokenPipeError:  # it died between requests: it never saw this one
                    self._stop()
                    proc = self._ensure()
                    self._send(proc, line)
                reply = self._read_reply(proc, time.monotonic() + timeout + KILL_GRACE)
            except BaseException:  # a dead worker, or e.g. KeyboardInterrupt: the next reply would be stale
                self._stop()
                raise
            if reply is None:
                self._stop()
        if reply is None:
            raise OSWorldEnvError(
                f"OSWorld metric {func} gave no reply within {timeout:g} s: the worker was killed "
                "(the next request starts a new one)"
            )
        if reply.get("timeout"):
            raise OSWorldEnvError(f"OSWorld metric {func} ran past its timeout: {reply.get('error')}")
        return reply

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        if self._proc is not None:
            log.warning("OSWorld metrics worker exited (%s); starting a new one", self._proc.returncode)
            self._stop()
        if not self.python.exists():
            raise OSWorldEnvError(f"{self.python} does not exist: run scripts/osworld-env.sh")
        started = time.monotonic()
        # The worker's temporary files (its requests' files, the metrics' own) live in a folder removed
        # when it stops, however it stopped: a killed worker cleans up nothing itself.
        self._scratch = tempfile.mkdtemp(prefix="osworld-metrics-")
        # -I: neither our PYTHONPATH nor the worker's own folder (agent_core/tasks) lands on its sys.path.
        self._proc = subprocess.Popen(
            [str(self.python), "-I", str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            cwd=self._scratch,
            env={**os.environ, "TMPDIR": self._scratch},
        )
        self._buf = b""
        self._stderr.clear()
        assert self._proc.stderr is not None
        self._drainer = threading.Thread(target=self._drain, args=(self._proc.stderr,), daemon=True)
        self._drainer.start()
        log.info(
            "started the OSWorld metrics worker (pid %d) in %.2f s",
            self._proc.pid,
            time.monotonic() - started,
        )
        return self._proc

    def _drain(self, stream: IO[bytes]) -> None:
        # The worker's logging and prints, read as they come (a full pipe would stall it).
        for raw in stream:
            text = raw.decode("utf-8", "replace").rstrip()
            self._stderr.append(text)
            log.debug("osworld worker: %s", text)

    @staticmethod
    def _send(proc: subprocess.Popen[bytes], line: bytes) -> None:
        assert proc.stdin is not None
        proc.stdin.write(line)
        proc.stdin.flush()

    def _read_reply(self, proc: subprocess.Popen[bytes], deadline: float) -> dict[str, Any] | None:
        """The next reply line, or None past the deadline; OSWorldEnvError when the worker died."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        poller = select.poll()  # not select.select: a busy process's descriptors may pass 1024
        poller.register(fd, select.POLLIN)
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not poller.poll(left * 1000):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._stop()
                if self._drainer is not None:
                    self._drainer.join(timeout=2)  # its last lines of stderr
                tail = "\n".join(list(self._stderr)[-10:])
                raise OSWorldEnvError(
                    f"the OSWorld metrics worker exited ({proc.returncode}) mid-request:\n{tail}"
                )
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            raise OSWorldEnvError(f"the OSWorld metrics worker answered {line[:200]!r}")
        return reply

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        scratch, self._scratch = self._scratch, None
        self._buf = b""
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


_shared: OSWorldMetrics | None = None
_shared_lock = threading.Lock()


def _instance() -> OSWorldMetrics:
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = OSWorldMetrics()
            atexit.register(_shared.close)
        return _shared


def score(
    func: str,
    result: Any,
    expected: Any = NO_EXPECTED,
    options: Mapping[str, Any] | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    getter: Mapping[str, Any] | None = None,
    expected_getter: Mapping[str, Any] | None = None,
) -> float:
    """OSWorld's metric `func` on these values, in the process-wide worker (see `OSWorldMetrics.score`)."""
    return _instance().score(
        func, result, expected, options, timeout=timeout, getter=getter, expected_getter=expected_getter
    )


def probe(func: str, *, timeout: float = DEFAULT_TIMEOUT) -> MetricProbe:
    """Load OSWorld's metric `func` in the process-wide worker; OSWorldMetricError when it does not."""
    return _instance().probe(func, timeout=timeout)


def setup(
    step: str, params: Mapping[str, Any], endpoint: str | None, *, timeout: float = DEFAULT_TIMEOUT
) -> None:
    """OSWorld's setup step `step` in the process-wide worker (see `OSWorldMetrics.setup`)."""
    _instance().setup(step, params, endpoint, timeout=timeout)
