"""A control viewer's RFB input parsed (RfbClientFilter) and turned into the recorder's raw events
(RfbInputTranslator), which the session's merger makes the same steps of as a browser's events."""

from __future__ import annotations

import struct

from agent_core import actions as A
from agent_core.data.recording import Commit, EventMerger, RawEvent
from sandbox_workers.live.rfb import KeyMessage, PointerMessage, RfbClientFilter
from sandbox_workers.live.rfb_input import RfbInputTranslator

HANDSHAKE = b"RFB 003.008\n" + b"\x01" + b"\x00"
FB_REQUEST = b"\x03\x01" + struct.pack(">HHHH", 0, 0, 1280, 720)
SHIFT, CTRL, ALT_GR = 0xFFE1, 0xFFE3, 0xFE03


def key(sym: int, down: bool = True) -> bytes:
    return struct.pack(">BBxxI", 4, int(down), sym)


def pointer(x: int, y: int, buttons: int = 0) -> bytes:
    return struct.pack(">BBHH", 5, buttons, x, y)


def typed(text: str) -> list[bytes]:
    """The KeyEvents a viewer sends for `text` (shift around capitals), as noVNC does."""
    out = []
    for ch in text:
        sym = 0xFF0D if ch == "\n" else ord(ch)
        if ch.isupper():
            out += [key(SHIFT), key(sym), key(sym, False), key(SHIFT, False)]
        else:
            out += [key(sym), key(sym, False)]
    return out


def translate(chunks: list[bytes]) -> list[dict]:
    """The raw events a stream of client messages makes, through the filter and the translator."""
    f, tr = RfbClientFilter(), RfbInputTranslator()
    events: list[dict] = []
    for segment in f.segments(HANDSHAKE + b"".join(chunks)):
        if not isinstance(segment, bytes):
            made, why = tr.translate(segment, 1.0)
            assert not why, why
            events += made
    return events


def merged(events: list[dict]) -> list[A.Action]:
    m = EventMerger(platform="desktop", screen=(1280, 720))
    ops = [op for e in events for op in m.feed(RawEvent.from_json(e))] + m.flush()
    return [op.action for op in ops if isinstance(op, Commit)]


def test_the_filter_hands_input_over_in_stream_order_with_its_bytes_and_passes_the_rest():
    stream = HANDSHAKE + FB_REQUEST + key(0x61) + pointer(3, 4, 1) + FB_REQUEST
    f = RfbClientFilter()
    out = [s for i in range(len(stream)) for s in f.segments(stream[i : i + 1])]  # a byte at a time
    kinds = [type(s).__name__ for s in out if not isinstance(s, bytes)]
    assert kinds == ["KeyMessage", "PointerMessage"]
    assert [s for s in out if isinstance(s, KeyMessage)] == [
        KeyMessage(down=True, keysym=0x61, raw=key(0x61))
    ]
    ptr = next(s for s in out if isinstance(s, PointerMessage))
    assert (ptr.buttons, ptr.x, ptr.y, ptr.raw) == (1, 3, 4, pointer(3, 4, 1))
    passed = b"".join(s for s in out if isinstance(s, bytes))
    assert passed == b"RFB 003.008\n\x01\x01" + FB_REQUEST + FB_REQUEST


def test_clipboard_and_screen_resizes_never_pass_a_control_filter():
    cut = b"\x06\x00\x00\x00" + struct.pack(">i", 5) + b"hello"
    resize = b"\xfb\x00" + struct.pack(">HHBx", 800, 600, 1) + b"\x00" * 16
    f = RfbClientFilter()
    out = f.segments(HANDSHAKE + cut + resize + FB_REQUEST)
    assert b"".join(s for s in out if isinstance(s, bytes)) == b"RFB 003.008\n\x01\x01" + FB_REQUEST
    assert f.dropped == {"ClientCutText": 1, "SetDesktopSize": 1}
    assert f.refused == 2  # what the relay tells the viewer it dropped
    # The extended clipboard's messages (negative length: noVNC announces its capabilities by itself on
    # connecting) are dropped too, but they are nothing a viewer did.
    caps = b"\x06\x00\x00\x00" + struct.pack(">i", -8) + struct.pack(">II", 0x1000001, 1 << 20)
    assert f.segments(caps + FB_REQUEST) == [FB_REQUEST] and f.refused == 2


def test_typed_text_becomes_one_typing_step_as_from_the_browser():
    events = translate(typed("echo Hi > note.txt\n"))
    assert events[0] == {"kind": "key", "t": 1.0, "key": "e", "text": "e", "mods": []}
    assert {"kind": "key", "t": 1.0, "key": "h", "text": "H", "mods": ["shift"]} in events
    assert {"kind": "key", "t": 1.0, "key": "space", "text": " ", "mods": []} in events
    assert events[-1] == {"kind": "key", "t": 1.0, "key": "enter", "text": "", "mods": []}
    assert merged(events) == [A.Type(content="echo Hi > note.txt\n")]


def test_modifiers_held_make_hotkeys_and_altgr_is_no_modifier():
    events = translate([key(CTRL), key(0x63), key(0x63, False), key(CTRL, False), key(0x63)])
    assert [e["mods"] for e in events] == [["ctrl"], []]
    assert merged(events) == [A.Hotkey(keys=("ctrl", "c")), A.Type(content="c")]
    # AltGr + q on a German layout sends "@" itself: it is typed, not ctrl+alt+@.
    assert merged(translate([key(ALT_GR), key(0x40), key(ALT_GR, False)])) == [A.Type(content="@")]


def test_named_keys_keypad_and_unicode_keysyms():
    events = translate([key(0xFF52), key(0xFFBE + 4), key(0xFFB7), key(0x010003B1), key(0xFF1B)])
    assert [(e["key"], e["text"]) for e in events] == [
        ("up", ""),
        ("f5", ""),
        ("7", "7"),
        ("α", "α"),
        ("esc", ""),
    ]
    for e in events:
        RawEvent.from_json(e)  # each is an event the recorder takes


def test_a_key_with_no_name_is_not_translated_and_says_why():
    tr = RfbInputTranslator()
    made, why = tr.translate(KeyMessage(down=True, keysym=0xFE50, raw=b""), 1.0)  # dead_grave
    assert made == [] and "0xfe50" in why
    assert tr.translate(KeyMessage(down=False, keysym=0xFE50, raw=b""), 1.0) == ([], "")


def test_pointer_masks_become_clicks_drags_and_wheel_notches():
    click = [pointer(100, 50), pointer(100, 50, 1), pointer(100, 50, 0)]
    events = translate(click)
    assert [e["kind"] for e in events] == ["down", "up"]  # a move with no button held is nothing
    assert merged(events) == [A.Click(x=100, y=50)]
    drag = [pointer(10, 10, 1), pointer(60, 10, 1), pointer(200, 40, 1), pointer(200, 40, 0)]
    assert merged(translate(drag)) == [A.Drag(x1=10, y1=10, x2=200, y2=40)]
    right = [pointer(5, 6, 4), pointer(5, 6, 0)]
    assert merged(translate(right)) == [A.RightSingle(x=5, y=6)]
    notches = [pointer(300, 300, 16), pointer(300, 300, 0)] * 3 + [pointer(300, 300, 8), pointer(300, 300, 0)]
    wheel = translate(notches)
    assert [(e["dx"], e["dy"]) for e in wheel] == [(0, 1), (0, 1), (0, 1), (0, -1)]
    assert merged(wheel) == [
        A.Scroll(x=300, y=300, direction="down", amount=3),
        A.Scroll(x=300, y=300, direction="up", amount=1),
    ]
