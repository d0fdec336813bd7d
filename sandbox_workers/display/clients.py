"""The windows an input goes to and the X clients behind them: `XSession`'s part for `settle`.

The X server names the client that owns a window (X-Resource: its host pid, as the server sees it;
our servers run in the host's pid namespace). A step asks for a few of these, so what does not change
from step to step is kept: a window's owner (until that process is gone), the window manager's pid and
its managed windows (until the root's _NET_SUPPORTING_WM_CHECK or _NET_CLIENT_LIST change: the
session selects PropertyNotify on the root, and `note_property` hears of each change).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from Xlib import X  # type: ignore[import-untyped]
from Xlib import error as xerror
from Xlib.ext import res  # type: ignore[import-untyped]

OWNERS_KEPT = 512
"""Windows whose owner is remembered (the oldest are forgotten first)."""


class WindowClients:
    """Window → client queries over an `XSession`'s connection (a mixin: `d`, `root`, `atom`, `_clamp`
    are the session's)."""

    d: Any
    root: Any

    def atom(self, name: str) -> int:
        raise NotImplementedError

    def _clamp(self, x: int, y: int) -> tuple[int, int]:
        raise NotImplementedError

    def _init_clients(self) -> None:
        self._has_res = bool(self.d.has_extension("X-Resource"))
        self._owners: dict[int, int | None] = {}
        self._managed: set[int] | None = None
        self._wm: tuple[int, int | None] | None = None  # (its check window, its pid)
        self._last_path: list[int] = []
        self.root.change_attributes(event_mask=X.PropertyChangeMask)

    def note_property(self, atom: int) -> None:
        """A property of the root changed (a PropertyNotify): forget what it told."""
        if atom == self.atom("_NET_CLIENT_LIST"):
            self._managed, self._last_path = None, []  # windows came or went (and were reparented)
        elif atom == self.atom("_NET_SUPPORTING_WM_CHECK"):
            self._wm = None

    def client_pid(self, xid: int) -> int | None:
        """The host pid of the X client that owns window `xid` (X-Resource), None if the server cannot
        say (no such window, no extension, a client on another machine)."""
        if xid in self._owners:
            pid = self._owners[xid]
            if pid is not None and os.path.exists(f"/proc/{pid}"):
                return pid
        if not self._has_res:
            return None
        try:
            reply = self.d.res_query_client_ids([{"client": xid, "mask": res.LocalClientPIDMask}])
        except xerror.XError:
            return None
        pid = next(
            (int(c.value[0]) for c in reply.ids if c.spec.mask & res.LocalClientPIDMask and c.value), None
        )
        if len(self._owners) >= OWNERS_KEPT:
            self._owners.pop(next(iter(self._owners)))
        self._owners[xid] = pid
        return pid

    def pointer_path(self) -> list[int]:
        """The windows under the pointer, a top-level first, the deepest (the one a click goes to) last;
        empty over the bare root."""
        path, w = [], self.root
        for _ in range(32):
            child = w.query_pointer().child
            if not child:
                break
            w = child
            path.append(int(w.id))
        return path

    def path_at(self, x: int, y: int) -> list[int]:
        """The windows at (x, y) (clamped to the screen), as `pointer_path` would list them with the
        pointer there, found without moving it."""
        x, y = self._clamp(x, y)
        path, w = [], self.root
        for _ in range(32):
            child = w.translate_coords(self.root, x, y).child
            if not child:
                break
            w = child
            path.append(int(w.id))
        return path

    def window_path(self, wid: int) -> list[int]:
        """Window `wid`'s ancestors below the root, top-level first, then `wid` (kept for the window last
        asked about: the focused one, asked about at every key)."""
        if self._last_path and self._last_path[-1] == wid:
            return list(self._last_path)
        self._last_path = self._walk_up(wid)
        return list(self._last_path)

    def _walk_up(self, wid: int) -> list[int]:
        path = [wid]
        w = self.d.create_resource_object("window", wid)
        for _ in range(32):
            parent = w.query_tree().parent
            if not parent or int(parent.id) == int(self.root.id):
                break
            w = parent
            path.insert(0, int(w.id))
        return path

    def client_in(self, path: Sequence[int]) -> int | None:
        """The window of `path` that the window manager manages as a client (not its frame), else the
        top-level (an override-redirect popup, no window manager); None for an empty path."""
        if self._managed is None:
            prop = self.root.get_full_property(self.atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
            self._managed = {int(w) for w in prop.value} if prop is not None else set()
        return next((w for w in path if w in self._managed), path[0] if path else None)

    def focus_window(self) -> int | None:
        """The window key presses go to now: the focus window, or with the focus on the root (or
        PointerRoot) the deepest window under the pointer; None when they go nowhere (no focus, or the
        pointer over the bare root)."""
        focus = self.d.get_input_focus().focus
        fid = focus if isinstance(focus, int) else int(focus.id)
        if fid == X.NONE:
            return None
        if fid in (X.PointerRoot, int(self.root.id)):
            path = self.pointer_path()
            return path[-1] if path else None
        return fid

    def viewable(self, xid: int) -> bool:
        """Whether window `xid` is mapped and all its ancestors are (what it shows can be seen)."""
        try:
            attrs = self.d.create_resource_object("window", xid).get_attributes()
        except (xerror.BadWindow, xerror.BadDrawable):
            return False
        return bool(int(attrs.map_state) == X.IsViewable)

    def wm_pid(self) -> int | None:
        """The host pid of the window manager (the owner of its _NET_SUPPORTING_WM_CHECK window)."""
        if self._wm is not None and (self._wm[1] is None or os.path.exists(f"/proc/{self._wm[1]}")):
            return self._wm[1]
        prop = self.root.get_full_property(self.atom("_NET_SUPPORTING_WM_CHECK"), X.AnyPropertyType)
        check = int(prop.value[0]) if prop is not None and prop.value else 0
        if not check:
            return None
        self._wm = (check, self.client_pid(check))
        return self._wm[1]
