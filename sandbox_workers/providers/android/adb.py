"""The adb side of the Android sandbox: a client that never spawns `adb start-server`, reading a shell's
output with a deadline, raw screencaps, and key names and text as `input` takes them."""

from __future__ import annotations

import dataclasses
import re
import socket
import struct
import time
from typing import Any

import adbutils  # type: ignore[import-untyped]
from PIL import Image

from sandbox_workers.base import ActionUnsupported

_KEYCODE_RE = re.compile(r"KEYCODE_[A-Z0-9_]+")
_ASCII_TEXT = frozenset(chr(c) for c in range(0x20, 0x7F))
# KEYCODE_<name>: the key names that mean it (besides a-z, 0-9 and f1-f12, added below).
_KEY_NAMES = """
ENTER enter return kp_enter | DEL backspace del bksp | FORWARD_DEL delete forward_del | ESCAPE escape esc
CTRL_LEFT ctrl control | SHIFT_LEFT shift | ALT_LEFT alt option | META_LEFT meta win super cmd command
APP_SWITCH app_switch recents overview | VOLUME_MUTE volume_mute mute | VOLUME_UP volume_up volumeup
VOLUME_DOWN volume_down volumedown | PAGE_UP pageup page_up pgup | PAGE_DOWN pagedown page_down pgdn
DPAD_UP up | DPAD_DOWN down | DPAD_LEFT left | DPAD_RIGHT right | DPAD_CENTER center ok | BACK back
HOME home | TAB tab | SPACE space | MENU menu | POWER power | MOVE_END end | INSERT insert | SEARCH search
CAMERA camera | CAPS_LOCK capslock caps_lock | NOTIFICATION notification | WAKEUP wakeup | SLEEP sleep
COMMA , comma | PERIOD . period | MINUS - minus | EQUALS = equals | SLASH / slash | SEMICOLON ;
APOSTROPHE ' | LEFT_BRACKET [ | RIGHT_BRACKET ] | BACKSLASH \\ | GRAVE ` | AT @ | PLUS + | STAR * | POUND #
"""
_KEYS = {alias: code for entry in _KEY_NAMES.replace("\n", "|").split("|") if entry.strip()
         for code, *aliases in [entry.split()] for alias in aliases}  # fmt: skip
_KEYS |= {c: c.upper() for c in "abcdefghijklmnopqrstuvwxyz0123456789"} | {
    f"f{n}": f"F{n}" for n in range(1, 13)
}
_KEYS[" "] = "SPACE"


def keycode(key: str) -> str:
    """The KEYCODE_* name for a key name (enter, ctrl, a, f5, KEYCODE_X); ActionUnsupported if none."""
    k = key.strip() or key[:1]  # " " is the space key
    if _KEYCODE_RE.fullmatch(k):
        return k
    name = k.lower() if len(k) == 1 else k.lower().replace("-", "_").replace(" ", "_")
    name = name.removeprefix("arrow").lstrip("_") if name.startswith("arrow") else name
    code = _KEYS.get(name)
    if code is None:
        raise ActionUnsupported(f"no Android key for {key!r}; use a name like enter, back, tab, ctrl, a, f5")
    return f"KEYCODE_{code}"


def input_text_chunks(text: str) -> list[str]:
    """`input text` arguments that type `text` (printable ASCII only) exactly.

    `input text` turns "%s" into a space and has no escape for a literal "%s", so spaces become "%s"
    and a "%" followed by "s" is split across two calls.
    """
    chunks, cur = [], ""
    for ch in text:
        if ch == "s" and cur.endswith("%"):
            chunks.append(cur)
            cur = ""
        cur += ch
    chunks.append(cur)
    return [c.replace(" ", "%s") for c in chunks if c]


class _Timeout(Exception):
    """The deadline of one shell command passed."""


@dataclasses.dataclass
class _Out:
    """What one shell command gave back: exit code (None if it timed out) and raw output."""

    started: float
    code: int | None = None
    out: bytearray = dataclasses.field(default_factory=bytearray)
    err: bytearray = dataclasses.field(default_factory=bytearray)
    timed_out: bool = False
    truncated: bool = False

    def text(self) -> str:
        return (self.out + self.err).decode("utf-8", "replace").strip()


class _NoSpawnConnection(adbutils.AdbConnection):  # type: ignore[misc]
    """adbutils' connection, minus its fallback of running `adb start-server` when connect fails."""

    def _safe_connect(self) -> socket.socket:
        return self._create_socket()  # type: ignore[no-any-return]


class _Client(adbutils.AdbClient):  # type: ignore[misc]
    """An AdbClient whose connections never spawn a server and always carry a socket timeout."""

    def __init__(self, host: str, port: int, io_timeout: float) -> None:
        super().__init__(host=host, port=port)
        self.io_timeout = io_timeout
        self._version: int | None = None

    def make_connection(self, timeout: float | None = None) -> Any:
        conn = _NoSpawnConnection(self.host, self.port)
        conn.conn.settimeout(timeout or self.io_timeout)
        return conn

    def server_version(self) -> int:
        # adbutils asks before every device connection (to pick tport or transport): one is enough
        if self._version is None:
            self._version = int(super().server_version())
        return self._version


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Timeout
        sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(buf))
        except TimeoutError:
            raise _Timeout from None
        if not chunk:
            raise EOFError("adb closed the connection mid-command (device unplugged?)")
        buf += chunk
    return bytes(buf)


def decode_raw_screencap(buf: bytes) -> Image.Image:
    """Decode `screencap` without -p: a 12-byte (16 since Android 9: + colour space) header, then pixels."""
    if len(buf) < 12:
        raise ValueError(f"raw screencap too short ({len(buf)} bytes): {buf[:80]!r}")
    width, height, fmt = struct.unpack_from("<III", buf)
    for header in (16, 12):
        pixels = len(buf) - header
        if width and height and pixels > 0 and pixels % (width * height) == 0:
            bpp = pixels // (width * height)
            rawmode = {4: "BGRX" if fmt == 5 else "RGBX", 3: "RGB", 2: "BGR;16"}.get(bpp)
            if rawmode:
                return Image.frombytes("RGB", (width, height), buf[header:], "raw", rawmode)
    raise ValueError(f"raw screencap of {width}x{height} format {fmt} has {len(buf)} bytes")
