"""A fake adb server with one fake device behind it, speaking the real ADB host protocol over TCP.

Tests point a real adbutils client (and even the real `adb` command) at it; it stands in only for
the adb server + device. It implements what the android provider uses: the host services (version,
devices, features, get-state, transport/tport), `shell:` / `shell,v2:` / `exec:` and sync v1 (STAT,
LIST, SEND, RECV, QUIT). Shell scripts run in a tiny interpreter (quotes, `;` `&&` `||` `&`, `$$` `$?`)
over a fake userland: `input`, `am`, `monkey`, `pm`, `wm size`, `screencap`, `uiautomator dump`, and a
small in-memory filesystem. The screen is drawn from what was done to it (a red dot per tap).

Faults: `device.unplug()` (offline, live sessions cut), `server.remove(serial)` (not found),
`server.hang_up = True` (connections closed unanswered), `server.stop()` (connection refused).
"""

from __future__ import annotations

import base64
import contextlib
import io
import posixpath
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from PIL import Image, ImageDraw

UI_XML = (
    "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">"
    '<node index="0" text="" class="android.widget.FrameLayout" package="{pkg}" bounds="[0,0][{w},{h}]">'
    '<node index="0" text="Settings" resource-id="app:id/settings" class="android.widget.TextView" '
    'package="{pkg}" clickable="true" bounds="[100,200][300,400]" /></node></hierarchy>'
)


@dataclass
class Session:
    """One shell run: `$$`, the socket it streams to, and whether it was killed."""

    pid: int
    sock: socket.socket
    v2: bool
    killed: threading.Event = field(default_factory=threading.Event)
    cut: bool = False
    """The link was cut (unplugged): nothing more reaches the client, not even the exit packet."""

    def write(self, stream: int, data: bytes) -> None:
        if not data or self.cut:
            return
        if self.v2:
            self.sock.sendall(bytes([stream]) + struct.pack("<I", len(data)) + data)
        else:
            self.sock.sendall(data)


class FakeDevice:
    """The device's state: files, packages, screen, and every command run on it."""

    def __init__(self, serial: str = "emulator-5554", width: int = 1080, height: int = 2400) -> None:
        self.serial = serial
        self.state = "device"
        self.width, self.height = width, height
        self.features = "shell_v2,cmd,abb,fixed_push_mkdir"
        self.keycombination = True  # Android 13+
        self.packages = {
            "com.android.settings",
            "com.android.chrome",
            "com.google.android.apps.nexuslauncher",
        }
        self.files: dict[str, bytes] = {}
        self.dirs = {"/", "/sdcard", "/data", "/data/local", "/data/local/tmp"}
        self.history: list[list[str]] = []
        """The argv of every simple command run, in order."""
        self.taps: list[tuple[int, int]] = []
        self.swipes: list[tuple[int, int, int, int, int]] = []
        self.typed = ""
        """What `input text` / the ADBKeyBoard broadcast typed, decoded as the device would."""
        self.foreground = "com.google.android.apps.nexuslauncher"
        self.kills: list[int] = []
        self.stdin = b""
        """Everything clients sent into shell sessions (shell v2 packets: 4 = close stdin)."""
        self.sessions: dict[int, Session] = {}
        self.lock = threading.Lock()
        self._next_pid = 4000

    def commands(self, *names: str) -> list[list[str]]:
        """The recorded argvs whose program is one of `names` (all the device-changing ones by default)."""
        names = names or ("input", "am", "monkey", "pm")
        return [argv for argv in self.history if argv[0] in names]

    def unplug(self) -> None:
        """The device drops offline: the server reports it offline and live sessions are cut."""
        self.state = "offline"
        for sess in list(self.sessions.values()):
            # Cut the link before waking the command: woken first, it could send its exit packet
            # through the still-open socket and the client would see a normal exit (seen under load).
            sess.cut = True
            with contextlib.suppress(OSError):
                sess.sock.shutdown(socket.SHUT_RDWR)
            sess.killed.set()

    def plug(self) -> None:
        self.state = "device"

    # --- screen ---
    def screen(self) -> Image.Image:
        img = Image.new("RGB", (self.width, self.height), (255, 255, 255))
        draw = ImageDraw.Draw(img)
        for x1, y1, x2, y2, _ms in self.swipes:
            draw.line((x1, y1, x2, y2), fill=(0, 0, 255), width=8)
        for x, y in self.taps:
            draw.ellipse((x - 24, y - 24, x + 24, y + 24), fill=(255, 0, 0))
        return img

    def screencap(self, png: bool) -> bytes:
        img = self.screen()
        if png:
            buf = io.BytesIO()
            img.save(buf, format="PNG", compress_level=1)
            return buf.getvalue()
        # Android 9+ layout: width, height, pixel format (1 = RGBA_8888), colour space
        return struct.pack("<IIII", img.width, img.height, 1, 0) + img.convert("RGBA").tobytes()

    # --- filesystem ---
    def kind(self, path: str) -> str | None:
        path = posixpath.normpath(path)
        return "dir" if path in self.dirs else "file" if path in self.files else None

    def mkdirs(self, path: str) -> None:
        path = posixpath.normpath(path)
        while path not in self.dirs:
            self.dirs.add(path)
            path = posixpath.dirname(path)

    def write(self, path: str, data: bytes) -> None:
        path = posixpath.normpath(path)
        self.mkdirs(posixpath.dirname(path))
        self.files[path] = data

    def remove(self, path: str) -> None:
        path = posixpath.normpath(path)
        self.files = {p: d for p, d in self.files.items() if p != path and not p.startswith(path + "/")}
        self.dirs = {p for p in self.dirs if p != path and not p.startswith(path + "/")} | {"/"}

    def children(self, path: str) -> list[str]:
        path = posixpath.normpath(path)
        entries = set(self.files) | set(self.dirs)
        return sorted(posixpath.basename(p) for p in entries if p != "/" and posixpath.dirname(p) == path)

    def new_session(self, sock: socket.socket, v2: bool) -> Session:
        with self.lock:
            self._next_pid += 1
            sess = Session(self._next_pid, sock, v2)
            self.sessions[sess.pid] = sess
        return sess


