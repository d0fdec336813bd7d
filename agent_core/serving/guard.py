"""The guard of one inference server's process group: `python guard.py <grace_s> <command…>`.

Engine starts it as the leader of a session of its own; it runs the command (vLLM's API server, whose
engine core and workers join the same group) and makes sure that group ends, and ends soon:

- when the process that started it dies, however it dies (kill -9 included), the group is killed at
  once: nobody manages the server any more;
- on SIGTERM or SIGINT (a stop), the server gets SIGTERM and `grace_s` to exit, then the group SIGKILL.

Without it an aborted vLLM server keeps its HTTP connections open after its engine is gone ("Waiting for
connections to close"): a request in flight at that moment got no answer and no error until the client's
read timeout (120 s), instead of failing over to another server at once.

Standard library only, run by path: it needs neither the project on sys.path nor anything installed.
The exit status is the server's (128 + the signal when a signal ended it).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1


def _kill_group() -> None:
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)  # the guard included: nothing of the group survives
    except OSError:
        os._exit(137)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: guard.py GRACE_S COMMAND [ARG…]", file=sys.stderr)
        return 2
    grace_s, command = float(argv[0]), argv[1:]
    parent = os.getppid()
    # The parent's death as a signal of its own (SIGUSR1), told apart from a stop (SIGTERM).
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGUSR1)
    if os.getppid() != parent:  # it died before the line above took effect
        return 1
    child = subprocess.Popen(command)  # noqa: S603 - the engine's own command line

    def parent_died(signum: int, frame: object) -> None:
        _kill_group()

    def stop(signum: int, frame: object) -> None:
        # The server is told, and the group killed once the grace is over unless the server has exited
        # by then (the wait below returns and cancels the timer).
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signal.SIGTERM)
        signal.setitimer(signal.ITIMER_REAL, max(grace_s, 0.001))

    signal.signal(signal.SIGALRM, lambda signum, frame: _kill_group())
    signal.signal(signal.SIGUSR1, parent_died)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    code = child.wait()
    signal.setitimer(signal.ITIMER_REAL, 0)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
