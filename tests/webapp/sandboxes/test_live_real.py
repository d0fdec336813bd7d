"""The live transports through the real thing: a sandbox host with a light desktop heartbeating into
the test server, the web app's consumers (in this process, over the real Redis layer) relaying its
VNC, screencast and WebRTC streams to clients that speak those protocols."""

from __future__ import annotations

import asyncio
import io
import json
import re

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client, override_settings
from django.urls import reverse
from PIL import Image, ImageChops, ImageStat

from sandbox_workers.client import HostClient, LeasedSandbox
from sandbox_workers.live.fanout import hubs_of_this_loop
from tests.conftest import make_personas
from tests.procs import wait_for
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP, TOKEN, HostProc, keep_changing
from tests.sandbox_workers.rfbclient import RfbClient
from webapp.asgi import application
from webapp.sandboxes.models import Sandbox

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def desktop(live_server, tmp_path):
    """A leased light desktop (LeasedSandbox) and its row, on a host heartbeating into the test server."""
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        host = HostProc(name="live-host", var=tmp_path, profiles={"desktop": LIGHT_DESKTOP},
                        web_url=live_server.url, slot_base=140)  # fmt: skip
        host.start()
        try:
            assert wait_for(lambda: Sandbox.objects.filter(state="idle", endpoints__has_key="vnc").exists(),
                            timeout=120, interval=0.3), "no idle desktop sandbox registered"  # fmt: skip
            with HostClient(host.url, TOKEN) as client:
                leased = client.acquire("desktop", holder="live-test", ttl_s=600)
                row = Sandbox.objects.get(external_id=leased.info.sandbox_id)
                yield leased, row
                leased.release()
        finally:
            host.stop()


def ticket_for(client: Client, sandbox: Sandbox, *, mode: str, transport: str, fps: int | None = None) -> str:
    data = {"mode": mode, "transport": transport, **({"fps": fps} if fps else {})}
    resp = client.post(reverse("sandboxes:ticket", args=[sandbox.pk]), data)
    assert resp.status_code == 200, resp.content
    return resp.json()["url"]


def session(user) -> tuple[Client, list[tuple[bytes, bytes]]]:
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    return client, [(b"cookie", cookie.encode()), (b"origin", b"http://localhost")]


def mouse(leased: LeasedSandbox) -> tuple[int, int]:
    out = leased.exec(["xdotool", "getmouselocation"]).stdout
    m = re.search(r"x:(\d+) y:(\d+)", out)
    assert m, out
    return int(m[1]), int(m[2])


async def rfb_over(path: str, headers) -> tuple[WebsocketCommunicator, RfbClient]:
    """An RFB client through the relay; what the relay tells the viewer in text frames (input it
    refused) is kept in `comm.told`."""
    comm = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await comm.connect(timeout=20)
    assert connected
    comm.told = []

    async def recv() -> bytes:
        while True:
            message = await comm.receive_output(timeout=20)
            assert message["type"] == "websocket.send", message
            if message.get("bytes") is not None:
                return message["bytes"]
            comm.told.append(_refusal(message["text"]))

    return comm, RfbClient(lambda b: comm.send_to(bytes_data=b), recv)


def _refusal(text: str) -> str:
    message = json.loads(text)
    assert message["type"] == "input_refused", message
    return message["error"]


async def refusals(comm: WebsocketCommunicator, timeout: float = 20) -> list[str]:
    """What the relay told the viewer it refused (`comm.told`, from rfb_over), waited for until it told
    something and went quiet, or `timeout`. RFB bytes that come meanwhile are dropped: call it once
    the RFB client reads no more. (receive_nothing waits without cancelling the consumer.)"""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if await comm.receive_nothing(timeout=0.3, interval=0.02):
            if comm.told:
                break
            continue
        out = await comm.receive_output()
        if out.get("text") is not None:
            comm.told.append(_refusal(out["text"]))
    return list(comm.told)


