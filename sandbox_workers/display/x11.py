"""X11 plumbing of the desktop sandbox: XTEST input, damage, the clients behind windows, window queries.

`XSession` keeps ONE persistent Xlib connection per sandbox: input is XTEST fake_input on it (no
process per action), and the same connection listens for XDamage events on the root window and asks
the server which client owns a window (X-Resource, `clients`), so that a step waits until the
application can take its input and until the screen shows its effect (`settle.Waits`: the next
screenshot shows it). Capture is `capture.Grabber`. Not thread-safe: one sandbox's worker thread owns
it. Every failure of the X connection (a dead Xvfb) raises EnvError.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from Xlib import XK, X  # type: ignore[import-untyped]
from Xlib import error as xerror
from Xlib.display import Display  # type: ignore[import-untyped]
from Xlib.ext import damage, xtest  # type: ignore[import-untyped]
from Xlib.protocol import event as xevent  # type: ignore[import-untyped]
from Xlib.support import connect as _xconnect  # type: ignore[import-untyped]

from sandbox_workers.base import EnvError
from sandbox_workers.display.clients import WindowClients
from sandbox_workers.display.keys import char_keysym, key_keysym
from sandbox_workers.display.settle import Settle, SettleResult, Target, Waits

__all__ = ["Settle", "SettleResult", "Target", "Window", "XSession", "server_alive", "server_identity"]

T = TypeVar("T")

_get_auth = _xconnect.get_auth


def _get_auth_or_none(*args: Any) -> Any:
    # python-xlib raises when ~/.Xauthority is missing where libX11 just connects without a cookie
    # (our Xvfb servers need none); do what libX11 does.
    try:
        return _get_auth(*args)
    except xerror.XauthError:
        return "", ""


_xconnect.get_auth = _get_auth_or_none

_SCROLL_BUTTONS = {"up": 4, "down": 5, "left": 6, "right": 7}
_BUTTONS = {"left": 1, "middle": 2, "right": 3}


@dataclass(frozen=True)
class Window:
    """A top-level window the window manager manages."""

    id: int
    wm_class: tuple[str, ...]
    title: str
    x: int
    y: int
    width: int
    height: int

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "id": self.id,
            "class": list(self.wm_class),
            "title": self.title,
            "x": self.x,
            "y": self.y,
            "width": self.width,
            "height": self.height,
        }


_X_FAILURES = (xerror.ConnectionClosedError, xerror.DisplayError, xerror.XError, OSError)


def _socket_path(display: str) -> str:
    return f"/tmp/.X11-unix/X{display.lstrip(':').split('.')[0]}"  # noqa: S108


def server_identity(display: str) -> tuple[int, int] | None:
    """Which server listens for `display` now (its socket file's inode and creation time: tmpfs reuses
    inodes), None if none: a display number a dead server freed is soon taken by another sandbox's,
    which must not pass for the dead one."""
    try:
        st = os.stat(_socket_path(display))
    except OSError:
        return None
    return st.st_ino, st.st_ctime_ns


# An X connection setup request (little-endian, protocol 11.0, no authorization).
_SETUP_REQUEST = struct.pack("<cxHHHHxx", b"l", 11, 0, 0, 0)


def server_alive(display: str, identity: tuple[int, int] | None = None, timeout: float = 5.0) -> bool:
    """Whether the local X server of `display` (":N") answers on its socket (and, given `identity`
    from server_identity, is still that server).

    It must answer a connection setup, not only accept: a server killed mid-request may still have
    its listening socket open for an instant after our connection to it broke (the kernel closes a
    dying process's sockets one by one), and the kernel queues a connect there without the server.
    """
    path = _socket_path(display)
    if identity is not None and server_identity(display) != identity:
        return False
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        try:
            s.connect(path)
            s.sendall(_SETUP_REQUEST)
            answer = s.recv(1)  # 1 success, 0 refused (authorization), 2 authenticate: all alive
        except OSError:  # refused, reset when the listener closed, or no answer in time
            return False
    return answer != b""


class XSession(WindowClients):
    """A persistent connection to one X display: input, settling and window queries."""

    def __init__(self, display: str, settle: Settle | None = None) -> None:
        self.display_name = display
        self.settle_conf = settle or Settle()
        self.server = server_identity(display)
        try:
            self.d = Display(display)
        except _X_FAILURES as exc:
            raise EnvError(f"cannot connect to X display {display}: {exc}") from exc
        # Asynchronous X errors (a window that closed under a query, say) are kept, not printed.
        self.errors: deque[str] = deque(maxlen=20)
        self.d.set_error_handler(lambda err, *_: self.errors.append(str(err)))
        try:
            if not self.d.has_extension("XTEST"):
                raise EnvError(f"X display {display} lacks the XTEST extension")
            screen = self.d.screen()
            self.root = screen.root
            self.width = int(screen.width_in_pixels)
            self.height = int(screen.height_in_pixels)
            self.damage, self._damage_event = self._init_damage()
            self.watched_drawn: set[int] = set()
            self._atoms: dict[str, int] = {}
            self._init_clients()
            self._load_keymap()
            self.d.sync()
        except _X_FAILURES as exc:
            self.close()
            raise EnvError(f"X display {display} failed: {exc}") from exc
        self._held_keys: set[int] = set()
        self._spare_next = 0
        self._remapped: dict[int, int] = {}  # keysym → spare keycode it is mapped to now
        self.waits = Waits(self)

    # --- connection ---
    def close(self) -> None:
        """Close the connection (errors ignored: the server may be gone)."""
        if "waits" in self.__dict__:
            self.waits.threads.close()
        with contextlib.suppress(Exception):  # a dead server cannot be closed politely
            self.d.close()

    @contextmanager
    def _x(self, what: str) -> Iterator[None]:
        try:
            yield
        except _X_FAILURES as exc:
            raise EnvError(f"X display {self.display_name} failed during {what}: {exc!r}") from exc
        except Exception as exc:
            # python-xlib has bugs on a connection the server dropped (a TypeError formatting
            # BrokenPipeError, say): a dead server is EnvError whatever it raised.
            if not server_alive(self.display_name, self.server):
                raise EnvError(f"X display {self.display_name} died during {what}: {exc!r}") from exc
            raise

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run `fn` turning X failures into EnvError."""
        with self._x(what):
            return fn()

    def _init_damage(self) -> tuple[int, int]:
        """Set up DAMAGE by hand: python-xlib 0.33's damage.init calls a method that does not exist,
        so it is not loaded with the others; its request functions work called directly."""
        info = self.d.query_extension("DAMAGE")
        if info is None or not info.present:
            raise EnvError(f"X display {self.display_name} lacks the DAMAGE extension")
        self.d.display.set_extension_major(damage.extname, info.major_opcode)
        code = info.first_event + damage.DamageNotifyCode
        self.d.extension_add_event(code, damage.DamageNotify)
        damage.query_version(self.d)
        return int(damage.damage_create(self.root, damage.DamageReportNonEmpty)), int(code)

    # --- keyboard map ---
    def _load_keymap(self) -> None:
        info = self.d.display.info
        self._min_kc = int(info.min_keycode)
        count = int(info.max_keycode) - self._min_kc + 1
        mapping = self.d.get_keyboard_mapping(self._min_kc, count)
        self._per_code = len(mapping[0]) if mapping else 2
        self._codes: dict[int, tuple[int, int]] = {}
        self._spares: list[int] = []
        for i, syms in enumerate(mapping):
            kc = self._min_kc + i
            if not any(syms):
                self._spares.append(kc)
            for idx, sym in enumerate(syms):
                if sym and (sym not in self._codes or idx < self._codes[sym][1]):
                    self._codes[sym] = (kc, idx)
        shift = self._codes.get(int(XK.string_to_keysym("Shift_L")))
        if shift is None:
            raise EnvError("the X keyboard map has no Shift key")
        self._shift = shift[0]
        # Characters the keymap lacks are typed by mapping them onto keycodes without keysyms.
        if not self._spares:
            raise EnvError("the X keyboard map has no spare keycode for typing unmapped characters")

    def _code_for(self, sym: int, pending: set[int]) -> tuple[int, bool]:
        """(keycode, needs shift) for a keysym, remapping a spare keycode if the keymap lacks it."""
        found = self._codes.get(sym)
        if found is not None and found[1] <= 1:
            return found[0], found[1] == 1
        if sym in self._remapped:
            return self._remapped[sym], False
        kc = self._spares[self._spare_next % len(self._spares)]
        self._spare_next += 1
        if kc in pending:
            # This spare keycode was used earlier in the same burst: let clients translate those key
            # events with the old mapping before it changes (the race xdotool also has to avoid).
            self.d.sync()
            time.sleep(0.02)
            pending.clear()
        for old_sym, old_kc in list(self._remapped.items()):
            if old_kc == kc:
                del self._remapped[old_sym]
        # Left mapped afterwards (not restored): clients look the mapping up lazily, and a restore
        # racing that lookup would turn the character into whatever the key was before.
        self.d.change_keyboard_mapping(kc, [(sym,) * self._per_code])
        self._remapped[sym] = kc
        pending.add(kc)
        return kc, False

    # --- input ---
    def _clamp(self, x: int, y: int) -> tuple[int, int]:
        return max(0, min(self.width - 1, x)), max(0, min(self.height - 1, y))

    def move(self, x: int, y: int) -> None:
        """Move the pointer to (x, y) (clamped to the screen)."""
        x, y = self._clamp(x, y)
        xtest.fake_input(self.d, X.MotionNotify, detail=0, root=self.root, x=x, y=y)

    def pointer(self) -> tuple[int, int]:
        """Where the pointer is, in screen pixels."""
        reply = self.root.query_pointer()
        return int(reply.root_x), int(reply.root_y)

    def button(self, button: int, press: bool) -> None:
        """Press or release a mouse button (1 left, 2 middle, 3 right, 4–7 wheel)."""
        xtest.fake_input(self.d, X.ButtonPress if press else X.ButtonRelease, button)

    def click(self, x: int, y: int, button: str = "left", count: int = 1) -> None:
        """Click `count` times at (x, y)."""
        self.move(x, y)
        for _ in range(count):
            self.button(_BUTTONS[button], True)
            self.button(_BUTTONS[button], False)

    def drag(self, x1: int, y1: int, x2: int, y2: int, steps: int = 6) -> None:
        """Press at (x1, y1), move in `steps` to (x2, y2), release."""
        self.move(x1, y1)
        self.button(1, True)
        self.d.sync()
        for i in range(1, steps + 1):
            # Toolkits start a drag only after motion events spread over a little time.
            time.sleep(0.004)
            self.move(x1 + (x2 - x1) * i // steps, y1 + (y2 - y1) * i // steps)
            self.d.sync()
        self.button(1, False)

    def scroll(self, x: int, y: int, direction: str, amount: int) -> None:
        """Wheel notches at (x, y)."""
        self.move(x, y)
        b = _SCROLL_BUTTONS[direction]
        for _ in range(amount):
            self.button(b, True)
            self.button(b, False)

    def key(self, name: str, press: bool) -> None:
        """Press or release the key `name` (held keys are remembered for release_all)."""
        kc, _ = self._code_for(key_keysym(name), set())
        xtest.fake_input(self.d, X.KeyPress if press else X.KeyRelease, kc)
        (self._held_keys.add if press else self._held_keys.discard)(kc)

    def hotkey(self, names: tuple[str, ...]) -> None:
        """Press the keys in order, release them in reverse."""
        pending: set[int] = set()
        codes: list[int] = []
        for name in names:
            sym = key_keysym(name)
            kc, shift = self._code_for(sym, pending)
            # "ctrl+plus" means the key that types "+", which needs shift.
            if shift and len(name) == 1 and "shift" not in (n.lower() for n in names):
                codes.append(self._shift)
            codes.append(kc)
        for kc in codes:
            xtest.fake_input(self.d, X.KeyPress, kc)
        for kc in reversed(codes):
            xtest.fake_input(self.d, X.KeyRelease, kc)

    def type_text(self, text: str) -> None:
        """Type `text` (any Unicode; newline is Return, tab is Tab)."""
        pending: set[int] = set()
        for i, ch in enumerate(text):
            kc, shift = self._code_for(char_keysym(ch), pending)
            if shift:
                xtest.fake_input(self.d, X.KeyPress, self._shift)
            xtest.fake_input(self.d, X.KeyPress, kc)
            xtest.fake_input(self.d, X.KeyRelease, kc)
            if shift:
                xtest.fake_input(self.d, X.KeyRelease, self._shift)
            if i % 64 == 63:
                # Round trips now and then keep a long text from flooding the clients' queues.
                self.d.sync()

    def release_all(self) -> None:
        """Release every key and button an action left down."""
        for kc in list(self._held_keys):
            xtest.fake_input(self.d, X.KeyRelease, kc)
        self._held_keys.clear()
        for b in (1, 2, 3):
            xtest.fake_input(self.d, X.ButtonRelease, b)
        self.d.sync()

    # --- damage and settling (the waits themselves: settle.Waits) ---
    def arm(self) -> None:
        """Forget damage so far (call before an action; `settle` then waits for the action's own)."""
        damage.damage_subtract(self.d, self.damage)
        self.drain_damage()

    def changed(self, timeout_s: float) -> bool:
        """Whether anything was drawn since the last `arm`, waiting up to `timeout_s` for it."""
        with self._x("waiting for damage"):
            return self.wait_damage(timeout_s)

    def drain_damage(self) -> bool:
        """Read pending events; whether any was a DamageNotify of the screen (those of a window
        `watch`ed go to `watched_drawn` too)."""
        got = False
        while self.d.pending_events():
            ev = self.d.next_event()
            if ev.type == self._damage_event:
                got = True
                if int(ev.damage) != self.damage:
                    self.watched_drawn.add(int(ev.damage))
            elif ev.type == X.PropertyNotify:
                self.note_property(int(ev.atom))
        return got

    def watch(self, wid: int) -> int:
        """A damage object on window `wid` and what it shows (its events mark `watched_drawn`)."""
        window = self.d.create_resource_object("window", wid)
        return int(damage.damage_create(window, damage.DamageReportNonEmpty))

    def unwatch(self, did: int) -> None:
        """Drop a damage object of `watch` (its window may be gone: the error is only kept)."""
        damage.damage_destroy(self.d, did)
        self.watched_drawn.discard(did)

    def wait_damage(self, timeout_s: float) -> bool:
        """Whether a DamageNotify comes within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        fd = self.d.fileno()
        while True:
            if self.drain_damage():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            select.select([fd], [], [], left)

    def settle(self, target: Target | None = None, server: int | None = None) -> SettleResult:
        """Sync, then wait until the screen shows `target`'s effect of the input (settle.Waits)."""
        return self.waits.settle(target, server)

    def quiet(self, quiet_s: float, max_s: float, pids: Sequence[int] = ()) -> bool:
        """Wait until nothing was drawn and none of `pids` ran for `quiet_s`, at most `max_s`."""
        return bool(self.waits.quiet(quiet_s, max_s, pids))

    # --- windows ---
    def atom(self, name: str) -> int:
        """Intern an atom (cached)."""
        if name not in self._atoms:
            self._atoms[name] = int(self.d.intern_atom(name))
        return self._atoms[name]

    def wm_running(self) -> bool:
        """Whether an EWMH window manager owns the screen (_NET_SUPPORTING_WM_CHECK is set)."""
        prop = self.root.get_full_property(self.atom("_NET_SUPPORTING_WM_CHECK"), X.AnyPropertyType)
        if prop is None or not prop.value:
            return False
        child = self.d.create_resource_object("window", int(prop.value[0]))
        try:
            cprop = child.get_full_property(self.atom("_NET_SUPPORTING_WM_CHECK"), X.AnyPropertyType)
        except xerror.BadWindow:
            return False  # a stale property of a window manager that died
        return cprop is not None and bool(cprop.value) and int(cprop.value[0]) == int(prop.value[0])

    def ewmh_message(self, window_id: int, message: str, data: Sequence[int]) -> None:
        """Ask the window manager to do `message` (_NET_ACTIVE_WINDOW, _NET_CLOSE_WINDOW) to a window."""
        ev = xevent.ClientMessage(
            window=self.d.create_resource_object("window", window_id),
            client_type=self.atom(message),
            data=(32, [*data, 0, 0, 0, 0, 0][:5]),
        )
        self.root.send_event(ev, event_mask=X.SubstructureRedirectMask | X.SubstructureNotifyMask)
        self.d.flush()

    def is_splash(self, window_id: int) -> bool:
        """Whether a window says it is a splash screen (_NET_WM_WINDOW_TYPE_SPLASH: an app's "starting"
        picture, before its own window); False for a window that is gone."""
        w = self.d.create_resource_object("window", window_id)
        try:
            prop = w.get_full_property(self.atom("_NET_WM_WINDOW_TYPE"), X.AnyPropertyType)
        except (xerror.BadWindow, xerror.BadDrawable):
            return False
        return prop is not None and self.atom("_NET_WM_WINDOW_TYPE_SPLASH") in list(prop.value)

    def windows(self) -> list[Window]:
        """The managed top-level windows (the WM's _NET_CLIENT_LIST), oldest first."""
        prop = self.root.get_full_property(self.atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
        out = []
        for wid in prop.value if prop is not None else []:
            w = self.d.create_resource_object("window", int(wid))
            try:
                cls = w.get_wm_class() or ()
                name = w.get_full_property(self.atom("_NET_WM_NAME"), self.atom("UTF8_STRING"))
                value = name.value if name is not None else (w.get_wm_name() or "")
                title = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
                geo = w.get_geometry()
                pos = w.translate_coords(self.root, 0, 0)
                out.append(
                    Window(int(wid), tuple(cls), title, -int(pos.x), -int(pos.y), geo.width, geo.height)
                )
            except (xerror.BadWindow, xerror.BadDrawable):
                continue  # closed while we looked
        return out
