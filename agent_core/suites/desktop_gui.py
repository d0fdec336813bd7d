"""What the desktop suite's oracles use to find things on an X desktop and to wait for them.

Privileged reads only (the oracle is allowed them; no other policy is): the window list and its
stacking (`windows`, `xprop` / `xdotool` run in the sandbox), the AT-SPI tree (`a11y`), workspace
files. Everything the oracles *do* is a GUI action built from what these find: a click on a
window's title bar to focus it (Alt+Tab when it is covered), a click on a node's centre, keys.

Waits poll with a deadline and raise `OracleFailed` naming what never came, so a broken oracle
fails loudly instead of racing the desktop (a key typed before its dialog maps goes elsewhere).

Every action they yield says its thought (`said`): what is on the screen and why this action, so
oracle demonstrations teach a model the reasons along with the clicks and keys.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from agent_core import actions as A
from agent_core.tasks.oracles import OracleContext, said

T = TypeVar("T")
Actions = Iterator[A.Action]
Window = dict[str, Any]
WAIT_S = 15.0
SCREEN = (1280, 720)
HOME = "/home/user"


class OracleFailed(RuntimeError):
    """The desktop does not look the way the oracle expects (a window or control never appeared)."""


def param(ctx: OracleContext, name: str) -> Any:
    """The task parameter `name` (what a person reads off the task, such as the text to type)."""
    return ctx.params[name]


def wait_until(cond: Callable[[], T | None], what: str, timeout: float = WAIT_S) -> T:
    """`cond()`'s first truthy value, polled until `timeout` (then OracleFailed naming `what`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise OracleFailed(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


# --- files and commands (privileged: for waiting and finding, never for solving) -----------------


def read(ctx: OracleContext, path: str) -> str | None:
    """A workspace file's text, or None when it is not there."""
    try:
        return ctx.env.get_file(path).decode("utf-8", "replace")
    except FileNotFoundError:
        return None


def wait_file(
    ctx: OracleContext, path: str, check: Callable[[str], bool] = bool, timeout: float = WAIT_S
) -> str:
    """A workspace file's text once it exists and `check(text)` holds (a command's effect landed)."""
    return wait_until(lambda: _checked(read(ctx, path), check), f"~/{path} to be written", timeout)


def _checked(text: str | None, check: Callable[[str], bool]) -> str | None:
    if text is None or not check(text):
        return None
    return text or " "  # an empty file that passes `check` still counts


def shell_ok(ctx: OracleContext, command: str) -> bool:
    """Whether `command` exits 0 in the sandbox (a test: `test -d …`)."""
    out = ctx.env.exec(command, timeout=10)
    return out.exit_code == 0


# --- windows ---------------------------------------------------------------------------------------


def windows(ctx: OracleContext) -> list[Window]:
    """The managed top-level windows, oldest first: {id, class, title, x, y, width, height}."""
    result = ctx.env.call("windows")
    return [dict(w) for w in (result or {}).get("windows", [])]


def _matches(win: Window, cls: str, title: str) -> bool:
    return cls.lower() in " ".join(win.get("class", [])).lower() and title in str(win.get("title", ""))


def find_window(ctx: OracleContext, cls: str = "", title: str = "") -> Window | None:
    """The newest window whose class contains `cls` (any case) and whose title contains `title`."""
    found = [w for w in windows(ctx) if _matches(w, cls, title)]
    return found[-1] if found else None


def wait_window(ctx: OracleContext, cls: str = "", title: str = "", timeout: float = WAIT_S) -> Window:
    """`find_window`, waited for."""
    return wait_until(
        lambda: find_window(ctx, cls, title), f"a {cls or 'any'} window titled {title!r}", timeout
    )


def wait_no_window(ctx: OracleContext, cls: str = "", title: str = "", timeout: float = WAIT_S) -> None:
    """Until no window matches (a dialog closed)."""
    wait_until(lambda: find_window(ctx, cls, title) is None, f"the {title or cls} window to close", timeout)


@dataclass(frozen=True)
class Desk:
    """The window manager's view: the focused window, stacking (bottom to top), frame extents."""

    active: int
    stacking: tuple[int, ...]
    extents: dict[int, tuple[int, int, int, int]]
    """Window id → (left, right, top, bottom) decoration sizes."""


_DESK_CMD = (
    "xdotool getwindowfocus 2>/dev/null || echo 0; "
    "ids=$(xprop -root _NET_CLIENT_LIST_STACKING | sed 's/.*#//; s/,/ /g'); echo \"$ids\"; "
    'for w in $ids; do echo "$w $(xprop -id "$w" _NET_FRAME_EXTENTS)"; done'
)