def tokenize(line: str, pid: int, status: int) -> list[str]:
    """Split one line the way sh would: quotes, backslashes, `$$`/`$?`, and ; & && || as tokens."""
    tokens: list[str] = []
    cur: list[str] | None = None
    i, quote = 0, ""
    while i < len(line):
        ch = line[i]
        if quote == "'":
            if ch == "'":
                quote = ""
            else:
                cur = (cur or []) + [ch]
        elif ch == "\\" and i + 1 < len(line) and (quote != '"' or line[i + 1] in '"\\$`'):
            i += 1
            cur = (cur or []) + [line[i]]
        elif ch == "$" and line[i + 1 : i + 2] in ("$", "?"):
            cur = (cur or []) + list(str(pid if line[i + 1] == "$" else status))
            i += 1
        elif quote == '"':
            quote = "" if ch == '"' else quote
            cur = (cur or []) + ([] if ch == '"' else [ch])
        elif ch in "'\"":
            quote, cur = ch, cur or []
        elif ch in " \t":
            if cur is not None:
                tokens.append("".join(cur))
            cur = None
        elif ch in ";&|<>()":
            if cur is not None:
                tokens.append("".join(cur))
            cur = None
            op = line[i : i + 2] if line[i : i + 2] in ("&&", "||", ">>") else ch
            tokens.append("\x00" + op)
            i += len(op) - 1
        else:
            cur = (cur or []) + [ch]
        i += 1
    if cur is not None:
        tokens.append("".join(cur))
    return tokens


def decode_input_text(arg: str) -> str:
    """What Android's `input text` types for `arg`: a "%" followed by "s" becomes a space."""
    out, i = [], 0
    while i < len(arg):
        if arg[i] == "%" and arg[i + 1 : i + 2] == "s":
            out.append(" ")
            i += 2
        else:
            out.append(arg[i])
            i += 1
    return "".join(out)


