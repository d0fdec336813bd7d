"""Key names as agents write them (pyautogui / UI-TARS) → X keysyms and Playwright key names.

One place for both: the desktop types through X keysyms (`key_keysym`), the browser through
Playwright's names (`playwright_key`); tests check that both sandboxes accept the same names.
"""

from __future__ import annotations

from Xlib import XK  # type: ignore[import-untyped]

from agent_core.actions import ActionError

# --- X keysyms (the desktop) ----------------------------------------------------------------------

# Key names as pyautogui / UI-TARS write them → X keysym names. Anything else is tried as an X
# keysym name as is (Return, KP_Enter, XF86AudioMute, …) and single characters as themselves.
KEY_ALIASES: dict[str, str] = {
    "enter": "Return",
    "return": "Return",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
    "backspace": "BackSpace",
    "delete": "Delete",
    "del": "Delete",
    "insert": "Insert",
    "space": "space",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "arrowup": "Up",
    "arrowdown": "Down",
    "arrowleft": "Left",
    "arrowright": "Right",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pgup": "Prior",
    "page_up": "Prior",
    "pagedown": "Next",
    "pgdn": "Next",
    "page_down": "Next",
    "ctrl": "Control_L",
    "control": "Control_L",
    "ctrlleft": "Control_L",
    "ctrlright": "Control_R",
    "alt": "Alt_L",
    "altleft": "Alt_L",
    "altright": "Alt_R",
    "option": "Alt_L",
    "shift": "Shift_L",
    "shiftleft": "Shift_L",
    "shiftright": "Shift_R",
    "super": "Super_L",
    "win": "Super_L",
    "winleft": "Super_L",
    "winright": "Super_R",
    "meta": "Super_L",
    "cmd": "Super_L",
    "command": "Super_L",
    "capslock": "Caps_Lock",
    "numlock": "Num_Lock",
    "scrolllock": "Scroll_Lock",
    "printscreen": "Print",
    "prtsc": "Print",
    "print": "Print",
    "pause": "Pause",
    "menu": "Menu",
    "apps": "Menu",
    "volumeup": "XF86AudioRaiseVolume",
    "volumedown": "XF86AudioLowerVolume",
    "volumemute": "XF86AudioMute",
    "plus": "plus",
    "minus": "minus",
}
_CHAR_NAMES = {"\n": "Return", "\r": "Return", "\t": "Tab", " ": "space"}


def char_keysym(ch: str) -> int:
    """The X keysym of one character (Latin-1 keysyms are the code point, others 0x01000000 + it)."""
    if ch in _CHAR_NAMES:
        return int(XK.string_to_keysym(_CHAR_NAMES[ch]))
    code = ord(ch)
    if 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xFF:
        return code
    return 0x01000000 + code


def _small_number(text: str) -> bool:
    return 0 < len(text) <= 3 and text.isascii() and text.isdigit()


def key_keysym(name: str) -> int:
    """The keysym of a key name (see KEY_ALIASES) or single character; ActionError if unknown."""
    if len(name) == 1:
        return char_keysym(name)
    lowered = name.lower()
    if lowered in KEY_ALIASES:
        return int(XK.string_to_keysym(KEY_ALIASES[lowered]))
    # F1 … F35: ASCII digits only ("f²" passes str.isdigit() and then fails int(): an agent's bad key
    # must be an unknown key, not a crash).
    if lowered[0] == "f" and _small_number(lowered[1:]) and 1 <= int(lowered[1:]) <= 35:
        return int(XK.string_to_keysym(f"F{int(lowered[1:])}"))
    for candidate in (name, name.capitalize()):
        sym = XK.string_to_keysym(candidate)
        if sym:
            return int(sym)
    raise ActionError(f"unknown key {name!r}")


# --- Playwright key names (the browser) ---------------------------------------------------------

_KEYS: dict[str, str] = {
    "enter": "Enter", "return": "Enter", "\n": "Enter", "esc": "Escape", "escape": "Escape",
    "tab": "Tab", "space": "Space", " ": "Space", "backspace": "Backspace", "delete": "Delete",
    "del": "Delete", "insert": "Insert", "home": "Home", "end": "End",
    "pageup": "PageUp", "pgup": "PageUp", "page_up": "PageUp",
    "pagedown": "PageDown", "pgdn": "PageDown", "page_down": "PageDown",
    "up": "ArrowUp", "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
    "arrowup": "ArrowUp", "arrowdown": "ArrowDown", "arrowleft": "ArrowLeft", "arrowright": "ArrowRight",
    "ctrl": "Control", "control": "Control", "ctrlleft": "Control", "ctrlright": "Control",
    "alt": "Alt", "option": "Alt", "altleft": "Alt", "altright": "Alt",
    "shift": "Shift", "shiftleft": "Shift", "shiftright": "Shift",
    "cmd": "Meta", "command": "Meta", "meta": "Meta", "win": "Meta", "super": "Meta",
    "capslock": "CapsLock", "numlock": "NumLock", "scrolllock": "ScrollLock",
    "printscreen": "PrintScreen", "prtsc": "PrintScreen", "pause": "Pause", "contextmenu": "ContextMenu",
    "apps": "ContextMenu", "plus": "+", "minus": "-", "add": "+", "subtract": "-",
}  # fmt: skip


class KeyNameError(ValueError):
    """A key name that maps to no key."""


def playwright_key(name: str) -> str:
    """Map a UI-TARS / pyautogui key name ("enter", "ctrl", "pgdn", "f5", "a") to Playwright's."""
    if not isinstance(name, str) or not name:
        raise KeyNameError(f"empty key name {name!r}")
    low = name.strip().lower() if name.strip() else name
    if low in _KEYS:
        return _KEYS[low]
    if len(name) == 1:  # a character: Playwright types it (uppercase implies Shift)
        return name
    digits = low[1:]  # ASCII only: "f²" passes str.isdigit() and then fails int()
    if (
        low[0] == "f"
        and 0 < len(digits) <= 2
        and digits.isascii()
        and digits.isdigit()
        and 1 <= int(digits) <= 24
    ):
        return f"F{int(digits)}"
    if low.startswith("num") and len(low) == 4 and low[3] in "0123456789":  # pyautogui's num0 … num9
        return f"Numpad{low[3]}"
    # Playwright's own names (ArrowUp, KeyA, Digit1, …) pass through unchanged.
    if name[0].isupper() and name.isascii() and name.isalnum():
        return name
    raise KeyNameError(f"unknown key name {name!r}")