def desk(ctx: OracleContext) -> Desk:
    """The focused window (see `active_window`) and the stacking order, read with xdotool/xprop."""
    out = ctx.env.exec(_DESK_CMD, timeout=10).stdout.splitlines()
    if len(out) < 2:
        raise OracleFailed(f"cannot read the window stacking: {out!r}")
    active = int(out[0]) if out[0].strip().isdigit() else 0
    stacking = tuple(int(w, 16) for w in out[1].split() if w.startswith("0x"))
    extents: dict[int, tuple[int, int, int, int]] = {}
    for line in out[2:]:
        wid, _, rest = line.partition(" ")
        nums = [int(n) for n in re.findall(r"\d+", rest.partition("=")[2])]
        if wid.startswith("0x") and len(nums) == 4:
            extents[int(wid, 16)] = (nums[0], nums[1], nums[2], nums[3])
    return Desk(active=active, stacking=stacking, extents=extents)


def active_window(ctx: OracleContext) -> int:
    """The top-level window that has the X input focus (0 when none). Not _NET_ACTIVE_WINDOW: a
    reset desktop's new window manager may not have set it yet, and the old value can name a new
    window (X reuses ids across sessions)."""
    out = ctx.env.exec("xdotool getwindowfocus 2>/dev/null || echo 0", timeout=10).stdout.strip()
    return int(out) if out.isdigit() else 0


