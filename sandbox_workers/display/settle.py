"""When an X application has taken a step's input, and when the screen shows what it made of it.

Why not a fixed window: waiting a fixed time for the first damage (25 ms) missed a Chromium page's
repaint in 4-7 of 30 steps (its renderer draws 20-70 ms after the click), made a click that changes
nothing wait the whole window, and let the next input reach LibreOffice while it was still busy with
the previous one: it handles keys that come while it works (its Reschedule) before the work, so under
load the Calc oracle's formulas went into the cell it had clicked before its arrow keys had moved the
cursor to D2 (tests/sandbox_workers/settle_app.py reproduces it).

What is watched instead (`Waits.ready` before the input, `Waits.settle` after it):
- the application the input goes to: the X client owning the deepest window under the pointer, or the
  one keys go to, and the window manager (it acts on clicks: focus, raise). The X server names each
  one's host pid (X-Resource); its main thread, the one that reads the X connection, is read in /proc:
  while it runs or waits to run, the application is still handling input; asleep for `idle_ms`, it has
  handled it and the work it did for it. After the input the client that had the focus (a click may
  take it away) and the X server (what the clients asked it to draw) are watched the same way;
- damage: on the screen (`quiet_ms` without any: the drawing is done) and on the application's own
  window (what it drew there is its repaint; the window manager's frame is not);
- a repaint that comes after the application went idle (Chromium's renderer, a process of its own,
  draws after the browser process has passed the click on) is awaited as long as that application has
  been seen to take (`PaintLatency`); one never seen drawing is given the whole bound, and one that drew
  less than a frame ago gets that frame (a toolkit's frame clock paints at most once a frame).
Everything is bounded by `max_ms` (for an app whose repaints lag, by what its slowest recent repaint
took and a half, at most four times `max_ms`). Where the server cannot name clients (no X-Resource),
the old first-damage window (`first_ms`) is the rule.

Before the input `ready` waits, at most `ready_ms`, until the application is idle, and for typing until
keys would reach a viewable window of an application; past that nothing is sent and `InputNotDelivered`
(an invalid step for an agent) says why.
"""

from __future__ import annotations

import os
import select
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from Xlib.ext import damage  # type: ignore[import-untyped]

from sandbox_workers.base import ActionFailed

FRAME_S = 1 / 60
"""One frame of a toolkit's frame clock: a repaint asked for within a frame of the last one waits for it."""
GRACE_S = 0.002
"""After the application went idle, the X server still delivers the damage of what it drew."""
KEEP = 8
"""Recent latencies kept per application."""


@dataclass(frozen=True)
class Settle:
    """How long a step waits before and after its input (milliseconds); see the module docstring."""

    first_ms: float = 25.0
    """Where the application cannot be watched: wait at most this long for the first damage."""
    quiet_ms: float = 4.0
    """Drawing is over once no damage came for this long…"""
    max_ms: float = 120.0
    """…and a step never waits longer than this in all after its input (an app whose repaints lag,
    Chromium on a loaded machine, up to four times this: `PaintLatency.bound_s`)."""
    idle_ms: float = 3.0
    """The application has handled the input once its main thread slept this long."""
    ready_ms: float = 5000.0
    """Before the input: how long to wait for the application to be idle (and for typing, for a focused
    window); past it the input is not sent."""


@dataclass(frozen=True)
class SettleResult:
    """How a step's wait after its input ended."""

    waited_ms: float
    changed: bool
    """Whether anything was drawn."""
    ended: str
    """"quiet" (the application drew in its window, then nothing more was drawn), "idle" (it has
    handled the input and drew nothing in its window, its repaint if any overdue; others may have drawn:
    `changed`), "bound" (max_ms reached: the screen may still be changing), "first" (nothing drawn
    within first_ms: the application could not be watched)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form (an observation's `settle` info)."""
        return {"waited_ms": round(self.waited_ms, 1), "changed": self.changed, "ended": self.ended}


