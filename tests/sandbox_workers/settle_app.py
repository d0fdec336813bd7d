"""A small X application for the step-settling tests, run on a sandbox's display from the host.

    python settle_app.py [--busy-ms N] [--renderer-ms N] [--map-after S] [--hang]

One 400×300 window (WM_CLASS "settleapp"). A click on its left half changes its colour; on its right
half nothing happens (no redraw). The Right key moves a cursor; a printable key is reported on stdout
as "key <cursor> <char>" (where it went); every colour change as "drawn <n>", every paint of the window
(on an expose too) once on the screen as "painted <colour>". What it models:
- --busy-ms N: a click's or Right's work takes N ms of the main thread before its effect is drawn (an app
  under load, LibreOffice loading or recalculating), handling the input events that come meanwhile
  first, as toolkits that yield to their event loop while busy do: a key typed then lands where the
  cursor was;
- --renderer-ms N: a second process (its own X connection, like Chromium's renderer and GPU processes)
  draws a click's new colour N ms after the main process passed it on; the main thread is idle meanwhile;
- --map-after S: the window maps (and takes the keyboard focus) S seconds after the start;
- --hang: once mapped and focused, the main thread never sleeps again.
"""

from __future__ import annotations

import argparse
import os
import select
import subprocess
import sys
import time

from Xlib import XK, X, Xatom  # type: ignore[import-untyped]
from Xlib.display import Display  # type: ignore[import-untyped]

W, H = 400, 300
COLOURS = (0x808080, 0x2060E0, 0x20C040)


def fill(d: Display, win: object, colour: int) -> None:
    gc = win.create_gc(foreground=colour)  # type: ignore[attr-defined]
    win.fill_rectangle(gc, 0, 0, W, H)  # type: ignore[attr-defined]
    gc.free()
    d.flush()


def renderer(wid: int, delay_s: float) -> None:
    """The second process: for each byte read on stdin, wait `delay_s`, then draw that colour."""
    d = Display()
    win = d.create_resource_object("window", wid)
    while True:
        data = os.read(0, 1)
        if not data:
            return
        time.sleep(delay_s)
        fill(d, win, COLOURS[data[0] % len(COLOURS)])
        d.sync()
        sys.stdout.write(f"painted {data[0]}\n")
        sys.stdout.flush()


def busy(d: Display, handle: object, ms: float) -> None:
    """`ms` of work in 2 ms slices, handling the X events that come meanwhile first."""
    end = time.monotonic() + ms / 1000
    while time.monotonic() < end:
        slice_end = min(end, time.monotonic() + 0.002)
        while time.monotonic() < slice_end:
            pass
        while d.pending_events():
            handle(d.next_event())  # type: ignore[operator]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--busy-ms", type=float, default=0.0)
    p.add_argument("--renderer-ms", type=float, default=0.0)
    p.add_argument("--map-after", type=float, default=0.0)
    p.add_argument("--hang", action="store_true")
    p.add_argument("--renderer-of", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.renderer_of:
        renderer(args.renderer_of, args.renderer_ms / 1000)
        return
    d = Display()
    screen = d.screen()
    win = screen.root.create_window(
        0, 0, W, H, 0, screen.root_depth, X.InputOutput, X.CopyFromParent,
        background_pixel=COLOURS[0],
        event_mask=X.ExposureMask | X.ButtonPressMask | X.KeyPressMask | X.StructureNotifyMask,
    )  # fmt: skip
    win.set_wm_class("settleapp", "SettleApp")
    win.set_wm_name("settle app")
    win.change_property(d.intern_atom("WM_PROTOCOLS"), Xatom.ATOM, 32, [d.intern_atom("WM_DELETE_WINDOW")])
    pipe = -1
    if args.renderer_ms:
        d.sync()  # the window exists before the renderer's connection names it
        argv = [sys.executable, __file__, "--renderer-of", str(win.id), f"--renderer-ms={args.renderer_ms}"]
        second = subprocess.Popen(argv, stdin=subprocess.PIPE)  # kept: its stdin must stay open
        assert second.stdin is not None
        pipe = second.stdin.fileno()
    state = {"colour": 0, "cursor": 0, "drawn": 0}

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def handle(ev: object) -> None:
        kind = ev.type  # type: ignore[attr-defined]
        if kind == X.Expose and not pipe >= 0:
            fill(d, win, COLOURS[state["colour"]])
            d.sync()
            say(f"painted {state['colour']}")
        elif kind == X.Expose:
            os.write(pipe, bytes([state["colour"]]))
        elif kind == X.MapNotify:
            win.set_input_focus(X.RevertToParent, X.CurrentTime)
            d.sync()
            say("focused")
            while args.hang:
                pass
        elif kind == X.ButtonPress and ev.event_x < W // 2:  # type: ignore[attr-defined]
            state["colour"] = 1 + state["colour"] % (len(COLOURS) - 1)
            if pipe >= 0:
                os.write(pipe, bytes([state["colour"]]))
            else:
                busy(d, handle, args.busy_ms)
                fill(d, win, COLOURS[state["colour"]])
            state["drawn"] += 1
            say(f"drawn {state['drawn']}")
        elif kind == X.KeyPress:
            sym = d.keycode_to_keysym(ev.detail, 1 if ev.state & X.ShiftMask else 0)  # type: ignore[attr-defined]
            if sym == XK.XK_Right:
                busy(d, handle, args.busy_ms)
                state["cursor"] += 1
                fill(d, win, COLOURS[state["colour"]])  # the cursor's move is drawn
            elif 0x20 <= sym < 0x7F:
                say(f"key {state['cursor']} {chr(sym)}")
                fill(d, win, COLOURS[state["colour"]])  # the typed character is drawn

    if args.map_after:
        time.sleep(args.map_after)
    win.map()
    d.flush()
    say("mapped")
    fd = d.fileno()
    while True:
        while d.pending_events():
            handle(d.next_event())
        select.select([fd], [], [], 1.0)


if __name__ == "__main__":
    main()