def _frame(win: Window, ext: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    left, right, top, bottom = ext
    return (
        win["x"] - left,
        win["y"] - top,
        win["x"] + win["width"] + right,
        win["y"] + win["height"] + bottom,
    )


def _title_points(win: Window, ext: tuple[int, int, int, int]) -> list[tuple[int, int]]:
    """Points that focus a window harmlessly: its title bar between the menu icon and the buttons, or
    for an undecorated window (Chromium draws its own) the empty part of its tab strip."""
    x, y, w = int(win["x"]), int(win["y"]), int(win["width"])
    top = ext[2]
    if top >= 10:
        row, lo, hi = y - top // 2, x + 40, x + w - 90
    else:
        row, lo, hi = y + 20, x + int(w * 0.55), x + w - 150
    return [(px, row) for px in range(lo, max(lo, hi) + 1, 20)]


def visible_title_point(win: Window, d: Desk, wins: list[Window]) -> tuple[int, int] | None:
    """A title-bar point of `win` no window stacked above it covers, if any."""
    by_id = {int(w["id"]): w for w in wins}
    wid = int(win["id"])
    above = d.stacking[d.stacking.index(wid) + 1 :] if wid in d.stacking else ()
    covers = [_frame(by_id[a], d.extents.get(a, (0, 0, 0, 0))) for a in above if a in by_id]
    for px, py in _title_points(win, d.extents.get(wid, (0, 0, 0, 0))):
        if not (0 <= px < SCREEN[0] and 0 <= py < SCREEN[1]):
            continue
        if not any(x1 <= px < x2 and y1 <= py < y2 for x1, y1, x2, y2 in covers):
            return px, py
    return None


def focus(ctx: OracleContext, win: Window, why: str = "") -> Actions:
    """Focus `win` as a person would: click its title bar, or Alt+Tab to it when it is covered;
    then wait until the window manager has given it the focus (`why`: what the window is for)."""
    wid = int(win["id"])
    title = str(win.get("title", "")) or "the window"
    reason = f"{why} " if why else ""
    for attempt in range(3):
        d = desk(ctx)
        if d.active == wid:
            return
        again = " again" if attempt else ""
        point = visible_title_point(win, d, windows(ctx))
        if point is not None:
            yield said(
                ctx,
                f'{reason}The window "{title}" is not the active one; I click its title bar{again} to '
                "bring it to the front.",
                A.Click(x=point[0], y=point[1]),
            )
        else:
            # Alt+Tab walks the windows most recently used first (stacking order, top down).
            order = [w for w in reversed(d.stacking)]
            steps = order.index(wid) if wid in order else 1
            yield said(
                ctx,
                f'{reason}The window "{title}" is hidden behind others; I hold Alt down{again} to switch '
                "windows with Tab.",
                A.KeyDown(key="alt"),
            )
            for n in range(max(1, steps)):
                yield said(
                    ctx,
                    f'With Alt held, I press Tab ({n + 1} of {max(1, steps)}) to move to "{title}".',
                    A.Press(key="tab"),
                )
            yield said(
                ctx, f'"{title}" is selected; I release Alt to bring it to the front.', A.KeyUp(key="alt")
            )
        try:
            wait_until(lambda: active_window(ctx) == wid, f"window {win.get('title')!r} to take the focus", 3)
            return
        except OracleFailed:
            continue
    raise OracleFailed(f"could not focus window {win.get('title')!r}")


# --- the accessibility tree ------------------------------------------------------------------------

_LINE = re.compile(
    r'^(?P<indent> *)(?P<role>[\w-]+)(?: "(?P<name>.*?)")?'
    r"(?: @(?P<x>-?\d+),(?P<y>-?\d+) (?P<w>-?\d+)x(?P<h>-?\d+))?"
    r"(?: \[(?P<states>[\w,]+)\])?(?: = (?P<value>.*))?$"
)
_TOP_ROLES = ("frame", "dialog", "window", "file-chooser", "alert")


@dataclass(frozen=True)
class Node:
    """One accessible object: role, name, screen box, states, text value, and its top-level window."""

    role: str
    name: str
    x: int
    y: int
    w: int
    h: int
    states: frozenset[str]
    value: str
    window: str
    depth: int

    @property
    def center(self) -> tuple[int, int]:
        return self.x + self.w // 2, self.y + self.h // 2

    def click(self) -> A.Click:
        """A click at the node's centre."""
        x, y = self.center
        return A.Click(x=x, y=y)

    def said(self, ctx: OracleContext, thought: str) -> A.Click:
        """A click at the node's centre, with `thought`."""
        return said(ctx, thought, self.click())


def a11y(ctx: OracleContext) -> list[Node]:
    """The AT-SPI tree as nodes (empty when no application exposes one)."""
    tree = ctx.env.call("a11y")
    text = str((tree or {}).get("tree", ""))
    nodes: list[Node] = []
    tops: list[tuple[int, str]] = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m is None or m["x"] is None:
            continue
        depth = len(m["indent"]) // 2
        while tops and tops[-1][0] >= depth:
            tops.pop()
        role, name = m["role"], m["name"] or ""
        if role in _TOP_ROLES:
            tops.append((depth, name))
        nodes.append(
            Node(
                role=role,
                name=name,
                x=int(m["x"]),
                y=int(m["y"]),
                w=int(m["w"]),
                h=int(m["h"]),
                states=frozenset((m["states"] or "").split(",")) - {""},
                value=m["value"] or "",
                window=tops[-1][1] if tops else "",
                depth=depth,
            )
        )
    return nodes


def find_nodes(ctx: OracleContext, role: str, name: str | None = None, *, window: str = "") -> list[Node]:
    """Visible nodes of `role` (and exact `name`, when given) in a window whose title contains `window`."""
    return [
        n
        for n in a11y(ctx)
        if n.role == role and (name is None or n.name == name) and window in n.window and n.w > 0 and n.h > 0
    ]


def wait_node(
    ctx: OracleContext, role: str, name: str | None = None, *, window: str = "", timeout: float = WAIT_S
) -> Node:
    """The first matching node, waited for."""
    found = wait_until(
        lambda: find_nodes(ctx, role, name, window=window), f"a {role} {name or ''!r} in {window!r}", timeout
    )
    return found[0]


def wait_nodes(
    ctx: OracleContext, role: str, count: int, *, window: str = "", timeout: float = WAIT_S
) -> list[Node]:
    """Exactly `count` nodes of `role` (a folder view that has listed every file)."""

    def counted() -> tuple[list[Node]] | None:
        nodes = find_nodes(ctx, role, window=window)
        return (nodes,) if len(nodes) == count else None

    return wait_until(counted, f"{count} {role} nodes in {window!r}", timeout)[0]


# --- the apps --------------------------------------------------------------------------------------


def shell(ctx: OracleContext, command: str, why: str) -> Actions:
    """Focus the terminal and type `command` with Enter (`why`: what the command does for the task)."""
    term = wait_window(ctx, "xterm")
    yield from focus(ctx, term, "I need the terminal.")
    yield said(
        ctx, f"{why} In the terminal I type `{command}` and press Enter.", A.Type(content=command + "\n")
    )


def editor(ctx: OracleContext, title: str = "", why: str = "") -> Actions:
    """Focus the Mousepad window showing `title` and click into its text (the caret goes there)."""
    win = wait_window(ctx, "mousepad", title)
    name = title or str(win.get("title", "")) or "the editor"
    yield from focus(ctx, win, why or f'I need to edit "{name}" in Mousepad.')
    yield said(
        ctx,
        f'Mousepad shows "{name}"; I click into its text so that the keys I press go there.',
        A.Click(x=int(win["x"]) + int(win["width"]) // 2, y=int(win["y"]) + int(win["height"]) - 60),
    )


def save_editor(ctx: OracleContext, title: str) -> Actions:
    """Ctrl+S in Mousepad, then wait until its title drops the modified mark (`*`)."""
    yield said(
        ctx, f'The edit of "{title}" is done; I press Ctrl+S to save it.', A.Hotkey(keys=("ctrl", "s"))
    )

    def saved() -> bool:
        win = find_window(ctx, "mousepad", title)
        return win is not None and not str(win["title"]).startswith("*")

    wait_until(saved, f"Mousepad to save {title}")


def save_as(ctx: OracleContext, path: str) -> Actions:
    """Ctrl+S on an untitled document: type the full path in the Save As dialog and confirm (a second
    Enter when the first only closed the file chooser's completion popup)."""
    yield said(
        ctx,
        "The document is new, so Ctrl+S opens the Save As dialog to name it.",
        A.Hotkey(keys=("ctrl", "s")),
    )
    wait_window(ctx, "mousepad", "Save As")
    yield said(
        ctx, f"The Save As dialog is open; I type the full path {path} as the name.", A.Type(content=path)
    )
    for attempt in range(3):
        why = (
            "I press Enter to save under that name."
            if not attempt
            else "The dialog is still open (Enter only closed its completion list); I press Enter again."
        )
        yield said(ctx, why, A.Press(key="enter"))
        try:
            wait_no_window(ctx, "mousepad", "Save As", timeout=1.5)
            return
        except OracleFailed:
            continue
    raise OracleFailed("the Save As dialog did not close")


def file_manager(ctx: OracleContext, folder: str) -> Iterator[A.Action]:
    """Focus the PCManFM window showing `folder` (its title is the folder's name)."""
    win = wait_window(ctx, "pcmanfm", folder.rstrip("/").rsplit("/", 1)[-1] or folder)
    yield from focus(ctx, win, f"The file manager shows ~/{folder}, where I have to work.")


def folder_entries(ctx: OracleContext, folder: str, *, hidden: bool = False) -> list[str]:
    """A folder's entries in PCManFM's order: folders first, then files, each by name."""
    listing = "ls -A" if hidden else "ls"
    out = ctx.env.exec(f"cd {HOME}/{folder} && {listing} -p", timeout=10).stdout.split("\n")
    names = [n for n in out if n]
    dirs = sorted((n.rstrip("/") for n in names if n.endswith("/")), key=str.lower)
    files = sorted((n for n in names if not n.endswith("/")), key=str.lower)
    return dirs + files


def icons(ctx: OracleContext, folder: str) -> dict[str, Node]:
    """Each entry of `folder` → its icon in the PCManFM window showing it (the view lists every one)."""
    names = folder_entries(ctx, folder)
    title = folder.rstrip("/").rsplit("/", 1)[-1]
    nodes = wait_nodes(ctx, "icon", len(names), window=title)
    return dict(zip(names, nodes, strict=True))


def browser_page(ctx: OracleContext, title: str, timeout: float = 30.0) -> Window:
    """The Chromium window once its page's title contains `title` (the page has loaded)."""
    return wait_window(ctx, "chromium", title, timeout)


PAGE_TOP = 87
"""Where a maximized Chromium's page starts on screen (below its tab strip and toolbar)."""


def click_heading(ctx: OracleContext, win: Window, why: str = "") -> A.Click:
    """A click on the page's top heading, right of its text: it gives the page the keyboard focus and
    makes Tab start from the top of the page (the suite's pages all open with an <h1>).

    The browser oracles find page controls by Tab order, not through the accessibility tree: AT-SPI
    queries now and then crash this Chromium (while a tab opens or the address bar has the focus)."""
    page = str(win.get("title", "")).replace(" - Chromium", "") or "the page"
    reason = f"{why} " if why else ""
    return said(
        ctx,
        f'{reason}Chromium shows "{page}"; I click beside its heading so the keys I press go to the page, '
        "Tab starting from its top.",
        A.Click(x=int(win["x"]) + int(win["width"]) * 3 // 4, y=int(win["y"]) + PAGE_TOP + 42),
    )


def _browser_title(ctx: OracleContext) -> str:
    win = find_window(ctx, "chromium")
    return str(win["title"]) if win is not None else ""


def _title_changed(ctx: OracleContext, before: str) -> bool:
    return _browser_title(ctx) != before


def open_url(ctx: OracleContext, url: str, title: str, timeout: float = 10.0) -> Actions:
    """Ctrl+L, type `url` and Enter in Chromium's address bar; again when no page titled `title`
    comes (keys typed before the bar has the focus go to the page: a URL that lost its start).

    It watches the window title only: querying the accessibility tree while the address bar has the
    focus (or a tab opens) can crash Chromium."""
    for attempt in range(4):
        before = _browser_title(ctx)
        again = "The page did not open; " if attempt else ""
        yield said(
            ctx,
            f"{again}I press Ctrl+L to put the cursor in Chromium's address bar.",
            A.Hotkey(keys=("ctrl", "l")),
        )
        yield said(ctx, f"I type the address {url} and press Enter to open it.", A.Type(content=url + "\n"))
        try:
            wait_until(partial(_title_changed, ctx, before), "the page to change", timeout)
            browser_page(ctx, title, 2.0)
            return
        except OracleFailed:
            continue
    raise OracleFailed(f"could not open {url}")
