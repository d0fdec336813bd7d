"""The VLC sample: a short clip (a YUV4MPEG2 file, fetched onto the Desktop) that VLC plays and pauses on
its last frame, launched with flags as OSWorld's vlc tasks are (--play-and-pause, and where snapshots
go); the task takes a snapshot of that frame. Scored as OSWorld's gimp and vlc image tasks are: the
snapshot's file (vm_file) against the last frame as rendered here (cloud_file), by check_structure_sim
(same size, SSIM >= 0.9: VLC's YUV to RGB conversion is not bit-exact)."""

from __future__ import annotations

import io
from collections.abc import Iterator

from PIL import Image, ImageDraw

from agent_core.actions import model as A
from agent_core.suites.desktop_gui import focus, shell_ok, wait_until, wait_window
from agent_core.suites.osworld_samples import BASE, FILES, TASKS, step, task_id
from agent_core.tasks.oracles import OracleContext, register_oracle, said

CLIP = "/home/user/Desktop/sunrise.y4m"
SNAPSHOT = "/home/user/Desktop/sunrise_frame.png"
SIZE = (320, 240)
FPS = 10
RISE = 6
"""Frames in which the sun rises; the scene then stands still for as many more, the last one included."""


def frame(n: int) -> Image.Image:
    """Frame n of the clip: the sun rises beside a house and the night sky turns blue, then the scene
    stands still (an earlier frame is far from the last one: its sky is darker)."""
    w, h = SIZE
    t = min(n, RISE - 1) / (RISE - 1)
    night, day = (15, 20, 60), (120, 180, 235)
    img = Image.new("RGB", SIZE, tuple(round(a + (b - a) * t) for a, b in zip(night, day, strict=True)))
    draw = ImageDraw.Draw(img)
    y = 150 - 15 * min(n, RISE - 1)
    draw.ellipse((40, y, 100, y + 60), fill=(250, 200, 40))
    draw.rectangle((0, 170, w - 1, h - 1), fill=(70, 140, 60))
    draw.rectangle((200, 120, 280, 180), fill=(200, 80, 60))
    draw.polygon([(190, 120), (240, 80), (290, 120)], fill=(110, 60, 50))
    draw.rectangle((230, 145, 250, 180), fill=(60, 40, 30))
    return img


def _limited_range(img: Image.Image) -> bytes:
    """The frame's Y, Cb and Cr planes (4:4:4), in the video range (Y 16-235, Cb/Cr 16-240) that
    players assume for YUV4MPEG2; Pillow's YCbCr is full range."""
    y, cb, cr = img.convert("YCbCr").split()
    y = y.point(lambda v: 16 + round(v * 219 / 255))
    cb, cr = (c.point(lambda v: 128 + round((v - 128) * 224 / 255)) for c in (cb, cr))
    return y.tobytes() + cb.tobytes() + cr.tobytes()


def clip() -> bytes:
    """A YUV4MPEG2 clip (VLC's rawvid demuxer plays it; no codec needed) of 2 × RISE frames."""
    w, h = SIZE
    header = f"YUV4MPEG2 W{w} H{h} F{FPS}:1 Ip A1:1 C444\n".encode()
    return header + b"".join(b"FRAME\n" + _limited_range(frame(n)) for n in range(2 * RISE))


def last_frame() -> bytes:
    buf = io.BytesIO()
    frame(2 * RISE - 1).save(buf, format="PNG")
    return buf.getvalue()


FILES[f"{BASE}/vlc/sunrise.y4m"] = clip
FILES[f"{BASE}/vlc/sunrise_frame_gold.png"] = last_frame

TASKS["vlc"] = {
    "id": "sample-vlc-snapshot-frame",
    "snapshot": "base_setup",
    "instruction": "VLC has played the clip sunrise.y4m and stopped on its last frame. Take a snapshot of "
    "that frame with VLC (VLC is set to save it as sunrise_frame.png on the Desktop).",
    "source": "the platform's own sample (OSWorld's format)",
    "config": [
        step("download", files=[{"url": f"{BASE}/vlc/sunrise.y4m", "path": CLIP}]),
        step(
            "launch",
            command=[
                "vlc",
                "--no-qt-privacy-ask",
                "--play-and-pause",
                f"--snapshot-path={SNAPSHOT}",
                CLIP,
            ],
        ),
        step("sleep", seconds=3),
    ],
    "trajectory": "trajectories/",
    "related_apps": ["vlc"],
    "evaluator": {
        "func": "check_structure_sim",
        "result": {"type": "vm_file", "path": SNAPSHOT, "dest": "sunrise_frame.png"},
        "expected": {
            "type": "cloud_file",
            "path": f"{BASE}/vlc/sunrise_frame_gold.png",
            "dest": "sunrise_frame_gold.png",
        },
    },
}


@register_oracle(task_id("vlc", TASKS["vlc"]))
def snapshot_frame(ctx: OracleContext) -> Iterator[A.Action]:
    """VLC's Take Snapshot key (Shift+S) in its focused window saves the frame it shows, where VLC was
    told to (--snapshot-path)."""
    win = wait_window(ctx, "vlc", "sunrise.y4m - VLC media player")
    yield from focus(ctx, win, "VLC shows the clip, paused on its last frame.")
    yield said(
        ctx,
        "VLC is paused at the end of sunrise.y4m (the play button shows, the time reads 00:01 of 00:01) "
        "with the sun up over the house. Shift+S is VLC's Take Snapshot key: it saves that frame.",
        A.Hotkey(keys=("shift", "s")),
    )
    wait_until(lambda: shell_ok(ctx, f"test -s {SNAPSHOT}"), "VLC to save the snapshot")
    yield said(
        ctx,
        "VLC briefly showed the snapshot's thumbnail in the corner of the video: the frame is saved as "
        "sunrise_frame.png on the Desktop.",
        A.Finished(content=""),
    )
