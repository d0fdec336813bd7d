"""Android sandboxes: one phone or emulator, reached through an adb server with adbutils.

The device is owned by whoever runs the adb server; this provider starts and kills no process (so
`pids()` is empty) and never lets adbutils spawn `adb start-server` behind our back: a missing server
is an `EnvError`, not a stray daemon nobody reaps. Every adb failure becomes `EnvError` with its cause.

Profile.options: serial (required), adb_host (127.0.0.1), adb_port (5037), workdir (/sdcard/flywheel),
home_package, reset_packages ([]), apps ({name: package} for open_app), screencap ("raw" or "png"),
settle_s (0.3, pause after each GUI action), io_timeout (30 s), text_ime (None or "adbkeyboard": type
non-ASCII text through the ADBKeyBoard IME's ADB_INPUT_B64 broadcast, which must be installed).
"""

from __future__ import annotations

import base64
import dataclasses
import io
import posixpath
import re
import shlex
import struct
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import adbutils  # type: ignore[import-untyped]
from PIL import Image

from agent_core import actions as A
from sandbox_workers.base import (
    ActionUnsupported,
    EnvError,
    ExecResult,
    Health,
    ImageFormat,
    Observation,
    Profile,
    Provider,
    SandboxError,
    SandboxPathError,
    Screenshot,
    register_provider,
)
from sandbox_workers.providers.android.adb import (
    _ASCII_TEXT,
    _Client,
    _Out,
    _recv_exact,
    _Timeout,
    decode_raw_screencap,
    input_text_chunks,
    keycode,
)

_PID_MARK = b"__FLYWHEEL_PID__"
_SCROLL_STEP_PX = 100
_PACKAGE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+")
_UNSUPPORTED = {
    "hover": "a touch screen has no pointer to move without touching",
    "right_single": "a touch screen has no right button (use long_press)",
    "middle_single": "a touch screen has no middle button",
    "keydown": "`input` only sends whole key presses, not a held key",
    "keyup": "`input` only sends whole key presses, not a key release",
}


