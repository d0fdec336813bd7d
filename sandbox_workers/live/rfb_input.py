"""A VNC viewer's input as the session recorder's raw events: RFB key and pointer messages → RawEvent JSON.

The VNC relay never forwards a control viewer's raw input into a sandbox that is in an episode: it
turns each KeyEvent and PointerEvent (`sandbox_workers.live.rfb`) into the events a browser's recorder
sends (`agent_core.data.recording.RawEvent.from_json`: down, up, move, wheel, key), so the episode's
recorder merges and executes them as it does the session page's, and they become steps.

What it keeps from one message to the next: the buttons held and the last point (RFB sends the
whole button mask with each pointer message), and the modifiers held (RFB sends a modifier's own key
events; a browser sends the modifiers with each key). Rules worth knowing:
- Only changes matter: a button whose bit rises is a "down", one whose bit falls an "up" (after a
  "move" to the new point if it moved while held); moves with no button held are nothing, as in the
  browser's recorder.
- Wheel bits (3: up, 4: down, 5: left, 6: right) are one notch each time they rise.
- Keys: a key's down is a "key" event; its up is nothing. Characters are the keysym's character
  (Latin-1 and Unicode keysyms); named keys (Return, arrows, F1-F24, the keypad, …) their recorder
  names. AltGr is no modifier (the keysym already is the character it makes).
- A key with no name here (a dead key, a media key, a legacy non-Latin keysym) is not translated:
  `translate` returns why, and the relay tells the viewer instead of sending anything.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from sandbox_workers.live.rfb import KeyMessage, PointerMessage

__all__ = ["RfbInputTranslator"]

_BUTTONS = ((0x01, "left"), (0x02, "middle"), (0x04, "right"))
_WHEEL = ((0x08, 0, -1), (0x10, 0, 1), (0x20, -1, 0), (0x40, 1, 0))  # bit, dx, dy (dy > 0: down)

_MODIFIERS = {
    0xFFE1: "shift", 0xFFE2: "shift", 0xFFE3: "ctrl", 0xFFE4: "ctrl", 0xFFE9: "alt", 0xFFEA: "alt",
    0xFFE7: "meta", 0xFFE8: "meta", 0xFFEB: "meta", 0xFFEC: "meta",
}  # fmt: skip
_ORDER = ("ctrl", "alt", "shift", "meta")  # agent_core.data.recording.MODIFIERS
_IGNORED = {0xFE03, 0xFE11, 0xFFE5}  # ISO_Level3_Shift (AltGr), ISO_Level5_Shift, Caps_Lock: no step

# X keysyms → the recorder's key names (agent_core.data.recording.NAMED_KEYS).
_NAMED = {
    0xFF08: "backspace", 0xFF09: "tab", 0xFE20: "tab", 0xFF0D: "enter", 0xFF8D: "enter", 0xFF1B: "esc",
    0xFF63: "insert", 0xFF9E: "insert", 0xFFFF: "delete", 0xFF9F: "delete",
    0xFF50: "home", 0xFF95: "home", 0xFF57: "end", 0xFF9C: "end",
    0xFF51: "left", 0xFF96: "left", 0xFF52: "up", 0xFF97: "up", 0xFF53: "right", 0xFF98: "right",
    0xFF54: "down", 0xFF99: "down", 0xFF55: "pageup", 0xFF9A: "pageup", 0xFF56: "pagedown",
    0xFF9B: "pagedown", 0xFF61: "printscreen", 0xFF13: "pause", 0xFF14: "scrolllock",
    0xFF7F: "numlock", 0xFF67: "menu", 0xFF80: "space",
    **{0xFFBE + i: f"f{i + 1}" for i in range(24)},
}  # fmt: skip
# Keypad keys that type a character.
_KEYPAD = {0xFFAA: "*", 0xFFAB: "+", 0xFFAD: "-", 0xFFAE: ".", 0xFFAF: "/", 0xFFBD: "=",
           **{0xFFB0 + i: str(i) for i in range(10)}}  # fmt: skip


def _char(keysym: int) -> str | None:
    """The character a keysym types, or None (a keysym that is no character, or not one we read)."""
    if 0x20 <= keysym <= 0x7E or 0xA0 <= keysym <= 0xFF:
        ch = chr(keysym)
    elif keysym in _KEYPAD:
        ch = _KEYPAD[keysym]
    elif 0x01000100 <= keysym <= 0x0110FFFF:
        ch = chr(keysym - 0x01000000)
    else:
        return None
    return None if unicodedata.category(ch)[0] == "C" else ch


class RfbInputTranslator:
    """One viewer's RFB input → raw recorder events (see the module doc); keeps the state between messages."""

    def __init__(self) -> None:
        self._buttons = 0
        self._x = self._y = 0
        self._mods: dict[int, str] = {}  # modifier keysyms held → their name

    def translate(self, message: KeyMessage | PointerMessage, t: float) -> tuple[list[dict[str, Any]], str]:
        """The raw events one message makes (at time `t`, seconds), and why it made none where it should."""
        if isinstance(message, PointerMessage):
            return self._pointer(message, t), ""
        return self._key(message, t)

    def _pointer(self, m: PointerMessage, t: float) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        before, now = self._buttons, m.buttons
        moved = (m.x, m.y) != (self._x, self._y)
        if moved and before & 0x07:
            events.append({"kind": "move", "t": t, "x": m.x, "y": m.y})
        for bit, name in _BUTTONS:
            if before & bit and not now & bit:
                events.append({"kind": "up", "t": t, "x": m.x, "y": m.y, "button": name})
        for bit, name in _BUTTONS:
            if now & bit and not before & bit:
                events.append({"kind": "down", "t": t, "x": m.x, "y": m.y, "button": name})
        for bit, dx, dy in _WHEEL:
            if now & bit and not before & bit:
                events.append({"kind": "wheel", "t": t, "x": m.x, "y": m.y, "dx": dx, "dy": dy})
        self._buttons, self._x, self._y = now, m.x, m.y
        return events

    def _key(self, m: KeyMessage, t: float) -> tuple[list[dict[str, Any]], str]:
        sym = m.keysym
        if sym in _MODIFIERS:
            if m.down:
                self._mods[sym] = _MODIFIERS[sym]
            else:
                self._mods.pop(sym, None)
            return [], ""
        if not m.down or sym in _IGNORED:
            return [], ""
        held = set(self._mods.values())
        mods = [name for name in _ORDER if name in held]
        if sym in _NAMED:
            key = _NAMED[sym]
            text = " " if key == "space" else ""
            return [{"kind": "key", "t": t, "key": key, "text": text, "mods": mods}], ""
        ch = _char(sym)
        if ch is None:
            return [], f"the key with keysym {sym:#x} has no name a step can record"
        if ch == " ":
            return [{"kind": "key", "t": t, "key": "space", "text": " ", "mods": mods}], ""
        lower = ch.lower()
        key = lower if len(lower) == 1 else ch  # as the browser's recorder names it ("İ" stays "İ")
        return [{"kind": "key", "t": t, "key": key, "text": ch, "mods": mods}], ""