class InputNotDelivered(ActionFailed):
    """The input was not sent: the application could not take it (busy past the bound, or no window to
    type into). The screen is as it was; the agent may try again."""


@dataclass(frozen=True)
class Target:
    """Who takes an input: the application (`app`, a host pid) and who else may act on it."""

    app: int | None
    """The X client the input goes to (None: the server cannot say)."""
    pids: tuple[int, ...]
    """The application and the window manager: both must be idle before the input."""
    others: tuple[int, ...] = ()
    """Clients that may draw because of it too (the one that had the focus a click may take away)."""
    window: int | None = None
    """The application's top-level window (None: the desktop): what it draws there is its repaint; the
    window manager's frame or another app redrawing (a focus change) is not."""
    what: str = ""
    """The target in words, for a refusal's message."""


class ThreadWatch:
    """When each watched process's main thread was last seen running (or waiting to run).

    A poll reads each one's run + run-queue time (schedstat, kept open and read again in place: a few
    µs); a thread that waits for a CPU does not move it, so an idle verdict is confirmed by the threads'
    states (`running`)."""

    def __init__(self) -> None:
        self._files: dict[int, tuple[int, int]] = {}
        self._seen: dict[int, int | None] = {}
        self._busy_at: dict[int, float] = {}

    def _fds(self, pid: int) -> tuple[int, int] | None:
        files = self._files.get(pid)
        if files is None:
            try:
                stat = os.open(f"/proc/{pid}/task/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return None
            try:
                sched = os.open(f"/proc/{pid}/task/{pid}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                sched = -1  # no schedstat in this kernel: the state alone
            files = self._files[pid] = (stat, sched)
        return files

    def _ns(self, pid: int) -> int | None:
        """Run + run-queue ns of `pid`'s main thread; None if it is gone."""
        files = self._fds(pid)
        if files is None:
            return None
        try:
            if files[1] < 0:
                return 0 if os.pread(files[0], 1, 0) else None
            data = os.pread(files[1], 128, 0)
            return sum(map(int, data.split()[:2])) if data else None
        except (OSError, ValueError):
            self._forget(pid)
            return None

    def _forget(self, pid: int) -> None:
        for fd in self._files.pop(pid, ()):
            if fd >= 0:
                os.close(fd)

    def poll(self, pids: Iterable[int], now: float) -> None:
        """Look at each of `pids` now; a new one counts as busy now (it is not known to be idle)."""
        for pid in pids:
            known = pid in self._seen
            prev = self._seen.get(pid)
            cur = self._seen[pid] = self._ns(pid)
            if cur is None:
                self._busy_at.pop(pid, None)  # gone: it takes no input and draws nothing
            elif not known or prev is None or cur != prev:
                self._busy_at[pid] = now
        if len(self._seen) > 64:  # pids of applications long gone
            for pid in list(self._seen)[:32]:
                self._seen.pop(pid, None)
                self._busy_at.pop(pid, None)
                self._forget(pid)

    def running(self, pids: Iterable[int], now: float) -> bool:
        """Whether one of `pids` is running or waiting to run (or in disk wait) now; it counts as busy."""
        found = False
        for pid in pids:
            files = self._fds(pid)
            try:
                stat = os.pread(files[0], 512, 0) if files is not None else b""
            except OSError:
                stat = b""
            end = stat.rfind(b")")
            if end > 0 and stat[end + 2 : end + 3] in (b"R", b"D"):
                self._busy_at[pid] = now
                found = True
        return found

    def idle_since(self, pids: Iterable[int]) -> float:
        """Since when none of `pids` was seen busy (as of the last poll)."""
        return max((self._busy_at.get(pid, 0.0) for pid in pids), default=0.0)

    def close(self) -> None:
        """Close the open /proc files."""
        for pid in list(self._files):
            self._forget(pid)


@dataclass
class PaintLatency:
    """Per application (host pid): how long its recent repaints took, after it went idle (`lag`) and
    after the input. One that draws before it sleeps (a single-process toolkit app) never lags: its
    repaint is due once it is idle. One whose repaint comes from another process (Chromium's renderer)
    lags, and its browser process wakes now and then meanwhile, so its repaint is awaited both ways."""

    _seen: dict[int, deque[tuple[float, float]]] = field(default_factory=dict)

    def known(self, app: int) -> bool:
        """Whether `app` has been seen drawing."""
        return app in self._seen

    def bound_s(self, app: int | None, max_s: float) -> float:
        """How long a step of `app` may wait in all: `max_s`, or for an app whose repaints lag, as long
        as its slowest recent one took and a half (the machine is loaded), at most four times `max_s`."""
        seen = self._seen.get(app) if app is not None else None
        if not seen or max(s[0] for s in seen) == 0.0:
            return max_s
        return min(4 * max_s, max(max_s, 1.5 * max(s[1] for s in seen) + FRAME_S))

    def due(self, app: int | None, t0: float, idle_from: float, cap: float) -> float:
        """When a repaint of `app` for an input sent at `t0` is overdue, it having been idle since
        `idle_from`: at `cap` (the bound) if it was never seen drawing."""
        seen = self._seen.get(app) if app is not None else None
        if not seen:
            return cap
        lag = max(s[0] for s in seen)
        if lag == 0.0:
            return min(cap, idle_from + GRACE_S)
        after_input = max(s[1] for s in seen)
        return min(cap, max(idle_from + 2 * lag + GRACE_S, t0 + 1.25 * after_input + FRAME_S))

    def overdue(self, app: int | None, waited_s: float) -> None:
        """A step of `app` ended at its bound without its repaint: if its repaints lag, the next one
        may take longer than `waited_s` (the machine got busier), and its bound grows with it."""
        seen = self._seen.get(app) if app is not None else None
        if seen and max(s[0] for s in seen) > 0.0:
            self.record(app, max(s[0] for s in seen), waited_s)

    def record(self, app: int | None, lag_s: float, after_input_s: float = 0.0) -> None:
        """`app` drew `lag_s` after it went idle (0: while it was handling the input), `after_input_s`
        after the input."""
        if app is None:
            return
        if app not in self._seen:
            if len(self._seen) >= 64:
                self._seen.pop(next(iter(self._seen)))
            self._seen[app] = deque(maxlen=KEEP)
        self._seen[app].append((max(0.0, lag_s), max(0.0, after_input_s)))


def _comm(pid: int | None) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


POLL_S = 0.001
"""How often the waits look at the watched threads."""


class XSession(Protocol):
    """What the waits use of an X session (`sandbox_workers.display.x11.XSession`, which imports this
    module: named here by shape, not by import)."""

    d: Any
    damage: Any
    settle_conf: Settle
    watched_drawn: set[int]

    def arm(self) -> None: ...
    def drain_damage(self) -> bool: ...
    def watch(self, wid: int) -> int: ...
    def unwatch(self, did: int) -> None: ...
    def wait_damage(self, timeout_s: float) -> bool: ...
    def client_pid(self, xid: int) -> int | None: ...
    def path_at(self, x: int, y: int) -> list[int]: ...
    def window_path(self, wid: int) -> list[int]: ...
    def client_in(self, path: Sequence[int]) -> int | None: ...
    def focus_window(self) -> int | None: ...
    def viewable(self, xid: int) -> bool: ...
    def wm_pid(self) -> int | None: ...


class Waits:
    """The waits of one `XSession`'s steps (`ready` before the input, `settle` after it), with what
    they learn of each application. Not thread-safe, like the session."""

    def __init__(self, x: XSession) -> None:
        self.x = x
        self.threads = ThreadWatch()
        self.paint = PaintLatency()
        self.last_damage: float | None = None
        """When the last step's drawing was seen (a repaint within a frame of it waits for the frame)."""
        self._watch: int | None = None
        """The damage object on the current target's window (`arm`)."""

    @property
    def conf(self) -> Settle:
        return self.x.settle_conf

    def target(self, point: tuple[int, int] | None) -> Target:
        """Who takes an input at `point` or, without one, the keys."""
        x = self.x
        wm = x.wm_pid()
        if wm is not None and not self.paint.known(wm):
            # The window manager draws what it draws itself, before it sleeps (no renderer of its
            # own): its repaints never lag, though it may go long without drawing at all.
            self.paint.record(wm, 0.0)
        focused = x.focus_window()
        had_focus = x.client_pid(focused) if focused is not None else None
        if point is not None:
            # Found without moving the pointer there: a move is input the app would be busy with.
            path = x.path_at(*point)
            where = "the window under the pointer"
        else:
            path = x.window_path(focused) if focused is not None else []
            where = "the focused window"
        x.drain_damage()  # the root's property changes that came before the path's replies
        window = x.client_in(path)
        if window is None:
            app, where = wm, "the desktop (its window manager)"
        else:
            app = x.client_pid(path[-1])
        pids = tuple(p for p in dict.fromkeys((app, wm)) if p is not None)
        others = tuple(p for p in (had_focus,) if p is not None and p not in pids)
        what = f"{where} ({_comm(app)}, pid {app})"
        return Target(app=app, pids=pids, others=others, window=window, what=what)

    def ready(self, target: Target, *, typing: bool = False) -> Target:
        """`target` once it can take the input (for `typing`: once a viewable window has the keyboard
        focus, the target then being its application); InputNotDelivered past `ready_ms`."""
        conf, x = self.conf, self.x
        deadline = time.monotonic() + conf.ready_ms / 1000
        if typing:
            wm, waited = x.wm_pid(), False
            while True:
                wid = x.focus_window()
                # The window manager parks the focus on a window of its own when no app has it.
                owner = x.client_pid(wid) if wid is not None else None
                if wid is not None and (owner is None or owner != wm) and x.viewable(wid):
                    break
                if time.monotonic() > deadline:
                    raise InputNotDelivered(
                        f"the input was not delivered: no window has the keyboard focus (after "
                        f"{conf.ready_ms / 1000:g} s), so typed text would go nowhere"
                    )
                waited = True
                time.sleep(0.01)
            if waited:  # the keys go to the window that took the focus meanwhile
                target = self.target(None)
        while True:
            now = time.monotonic()
            self.threads.poll(target.pids, now)
            idle = now - self.threads.idle_since(target.pids) >= conf.idle_ms / 1000
            if idle and not self.threads.running(target.pids, now):
                return target
            if now > deadline:
                raise InputNotDelivered(
                    f"the input was not delivered: {target.what} was still busy after "
                    f"{conf.ready_ms / 1000:g} s"
                )
            time.sleep(POLL_S)

    def settle(self, target: Target | None, server: int | None = None) -> SettleResult:
        """Sync, then wait until the screen shows what `target` made of the input (module docstring)."""
        x = self.x
        t0 = time.monotonic()
        x.d.sync()
        if target is None or target.app is None:
            return self._first_damage(t0)
        return self._settle(target, server, t0, self._watch)

    def arm(self, target: Target | None) -> None:
        """Before the input: forget what was drawn so far, and watch `target`'s window (`disarm` ends it)."""
        x = self.x
        self.disarm()
        if target is not None and target.window is not None:
            self._watch = x.watch(target.window)
            # A new damage object on a window starts with all of it damaged: the sync brings that
            # event in, and the subtract empties it, before the input.
            damage.damage_subtract(x.d, self._watch)
            x.d.sync()
        x.arm()
        x.watched_drawn.clear()

    def disarm(self) -> None:
        """Stop watching the last target's window."""
        if self._watch is not None:
            self.x.unwatch(self._watch)
            self._watch = None

    def _settle(self, target: Target, server: int | None, t0: float, watched: int | None) -> SettleResult:
        x, conf = self.x, self.conf
        app = target.app
        cap = t0 + self.paint.bound_s(app, conf.max_ms / 1000)
        clients = (*target.pids, *target.others)
        # The X server too: what the clients asked it to draw may still be in its queue.
        pids = (*clients, *((server,) if server is not None else ()))
        # Drawn less than a frame before this input: a repaint it asks for may wait for that frame.
        floor = self.last_damage + FRAME_S + GRACE_S if self.last_damage is not None else 0.0
        last = mine = None  # when anything was last drawn; when the app first drew in its window
        latency = 0.0
        fd = x.d.fileno()
        while True:
            now = time.monotonic()
            drawn = x.drain_damage()
            self.threads.poll(pids, now)
            idle_from = self.threads.idle_since(pids)
            if drawn:
                damage.damage_subtract(x.d, x.damage)
                last = now
                if mine is None and (watched is None or watched in x.watched_drawn):
                    mine = now
                    # Drawn after the clients had gone idle: the app's repaint lags (a renderer of its
                    # own). The server is left out: it is busy exactly when it draws.
                    latency = max(0.0, now - self.threads.idle_since(clients))
            ended = ""
            drawing = last is not None and now - last < conf.quiet_ms / 1000
            if now - idle_from >= conf.idle_ms / 1000 and not drawing:
                if mine is not None:
                    ended = "quiet"
                elif now >= max(self.paint.due(app, t0, idle_from, cap), floor):
                    ended = "idle"
                if ended and self.threads.running(pids, now):
                    ended = ""  # waiting for a CPU is not idle (under load it can be for long)
            if not ended and now >= cap:
                ended = "bound"
            if ended:
                if mine is not None:
                    self.paint.record(app, latency, mine - t0)
                elif ended == "bound":
                    self.paint.overdue(app, now - t0)
                if last is not None:
                    self.last_damage = last
                return SettleResult((now - t0) * 1000, last is not None, ended)
            select.select([fd], [], [], max(0.0, min(POLL_S, cap - now)))

    def _first_damage(self, t0: float) -> SettleResult:
        """The rule where the application cannot be watched: the first damage within first_ms, then
        quiet_ms without more, at most max_ms in all."""
        x, conf = self.x, self.conf
        if not x.wait_damage(conf.first_ms / 1000):
            return SettleResult((time.monotonic() - t0) * 1000, False, "first")
        cap = t0 + conf.max_ms / 1000
        while True:
            damage.damage_subtract(x.d, x.damage)
            left = cap - time.monotonic()
            if left <= 0:
                return SettleResult((time.monotonic() - t0) * 1000, True, "bound")
            if not x.wait_damage(min(conf.quiet_ms / 1000, left)):
                self.last_damage = time.monotonic()
                return SettleResult((time.monotonic() - t0) * 1000, True, "quiet")

    def quiet(self, quiet_s: float, max_s: float, pids: Iterable[int] = ()) -> bool:
        """Wait until nothing was drawn for `quiet_s` and none of `pids` ran for a fifth of it (an
        application done starting up: its document loaded and painted; an idle LibreOffice still wakes
        every 0.4-1 s), at most `max_s`; whether it got quiet."""
        x = self.x
        watched = tuple(pids)
        cap = time.monotonic() + max_s
        drawn_at = time.monotonic()
        self.threads.poll(watched, drawn_at)
        while True:
            now = time.monotonic()
            if x.drain_damage():
                damage.damage_subtract(x.d, x.damage)
                drawn_at = now
            self.threads.poll(watched, now)
            quiet = now - drawn_at >= quiet_s and now - self.threads.idle_since(watched) >= quiet_s / 5
            if quiet and not self.threads.running(watched, now):
                return True
            if now >= cap:
                return False
            select.select([x.d.fileno()], [], [], max(0.0, min(0.005, cap - now)))