class Shell:
    """Runs a `shell:`/`exec:` script for one session against a FakeDevice."""

    def __init__(self, device: FakeDevice, session: Session) -> None:
        self.dev, self.sess = device, session

    def out(self, text: str | bytes) -> None:
        self.sess.write(1, text.encode() if isinstance(text, str) else text)

    def err(self, text: str) -> None:
        self.sess.write(2, text.encode())

    def run(self, script: str) -> int:
        status = 0
        for line in script.split("\n"):
            argv: list[str] = []
            prev = ";"
            for tok in [*tokenize(line, self.sess.pid, status), "\x00;"]:
                if not tok.startswith("\x00"):
                    argv.append(tok)
                    continue
                op = tok[1:]
                if op not in (";", "&", "&&", "||"):
                    self.err(f"fake sh: unsupported operator {op!r}\n")
                    return 2
                if argv and (prev in (";", "&") or (prev == "&&") == (status == 0)):
                    status = self.command(argv)
                argv, prev = [], op
                if self.sess.killed.is_set():
                    return 137
        return status

    def command(self, argv: list[str]) -> int:
        dev = self.dev
        with dev.lock:
            dev.history.append(list(argv))
        name, args = argv[0], argv[1:]
        if name == "echo":
            newline = "\n" if args[:1] != ["-n"] else ""
            self.out(" ".join(args[1:] if not newline else args) + newline)
        elif name in ("true", "wait"):
            pass
        elif name == "false":
            return 1
        elif name == "exit":
            return int(args[0]) if args else 0
        elif name == "sleep":
            return 137 if self.sess.killed.wait(float(args[0])) else 0
        elif name == "wm" and args == ["size"]:
            self.out(f"Physical size: {dev.width}x{dev.height}\n")
        elif name == "screencap":
            self.out(dev.screencap(png="-p" in args))
        elif name == "uiautomator" and args[:1] == ["dump"]:
            path = args[1] if len(args) > 1 else "/sdcard/window_dump.xml"
            dev.write(path, UI_XML.format(pkg=dev.foreground, w=dev.width, h=dev.height).encode())
            self.out(f"UI hierchary dumped to: {path}\n")
        elif name == "input":
            return self.input(args)
        elif name == "am":
            if args[:4] == ["broadcast", "-a", "ADB_INPUT_B64", "--es"]:
                dev.typed += base64.b64decode(args[5]).decode()
            self.out(
                "Broadcasting: Intent { act=... }\nBroadcast completed: result=0\n"
                if args[0] == "broadcast"
                else ""
            )
        elif name == "monkey":
            pkg = args[args.index("-p") + 1] if "-p" in args else ""
            if pkg not in dev.packages:
                self.err("** No activities found to run, monkey aborted.\n")
                return 252
            dev.foreground = pkg
            self.out("  bash arg: -p\nEvents injected: 1\n## Network stats: elapsed time=12ms\n")
        elif name == "pm":
            return self.pm(args)
        elif name in ("kill", "pkill"):
            return self.kill(name, args)
        elif name in ("ls", "cat", "rm", "mkdir"):
            return self.files(name, [a for a in args if not a.startswith("-")])
        elif name == "getprop":
            self.out("\n")
        else:
            self.err(f"/system/bin/sh: {name}: inaccessible or not found\n")
            return 127
        return 0

    def input(self, args: list[str]) -> int:
        dev = self.dev
        sub, rest = (args[0], args[1:]) if args else ("", [])
        if sub == "tap" and len(rest) == 2:
            dev.taps.append((int(rest[0]), int(rest[1])))
        elif sub == "swipe" and len(rest) in (4, 5):
            x1, y1, x2, y2 = map(int, rest[:4])
            dev.swipes.append((x1, y1, x2, y2, int(rest[4]) if len(rest) == 5 else 300))
        elif sub == "text" and len(rest) == 1:
            dev.typed += decode_input_text(rest[0])
        elif sub == "keyevent" and rest or sub == "keycombination" and rest and dev.keycombination:
            pass
        else:
            self.err(f"Error: Unknown command: {sub}\nUsage: input [<source>] <command> [<arg>...]\n")
            return 255
        return 0

    def pm(self, args: list[str]) -> int:
        dev = self.dev
        if args[:1] == ["path"]:
            if args[1] not in dev.packages:
                return 1
            self.out(f"package:/data/app/{args[1]}-1/base.apk\n")
        elif args[:2] == ["list", "packages"]:
            self.out("".join(f"package:{p}\n" for p in sorted(dev.packages)))
        elif args[:1] == ["clear"]:
            self.out("Success\n" if args[1] in dev.packages else "Failed\n")  # exit 0 either way, as pm does
        else:
            self.err(f"Unknown pm command {args[:1]}\n")
            return 255
        return 0

    def kill(self, name: str, args: list[str]) -> int:
        targets: list[Session] = []
        if name == "kill":
            targets = [s for a in args if a.isdigit() and (s := self.dev.sessions.get(int(a)))]
        # pkill -P <pid>: the fake's commands never fork, so there are no children to find
        for sess in targets:
            self.dev.kills.append(sess.pid)
            sess.killed.set()
        return 0 if targets else 1

    def files(self, name: str, paths: list[str]) -> int:
        dev, status = self.dev, 0
        for path in paths:
            kind = dev.kind(path)
            if name == "mkdir":
                dev.mkdirs(path)
            elif name == "rm":
                dev.remove(path)
            elif kind is None:
                self.err(f"{name}: {path}: No such file or directory\n")
                status = 1
            elif name == "cat" and kind == "file":
                self.out(dev.files[posixpath.normpath(path)])
            elif name == "ls":
                self.out("".join(n + "\n" for n in (dev.children(path) if kind == "dir" else [path])))
            else:
                self.err(f"{name}: {path}: Is a directory\n")
                status = 1
        return status


