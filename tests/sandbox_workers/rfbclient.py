"""A minimal RFB (VNC) viewer for tests and benchmarks: handshake, Raw updates, a pointer event.

Transport-agnostic: give it `send(bytes)` and `recv() -> bytes` coroutines (a WebSocket, a channels
WebsocketCommunicator). Keeps the framebuffer as 32-bit BGRX so callers can read pixels.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable

Send = Callable[[bytes], Awaitable[None]]
Recv = Callable[[], Awaitable[bytes]]

# 32 bpp, depth 24, little-endian, true colour, 8 bits a channel: bytes in memory are B, G, R, X.
PIXEL_FORMAT = struct.pack(">BBBBHHHBBB3x", 32, 24, 0, 1, 255, 255, 255, 16, 8, 0)


class RfbClient:
    def __init__(self, send: Send, recv: Recv) -> None:
        self._send, self._recv = send, recv
        self._buf = bytearray()
        self.width = self.height = 0
        self.name = ""
        self.fb = bytearray()
        self.updates = 0

    async def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._buf += await self._recv()
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def handshake(self) -> tuple[int, int]:
        """Version 3.8, security None, shared; ask for Raw 32-bit pixels. Returns the screen size."""
        version = await self._read(12)
        assert version.startswith(b"RFB 003."), version
        await self._send(b"RFB 003.008\n")
        (n,) = await self._read(1)
        if n == 0:
            (length,) = struct.unpack(">I", await self._read(4))
            raise ConnectionError((await self._read(length)).decode(errors="replace"))
        types = await self._read(n)
        assert 1 in types, f"the server offers no 'None' security: {list(types)}"
        await self._send(b"\x01")
        (result,) = struct.unpack(">I", await self._read(4))
        assert result == 0, "security handshake failed"
        await self._send(b"\x01")  # ClientInit: shared
        self.width, self.height = struct.unpack(">HH", await self._read(4))
        await self._read(16)
        (length,) = struct.unpack(">I", await self._read(4))
        self.name = (await self._read(length)).decode(errors="replace")
        self.fb = bytearray(self.width * self.height * 4)
        await self._send(b"\x00\x00\x00\x00" + PIXEL_FORMAT)
        await self._send(b"\x02\x00" + struct.pack(">Hi", 1, 0))  # SetEncodings: Raw only
        return self.width, self.height

    async def request(self, *, incremental: bool) -> None:
        """Ask for the whole screen (or, incremental, for what changed)."""
        await self._send(struct.pack(">BBHHHH", 3, int(incremental), 0, 0, self.width, self.height))

    async def pointer(self, x: int, y: int, buttons: int = 0) -> None:
        await self._send(struct.pack(">BBHH", 5, buttons, x, y))

    async def key(self, keysym: int, down: bool) -> None:
        await self._send(struct.pack(">BBxxI", 4, int(down), keysym))

    async def read_update(self) -> list[tuple[int, int, int, int]]:
        """Read server messages until one FramebufferUpdate is applied; returns its rectangles."""
        while True:
            (kind,) = await self._read(1)
            if kind == 0:
                break
            if kind == 1:  # SetColourMapEntries
                _, _, n = struct.unpack(">xHH", await self._read(5))
                await self._read(6 * n)
            elif kind == 2:  # Bell
                continue
            elif kind == 3:  # ServerCutText
                (length,) = struct.unpack(">3xI", await self._read(7))
                await self._read(length)
            else:
                raise ConnectionError(f"unexpected server message {kind}")
        (n,) = struct.unpack(">xH", await self._read(3))
        rects = []
        for _ in range(n):
            x, y, w, h, enc = struct.unpack(">HHHHi", await self._read(12))
            if enc == 0:
                data = await self._read(w * h * 4)
                for row in range(h):
                    start = ((y + row) * self.width + x) * 4
                    self.fb[start : start + w * 4] = data[row * w * 4 : (row + 1) * w * 4]
            elif enc == -223:  # DesktopSize
                self.width, self.height = w, h
                self.fb = bytearray(w * h * 4)
            else:
                raise ConnectionError(f"unexpected encoding {enc}")
            rects.append((x, y, w, h))
        self.updates += 1
        return rects

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        i = (y * self.width + x) * 4
        return self.fb[i + 2], self.fb[i + 1], self.fb[i]

    def blank(self) -> bool:
        """Whether every pixel is the same colour."""
        first = self.fb[:3]
        return all(self.fb[i : i + 3] == first for i in range(0, len(self.fb), 4 * 97))
