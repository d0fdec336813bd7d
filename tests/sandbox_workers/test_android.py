"""The android provider against a fake adb server (real adbutils client, real ADB wire protocol).

The fake (fake_adb.py) stands in for the adb server + device only; a last test runs the same
lifecycle against a real device when ANDROID_SERIAL names one.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from agent_core import actions as A
from sandbox_workers.base import (
    ActionFailed,
    ActionUnsupported,
    EnvError,
    OperationUnsupported,
    Profile,
    SandboxError,
    SandboxPathError,
    perform,
)
from sandbox_workers.providers.android import AndroidProvider
from sandbox_workers.providers.android.adb import decode_raw_screencap, input_text_chunks
from sandbox_workers.registry import provider_class
from tests.procs import wait_for
from tests.sandbox_workers.fake_adb import FakeAdbServer, FakeDevice, decode_input_text

WORKDIR = "/sdcard/flywheel"


def make(
    server: FakeAdbServer, root: Path, serial: str = "emulator-5554", **options: object
) -> AndroidProvider:
    opts = {"serial": serial, "adb_port": server.port, "settle_s": 0, "io_timeout": 5, **options}
    return AndroidProvider(
        sandbox_id="sb-1", profile=Profile(name="phone", provider="android", options=opts), root=root
    )


@pytest.fixture
def device() -> FakeDevice:
    return FakeDevice()


@pytest.fixture
def server(device: FakeDevice) -> Iterator[FakeAdbServer]:
    with FakeAdbServer(device) as srv:
        yield srv


@pytest.fixture
def android(server: FakeAdbServer, tmp_path: Path) -> Iterator[AndroidProvider]:
    provider = make(server, tmp_path)
    provider.start()
    yield provider
    provider.stop()


def pixel(png: bytes, x: int, y: int) -> tuple[int, ...]:
    return Image.open(io.BytesIO(png)).convert("RGB").getpixel((x, y))  # type: ignore[return-value]


# --- configuration and lifecycle -----------------------------------------------------------------


def test_registered_under_android() -> None:
    assert provider_class("android") is AndroidProvider
    assert AndroidProvider.supports_snapshot is False


@pytest.mark.parametrize("options", [{}, {"serial": ""}, {"serial": "  "}, {"serial": 5554}])
def test_missing_serial_is_a_clear_error(options: dict[str, object], tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match=r"needs options\.serial"):
        AndroidProvider(sandbox_id="x", profile=Profile("p", "android", options=options), root=tmp_path)


def test_shallow_workdir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="two levels deep"):
        AndroidProvider(
            sandbox_id="x", profile=Profile("p", "android", options={"serial": "s", "workdir": "/sdcard"}),
            root=tmp_path,
        )  # fmt: skip


def test_start_checks_state_reads_size_and_makes_workdir(
    android: AndroidProvider, server: FakeAdbServer, device: FakeDevice
) -> None:
    assert android.size == (1080, 2400)
    assert device.kind(WORKDIR) == "dir"
    assert "host-serial:emulator-5554:get-state" in server.services
    assert "host:tport:serial:emulator-5554" in server.services
    assert android.health().ok
    assert android.pids() == []
    assert android.state() == {"serial": "emulator-5554", "adb_host": "127.0.0.1", "adb_port": server.port}


def test_start_refuses_an_offline_or_unknown_device(
    server: FakeAdbServer, device: FakeDevice, tmp_path: Path
) -> None:
    device.state = "unauthorized"
    with pytest.raises(EnvError, match="unauthorized.*accept the USB-debugging prompt"):
        make(server, tmp_path).start()
    with pytest.raises(EnvError, match="device 'nope' not found"):
        make(server, tmp_path, serial="nope").start()


def test_no_adb_server_is_an_env_error_and_starts_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server = FakeAdbServer()
    server.stop()  # the port is now closed
    spawned: list[object] = []
    monkeypatch.setattr("adbutils._adb.subprocess.run", lambda *a, **k: spawned.append(a))
    t0 = time.monotonic()
    with pytest.raises(EnvError, match="connect to adb server failed"):
        make(server, tmp_path).start()
    assert time.monotonic() - t0 < 2
    assert spawned == []  # adbutils' own fallback would have run `adb start-server`


def test_stop_is_idempotent_and_stopped_provider_refuses_work(android: AndroidProvider) -> None:
    android.stop()
    android.stop()
    assert not android.health().ok
    with pytest.raises(EnvError, match="not started"):
        android.act(A.Click(1, 1))


def test_snapshot_is_unsupported(android: AndroidProvider) -> None:
    with pytest.raises(OperationUnsupported):
        android.snapshot()
    with pytest.raises(OperationUnsupported):
        android.restore(b"")


def test_adopt_reconnects_and_fails_when_the_device_is_gone(
    android: AndroidProvider, server: FakeAdbServer, device: FakeDevice, tmp_path: Path
) -> None:
    profile = Profile("phone", "android", options={"serial": "ignored", "settle_s": 0})
    adopted = AndroidProvider.adopt(sandbox_id="sb-1", profile=profile, root=tmp_path, state=android.state())
    assert adopted.serial == "emulator-5554" and adopted.health().ok
    adopted.act(A.PressHome())
    assert device.commands()[-1] == ["input", "keyevent", "KEYCODE_HOME"]
    AndroidProvider.cleanup(root=tmp_path, state=android.state())  # nothing to kill; must not raise
    device.unplug()
    with pytest.raises(EnvError, match="offline"):
        AndroidProvider.adopt(sandbox_id="sb-1", profile=profile, root=tmp_path, state=android.state())


def test_reset_goes_home_clears_packages_and_empties_workdir(
    server: FakeAdbServer, device: FakeDevice, tmp_path: Path
) -> None:
    provider = make(
        server,
        tmp_path,
        reset_packages=["com.android.chrome"],
        home_package="com.google.android.apps.nexuslauncher",
    )
    provider.start()
    provider.put_file("notes/a.txt", b"x")
    device.history.clear()
    provider.reset()
    assert device.commands() == [
        ["input", "keyevent", "KEYCODE_HOME"],
        ["am", "start", "-a", "android.intent.action.MAIN", "-c", "android.intent.category.HOME",
         "com.google.android.apps.nexuslauncher"],
        ["am", "force-stop", "com.android.chrome"],
        ["pm", "clear", "com.android.chrome"],
    ]  # fmt: skip
    assert device.kind(WORKDIR) == "dir" and device.children(WORKDIR) == []


def test_reset_reports_a_failed_pm_clear(server: FakeAdbServer, tmp_path: Path) -> None:
    provider = make(server, tmp_path, reset_packages=["com.example.missing"])
    provider.start()
    with pytest.raises(EnvError, match="pm clear com.example.missing.*Failed"):
        provider.reset()


# --- actions ---------------------------------------------------------------------------------------


def test_gestures_send_the_expected_input_commands(android: AndroidProvider, device: FakeDevice) -> None:
    for action in (
        A.Click(540, 1200),
        A.LongPress(10, 20, seconds=1.5),
        A.Drag(100, 200, 300, 400),
        A.Scroll(540, 1200, "down", 5),
        A.Scroll(540, 1200, "up", 3),
        A.Scroll(540, 2300, "up", 5),  # clamped to the screen
        A.Scroll(540, 1200, "left", 2),
        A.Scroll(540, 1200, "right", 2),
    ):
        android.act(action)
    assert device.commands() == [
        ["input", "tap", "540", "1200"],
        ["input", "swipe", "10", "20", "10", "20", "1500"],
        ["input", "swipe", "100", "200", "300", "400", "800"],
        ["input", "swipe", "540", "1200", "540", "700", "400"],  # scroll down: the finger moves up
        ["input", "swipe", "540", "1200", "540", "1500", "400"],
        ["input", "swipe", "540", "2300", "540", "2399", "400"],
        ["input", "swipe", "540", "1200", "740", "1200", "400"],
        ["input", "swipe", "540", "1200", "340", "1200", "400"],
    ]


def test_double_tap_is_two_overlapping_taps_in_one_shell(
    android: AndroidProvider, device: FakeDevice
) -> None:
    android.act(A.LeftDouble(5, 6))
    assert device.commands() == [["input", "tap", "5", "6"], ["input", "tap", "5", "6"]]
    assert device.history[-2:] == [["input", "tap", "5", "6"], ["wait"]]


NASTY = [
    "hello world",
    'it\'s 50% off; rm -rf / && echo $HOME `id` "q" | cat > x',
    "literal %s and %%s and 100%",
    "tab\there",
    "a\\b*?[c]~#!{}()<>",
]


@pytest.mark.parametrize("text", NASTY)
def test_type_escapes_text_exactly(
    android: AndroidProvider, device: FakeDevice, server: FakeAdbServer, text: str
) -> None:
    android.act(A.Type(text + "\n"))
    assert device.typed == text.replace("\t", "")
    keys = [c[2] for c in device.commands("input") if c[1] == "keyevent"]
    assert keys == ["KEYCODE_TAB"] * text.count("\t") + ["KEYCODE_ENTER"]
    assert all(" " not in c[2] for c in device.commands("input") if c[1] == "text")
    if shutil.which("sh"):  # the fake's shell parses what a real POSIX shell would
        sent = [s.split(":", 1)[1] for s in server.services if s.startswith("shell,v2,raw:input text")]
        for script, argv in zip(sent, [c for c in device.commands("input") if c[1] == "text"], strict=True):
            out = subprocess.run(
                ["sh", "-c", 'input() { printf "%s\\0" "$@"; }; ' + script], capture_output=True
            )
            assert out.stdout.decode().split("\0")[:-1] == argv[1:]


@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40))
def test_input_text_chunks_roundtrip(text: str) -> None:
    assert "".join(decode_input_text(c) for c in input_text_chunks(text)) == text


def test_non_ascii_text_is_refused_with_a_reason(android: AndroidProvider, device: FakeDevice) -> None:
    with pytest.raises(ActionUnsupported, match="printable ASCII.*text_ime='adbkeyboard'"):
        android.act(A.Type("héllo"))
    assert device.commands() == []


def test_adbkeyboard_types_unicode(server: FakeAdbServer, device: FakeDevice, tmp_path: Path) -> None:
    provider = make(server, tmp_path, text_ime="adbkeyboard")
    provider.start()
    provider.act(A.Type("héllo 你好 ok\n"))
    assert device.typed == "héllo 你好 ok"
    assert device.commands("am")[0][:5] == ["am", "broadcast", "-a", "ADB_INPUT_B64", "--es"]


def test_keys_map_to_keycodes(android: AndroidProvider, device: FakeDevice) -> None:
    for action in (
        A.Press("enter"), A.Press("Backspace"), A.Press("ArrowUp"), A.Press("volume_up"), A.Press("tab"),
        A.Press("KEYCODE_CAMERA"), A.Press(" "), A.Hotkey(("back",)), A.PressHome(), A.PressBack(),
    ):  # fmt: skip
        android.act(action)
    assert [c[2] for c in device.commands("input")] == [
        "KEYCODE_ENTER", "KEYCODE_DEL", "KEYCODE_DPAD_UP", "KEYCODE_VOLUME_UP", "KEYCODE_TAB",
        "KEYCODE_CAMERA", "KEYCODE_SPACE", "KEYCODE_BACK", "KEYCODE_HOME", "KEYCODE_BACK",
    ]  # fmt: skip
    with pytest.raises(ActionUnsupported, match="no Android key for 'hyper'"):
        android.act(A.Press("hyper"))


def test_hotkey_chords_with_keycombination(android: AndroidProvider, device: FakeDevice) -> None:
    android.act(A.Hotkey(("ctrl", "a")))
    assert device.commands() == [["input", "keycombination", "KEYCODE_CTRL_LEFT", "KEYCODE_A"]]
    device.keycombination = False  # before Android 13
    with pytest.raises(ActionUnsupported, match="Android 13"):
        android.act(A.Hotkey(("ctrl", "c")))


def test_open_app_by_package_label_or_mapping(
    server: FakeAdbServer, device: FakeDevice, tmp_path: Path
) -> None:
    provider = make(server, tmp_path, apps={"Browser": "com.android.chrome"})
    provider.start()
    launch = ["-c", "android.intent.category.LAUNCHER", "1"]
    provider.act(A.OpenApp("com.android.settings"))
    assert device.commands("monkey")[-1] == ["monkey", "-p", "com.android.settings", *launch]
    provider.act(A.OpenApp("browser"))
    assert device.commands("monkey")[-1] == ["monkey", "-p", "com.android.chrome", *launch]
    provider.act(A.OpenApp("Settings"))  # the last segment of a package, case-insensitively
    assert device.foreground == "com.android.settings"
    for name in ("com.example.nothere", "Calculator"):
        with pytest.raises(ActionUnsupported, match="no installed package"):
            provider.act(A.OpenApp(name))


def test_open_app_without_launcher_activity(
    android: AndroidProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(android, "_package_for", lambda name: name)  # skip the pm lookup
    with pytest.raises(ActionUnsupported, match="no launcher activity"):
        android.act(A.OpenApp("com.example.nolauncher"))


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        (A.Hover(1, 2), "no pointer"),
        (A.RightSingle(1, 2), "no right button"),
        (A.KeyDown("shift"), "held key"),
        (A.KeyUp("shift"), "key release"),
        (A.McpCall("s", "t"), "cannot perform 'mcp_call'"),
    ],
)
def test_unsupported_actions_say_why(android: AndroidProvider, action: A.Action, reason: str) -> None:
    with pytest.raises(ActionUnsupported, match=reason):
        android.act(action)


def test_control_actions(android: AndroidProvider, device: FakeDevice) -> None:
    t0 = time.monotonic()
    android.act(A.Wait(0.2))
    assert time.monotonic() - t0 >= 0.2
    android.act(A.Finished("done"))
    android.act(A.CallUser())
    assert device.commands() == []
    android.act(A.Terminal("echo from-agent"))
    assert android.last_result is not None and android.last_result.stdout == "from-agent\n"  # type: ignore[union-attr]
    android.act(A.FileWrite("note.txt", "héllo"))
    android.act(A.FileRead("note.txt"))
    assert android.last_result == "héllo".encode()


# --- observation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("screencap", ["raw", "png"])
def test_screenshot_shows_the_tap(
    server: FakeAdbServer, device: FakeDevice, tmp_path: Path, screencap: str
) -> None:
    provider = make(server, tmp_path, screencap=screencap)
    provider.start()
    before = provider.observe(fmt="png").screenshot
    assert (before.width, before.height, before.content_type) == (1080, 2400, "image/png")
    assert pixel(before.data, 540, 1200) == (255, 255, 255)
    provider.act(A.Click(540, 1200))
    after = provider.observe(fmt="png").screenshot
    assert pixel(after.data, 540, 1200) == (255, 0, 0)
    assert pixel(after.data, 100, 100) == (255, 255, 255)
    jpeg = provider.observe(fmt="jpeg", quality=70).screenshot
    assert jpeg.data[:2] == b"\xff\xd8" and jpeg.content_type == "image/jpeg"
    r, g, b = pixel(jpeg.data, 540, 1200)
    assert r > 200 and g < 60 and b < 60
    want = "shell,v2,raw:screencap" + (" -p" if screencap == "png" else "")
    assert want in server.services


def test_a11y_tree_is_the_uiautomator_dump(android: AndroidProvider, device: FakeDevice) -> None:
    android.act(A.OpenApp("com.android.settings"))
    obs = android.observe(a11y=True)
    assert obs.a11y is not None and obs.a11y.startswith("<?xml")
    assert 'text="Settings"' in obs.a11y and 'package="com.android.settings"' in obs.a11y
    assert obs.info["serial"] == "emulator-5554"
    assert android.observe().a11y is None


def test_decode_raw_screencap_header_variants() -> None:
    img = Image.new("RGB", (3, 2), (10, 20, 30))
    rgba = img.convert("RGBA").tobytes()
    old = (3).to_bytes(4, "little") + (2).to_bytes(4, "little") + (1).to_bytes(4, "little") + rgba
    assert decode_raw_screencap(old).getpixel((2, 1)) == (10, 20, 30)  # 12-byte header (before Android 9)
    with pytest.raises(ValueError, match="raw screencap"):
        decode_raw_screencap(b"/system/bin/sh: screencap: not found")


# --- shell and files -------------------------------------------------------------------------------


def test_exec_returns_code_and_separate_streams(android: AndroidProvider, device: FakeDevice) -> None:
    res = android.exec("echo out; ls /nope")
    assert (res.exit_code, res.stdout, res.timed_out, res.truncated) == (1, "out\n", False, False)
    assert "No such file" in res.stderr
    assert android.exec(["echo", "a b;c", "$HOME"]).stdout == "a b;c $HOME\n"
    android.exec("sleep 0.2")
    assert b"\x04\x00\x00\x00\x00" in device.stdin  # stdin closed: a command reading it gets EOF, not a hang


def test_a_nul_in_a_command_is_refused_before_it_reaches_adb(
    android: AndroidProvider, device: FakeDevice
) -> None:
    sent = len(device.history)
    for command in ("echo a\x00; rm -rf /sdcard", ["echo", "a\x00b"]):
        with pytest.raises(SandboxError, match="NUL") as err:
            android.exec(command)
        assert not isinstance(err.value, EnvError)
    with pytest.raises(ActionFailed, match="NUL"):
        perform(android, A.Terminal(command="echo \x00"))
    assert len(device.history) == sent
    assert android.exec("echo ok").stdout == "ok\n"


def test_exec_timeout_kills_the_command(android: AndroidProvider, device: FakeDevice) -> None:
    t0 = time.monotonic()
    res = android.exec("sleep 30", timeout=0.3)
    assert res.timed_out and res.exit_code is None
    assert time.monotonic() - t0 < 3
    assert len(device.kills) == 1 and device.kills[0] > 0
    assert ["kill", "-KILL", str(device.kills[0])] in device.history


def test_exec_output_cap(android: AndroidProvider) -> None:
    android.put_file("big.txt", b"x" * 200_000)
    res = android.exec(f"cat {WORKDIR}/big.txt", output_cap=1000)
    assert res.truncated and res.stdout == "x" * 1000 and res.exit_code == 0
    assert not android.exec("echo short", output_cap=1000).truncated


def test_push_pull_roundtrip(android: AndroidProvider, device: FakeDevice) -> None:
    blob = os.urandom(150_000)
    android.put_file("deep/dir/blob.bin", blob)
    assert device.files[f"{WORKDIR}/deep/dir/blob.bin"] == blob
    assert android.get_file("deep/dir/blob.bin") == blob
    assert android.get_file(f"{WORKDIR}/deep/dir/blob.bin") == blob  # absolute inside the workdir is fine
    android.put_file("deep/dir/blob.bin", b"new")
    assert android.get_file("./deep/../deep/dir/blob.bin") == b"new"


@pytest.mark.parametrize(
    "path", ["../escape.txt", "/etc/passwd", f"{WORKDIR}/../x", f"{WORKDIR}-other/x", "", "."]
)
def test_paths_leaving_the_workdir_are_refused(
    android: AndroidProvider, device: FakeDevice, path: str
) -> None:
    with pytest.raises(SandboxPathError):
        android.put_file(path, b"x")
    with pytest.raises(SandboxPathError):
        android.get_file(path)
    assert device.commands() == [] and not any("escape" in p for p in device.files)


def test_missing_file_and_directory_are_path_errors(android: AndroidProvider) -> None:
    with pytest.raises(SandboxPathError, match="does not exist"):
        android.get_file("nope.txt")
    android.put_file("d/f.txt", b"x")
    with pytest.raises(SandboxPathError, match="is a directory"):
        android.get_file("d")
    with pytest.raises(SandboxPathError, match="is a directory"):
        android.put_file("d", b"x")


# --- faults ----------------------------------------------------------------------------------------


def assert_env_errors_fast(provider: AndroidProvider, match: str) -> None:
    for call in (
        lambda: provider.act(A.Click(1, 1)),
        lambda: provider.observe(),
        lambda: provider.exec("echo hi"),
        lambda: provider.get_file("x"),
    ):
        t0 = time.monotonic()
        with pytest.raises(EnvError, match=match):
            call()
        assert time.monotonic() - t0 < 1.5


def test_unplugged_device(android: AndroidProvider, device: FakeDevice) -> None:
    device.unplug()
    health = android.health()
    assert not health.ok and "offline" in health.detail
    assert_env_errors_fast(android, "device offline")
    device.plug()
    assert android.health().ok
    android.act(A.Click(1, 1))


def test_device_removed_from_server(android: AndroidProvider, server: FakeAdbServer) -> None:
    server.remove("emulator-5554")
    assert "not found" in android.health().detail
    assert_env_errors_fast(android, "not found")


def test_unplug_mid_command(android: AndroidProvider, device: FakeDevice) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            android.exec("sleep 30", timeout=20)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    # Unplug once the command runs on the device (a fixed 0.3 s was sometimes before it had started).
    started = wait_for(lambda: any(argv[:1] == ["sleep"] for argv in device.history), timeout=10)
    assert started, f"the command never started on the device: {device.history[-3:]}"
    t0 = time.monotonic()
    device.unplug()
    thread.join(5)
    assert time.monotonic() - t0 < 2
    assert len(errors) == 1 and isinstance(errors[0], EnvError)


def test_adb_server_gone_or_hanging_up(android: AndroidProvider, server: FakeAdbServer) -> None:
    server.hang_up = True
    assert not android.health().ok
    assert_env_errors_fast(android, "failed")
    server.stop()
    health = android.health()
    assert not health.ok and "connect to adb server failed" in health.detail
    assert_env_errors_fast(android, "connect to adb server failed")


def test_health_is_fast(android: AndroidProvider) -> None:
    t0 = time.perf_counter()
    for _ in range(20):
        assert android.health().ok
    assert (time.perf_counter() - t0) / 20 < 0.01  # no device round trip, no linger on close


# --- the fake against the real adb client ---------------------------------------------------------


@pytest.mark.skipif(not shutil.which("adb"), reason="no adb command installed")
def test_real_adb_client_talks_to_the_fake(server: FakeAdbServer, device: FakeDevice, tmp_path: Path) -> None:
    """The `adb` command (a real ADB host client) drives the fake: its wire protocol is the real one."""

    def adb(*args: str) -> subprocess.CompletedProcess[bytes]:
        cmd = ["adb", "-H", "127.0.0.1", "-P", str(server.port), "-s", device.serial, *args]
        return subprocess.run(cmd, capture_output=True, timeout=20)

    assert adb("get-state").stdout == b"device\n"
    res = adb("shell", "echo hi && exit 3")
    assert (res.returncode, res.stdout) == (3, b"hi\n")
    (tmp_path / "up.txt").write_bytes(b"pushed")
    assert adb("push", str(tmp_path / "up.txt"), f"{WORKDIR}/up.txt").returncode == 0
    assert device.files[f"{WORKDIR}/up.txt"] == b"pushed"
    assert adb("pull", f"{WORKDIR}/up.txt", str(tmp_path / "down.txt")).returncode == 0
    assert (tmp_path / "down.txt").read_bytes() == b"pushed"
    assert adb("exec-out", "screencap -p").stdout[:8] == b"\x89PNG\r\n\x1a\n"


# --- a real device ---------------------------------------------------------------------------------


@pytest.mark.skipif(
    not os.environ.get("ANDROID_SERIAL"),
    reason="no Android device configured (set ANDROID_SERIAL and run an adb server)",
)
def test_real_device_lifecycle(tmp_path: Path) -> None:
    opts = {
        "serial": os.environ["ANDROID_SERIAL"],
        "adb_host": os.environ.get("ANDROID_ADB_SERVER_HOST", "127.0.0.1"),
        "adb_port": int(os.environ.get("ANDROID_ADB_SERVER_PORT", "5037")),
        "workdir": "/data/local/tmp/flywheel_test",
    }
    provider = AndroidProvider(
        sandbox_id="real", profile=Profile("real", "android", options=opts), root=tmp_path
    )
    provider.start()
    try:
        assert provider.health().ok
        obs = provider.observe(fmt="jpeg", a11y=True)
        assert obs.screenshot.width > 0 and obs.screenshot.data[:2] == b"\xff\xd8"
        assert obs.a11y is None or "<hierarchy" in obs.a11y
        provider.act(A.PressHome())
        res = provider.exec("echo hi")
        assert (res.exit_code, res.stdout) == (0, "hi\n")
        assert provider.exec("sleep 10", timeout=0.5).timed_out
        provider.put_file("t/x.bin", b"\x00\x01hello")
        assert provider.get_file("t/x.bin") == b"\x00\x01hello"
        provider.reset()
        with pytest.raises(SandboxPathError):
            provider.get_file("t/x.bin")
    finally:
        provider.stop()
