"""The view-only RFB filter: pictures pass, input never does, whatever the chunking or the lengths."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox_workers.live.rfb import MAX_CUT_TEXT, RfbViolation, ViewOnlyRfbFilter

VERSION = b"RFB 003.008\n"
HANDSHAKE = VERSION + b"\x01" + b"\x00"  # security None, ClientInit not shared (forced shared)
HANDSHAKE_OUT = VERSION + b"\x01" + b"\x01"

PIXEL_FORMAT = b"\x00\x00\x00\x00" + bytes([32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0])
ENCODINGS = b"\x02\x00" + struct.pack(">H", 3) + struct.pack(">iii", 0, 1, -223)
FB_REQUEST = b"\x03\x01" + struct.pack(">HHHH", 0, 0, 1280, 720)
KEY = b"\x04\x01\x00\x00" + struct.pack(">I", 0x61)
POINTER = b"\x05\x01" + struct.pack(">HH", 10, 20)


def cut_text(text: bytes) -> bytes:
    return b"\x06\x00\x00\x00" + struct.pack(">i", len(text)) + text


def run(chunks: list[bytes]) -> tuple[bytes, ViewOnlyRfbFilter]:
    f = ViewOnlyRfbFilter()
    return b"".join(f.feed(c) for c in chunks), f


def test_handshake_and_picture_requests_pass_input_is_dropped():
    stream = HANDSHAKE + PIXEL_FORMAT + ENCODINGS + FB_REQUEST + KEY + POINTER + cut_text(b"hi") + FB_REQUEST
    out, f = run([stream])
    assert out == HANDSHAKE_OUT + PIXEL_FORMAT + ENCODINGS + FB_REQUEST + FB_REQUEST
    assert f.dropped == {"KeyEvent": 1, "PointerEvent": 1, "ClientCutText": 1}
    assert f.passed["FramebufferUpdateRequest"] == 2
    assert f.handshake_done


def test_client_init_is_forced_shared():
    out, _ = run([VERSION, b"\x01", b"\x00"])
    assert out[-1:] == b"\x01"


def test_every_byte_split_gives_the_same_output():
    stream = HANDSHAKE + ENCODINGS + POINTER + FB_REQUEST + cut_text(b"secret text") + KEY + PIXEL_FORMAT
    whole, _ = run([stream])
    one_by_one, _ = run([stream[i : i + 1] for i in range(len(stream))])
    assert one_by_one == whole
    for cut in range(len(stream) + 1):
        assert run([stream[:cut], stream[cut:]])[0] == whole


# No deadline: on a machine loaded by other work one example can take longer than hypothesis' 200 ms.
@settings(deadline=None)
@given(st.lists(st.sampled_from(["fb", "px", "enc", "key", "ptr", "cut"]), max_size=30), st.data())
def test_random_message_mixes_in_random_chunks_never_let_input_through(kinds, data):
    parts = {"fb": FB_REQUEST, "px": PIXEL_FORMAT, "enc": ENCODINGS, "key": KEY, "ptr": POINTER,
             "cut": cut_text(b"\x05\x04" * 7)}  # fmt: skip
    stream = HANDSHAKE + b"".join(parts[k] for k in kinds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    out, _ = run(chunks)
    want = HANDSHAKE_OUT + b"".join(parts[k] for k in kinds if k in ("fb", "px", "enc"))
    assert out == want


def test_rfb_33_has_no_security_byte():
    out, f = run([b"RFB 003.003\n", b"\x00", POINTER, FB_REQUEST])
    assert out == b"RFB 003.003\n\x01" + FB_REQUEST
    assert f.dropped == {"PointerEvent": 1}


def test_vnc_auth_response_passes():
    response = bytes(range(16))
    out, _ = run([VERSION + b"\x02" + response[:5], response[5:] + b"\x01" + KEY + FB_REQUEST])
    assert out == VERSION + b"\x02" + response + b"\x01" + FB_REQUEST


def test_a_huge_cut_text_length_ends_the_stream_without_buffering():
    f = ViewOnlyRfbFilter()
    f.feed(HANDSHAKE)
    with pytest.raises(RfbViolation, match="too long"):
        f.feed(b"\x06\x00\x00\x00" + struct.pack(">i", MAX_CUT_TEXT + 1))
    with pytest.raises(RfbViolation):  # and it stays refused
        f.feed(FB_REQUEST)


def test_a_negative_cut_text_length_is_skipped_by_its_size():
    text = b"x" * 40
    out, f = run([HANDSHAKE, b"\x06\x00\x00\x00" + struct.pack(">i", -len(text)), text[:13], text[13:],
                  FB_REQUEST])  # fmt: skip
    assert out == HANDSHAKE_OUT + FB_REQUEST
    assert f.dropped == {"ClientCutText": 1}


def test_a_large_but_allowed_cut_text_streams_through_the_skip():
    f = ViewOnlyRfbFilter()
    f.feed(HANDSHAKE)
    assert f.feed(cut_text(b"")[:4] + struct.pack(">i", MAX_CUT_TEXT)) == b""
    for _ in range(MAX_CUT_TEXT // 65536):
        assert f.feed(b"\x04" * 65536) == b""  # bytes that look like KeyEvents are text here
    assert f.feed(FB_REQUEST) == FB_REQUEST


def test_set_encodings_with_the_largest_count_is_buffered_until_complete():
    header = b"\x02\x00" + struct.pack(">H", 65535)
    f = ViewOnlyRfbFilter()
    f.feed(HANDSHAKE)
    assert f.feed(header + b"\x00" * 1000) == b""
    body = b"\x00" * (4 * 65535 - 1000)
    assert f.feed(body) == header + b"\x00" * (4 * 65535)


@pytest.mark.parametrize("kind", [1, 7, 100, 149, 200, 255])
def test_unknown_message_types_end_the_stream(kind):
    f = ViewOnlyRfbFilter()
    f.feed(HANDSHAKE)
    with pytest.raises(RfbViolation, match="unknown"):
        f.feed(bytes([kind]) + b"\x00" * 20)


@pytest.mark.parametrize(
    "first", [b"GET / HTTP/1.1\r\n", b"RFB 004.000\n", b"RFB 3.8.0000\n", b"XRFB"], ids=repr
)
def test_garbage_instead_of_a_version_is_refused(first):
    with pytest.raises(RfbViolation):
        ViewOnlyRfbFilter().feed(first)


def test_unsupported_security_type_is_refused():
    with pytest.raises(RfbViolation, match="security type 19"):
        ViewOnlyRfbFilter().feed(VERSION + b"\x13")


def test_fence_with_an_oversized_payload_is_refused_and_a_small_one_passes():
    fence = b"\xf8\x00\x00\x00" + struct.pack(">I", 0) + b"\x04" + b"abcd"
    out, _ = run([HANDSHAKE, fence[:6], fence[6:]])
    assert out == HANDSHAKE_OUT + fence
    f = ViewOnlyRfbFilter()
    f.feed(HANDSHAKE)
    with pytest.raises(RfbViolation):
        f.feed(b"\xf8\x00\x00\x00" + struct.pack(">I", 0) + b"\xff")


def test_set_desktop_size_is_dropped_whole():
    resize = b"\xfb\x00" + struct.pack(">HH", 800, 600) + b"\x02\x00" + b"\x00" * 32
    out, f = run([HANDSHAKE, resize[:9], resize[9:] + FB_REQUEST])
    assert out == HANDSHAKE_OUT + FB_REQUEST
    assert f.dropped == {"SetDesktopSize": 1}
