"""Screen capture of an X display (a persistent mss instance, MIT-SHM when it can) and the PNG
encoder that re-compresses only the strips of the screen that changed. Not thread-safe: one
sandbox's worker thread owns a `Grabber`.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import mss
import mss.exception
from PIL import Image

from sandbox_workers.base import EnvError, ImageFormat, Screenshot
from sandbox_workers.display.x11 import server_alive, server_identity


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
