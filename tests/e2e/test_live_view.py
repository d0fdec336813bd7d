"""The live view in a real Chromium: the shared screencast (watching), WebRTC, WebRTC relayed through a
real TURN server (coturn) from a browser with no UDP, and the fallback to the WebSocket transport when
ICE cannot connect draw a real desktop sandbox; an outsider can open neither the page, nor a ticket,
nor the socket."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from sandbox_workers.client import HostClient
from tests.conftest import Personas
from tests.e2e.conftest import session_cookie
from tests.e2e.netns import chromium_without_udp, turn_server
from tests.e2e.platform import site_with_host
from tests.procs import CHROMIUM, CHROMIUM_ARGS, wait_for
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP, TOKEN
from webapp.sandboxes.models import Sandbox

pytestmark = pytest.mark.slow

# Whether the canvas in the live box (noVNC's 2D canvas, or the screencast's bitmaprenderer one: read
# through a copy) has a picture: some of a grid of pixels differ.
CANVAS_DRAWN = """() => {
  const c = document.querySelector('[data-testid=live] canvas');
  if (!c || !c.width || !c.height) return false;
  const copy = document.createElement('canvas');
  copy.width = c.width; copy.height = c.height;
  const g = copy.getContext('2d');
  g.drawImage(c, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data;
  const seen = new Set();
  for (let y = 0; y < c.height; y += 37) for (let x = 0; x < c.width; x += 37) {
    const i = (y * c.width + x) * 4; seen.add(d[i] + ',' + d[i + 1] + ',' + d[i + 2]);
  }
  return seen.size > 1 ? {w: c.width, h: c.height, colours: seen.size} : false;
}"""

OPEN_SOCKET = """(path) => new Promise((resolve) => {
  const ws = new WebSocket(location.origin.replace(/^http/, "ws") + path);
  ws.onclose = (event) => resolve(event.code);
})"""


@pytest.fixture
def turn(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A real TURN server (coturn) on this machine: its RTCIceServer entry."""
    with turn_server(tmp_path) as server:
        yield server


@pytest.fixture
def site(transactional_db: None, tmp_path: Path, turn: dict[str, Any]) -> Iterator[tuple[str, Sandbox]]:
    """daphne with the host token and the TURN server in LIVE_ICE_SERVERS, and a host with a light
    desktop heartbeating into it."""
    with site_with_host(
        tmp_path,
        host_name=f"e2e-live-{uuid.uuid4().hex[:6]}",
        profiles={"desktop": LIGHT_DESKTOP},
        slot_base=140,
        # A page whose WebRTC did not connect in 4 s falls back.
        env={"LIVE_WEBRTC_CONNECT_S": "4", "LIVE_ICE_SERVERS": json.dumps([turn])},
        ready=lambda host: Sandbox.objects.filter(state="idle", endpoints__has_key="vnc").first(),
    ) as found:
        yield found


def page_as(browser: Browser, base_url: str, user) -> Page:
    context = browser.new_context(base_url=base_url)
    context.set_default_timeout(20_000)
    context.add_cookies([session_cookie(user, base_url)])  # type: ignore[list-item]
    return context.new_page()


def test_researcher_watches_over_each_transport_and_an_outsider_sees_nothing(
    browser: Browser, personas: Personas, site: tuple[str, Sandbox], tmp_path: Path, turn: dict[str, Any]
) -> None:
    url, sandbox = site
    page = page_as(browser, url, personas.researcher)
    response = page.goto(f"/sandboxes/{sandbox.pk}/live/")
    assert response is not None and response.status == 200
    drawn = page.wait_for_function(CANVAS_DRAWN, timeout=60_000).json_value()
    assert drawn["w"] >= 320 and drawn["h"] >= 200, drawn
    assert page.locator("[data-testid=live] .live-box").get_attribute("data-state") == "connected"
    assert page.evaluate("window.liveView.screenSize()") == {"width": drawn["w"], "height": drawn["h"]}
    # The overlay covers the drawn screen with a viewBox in screen pixels.
    assert page.locator(".live-overlay").get_attribute("viewBox") == f"0 0 {drawn['w']} {drawn['h']}"

    # The wall shows it as a live thumbnail (screencast) that links to this page.
    page.goto("/sandboxes/wall/")
    tile = page.locator(f"[data-testid=wall-tile][data-sandbox='{sandbox.pk}']")
    page.wait_for_function(
        f"""() => {{ const c = document.querySelector("[data-sandbox='{sandbox.pk}'] canvas");
                    return c && c.width > 0; }}""",
        timeout=60_000,
    )
    assert tile.get_attribute("href") == f"/sandboxes/{sandbox.pk}/live/"

    webrtc_and_its_fallback(browser, personas, url, sandbox, tmp_path)
    webrtc_through_turn(browser, personas, url, sandbox, tmp_path, turn)

    outsider = page_as(browser, url, personas.outsider)
    response = outsider.goto(f"/sandboxes/{sandbox.pk}/live/")
    assert response is not None and response.status == 404
    outsider.goto("/")
    csrf = outsider.evaluate("JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRFToken']")
    ticket = outsider.request.post(
        f"/sandboxes/{sandbox.pk}/ticket/", form={"mode": "view", "transport": "vnc"},
        headers={"X-CSRFToken": csrf, "Referer": url + "/"},
    )  # fmt: skip
    assert ticket.status == 404
    assert outsider.evaluate(OPEN_SOCKET, f"/ws/sandboxes/{sandbox.pk}/vnc/?ticket=forged") == 4403
    # Even with the researcher's ticket in hand, the outsider's session cannot use it.
    stolen = page.evaluate(
        """async (pk) => {
             const csrf = JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRFToken'];
             const r = await fetch(`/sandboxes/${pk}/ticket/`, {method: 'POST',
               headers: {'X-CSRFToken': csrf}, body: new URLSearchParams({mode: 'view', transport: 'vnc'})});
             return (await r.json()).url; }""",
        sandbox.pk,
    )
    assert outsider.evaluate(OPEN_SOCKET, stolen) == 4403

    control_refused_outside_an_episode(browser, personas, url, sandbox)


def control_refused_outside_an_episode(
    browser: Browser, personas: Personas, url: str, sandbox: Sandbox
) -> None:
    """noVNC in control mode on a sandbox leased outside any episode: the click and the keys reach
    nothing, the page says why, and the picture goes on."""
    page = page_as(browser, url, personas.researcher)
    page.goto(f"/sandboxes/{sandbox.pk}/live/?mode=control")
    page.wait_for_function(CANVAS_DRAWN, timeout=60_000)
    box = page.locator("[data-testid=live] .live-box")
    assert (box.get_attribute("data-transport"), box.get_attribute("data-mode")) == ("vnc", "control")
    with HostClient(sandbox.host.api_url, TOKEN) as host:
        leases = []
        try:
            # The host leases whichever desktop is idle: lease until the one on the page is held.
            while sandbox.external_id not in {lease.info.sandbox_id for lease in leases}:
                assert len(leases) < 3, "the desktop on the page was never leased"
                leases.append(host.acquire("desktop", holder="e2e-not-an-episode", ttl_s=120, wait_s=30))
            assert wait_for(lambda: Sandbox.objects.get(pk=sandbox.pk).state == "leased", timeout=20)
            page.locator("[data-testid=live] canvas").first.click(position={"x": 40, "y": 40})
            page.keyboard.type("refused")
            notice = page.get_by_test_id("live-notice")
            notice.wait_for(state="visible", timeout=20_000)
            assert "Input not sent" in notice.inner_text() and "leased" in notice.inner_text()
            assert box.get_attribute("data-state") == "connected"
        finally:
            for lease in leases:
                lease.release()


VIDEO_PLAYING = """() => { const v = document.querySelector('[data-testid=live] video');
                           return Boolean(v && v.videoWidth > 0 && v.currentTime > 0); }"""


def webrtc_and_its_fallback(
    browser: Browser, personas: Personas, url: str, sandbox: Sandbox, tmp_path: Path
) -> None:
    box = "[data-testid=live] .live-box"
    # On loopback WebRTC connects: the video plays.
    page = page_as(browser, url, personas.researcher)
    page.goto(f"/sandboxes/{sandbox.pk}/live/?transport=webrtc")
    page.wait_for_function(VIDEO_PLAYING, timeout=30_000)
    assert page.locator(box).get_attribute("data-transport") == "webrtc"
    assert page.locator(box).get_attribute("data-state") == "connected"

    # A browser on a network that carries the site's TCP and no UDP at all (its own network namespace,
    # as behind a firewall that drops UDP, with the TURN server out of reach): ICE cannot connect, and
    # the page goes on over the screencast by itself.
    port = int(url.rsplit(":", 1)[1])
    executable, bridge = chromium_without_udp(tmp_path, [port], CHROMIUM)
    blocked = browser.browser_type.launch(executable_path=executable, args=CHROMIUM_ARGS)
    try:
        page = watched_peers(blocked, personas, url)
        page.goto(f"/sandboxes/{sandbox.pk}/live/?transport=webrtc")
        page.wait_for_function(
            "() => document.querySelector('[data-testid=live] .live-box').dataset.transport === 'screencast'",
            timeout=30_000,
        )
        page.wait_for_function(CANVAS_DRAWN, timeout=30_000)
        assert page.locator(box).get_attribute("data-state") == "connected"
        assert "connected" not in page.evaluate("window.__states")  # the peer never connected
    finally:
        blocked.close()
        bridge.close()


def watched_peers(browser: Browser, personas: Personas, url: str) -> Page:
    """A researcher's page that keeps its peer connections' states (window.__states) and the peers
    (window.__pcs)."""
    context = browser.new_context(base_url=url)
    context.add_cookies([session_cookie(personas.researcher, url)])  # type: ignore[list-item]
    page = context.new_page()
    page.add_init_script(
        """window.__states = []; window.__pcs = [];
           const Native = window.RTCPeerConnection;
           window.RTCPeerConnection = function (...a) {
             const pc = new Native(...a);
             window.__pcs.push(pc);
             pc.addEventListener('connectionstatechange', () => window.__states.push(pc.connectionState));
             return pc; };"""
    )
    return page


# The local candidate of the pair the page's newest peer connection uses.
SELECTED_CANDIDATE = """async () => {
  const pc = window.__pcs[window.__pcs.length - 1];
  const stats = await pc.getStats();
  for (const s of stats.values())
    if (s.type === 'transport' && s.selectedCandidatePairId) {
      const pair = stats.get(s.selectedCandidatePairId);
      const local = stats.get(pair.localCandidateId);
      return {type: local.candidateType, relayProtocol: local.relayProtocol || null};
    }
  return null;
}"""


def webrtc_through_turn(
    browser: Browser, personas: Personas, url: str, sandbox: Sandbox, tmp_path: Path, turn: dict[str, Any]
) -> None:
    """The same UDP-less network, with the site's TURN server reachable over TCP: ICE relays through it
    and the video plays over WebRTC (no fallback)."""
    site_port = int(url.rsplit(":", 1)[1])
    turn_port = int(turn["urls"][0].split(":")[2].split("?")[0])
    executable, bridges = chromium_without_udp(tmp_path, [site_port, turn_port], CHROMIUM, lan=True)
    relayed = browser.browser_type.launch(executable_path=executable, args=CHROMIUM_ARGS)
    try:
        page = watched_peers(relayed, personas, url)
        page.goto(f"/sandboxes/{sandbox.pk}/live/?transport=webrtc")
        page.wait_for_function(VIDEO_PLAYING, timeout=30_000)
        box = page.locator("[data-testid=live] .live-box")
        assert box.get_attribute("data-transport") == "webrtc"
        assert box.get_attribute("data-state") == "connected"
        assert "connected" in page.evaluate("window.__states")
        assert page.evaluate(SELECTED_CANDIDATE) == {"type": "relay", "relayProtocol": "tcp"}
    finally:
        relayed.close()
        bridges.close()