@register_provider("android")
class AndroidProvider(Provider):
    """One Android device behind an adb server; see the module docstring for the options."""

    supports_snapshot = False

    def __init__(self, *, sandbox_id: str, profile: Profile, root: Path) -> None:
        super().__init__(sandbox_id=sandbox_id, profile=profile, root=root)
        opts = profile.options
        serial = opts.get("serial")
        if not isinstance(serial, str) or not serial.strip():
            raise SandboxError(
                f"android profile {profile.name!r} needs options.serial (the device serial `adb devices` "
                "lists, e.g. emulator-5554 or 192.168.1.5:5555)"
            )
        self.serial = serial.strip()
        self.adb_host = str(opts.get("adb_host") or "127.0.0.1")
        self.adb_port = int(opts.get("adb_port") or 5037)
        self.workdir = posixpath.normpath(str(opts.get("workdir") or "/sdcard/flywheel"))
        if not self.workdir.startswith("/") or self.workdir.count("/") < 2:
            # reset() runs `rm -rf` on it: never a top-level directory
            raise SandboxError(
                f"android workdir must be an absolute path two levels deep, not {self.workdir!r}"
            )
        self.home_package: str | None = opts.get("home_package") or None
        self.reset_packages = [str(p) for p in opts.get("reset_packages") or []]
        self.apps: dict[str, str] = {str(k).casefold(): str(v) for k, v in (opts.get("apps") or {}).items()}
        self.screencap = str(opts.get("screencap") or "raw")
        if self.screencap not in ("raw", "png"):
            raise SandboxError(f"android screencap must be 'raw' or 'png', not {self.screencap!r}")
        self.settle_s = float(opts.get("settle_s", 0.3))
        self.io_timeout = float(opts.get("io_timeout", 30.0))
        self.text_ime: str | None = opts.get("text_ime") or None
        self.size: tuple[int, int] = (profile.width, profile.height)
        self.last_result: ExecResult | bytes | None = None
        """What the last Terminal / FileRead action returned (act() itself returns nothing)."""
        self._device: Any = None
        self._client = _Client(self.adb_host, self.adb_port, self.io_timeout)

    # --- plumbing -----------------------------------------------------------------------------

    @contextmanager
    def _adb(self, what: str) -> Iterator[None]:
        """Turn every adb/socket failure inside into EnvError naming the operation and the cause."""
        try:
            yield
        except SandboxError:
            raise
        except (adbutils.AdbError, OSError, EOFError, ValueError, struct.error, AssertionError) as exc:
            raise EnvError(f"android {self.serial}: {what} failed: {type(exc).__name__}: {exc}") from exc

    def _dev(self) -> Any:
        if self._device is None:
            raise EnvError(f"android {self.serial}: not started")
        return self._device

    def _host_query(self, service: str, timeout: float) -> str:
        """A host-side query answered by the adb server itself (no device round trip)."""
        conn = self._client.make_connection(timeout=timeout)
        try:
            conn.send_command(service)
            conn.check_okay()
            return str(conn.read_string_block())
        finally:
            conn.conn.close()  # not conn.close(): that lingers 10 ms, too slow for health()

    def _run(self, command: str, *, timeout: float, cap: int = 1 << 26, track: bool = False) -> _Out:
        """Run `command` through shell protocol v2 (separate stdout/stderr, real exit code, binary-safe).

        `timeout` bounds the whole command, not each read. With `track`, the shell first prints its pid
        so a command that runs past its timeout can be killed with its children: adbd only sends SIGHUP
        to the shell when we hang up, which leaves a `sleep` or a loop it started running.
        """
        if "\x00" in command:
            # adbd reads the command as a C string: a NUL would cut it short, silently.
            raise SandboxError(f"a command cannot hold a NUL character: {command[:200]!r}")
        script = f"echo {_PID_MARK.decode()}$$\n{command}" if track else command
        res = _Out(started=time.monotonic())
        deadline = res.started + timeout
        head, pid, total = b"", None, 0
        with self._adb("shell " + command[:60]):
            conn = self._dev().open_transport(timeout=max(1.0, min(timeout, self.io_timeout)))
            try:
                conn.send_command("shell,v2,raw:" + script)
                conn.check_okay()
                conn.conn.sendall(b"\x04\x00\x00\x00\x00")  # close stdin: a command reading it sees EOF
                while True:
                    try:
                        header = _recv_exact(conn.conn, 5, deadline)
                        data = _recv_exact(conn.conn, int.from_bytes(header[1:], "little"), deadline)
                    except _Timeout:
                        res.timed_out = True
                        break
                    if header[0] == 3:  # exit packet
                        res.code = data[0] if data else 255
                        break
                    if header[0] == 1 and track and pid is None:
                        head += data
                        if b"\n" not in head and len(head) < 64:
                            continue
                        line, _, rest = head.partition(b"\n")
                        ours = line.startswith(_PID_MARK) and line[len(_PID_MARK) :].isdigit()
                        pid, data = (int(line[len(_PID_MARK) :]), rest) if ours else (-1, head)
                    if header[0] in (1, 2):  # stdout, stderr
                        room = max(0, cap - total)
                        (res.out if header[0] == 1 else res.err).extend(data[:room])
                        total += len(data)
                        res.truncated = res.truncated or len(data) > room
                if res.timed_out and pid and pid > 0:
                    with suppress(EnvError):
                        self._run(f"pkill -KILL -P {pid}; kill -KILL {pid}", timeout=5.0)
            finally:
                conn.conn.close()  # not conn.close(): adbutils lingers 10 ms there
        return res

    def _sh(self, command: str) -> bytes:
        """Run an internal command; a non-zero exit or a timeout is an EnvError with its output."""
        res = self._run(command, timeout=self.io_timeout)
        if res.timed_out or res.code != 0:
            why = "timed out" if res.timed_out else f"exited {res.code}"
            raise EnvError(f"android {self.serial}: `{command[:120]}` {why}: {res.text()[:500]}")
        return bytes(res.out)

    def _input(self, *args: str | int) -> None:
        self._sh(shlex.join(["input", *map(str, args)]))

    def _connect(self) -> None:
        """Attach to the device and check it is usable; EnvError with the reason if not."""
        with self._adb("get-state"):
            state = self._host_query(f"host-serial:{self.serial}:get-state", self.io_timeout)
        if state != "device":
            hint = " (accept the USB-debugging prompt on the device)" if state == "unauthorized" else ""
            raise EnvError(f"android {self.serial}: device is {state!r}, not online{hint}")
        with self._adb("features"):
            features = self._host_query(f"host-serial:{self.serial}:features", self.io_timeout)
        if "shell_v2" not in features.split(","):
            raise EnvError(f"android {self.serial}: adbd lacks shell_v2 (needs Android 7+): {features!r}")
        self._device = self._client.device(self.serial)
        try:
            wm = self._sh("wm size").decode()
        except EnvError:
            self._device = None
            raise
        found = re.search(r"Override size: (\d+)x(\d+)", wm) or re.search(r"Physical size: (\d+)x(\d+)", wm)
        if not found:
            raise EnvError(f"android {self.serial}: cannot read the screen size from `wm size`: {wm!r}")
        self.size = (int(found.group(1)), int(found.group(2)))

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Connect, check the device is online, read the screen size, make the workdir."""
        if self._device is not None:
            return
        self._connect()
        self._sh(f"mkdir -p {shlex.quote(self.workdir)}")

    def health(self) -> Health:
        """The device state as the adb server knows it (one local round trip)."""
        if self._device is None:
            return Health(False, "not started")
        try:
            with self._adb("get-state"):
                state = self._host_query(f"host-serial:{self.serial}:get-state", 2.0)
        except EnvError as exc:
            return Health(False, str(exc))
        return Health(state == "device", f"{self.serial}: {state}")

    def reset(self) -> None:
        """Home screen, force-stop and clear the reset packages, empty the workdir."""
        self._input("keyevent", "KEYCODE_HOME")
        if self.home_package:
            launch = ["am", "start", "-a", "android.intent.action.MAIN", "-c", "android.intent.category.HOME"]
            self._sh(shlex.join([*launch, self.home_package]))
        for pkg in self.reset_packages:
            self._sh(shlex.join(["am", "force-stop", pkg]))
            out = self._sh(shlex.join(["pm", "clear", pkg])).decode()
            if "Success" not in out:  # pm clear reports failure on stdout with exit code 0
                raise EnvError(f"android {self.serial}: `pm clear {pkg}` failed: {out.strip()[:200]}")
        wd = shlex.quote(self.workdir)
        self._sh(f"rm -rf {wd} && mkdir -p {wd}")

    def stop(self) -> None:
        """Forget the device; the adb server and the device are not ours to stop."""
        self._device = None

    # --- stepping -----------------------------------------------------------------------------

    def observe(self, *, fmt: ImageFormat = "png", a11y: bool = False, quality: int = 80) -> Observation:
        """Screencap (raw pixels by default: far faster than the device's own PNG encoder), a11y dump."""
        png: bytes | None = None
        with self._adb("screencap"):
            if self.screencap == "raw":
                try:
                    image = decode_raw_screencap(self._sh("screencap"))
                except ValueError:
                    self.screencap = "png"  # an odd pixel format: the PNG path always works
            if self.screencap == "png":
                png = self._sh("screencap -p")
                image = Image.open(io.BytesIO(png))
            if fmt == "png" and png is not None:
                data = png  # the device's own PNG, passed through
            else:
                buf = io.BytesIO()
                # PNG level 1: several times faster than the default, about the same size for screens
                image.convert("RGB").save(buf, format=fmt.upper(), quality=quality, compress_level=1)
                data = buf.getvalue()
        info: dict[str, Any] = {"serial": self.serial}
        tree = None
        if a11y:
            tree, error = self._a11y()
            if error:
                info["a11y_error"] = error
        self.size = image.size  # follows rotation: action coordinates are in this orientation
        shot = Screenshot(data=data, format=fmt, width=image.width, height=image.height)
        return Observation(screenshot=shot, a11y=tree, info=info)

    def _a11y(self) -> tuple[str | None, str | None]:
        """The uiautomator XML, or the reason there is none (it refuses while the screen animates)."""
        path = f"/data/local/tmp/flywheel_{re.sub(r'[^A-Za-z0-9_]', '_', self.sandbox_id)}_ui.xml"
        out = ""
        for _ in range(2):
            out = self._run(f"uiautomator dump {path}", timeout=self.io_timeout).text()
            if "dumped to" in out:
                with self._adb("read ui dump"):
                    return bytes(self._dev().sync.read_bytes(path)).decode("utf-8", "replace"), None
        return None, f"uiautomator dump failed: {out.strip()[:200]}"

    def act(self, action: A.Action) -> None:
        """Perform one action through `input`, `am`/`monkey` or the shell; GUI ones then settle."""
        if isinstance(action, A.Wait):
            time.sleep(action.seconds)
        elif isinstance(action, A.Terminal):
            self.last_result = self.exec(action.command, timeout=action.timeout)
        elif isinstance(action, A.FileRead):
            self.last_result = self.get_file(action.path)
        elif isinstance(action, A.FileWrite):
            self.put_file(action.path, action.content.encode("utf-8"))
        elif not isinstance(action, A.Finished | A.CallUser):
            self._gui(action)
            if self.settle_s > 0:
                time.sleep(self.settle_s)

    def _gui(self, action: A.Action) -> None:
        if isinstance(action, A.Click):
            self._input("tap", action.x, action.y)
        elif isinstance(action, A.LeftDouble):
            # Two `input` processes back to back are ~300 ms apart, too slow for a double tap: start
            # the first in the background and the second right after it.
            x, y = action.x, action.y
            self._sh(f"input tap {x} {y} & sleep 0.1; input tap {x} {y}; wait")
        elif isinstance(action, A.LongPress):
            ms = max(1, int(action.seconds * 1000))
            self._input("swipe", action.x, action.y, action.x, action.y, ms)
        elif isinstance(action, A.Drag):
            self._input("swipe", action.x1, action.y1, action.x2, action.y2, 800)
        elif isinstance(action, A.Scroll):
            self._scroll(action)
        elif isinstance(action, A.Type):
            self._type(action.content)
        elif isinstance(action, A.Press):
            self._input("keyevent", keycode(action.key))
        elif isinstance(action, A.Hotkey):
            self._hotkey(action.keys)
        elif isinstance(action, A.PressHome | A.PressBack):
            self._input("keyevent", "KEYCODE_HOME" if isinstance(action, A.PressHome) else "KEYCODE_BACK")
        elif isinstance(action, A.OpenApp):
            self._open_app(action.app_name)
        else:
            why = _UNSUPPORTED.get(action.kind, "not an android action")
            raise ActionUnsupported(f"android cannot perform {action.kind!r}: {why}")

    def _scroll(self, action: A.Scroll) -> None:
        # The finger moves against the scroll direction: to scroll down the content, swipe up.
        dx, dy = {"up": (0, 1), "down": (0, -1), "left": (1, 0), "right": (-1, 0)}[action.direction]
        dist = action.amount * _SCROLL_STEP_PX
        w, h = self.size
        x2 = min(max(action.x + dx * dist, 0), w - 1)
        y2 = min(max(action.y + dy * dist, 0), h - 1)
        self._input("swipe", action.x, action.y, x2, y2, 400)

    def _type(self, content: str) -> None:
        """`input text` per run of text; newline → ENTER, tab → TAB (so a trailing newline submits)."""
        text = content.replace("\r\n", "\n").replace("\r", "\n")
        odd = sorted({c for c in text if c not in _ASCII_TEXT and c not in "\n\t"})
        if odd and self.text_ime != "adbkeyboard":
            raise ActionUnsupported(
                f"android `input text` can only type printable ASCII, not {''.join(odd)[:20]!r}; set profile "
                "option text_ime='adbkeyboard' with the ADBKeyBoard IME installed and selected to type it"
            )
        for run in re.split(r"([\n\t])", text):
            if run in ("\n", "\t"):
                self._input("keyevent", "KEYCODE_ENTER" if run == "\n" else "KEYCODE_TAB")
            elif run and self.text_ime == "adbkeyboard" and any(c not in _ASCII_TEXT for c in run):
                msg = base64.b64encode(run.encode("utf-8")).decode()
                self._sh(shlex.join(["am", "broadcast", "-a", "ADB_INPUT_B64", "--es", "msg", msg]))
            else:
                for chunk in input_text_chunks(run):
                    self._input("text", chunk)

    def _hotkey(self, keys: Sequence[str]) -> None:
        codes = [keycode(k) for k in keys]
        if len(codes) == 1:
            self._input("keyevent", codes[0])
            return
        # `input keyevent A B` presses one after the other; only keycombination (Android 13+) chords them.
        res = self._run(shlex.join(["input", "keycombination", *codes]), timeout=self.io_timeout)
        output = res.text()
        if res.code != 0 or "Unknown command" in output or "Error" in output:
            raise ActionUnsupported(
                f"android hotkey {'+'.join(keys)} needs `input keycombination` (Android 13+): {output[:200]}"
            )

    def _open_app(self, app_name: str) -> None:
        pkg = self._package_for(app_name)
        launch = ["monkey", "-p", pkg, "-c", "android.intent.category.LAUNCHER", "1"]
        out = self._run(shlex.join(launch), timeout=self.io_timeout)
        text = out.text()
        if out.code != 0 or "No activities found" in text or "aborted" in text:
            raise ActionUnsupported(
                f"android open_app: {pkg} is not installed or has no launcher activity: {text[:200]}"
            )

    def _package_for(self, app_name: str) -> str:
        """The package for an app name: the profile's apps map, a package name, or a unique last segment."""
        name = app_name.strip()
        if name.casefold() in self.apps:
            return self.apps[name.casefold()]
        if _PACKAGE_RE.fullmatch(name):
            res = self._run(shlex.join(["pm", "path", name]), timeout=self.io_timeout)
            if res.code == 0 and b"package:" in res.out:
                return name

        def squash(text: str) -> str:
            return re.sub(r"[^a-z0-9]", "", text.lower())

        pkgs: list[str] = re.findall(r"^package:(\S+)", self._sh("pm list packages").decode(), re.MULTILINE)
        hits = [p for p in pkgs if squash(name) and squash(p.rsplit(".", 1)[-1]) == squash(name)]
        if len(hits) == 1:
            return hits[0]
        also = f" (ambiguous: {', '.join(hits[:5])})" if hits else ""
        raise ActionUnsupported(
            f"android open_app: no installed package for {app_name!r}{also}; give the package name "
            "(e.g. com.android.settings) or map the name in the profile's apps option"
        )

    # --- shell and files ----------------------------------------------------------------------

    def exec(
        self, command: str | Sequence[str], *, timeout: float = 30.0, output_cap: int = 65536
    ) -> ExecResult:
        """Run `command` in the device shell; past `timeout` it is killed and exit_code is None."""
        cmd = command if isinstance(command, str) else shlex.join(command)
        res = self._run(cmd, timeout=timeout, cap=max(0, output_cap), track=True)
        return ExecResult(
            exit_code=None if res.timed_out else res.code,
            stdout=res.out.decode("utf-8", "replace"),
            stderr=res.err.decode("utf-8", "replace"),
            timed_out=res.timed_out,
            truncated=res.truncated,
            duration_s=time.monotonic() - res.started,
        )

    def _remote(self, path: str) -> str:
        """The device path for a workspace path; SandboxPathError if it leaves the workdir."""
        if not path or "\x00" in path:
            raise SandboxPathError(f"bad sandbox path {path!r}")
        full = posixpath.normpath(posixpath.join(self.workdir, path))
        if not full.startswith(self.workdir + "/"):
            raise SandboxPathError(f"{path!r} leaves the android workspace {self.workdir}")
        return full

    def put_file(self, path: str, data: bytes) -> None:
        """Push `data` to the workdir (adbd creates missing parent directories)."""
        remote = self._remote(path)
        with self._adb(f"push {remote}"):
            sync = self._dev().sync
            if sync.stat(remote).mode & 0o170000 == 0o040000:
                raise SandboxPathError(f"{path!r} is a directory on the device")
            sync.push(data, remote, mode=0o644)

    def get_file(self, path: str) -> bytes:
        """Pull a file of the workdir; SandboxPathError if it does not exist or is a directory."""
        remote = self._remote(path)
        with self._adb(f"pull {remote}"):
            sync = self._dev().sync
            mode = sync.stat(remote).mode & 0o170000  # 0: missing
            if mode in (0, 0o040000):
                raise SandboxPathError(
                    f"{path!r} {'is a directory' if mode else 'does not exist'} on the device"
                )
            return bytes(sync.read_bytes(remote))

    # --- surviving a host restart ---------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Where the device is: enough for `adopt` to reconnect."""
        return {"serial": self.serial, "adb_host": self.adb_host, "adb_port": self.adb_port}

    @classmethod
    def adopt(
        cls, *, sandbox_id: str, profile: Profile, root: Path, state: Mapping[str, Any]
    ) -> AndroidProvider:
        """Reconnect to the device the previous host used; EnvError if it is gone or offline."""
        merged = {
            **profile.options,
            **{k: state[k] for k in ("serial", "adb_host", "adb_port") if k in state},
        }
        provider = cls(sandbox_id=sandbox_id, profile=dataclasses.replace(profile, options=merged), root=root)
        provider._connect()
        return provider

    @classmethod
    def cleanup(cls, *, root: Path, state: Mapping[str, Any]) -> None:
        """Nothing to kill: the provider never started a process."""
        return
