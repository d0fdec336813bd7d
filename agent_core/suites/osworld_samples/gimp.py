"""The GIMP sample: a picture (fetched onto the Desktop) open in GIMP; the task mirrors it left to right
and overwrites the file. Scored as OSWorld's gimp task 72f83cdc is: check_image_mirror compares the
file on the Desktop with the original (a cloud file) mirrored, by SSIM."""

from __future__ import annotations

import io
from collections.abc import Iterator

from PIL import Image, ImageDraw

from agent_core.actions import model as A
from agent_core.suites.desktop_gui import focus, wait_window
from agent_core.suites.osworld_samples import BASE, FILES, TASKS, step, task_id
from agent_core.tasks.oracles import OracleContext, register_oracle, said

NAME = "signpost"
PATH = f"/home/user/Desktop/{NAME}.png"


def signpost() -> bytes:
    """A picture that differs from its mirror image: a post with an arrow pointing right, a sun on the
    left, a red flag at the top left."""
    img = Image.new("RGB", (240, 160), (170, 215, 245))
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 125, 239, 159), fill=(90, 160, 70))
    draw.ellipse((14, 14, 54, 54), fill=(250, 210, 40))
    draw.rectangle((150, 40, 160, 130), fill=(110, 80, 50))
    draw.polygon([(100, 45), (200, 45), (225, 62), (200, 79), (100, 79)], fill=(240, 240, 235))
    draw.polygon([(70, 100), (70, 125), (95, 112)], fill=(200, 30, 30))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


FILES[f"{BASE}/gimp/{NAME}.png"] = signpost

TASKS["gimp"] = {
    "id": "sample-gimp-flip-horizontally",
    "snapshot": "gimp",
    "instruction": f"Flip the picture open in GIMP horizontally (mirror it left to right) and overwrite "
    f"{NAME}.png on the Desktop with the flipped picture.",
    "source": "the platform's own sample (OSWorld's format)",
    "config": [
        step("download", files=[{"url": f"{BASE}/gimp/{NAME}.png", "path": PATH}]),
        step("open", path=PATH),
    ],
    "trajectory": "trajectories/",
    "related_apps": ["gimp"],
    "evaluator": {
        "func": "check_image_mirror",
        "result": {"type": "vm_file", "path": PATH, "dest": f"{NAME}.png"},
        "expected": {"type": "cloud_file", "path": f"{BASE}/gimp/{NAME}.png", "dest": f"{NAME}_original.png"},
    },
}


@register_oracle(task_id("gimp", TASKS["gimp"]))
def flip_and_overwrite(ctx: OracleContext) -> Iterator[A.Action]:
    """GIMP's action search (/) finds Image > Transform > Flip Horizontally by its description ("flip
    image horizontally": the only match, where "flip horizontally" also lists View > Flip, which only
    mirrors the view); File > Overwrite signpost.png (Alt+F, W) writes the PNG back as it was imported."""
    win = wait_window(ctx, "gimp", f"[{NAME}]")
    yield from focus(ctx, win, f"GIMP shows {NAME}.png, the picture to flip.")
    yield said(
        ctx,
        f"GIMP shows {NAME}.png with the arrow pointing right. Rather than hunt through the menus I open "
        "GIMP's action search with the slash key.",
        A.Press(key="/"),
    )
    wait_window(ctx, "gimp", "Search Actions")
    yield said(
        ctx,
        'The Search Actions box is open. "Flip horizontally" alone would also match View > Flip, which '
        "only mirrors the view, so I search for the image command by its description.",
        A.Type(content="flip image horizontally"),
    )
    yield said(ctx, 'The only match is "Flip Horizontally - Flip image horizontally"; Enter runs it.',
               A.Press(key="enter"))  # fmt: skip
    wait_window(ctx, "gimp", f"*[{NAME}]")
    yield said(
        ctx,
        "The picture is mirrored (the arrow now points left and the title shows it is modified). To write "
        "it back to the same PNG I open the File menu with Alt+F.",
        A.Hotkey(keys=("alt", "f")),
    )
    yield said(ctx, f'The File menu lists "Overwrite {NAME}.png" with W underlined; I press W.',
               A.Press(key="w"))  # fmt: skip
    wait_window(ctx, "gimp", f"[{NAME}] (overwritten)")
    yield said(
        ctx,
        f"The title says (overwritten) and the status bar that the image was exported to "
        f"{PATH}: the flipped picture has replaced the file.",
        A.Finished(content=""),
    )