class FakeAdbServer:
    """The adb server on a free loopback port, routing host and device services to FakeDevices."""

    VERSION = 41

    def __init__(self, *devices: FakeDevice) -> None:
        self.devices = {d.serial: d for d in devices}
        self.services: list[str] = []
        """Every service request received, in order."""
        self.hang_up = False
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._conns: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept, name="fake-adb", daemon=True)
        self._thread.start()

    def remove(self, serial: str) -> None:
        """The device disappears from the server entirely (unplugged USB)."""
        self.devices.pop(serial).unplug()

    def stop(self) -> None:
        """Stop listening and cut every connection (connection refused from now on)."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept(); close() alone would not
        self._listener.close()
        self._thread.join(2)
        for conn in list(self._conns):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for dev in self.devices.values():
            for sess in dev.sessions.values():
                sess.killed.set()

    def __enter__(self) -> FakeAdbServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if self.hang_up:
                conn.close()
                continue
            self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    # --- wire helpers ---
    @staticmethod
    def _recv(conn: socket.socket, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    @staticmethod
    def _block(text: str) -> bytes:
        data = text.encode()
        return f"{len(data):04x}".encode() + data

    def _fail(self, conn: socket.socket, message: str) -> None:
        conn.sendall(b"FAIL" + self._block(message))

    def _serve(self, conn: socket.socket) -> None:
        try:
            device: FakeDevice | None = None
            while True:
                head = self._recv(conn, 4)
                body = self._recv(conn, int(head, 16)) if head else None
                if body is None:
                    return None
                service = body.decode()
                self.services.append(service)
                if device is not None:
                    return self._device_service(conn, device, service)
                device = self._host_service(conn, service)
                if device is None:
                    return None
        except (OSError, ValueError):
            return None
        finally:
            self._conns.discard(conn)
            conn.close()

    def _lookup(self, conn: socket.socket, serial: str, *, online: bool) -> FakeDevice | None:
        dev = self.devices.get(serial)
        if dev is None:
            self._fail(conn, f"device '{serial}' not found")
        elif online and dev.state != "device":
            self._fail(conn, f"device {dev.state}")
        else:
            return dev
        return None

    def _host_service(self, conn: socket.socket, service: str) -> FakeDevice | None:
        """Answer a host service; returns the device when the connection switches to it."""
        if service == "host:version":
            conn.sendall(b"OKAY" + self._block(f"{self.VERSION:04x}"))
        elif service in ("host:devices", "host:devices-l"):
            conn.sendall(b"OKAY" + self._block("".join(f"{s}\t{d.state}\n" for s, d in self.devices.items())))
        elif service == "host:kill":
            conn.sendall(b"OKAY")
        elif service in ("host:features", "host:host-features"):
            conn.sendall(b"OKAY" + self._block("shell_v2,cmd"))
        elif service.startswith("host-serial:"):
            serial, _, query = service[len("host-serial:") :].rpartition(":")
            dev = self._lookup(conn, serial, online=query != "get-state")
            if dev is not None:
                answers = {"get-state": dev.state, "get-serialno": serial, "features": dev.features}
                if query in answers:
                    conn.sendall(b"OKAY" + self._block(answers[query]))
                else:
                    self._fail(conn, f"unsupported host-serial query {query!r}")
        elif service.startswith(("host:transport:", "host:tport:serial:")):
            serial = service.removeprefix("host:transport:").removeprefix("host:tport:serial:")
            dev = self._lookup(conn, serial, online=True)
            if dev is not None:
                conn.sendall(b"OKAY" + (struct.pack("<Q", 1) if "tport" in service else b""))
            return dev
        else:
            self._fail(conn, f"unknown host service {service!r}")
        return None

    def _device_service(self, conn: socket.socket, dev: FakeDevice, service: str) -> None:
        kind, _, command = service.partition(":")
        if kind.split(",")[0] in ("shell", "exec"):
            v2 = "v2" in kind.split(",")
            conn.sendall(b"OKAY")
            sess = dev.new_session(conn, v2)
            try:
                status = Shell(dev, sess).run(command)
                if v2 and not sess.cut:
                    conn.sendall(bytes([3]) + struct.pack("<I", 1) + bytes([status & 0xFF]))
            finally:
                dev.sessions.pop(sess.pid, None)
            # End the output with a FIN, then read what the client sent (shell v2 stdin packets) until
            # it hangs up: closing with unread data would reset the connection and could drop output
            # the client has not read yet.
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(5)
            with contextlib.suppress(OSError):
                while chunk := conn.recv(65536):
                    dev.stdin += chunk
        elif kind == "sync":
            conn.sendall(b"OKAY")
            self._sync(conn, dev)
        else:
            self._fail(conn, f"unknown device service {service!r}")

    def _sync(self, conn: socket.socket, dev: FakeDevice) -> None:
        """The sync v1 protocol: 4-byte id + little-endian length + payload, per request."""
        while True:
            head = self._recv(conn, 8)
            if head is None or head[:4] == b"QUIT":
                return
            arg = self._recv(conn, struct.unpack("<I", head[4:])[0]) or b""
            path = arg.decode()
            cmd = head[:4]
            now = int(time.time())
            if cmd == b"STAT":
                kind = dev.kind(path)
                mode = {"dir": 0o040755, "file": 0o100644, None: 0}[kind]
                size = len(dev.files[posixpath.normpath(path)]) if kind == "file" else 0
                conn.sendall(b"STAT" + struct.pack("<III", mode, size, now if kind else 0))
            elif cmd == b"LIST":
                for name in dev.children(path):
                    full = posixpath.join(path, name)
                    mode = 0o040755 if dev.kind(full) == "dir" else 0o100644
                    size = len(dev.files.get(posixpath.normpath(full), b""))
                    conn.sendall(b"DENT" + struct.pack("<IIII", mode, size, now, len(name)) + name.encode())
                conn.sendall(b"DONE" + bytes(16))
            elif cmd == b"SEND":
                self._receive_file(conn, dev, path.rpartition(",")[0])
            elif cmd == b"RECV":
                if dev.kind(path) != "file":
                    msg = b"open failed: No such file or directory"
                    conn.sendall(b"FAIL" + struct.pack("<I", len(msg)) + msg)
                    continue
                data = dev.files[posixpath.normpath(path)]
                for i in range(0, len(data), 65536):
                    chunk = data[i : i + 65536]
                    conn.sendall(b"DATA" + struct.pack("<I", len(chunk)) + chunk)
                conn.sendall(b"DONE" + bytes(4))
            else:
                return

    def _receive_file(self, conn: socket.socket, dev: FakeDevice, path: str) -> None:
        data = bytearray()
        while True:
            head = self._recv(conn, 8)
            if head is None:
                return
            n = struct.unpack("<I", head[4:])[0]
            if head[:4] == b"DONE":
                break
            data += self._recv(conn, n) or b""
        if dev.kind(path) == "dir":
            msg = f"couldn't create file: {path}: Is a directory".encode()
            conn.sendall(b"FAIL" + struct.pack("<I", len(msg)) + msg)
            return
        dev.write(path, bytes(data))
        conn.sendall(b"OKAY" + bytes(4))
