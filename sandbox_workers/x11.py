"""X11 plumbing of the desktop sandbox: XTEST input, Damage-based settling, capture, window queries.

`XSession` keeps ONE persistent Xlib connection per sandbox: input is XTEST fake_input on it (no
process per action), and the same connection listens for XDamage events on the root window so an
action returns once the screen has settled (the next screenshot shows its effect). `Grabber` keeps a
persistent mss instance (MIT-SHM) and encodes PNG or JPEG. Neither is thread-safe: one sandbox's
worker thread owns them. Every failure of the X connection (a dead Xvfb) raises EnvError.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import socket
import struct
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import mss
import mss.exception
from PIL import Image
from Xlib import XK, X  # type: ignore[import-untyped]
from Xlib import error as xerror
from Xlib.display import Display  # type: ignore[import-untyped]
from Xlib.ext import damage, xtest  # type: ignore[import-untyped]
from Xlib.support import connect as _xconnect  # type: ignore[import-untyped]

from agent_core.actions import ActionError
from sandbox_workers.base import EnvError, ImageFormat, Screenshot

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

# Key names as pyautogui / UI-TARS write them → X keysym names. Anything else is tried as an X
# keysym name as is (Return, KP_Enter, XF86AudioMute, …) and single characters as themselves.
KEY_ALIASES: dict[str, str] = {
    "enter": "Return",
    "return": "Return",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
    "backspace": "BackSpace",
    "delete": "Delete",
    "del": "Delete",
    "insert": "Insert",
    "space": "space",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "arrowup": "Up",
    "arrowdown": "Down",
    "arrowleft": "Left",
    "arrowright": "Right",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pgup": "Prior",
    "page_up": "Prior",
    "pagedown": "Next",
    "pgdn": "Next",
    "page_down": "Next",
    "ctrl": "Control_L",
    "control": "Control_L",
    "ctrlleft": "Control_L",
    "ctrlright": "Control_R",
    "alt": "Alt_L",
    "altleft": "Alt_L",
    "altright": "Alt_R",
    "option": "Alt_L",
    "shift": "Shift_L",
    "shiftleft": "Shift_L",
    "shiftright": "Shift_R",
    "super": "Super_L",
    "win": "Super_L",
    "winleft": "Super_L",
    "winright": "Super_R",
    "meta": "Super_L",
    "cmd": "Super_L",
    "command": "Super_L",
    "capslock": "Caps_Lock",
    "numlock": "Num_Lock",
    "scrolllock": "Scroll_Lock",
    "printscreen": "Print",
    "prtsc": "Print",
    "print": "Print",
    "pause": "Pause",
    "menu": "Menu",
    "apps": "Menu",
    "volumeup": "XF86AudioRaiseVolume",
    "volumedown": "XF86AudioLowerVolume",
    "volumemute": "XF86AudioMute",
    "plus": "plus",
    "minus": "minus",
}
_CHAR_NAMES = {"\n": "Return", "\r": "Return", "\t": "Tab", " ": "space"}
_SCROLL_BUTTONS = {"up": 4, "down": 5, "left": 6, "right": 7}
_BUTTONS = {"left": 1, "middle": 2, "right": 3}


def char_keysym(ch: str) -> int:
    """The X keysym of one character (Latin-1 keysyms are the code point, others 0x01000000 + it)."""
    if ch in _CHAR_NAMES:
        return int(XK.string_to_keysym(_CHAR_NAMES[ch]))
    code = ord(ch)
    if 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xFF:
        return code
    return 0x01000000 + code


def _small_number(text: str) -> bool:
    return 0 < len(text) <= 3 and text.isascii() and text.isdigit()


def key_keysym(name: str) -> int:
    """The keysym of a key name (see KEY_ALIASES) or single character; ActionError if unknown."""
    if len(name) == 1:
        return char_keysym(name)
    lowered = name.lower()
    if lowered in KEY_ALIASES:
        return int(XK.string_to_keysym(KEY_ALIASES[lowered]))
    # F1 … F35: ASCII digits only ("f²" passes str.isdigit() and then fails int(): an agent's bad key
    # must be an unknown key, not a crash).
    if lowered[0] == "f" and _small_number(lowered[1:]) and 1 <= int(lowered[1:]) <= 35:
        return int(XK.string_to_keysym(f"F{int(lowered[1:])}"))
    for candidate in (name, name.capitalize()):
        sym = XK.string_to_keysym(candidate)
        if sym:
            return int(sym)
    raise ActionError(f"unknown key {name!r}")


@dataclass(frozen=True)
class Settle:
    """How long to wait for the screen to settle after an action (milliseconds)."""

    first_ms: float = 25.0
    """Wait at most this long for the first damage; none by then: nothing changed."""
    quiet_ms: float = 4.0
    """Then wait until no damage came for this long…"""
    max_ms: float = 120.0
    """…but never longer than this in all."""


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


class XSession:
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
            self._damage, self._damage_event = self._init_damage()
            self._atoms: dict[str, int] = {}
            self._load_keymap()
            self.d.sync()
        except _X_FAILURES as exc:
            self.close()
            raise EnvError(f"X display {display} failed: {exc}") from exc
        self._held_keys: set[int] = set()
        self._spare_next = 0
        self._remapped: dict[int, int] = {}  # keysym → spare keycode it is mapped to now

    # --- connection ---
    def close(self) -> None:
        """Close the connection (errors ignored: the server may be gone)."""
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

    # --- settling ---
    def arm(self) -> None:
        """Forget damage so far (call before an action; `settle` then waits for the action's own)."""
        damage.damage_subtract(self.d, self._damage)
        self._drain()

    def _drain(self) -> bool:
        """Read pending events; whether any was a DamageNotify."""
        got = False
        while self.d.pending_events():
            ev = self.d.next_event()
            if ev.type == self._damage_event:
                got = True
        return got

    def _wait_damage(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        fd = self.d.fileno()
        while True:
            if self._drain():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            select.select([fd], [], [], left)

    def settle(self) -> float:
        """Sync, then wait until the screen has settled (see Settle); returns the seconds waited."""
        t0 = time.monotonic()
        conf = self.settle_conf
        self.d.sync()
        if not self._wait_damage(conf.first_ms / 1000):
            return time.monotonic() - t0
        cap = t0 + conf.max_ms / 1000
        while True:
            damage.damage_subtract(self.d, self._damage)
            left = cap - time.monotonic()
            if left <= 0 or not self._wait_damage(min(conf.quiet_ms / 1000, left)):
                return time.monotonic() - t0

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


def _adler32_combine(a1: int, a2: int, len2: int) -> int:
    """adler32 of A+B from adler32(A), adler32(B) and len(B) (zlib's adler32_combine)."""
    base = 65521
    rem = len2 % base
    sum1 = a1 & 0xFFFF
    sum2 = (rem * sum1) % base
    sum1 += (a2 & 0xFFFF) + base - 1
    sum2 += (a1 >> 16) + (a2 >> 16) + base - rem
    sum1 %= base
    sum2 %= base
    return sum1 | (sum2 << 16)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="png")
    return _POOL


@dataclass(frozen=True)
class _Strip:
    raw: bytes | bytearray
    """The strip's BGRA bytes as captured (to see whether it changed)."""
    deflated: bytes
    adler: int
    length: int


class PngEncoder:
    """PNG encoding of successive screen frames that re-compresses only the strips that changed.

    The image is cut into strips of STRIP rows; each strip is deflated on its own (ending in a sync
    flush, the last one in the final block), so the strips concatenate into one valid zlib stream
    whose adler32 is combined from the strips'. A strip whose pixels equal the previous frame's
    keeps its compressed bytes: typing a character re-encodes one strip, not the screen. Rows are
    unfiltered (filter 0) at zlib level 1, which on screen content is as small as Pillow's adaptive
    filtering and several times faster.
    """

    STRIP = 16

    def __init__(self, level: int = 1) -> None:
        self.level = level
        self._strips: list[_Strip] = []
        self._size = (0, 0)

    def _deflate(self, raw: bytes | bytearray, width: int, rows: int, last: bool) -> _Strip:
        rgb = Image.frombuffer("RGB", (width, rows), raw, "raw", "BGRX", 0, 1).tobytes()
        w3 = width * 3
        filtered = b"".join(b"\0" + rgb[r * w3 : (r + 1) * w3] for r in range(rows))
        comp = zlib.compressobj(self.level, zlib.DEFLATED, -15)
        data = comp.compress(filtered) + comp.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)
        return _Strip(raw, data, zlib.adler32(filtered), len(filtered))

    def encode(self, bgra: bytes | bytearray, width: int, height: int) -> bytes:
        """PNG (8-bit RGB) of a BGRA frame."""
        if (width, height) != self._size:
            self._strips = []
            self._size = (width, height)
        stride = width * 4
        count = (height + self.STRIP - 1) // self.STRIP
        todo: list[tuple[int, bytes | bytearray, int]] = []
        for i in range(count):
            y0 = i * self.STRIP
            y1 = min(height, y0 + self.STRIP)
            raw = bgra[y0 * stride : y1 * stride]
            if i < len(self._strips) and self._strips[i].raw == raw:
                continue
            todo.append((i, raw, y1 - y0))
        if len(self._strips) != count:
            self._strips = [_Strip(b"", b"", 1, 0)] * count
        if len(todo) > 4:
            done = list(_pool().map(lambda t: self._deflate(t[1], width, t[2], t[0] == count - 1), todo))
        else:
            done = [self._deflate(raw, width, rows, i == count - 1) for i, raw, rows in todo]
        for (i, _, _), strip in zip(todo, done, strict=True):
            self._strips[i] = strip
        adler = 1
        for strip in self._strips:
            adler = _adler32_combine(adler, strip.adler, strip.length)
        zdata = b"\x78\x01" + b"".join(s.deflated for s in self._strips) + struct.pack(">I", adler)
        header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + _png_chunk(b"IHDR", header)
            + _png_chunk(b"IDAT", zdata)
            + _png_chunk(b"IEND", b"")
        )


