"""What an MCP tool costs inside a real X desktop sandbox, beside the sandbox's own exec.

    python bench/mcp_bench.py [--calls 50]

Prints: the time from a sandbox with no server running to the tool list of its three default servers
(files, shell, records: each started in the sandbox's confinement and asked for its tools); a server's
own start (its first call after it was stopped); call latency p50/p95 of files.read_file, records.lookup
and shell.run beside the sandbox's exec of `cat` on the same file (the baseline: the shortest way the
host reaches into the sandbox); and the time to the next good call after a server is killed (the hub
starts it again).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_core import actions as A  # noqa: E402
from sandbox_workers.base import Profile, perform  # noqa: E402
from sandbox_workers.providers.xdesktop import XDesktopProvider  # noqa: E402


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def figures(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    return f"p50 {statistics.median(ms):7.1f} ms   p95 {p95:7.1f} ms"


def call(p: XDesktopProvider, server: str, tool: str, **arguments: Any) -> dict[str, Any]:
    result = perform(p, A.McpCall(server, tool, arguments))
    assert result is not None and not result["is_error"], result
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mcp-bench-"))
    tmp.chmod(0o711)  # the sandbox runs as its own uid and must reach its root
    p = XDesktopProvider(
        sandbox_id="mcp-bench", profile=Profile(name="bench", provider="xdesktop"), root=tmp / "sb"
    )
    try:
        p.start()
        p.put_file("data.txt", b"line\n" * 200)
        p.put_file("records.json", b'{"SKU-1": {"unit_price": 12}}')
        print(f"MCP in an X desktop sandbox ({os.cpu_count()} CPUs), {args.calls} calls each")
        listed = timed(lambda: p.call("mcp_tools", {}))
        print(f"  tool list with 3 servers started from none       {listed * 1000:7.0f} ms")
        hub = p.mcp_hub
        assert hub is not None
        starts = []
        for _ in range(3):
            hub.close()
            starts.append(timed(lambda: call(p, "files", "read_file", path="data.txt")))
        print(f"  a server's start to its first answer (files)     {figures(starts)}")
        rows = {
            "exec cat (baseline)": lambda: p.exec("cat data.txt"),
            "files.read_file": lambda: call(p, "files", "read_file", path="data.txt"),
            "records.lookup": lambda: call(p, "records", "lookup", key="SKU-1"),
            "shell.run true": lambda: call(p, "shell", "run", command="true"),
        }
        base = None
        for name, fn in rows.items():
            fn()  # warm
            samples = [timed(fn) for _ in range(args.calls)]
            median = statistics.median(samples)
            base = base or median
            print(f"  {name:<22} {figures(samples)}   {median / base:5.1f}x the baseline")
        restarts = []
        for _ in range(3):
            call(p, "files", "read_file", path="data.txt")
            killed = hub.pids()
            for pid in killed:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            time.sleep(1.0)  # the servers are gone for sure (not a race with the kill)
            t0 = time.perf_counter()
            while True:  # the call that finds its server dead is refused; the next one starts it again
                try:
                    call(p, "files", "read_file", path="data.txt")
                    break
                except Exception:  # noqa: BLE001 (what a bench reports is the time to a good call)
                    if time.perf_counter() - t0 > 60:
                        raise
            restarts.append(time.perf_counter() - t0)
        print(f"  killed servers (1 s before) to the next good call {figures(restarts)}")
    finally:
        p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