def test_vnc_relay_speaks_rfb_and_raw_input_reaches_only_an_idle_sandbox(desktop):
    """Pictures pass every ticket; a view ticket's pointer and a control ticket's pointer into a sandbox
    leased outside an episode reach nothing (each viewer is told); a control ticket's keys reach an
    idle desktop raw (its screen changes)."""
    leased, row = desktop
    people = make_personas()
    client, headers = session(people.admin)
    # The host's own lease ("live-test") is no episode's: the web app sees the sandbox leased.
    assert wait_for(lambda: Sandbox.objects.get(pk=row.pk).state == "leased", timeout=20, interval=0.2)

    async def point_through(path: str, x: int, y: int) -> tuple[RfbClient, list[str]]:
        comm, rfb = await rfb_over(path, headers)
        await rfb.handshake()
        await rfb.request(incremental=False)
        await rfb.read_update()
        await rfb.pointer(x, y, 1)  # a click: a step's worth of input (hovering alone tells nothing)
        await rfb.pointer(x, y)
        # The pointer event is ahead of this request on the same stream: once the update comes back,
        # a pointer event that reached x11vnc has been applied.
        await rfb.request(incremental=False)
        await rfb.read_update()
        told = await refusals(comm)
        await comm.disconnect()
        return rfb, told

    leased.exec(["xdotool", "mousemove", "5", "5"])
    assert mouse(leased) == (5, 5)
    rfb, told = async_to_sync(point_through)(ticket_for(client, row, mode="view", transport="vnc"), 200, 150)
    screen = leased.observe(fmt="png").screenshot
    assert (rfb.width, rfb.height) == (screen.width, screen.height)
    assert not rfb.blank(), "the framebuffer from the relay is one flat colour"
    assert mouse(leased) == (5, 5), "a view-only viewer moved the pointer"
    assert told and "view-only" in told[0], told
    _, told = async_to_sync(point_through)(ticket_for(client, row, mode="control", transport="vnc"), 200, 150)
    assert mouse(leased) == (5, 5), "a control viewer moved the pointer of a sandbox no episode leased"
    assert told and ("outside a live episode" in told[0] or "is leased" in told[0]), told

    # The pool's other, idle desktop: the admin's typing reaches it raw (x11vnc repaints the xterm).
    idle = wait_for(lambda: Sandbox.objects.filter(state="idle").exclude(pk=row.pk).first(), timeout=60)
    assert idle, "no idle desktop to try"

    async def type_into(path: str) -> int:
        comm, rfb = await rfb_over(path, headers)
        await rfb.handshake()
        await rfb.request(incremental=False)
        await rfb.read_update()
        await rfb.pointer(640, 360, 1)
        await rfb.pointer(640, 360, 0)
        for ch in "echo typed-raw":
            await rfb.key(ord(ch), True)
            await rfb.key(ord(ch), False)
        # A still desktop sends no incremental update: one comes once the typing repaints the xterm.
        await rfb.request(incremental=True)
        rects = await asyncio.wait_for(rfb.read_update(), timeout=30)
        await comm.disconnect()
        return sum(w * h for _, _, w, h in rects)

    assert async_to_sync(type_into)(ticket_for(client, idle, mode="control", transport="vnc")) > 0


def test_view_mode_relay_closes_on_an_unknown_message(desktop):
    _, row = desktop
    client, headers = session(make_personas().researcher)

    path = ticket_for(client, row, mode="view", transport="vnc")

    async def scenario() -> dict:
        comm, rfb = await rfb_over(path, headers)
        await rfb.handshake()
        await comm.send_to(bytes_data=b"\x07" + b"\x00" * 15)
        while True:
            out = await comm.receive_output(timeout=20)
            if out["type"] == "websocket.close":
                return out

    assert async_to_sync(scenario)()["code"] == 4400