class Grabber:
    """Screen capture of one display through a persistent mss instance (MIT-SHM when it can)."""

    def __init__(self, display: str) -> None:
        self.display_name = display
        self._png = PngEncoder()
        self.server = server_identity(display)
        try:
            self._mss = mss.MSS(display=display)
            mons = self._mss.monitors
            self.monitor = dict(mons[1] if len(mons) > 1 else mons[0])
        except (mss.exception.ScreenShotError, OSError) as exc:
            raise EnvError(f"cannot capture display {display}: {exc}") from exc

    def close(self) -> None:
        """Release the capture resources (errors ignored)."""
        with contextlib.suppress(Exception):  # the server may be gone
            self._mss.close()

    def _grab(self) -> tuple[bytearray, int, int]:
        try:
            shot = self._mss.grab(self.monitor)
        except (mss.exception.ScreenShotError, OSError) as exc:
            raise EnvError(f"screen capture of {self.display_name} failed: {exc}") from exc
        except Exception as exc:
            # mss asserts on a reply from a server that died mid-request.
            if not server_alive(self.display_name, self.server):
                raise EnvError(f"X display {self.display_name} died during capture: {exc!r}") from exc
            raise
        # .raw, not .bgra: that would copy the frame once more (a fresh 3.7 MB, page faults and all).
        return shot.raw, int(shot.width), int(shot.height)

    def image(self) -> Image.Image:
        """The screen now as an RGB image."""
        bgra, w, h = self._grab()
        return Image.frombuffer("RGB", (w, h), bgra, "raw", "BGRX", 0, 1)

    def screenshot(self, fmt: ImageFormat = "png", quality: int = 80) -> Screenshot:
        """Capture and encode (PNG incrementally, see PngEncoder; JPEG with Pillow)."""
        captured = time.time()
        bgra, w, h = self._grab()
        if fmt == "png":
            data = self._png.encode(bgra, w, h)
        else:
            buf = io.BytesIO()
            img = Image.frombuffer("RGB", (w, h), bgra, "raw", "BGRX", 0, 1)
            img.save(buf, "JPEG", quality=max(1, min(95, quality)))
            data = buf.getvalue()
        return Screenshot(data=data, format=fmt, width=w, height=h, captured_at=captured)
