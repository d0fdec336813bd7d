"""Filters for the client-to-server half of an RFB (VNC) byte stream: no viewer's input reaches a
sandbox's VNC server unless the relay decides it may.

The relay feeds a filter whatever bytes the viewer sends, in chunks of any size. `RfbClientFilter`
returns, in order, the bytes that may reach the VNC server (the handshake and the messages that only
ask for pictures) and the viewer's input as parsed messages (`KeyMessage`, `PointerMessage`, each
with its raw bytes) for the relay to route: into an episode as recorded steps, raw to an idle
sandbox, or nowhere. Clipboard text and screen resizes never pass (counted in `dropped`).
`ViewOnlyRfbFilter` drops the input too. A message a filter cannot size (an unknown type, a security
type it does not speak) ends the stream with RfbViolation: a filter that guessed would let input
through, so it fails closed.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from enum import Enum, auto

__all__ = [
    "MAX_CUT_TEXT",
    "KeyMessage",
    "PointerMessage",
    "RfbClientFilter",
    "RfbViolation",
    "ViewOnlyRfbFilter",
]

# A viewer has no business sending a large clipboard; anything bigger ends the stream.
MAX_CUT_TEXT = 1 << 20

_VERSION = re.compile(rb"RFB (\d{3})\.(\d{3})\n")

# Client message types (RFC 6143 §7.5 and the community extensions noVNC speaks).
SET_PIXEL_FORMAT = 0
SET_ENCODINGS = 2
FRAMEBUFFER_UPDATE_REQUEST = 3
KEY_EVENT = 4
POINTER_EVENT = 5
CLIENT_CUT_TEXT = 6
ENABLE_CONTINUOUS_UPDATES = 150
CLIENT_FENCE = 248
SET_DESKTOP_SIZE = 251

# Flow-control messages that only shape how pictures are sent.
_PASS = {SET_PIXEL_FORMAT, SET_ENCODINGS, FRAMEBUFFER_UPDATE_REQUEST, ENABLE_CONTINUOUS_UPDATES, CLIENT_FENCE}
_NAMES = {
    SET_PIXEL_FORMAT: "SetPixelFormat",
    SET_ENCODINGS: "SetEncodings",
    FRAMEBUFFER_UPDATE_REQUEST: "FramebufferUpdateRequest",
    KEY_EVENT: "KeyEvent",
    POINTER_EVENT: "PointerEvent",
    CLIENT_CUT_TEXT: "ClientCutText",
    ENABLE_CONTINUOUS_UPDATES: "EnableContinuousUpdates",
    CLIENT_FENCE: "ClientFence",
    SET_DESKTOP_SIZE: "SetDesktopSize",
}

SECURITY_NONE = 1
SECURITY_VNC_AUTH = 2


class RfbViolation(Exception):
    """The viewer sent something the filter cannot pass or skip safely."""


@dataclass(frozen=True)
class KeyMessage:
    """A KeyEvent: an X keysym pressed (down) or released."""

    down: bool
    keysym: int
    raw: bytes


@dataclass(frozen=True)
class PointerMessage:
    """A PointerEvent: the buttons held (bit 0 left, 1 middle, 2 right, 3-6 wheel) at a screen point."""

    buttons: int
    x: int
    y: int
    raw: bytes


Segment = bytes | KeyMessage | PointerMessage


class _Stage(Enum):
    VERSION = auto()
    SECURITY = auto()
    VNC_AUTH = auto()
    CLIENT_INIT = auto()
    MESSAGES = auto()
    SKIPPING = auto()
    FAILED = auto()


class RfbClientFilter:
    """Incremental: `segments(chunk)` returns, in stream order, bytes that may be forwarded and the input
    messages; raises RfbViolation (and stays failed).

    Assumes RFB 3.7/3.8 (the client names its security type) or 3.3 with no authentication, which is
    what the sandboxes' x11vnc offers the relay. ClientInit's shared flag is forced on, so a viewer
    never disconnects the other viewers.
    """

    keep_input = True
    """Whether key and pointer messages are handed over (else dropped and counted, like the clipboard)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._stage = _Stage.VERSION
        self._skip = 0
        self.passed: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.refused = 0
        """What the viewer meant to change and was dropped: clipboard text (not the extended clipboard's
        capability messages, which noVNC sends by itself on connecting) and screen resizes."""

    @property
    def handshake_done(self) -> bool:
        """Whether the viewer has finished its side of the handshake."""
        return self._stage in (_Stage.MESSAGES, _Stage.SKIPPING)

    def segments(self, data: bytes) -> list[Segment]:
        """Take the next bytes from the viewer: what may go on to the server and the input, in order."""
        if self._stage is _Stage.FAILED:
            raise RfbViolation("the stream was already refused")
        self._buf += data
        out: list[bytearray | KeyMessage | PointerMessage] = []
        try:
            while self._step(out):
                pass
        except RfbViolation:
            self._stage = _Stage.FAILED
            self._buf.clear()
            raise
        return [bytes(s) if isinstance(s, bytearray) else s for s in out]

    def _step(self, out: list[bytearray | KeyMessage | PointerMessage]) -> bool:
        """Consume one unit from the buffer into `out` (or drop it); False when more bytes are needed."""
        buf, stage = self._buf, self._stage
        if stage is _Stage.SKIPPING:
            n = min(self._skip, len(buf))
            del buf[:n]
            self._skip -= n
            if self._skip:
                return False
            self._stage = _Stage.MESSAGES
            return True
        if not buf:
            return False
        if stage is _Stage.VERSION:
            if len(buf) < 12:
                if not b"RFB ".startswith(bytes(buf[:4])):
                    raise RfbViolation("not an RFB ProtocolVersion")
                return False
            match = _VERSION.fullmatch(bytes(buf[:12]))
            if not match:
                raise RfbViolation(f"bad ProtocolVersion {bytes(buf[:12])!r}")
            major, minor = int(match[1]), int(match[2])
            if major != 3:
                raise RfbViolation(f"unsupported RFB version {major}.{minor}")
            self._emit(out, 12, "ProtocolVersion")
            # 3.3 has the server pick the security type; the client says nothing until ClientInit.
            self._stage = _Stage.CLIENT_INIT if minor < 7 else _Stage.SECURITY
            return True
        if stage is _Stage.SECURITY:
            kind = buf[0]
            if kind == SECURITY_NONE:
                self._stage = _Stage.CLIENT_INIT
            elif kind == SECURITY_VNC_AUTH:
                self._stage = _Stage.VNC_AUTH
            else:
                raise RfbViolation(f"security type {kind} is not supported through the view-only relay")
            self._emit(out, 1, "SecurityType")
            return True
        if stage is _Stage.VNC_AUTH:
            if len(buf) < 16:
                return False
            self._emit(out, 16, "VncAuthResponse")
            self._stage = _Stage.CLIENT_INIT
            return True
        if stage is _Stage.CLIENT_INIT:
            buf[0] = 1  # shared: a viewer must not kick the others off
            self._emit(out, 1, "ClientInit")
            self._stage = _Stage.MESSAGES
            return True
        return self._message(out)

    def _message(self, out: list[bytearray | KeyMessage | PointerMessage]) -> bool:
        buf = self._buf
        kind = buf[0]
        size = self._size(kind)
        if size is None:
            return False
        name = _NAMES[kind]
        if kind in _PASS:
            self._emit(out, size, name)
            return True
        if kind in (KEY_EVENT, POINTER_EVENT) and not self.keep_input:
            self.dropped[name] = self.dropped.get(name, 0) + 1
            del buf[:size]
            return True
        if kind == KEY_EVENT:
            down, keysym = struct.unpack_from(">B2xI", buf, 1)
            out.append(KeyMessage(down=bool(down), keysym=keysym, raw=bytes(buf[:size])))
            del buf[:size]
            return True
        if kind == POINTER_EVENT:
            buttons, x, y = struct.unpack_from(">BHH", buf, 1)
            out.append(PointerMessage(buttons=buttons, x=x, y=y, raw=bytes(buf[:size])))
            del buf[:size]
            return True
        if kind == CLIENT_CUT_TEXT:
            # Dropped as it streams, never buffered: the length field is the client's to lie about.
            self.dropped[name] = self.dropped.get(name, 0) + 1
            (length,) = struct.unpack_from(">i", buf, 4)
            self.refused += length >= 0
            length = abs(length)  # negative: the extended clipboard format, same byte count
            if length > MAX_CUT_TEXT:
                raise RfbViolation(f"ClientCutText of {length} bytes is too long")
            del buf[:8]
            self._skip = length
            self._stage = _Stage.SKIPPING
            return True
        self.dropped[name] = self.dropped.get(name, 0) + 1
        self.refused += kind == SET_DESKTOP_SIZE
        del buf[:size]
        return True

    def _size(self, kind: int) -> int | None:
        """The whole message's length once enough of it is buffered to know; None until then."""
        buf = self._buf
        if kind == SET_PIXEL_FORMAT:
            return 20 if len(buf) >= 20 else None
        if kind == SET_ENCODINGS:
            if len(buf) < 4:
                return None
            (count,) = struct.unpack_from(">H", buf, 2)
            size = 4 + 4 * count
            return size if len(buf) >= size else None
        if kind == FRAMEBUFFER_UPDATE_REQUEST:
            return 10 if len(buf) >= 10 else None
        if kind == KEY_EVENT:
            return 8 if len(buf) >= 8 else None
        if kind == POINTER_EVENT:
            return 6 if len(buf) >= 6 else None
        if kind == CLIENT_CUT_TEXT:
            return 8 if len(buf) >= 8 else None  # the header; the text is skipped as it streams
        if kind == ENABLE_CONTINUOUS_UPDATES:
            return 10 if len(buf) >= 10 else None
        if kind == CLIENT_FENCE:
            if len(buf) < 9:
                return None
            length = buf[8]
            if length > 64:
                raise RfbViolation(f"ClientFence payload of {length} bytes (at most 64)")
            return 9 + length if len(buf) >= 9 + length else None
        if kind == SET_DESKTOP_SIZE:
            if len(buf) < 8:
                return None
            size = 8 + 16 * buf[6]
            return size if len(buf) >= size else None
        raise RfbViolation(f"unknown client message type {kind}")

    def _emit(self, out: list[bytearray | KeyMessage | PointerMessage], n: int, name: str) -> None:
        last = out[-1] if out else None
        if isinstance(last, bytearray):
            last += self._buf[:n]
        else:
            out.append(bytearray(self._buf[:n]))
        del self._buf[:n]
        self.passed[name] = self.passed.get(name, 0) + 1


class ViewOnlyRfbFilter(RfbClientFilter):
    """The view-only relay's filter: `feed(chunk)` returns only the bytes that may be forwarded; the
    viewer's keys and pointer are dropped (counted in `dropped`) like its clipboard."""

    keep_input = False

    def feed(self, data: bytes) -> bytes:
        """Take the next bytes from the viewer; return the bytes that may go on to the server."""
        return b"".join(s for s in self.segments(data) if isinstance(s, bytes))