def test_screencast_viewers_get_jpegs_of_the_screen_through_one_shared_host_socket(desktop):
    leased, row = desktop
    people = make_personas()
    viewers = [(people.admin, 10), (people.researcher, 10), (people.admin, 2)]
    paths = []
    for user, fps in viewers:
        client, headers = session(user)
        paths.append((ticket_for(client, row, mode="view", transport="screencast", fps=fps), headers))
    host = HostClient(row.host.api_url, TOKEN)

    async def scenario() -> tuple[list[int], dict, dict, set]:
        comms = []
        for path, headers in paths:
            comm = WebsocketCommunicator(application, path, headers=headers)
            assert (await comm.connect(timeout=20))[0]
            comms.append(comm)
        counts = [0] * len(comms)
        sizes: set[tuple[int, int]] = set()
        end = asyncio.get_running_loop().time() + 3
        while (left := end - asyncio.get_running_loop().time()) > 0:
            for i, comm in enumerate(comms):
                if not await comm.receive_nothing(timeout=min(left, 0.02), interval=0.005):
                    frame = await comm.receive_from()
                    assert isinstance(frame, bytes) and frame[:2] == b"\xff\xd8"
                    if not counts[i]:
                        sizes.add(Image.open(io.BytesIO(frame)).size)
                    counts[i] += 1
        hubs = {k: (h.viewers, h.fps) for k, h in hubs_of_this_loop().items()}
        host_live = (await asyncio.to_thread(host.status))["live"]
        for comm in comms:
            await comm.disconnect()
        return counts, hubs, host_live, sizes

    keep_changing(leased, 4)  # a still screen sends one frame
    counts, hubs, host_live, sizes = async_to_sync(scenario)()
    screen = leased.observe(fmt="png").screenshot
    assert sizes == {(screen.width, screen.height)}, sizes
    # The web process holds one host socket for the three viewers, at the fastest one's rate…
    assert hubs == {("host", row.host.api_url, row.external_id, None): (3, 10)}, hubs
    # …and the host sees one viewer: that socket.
    assert host_live[row.external_id]["viewers"] == 1, host_live
    assert counts[0] >= 10 and counts[1] >= 10 and 2 <= counts[2] <= 7, counts


def test_webrtc_video_shows_the_screen_and_control_input_outside_an_episode_is_refused(desktop):
    from aiortc import RTCPeerConnection, RTCSessionDescription

    leased, row = desktop
    people = make_personas()
    client, headers = session(people.researcher)  # researchers may take control
    painted = leased.exec(["xsetroot", "-solid", "#00c000"])
    assert painted.exit_code == 0, painted.stderr  # x11-xserver-utils: scripts/setup.sh installs it
    screen = Image.open(io.BytesIO(leased.observe(fmt="png").screenshot.data)).convert("RGB")

    path = ticket_for(client, row, mode="control", transport="webrtc")

    async def scenario() -> tuple[Image.Image, dict]:
        comm = WebsocketCommunicator(application, path, headers=headers)
        assert (await comm.connect(timeout=20))[0]
        pc = RTCPeerConnection()
        pc.addTransceiver("video", direction="recvonly")
        channel = pc.createDataChannel("input")
        track_ready: asyncio.Future = asyncio.get_running_loop().create_future()
        pc.on("track", lambda track: track_ready.done() or track_ready.set_result(track))
        opened = asyncio.Event()
        channel.on("open", opened.set)
        await pc.setLocalDescription(await pc.createOffer())
        await comm.send_to(text_data=json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))
        answer = json.loads(await comm.receive_from(timeout=30))
        assert answer["type"] == "answer", answer
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type="answer"))
        track = await asyncio.wait_for(track_ready, timeout=30)
        frame = None
        for _ in range(5):  # the first frames of a fresh decoder may still be settling
            frame = await asyncio.wait_for(track.recv(), timeout=30)
        await asyncio.wait_for(opened.wait(), timeout=30)
        # The sandbox is leased outside an episode (the host's "live-test"): nothing records input there.
        channel.send(json.dumps({"type": "input", "events": [{"kind": "down", "x": 10, "y": 20, "t": 1.0}]}))
        message = json.loads(await comm.receive_from(timeout=20))
        await pc.close()
        await comm.disconnect()
        return frame.to_image(), message

    image, message = async_to_sync(scenario)()
    assert image.size == screen.size
    small = (160, 90)
    diff = ImageStat.Stat(ImageChops.difference(image.resize(small), screen.resize(small))).mean
    assert max(diff) < 12, f"the video frame does not look like the screen (mean abs diff {diff})"
    # And the screen's known colour is where it should be (the root window, away from the xterm).
    r, g, b = image.getpixel((image.width - 5, image.height - 5))
    assert g > 150 and r < 60 and b < 60, (r, g, b)
    assert message["type"] == "input_refused", message
    assert "outside a live episode" in message["error"] or "is leased" in message["error"], message


