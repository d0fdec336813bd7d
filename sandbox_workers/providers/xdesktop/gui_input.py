"""An X desktop's GUI input: where a pointer action lands and the XTEST events of each action."""

from __future__ import annotations

from agent_core import actions as A
from sandbox_workers.base import ActionUnsupported
from sandbox_workers.display.x11 import XSession


def ready_after_launch(wid: int, quiet_s: float, max_s: float, x: XSession) -> bool:
    """Wait until window `wid`'s app is done starting up (nothing drawn, its main thread asleep)."""
    pid = x.client_pid(wid)
    return x.quiet(quiet_s, max_s, () if pid is None else (pid,))


def point(action: A.Action) -> tuple[int, int] | None:
    """Where a pointer action starts (None: a key action, which goes to the focused window)."""
    if isinstance(action, A.Drag):
        return action.x1, action.y1
    if isinstance(action, A.PointerAction):
        return action.x, action.y
    return None


def send(x: XSession, action: A.Action) -> None:
    """Send the input events of one GUI action."""
    if isinstance(action, A.Click):
        x.click(action.x, action.y)
    elif isinstance(action, A.LeftDouble):
        x.click(action.x, action.y, count=2)
    elif isinstance(action, A.RightSingle):
        x.click(action.x, action.y, button="right")
    elif isinstance(action, A.MiddleSingle):
        x.click(action.x, action.y, button="middle")
    elif isinstance(action, A.Hover):
        x.move(action.x, action.y)
    elif isinstance(action, A.Drag):
        x.drag(action.x1, action.y1, action.x2, action.y2)
    elif isinstance(action, A.Scroll):
        x.scroll(action.x, action.y, action.direction, action.amount)
    elif isinstance(action, A.Hotkey):
        x.hotkey(action.keys)
    elif isinstance(action, A.Press):
        x.hotkey((action.key,))
    elif isinstance(action, A.KeyDown):
        x.key(action.key, True)
    elif isinstance(action, A.KeyUp):
        x.key(action.key, False)
    elif isinstance(action, A.Type):
        x.type_text(action.content)
    else:
        raise ActionUnsupported(f"{action.kind} is not an action of the X desktop")