def test_webrtc_viewers_share_one_decode_and_one_vp8_encoding_and_view_tickets_send_no_input(desktop):
    from aiortc import RTCPeerConnection, RTCSessionDescription

    from sandbox_workers.live.shared_video import videos_of_this_loop

    leased, row = desktop
    api_url = row.host.api_url
    people = make_personas()
    viewers = []
    for user in (people.admin, people.researcher, people.admin):
        client, headers = session(user)
        viewers.append((ticket_for(client, row, mode="view", transport="webrtc", fps=10), headers))

    async def scenario() -> tuple[list[int], dict, dict, dict]:
        opened, channels = [], []
        for path, headers in viewers:
            comm = WebsocketCommunicator(application, path, headers=headers)
            assert (await comm.connect(timeout=20))[0]
            pc = RTCPeerConnection()
            pc.addTransceiver("video", direction="recvonly")
            channel = pc.createDataChannel("input")  # a view ticket's peer must ignore it
            channels.append(channel)
            got: asyncio.Future = asyncio.get_running_loop().create_future()
            pc.on("track", lambda track, got=got: got.done() or got.set_result(track))
            await pc.setLocalDescription(await pc.createOffer())
            await comm.send_to(text_data=json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))
            answer = json.loads(await comm.receive_from(timeout=30))
            await pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type="answer"))
            opened.append((comm, pc, await asyncio.wait_for(got, timeout=30)))
        counts = [0] * len(opened)

        async def count(k: int, track) -> None:
            while True:
                frame = await track.recv()
                assert (frame.width, frame.height) == (1280, 720)
                counts[k] += 1

        tasks = [asyncio.create_task(count(k, t)) for k, (_, _, t) in enumerate(opened)]
        await asyncio.sleep(4)
        assert channels[0].readyState == "open"
        channels[0].send(json.dumps({"type": "input", "events": [{"kind": "key", "key": "a", "t": 1.0}]}))
        told = json.loads(await opened[0][0].receive_from(timeout=20))
        shared = videos_of_this_loop().items()
        videos = {k: (len(v.tracks), v.decoded, v.encoded + v.dropped) for k, v in shared}
        host_live = (await asyncio.to_thread(HostClient(api_url, TOKEN).status))["live"]
        for t in tasks:
            t.cancel()
        for comm, pc, _ in opened:
            await pc.close()
            await comm.disconnect()
        return counts, videos, host_live, told

    keep_changing(leased, 8)
    counts, videos, host_live, told = async_to_sync(scenario)()
    assert told["type"] == "input_refused" and "view-only" in told["error"], told
    # One shared video for the three peers: each frame decoded and encoded once, not three times…
    ((key, (tracks, decoded, encoded)),) = videos.items()
    assert key == ("webrtc", api_url, row.external_id, 10.0) and tracks == 3, videos
    # (+ keyframes and idle repeats; a frame counted while between its decode and its encode: + 1)
    assert encoded >= 10 and decoded <= encoded + 1 and encoded <= decoded + 10, videos
    # …every peer decodes the stream it gets (a VP8 stream with a frame missing would not decode)…
    assert min(counts) >= 10, counts
    # …and the host sees one viewer: the web process's one socket.
    assert host_live[row.external_id]["viewers"] == 1, host_live
