"""Who may watch or drive a sandbox's screen: sandbox_access, tickets, the ticket and page views, and
the live sockets' admission (anonymous 4401, everyone without a fitting ticket 4403)."""

from __future__ import annotations

import time
from datetime import timedelta
from unittest import mock

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import Permission
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.conftest import make_personas
from tests.factories import make_episode
from webapp.asgi import application
from webapp.episodes.models import Episode
from webapp.sandboxes import tickets
from webapp.sandboxes.models import Lease, Sandbox, SandboxHost
from webapp.sandboxes.selectors import sandbox_access, sandboxes_visible_to
from webapp.sandboxes.tickets import TicketError, ticket_check, ticket_issue

IN_MEMORY_LAYER = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def make_sandbox(n: int = 1) -> Sandbox:
    host, _ = SandboxHost.objects.get_or_create(name="h1", defaults={"api_url": "http://127.0.0.1:9"})
    return Sandbox.objects.create(
        host=host, external_id=f"sb-{n}", provider="xdesktop", profile="desktop", state="leased",
        endpoints={"vnc": {"host": "127.0.0.1", "port": 5999}},
    )  # fmt: skip


@pytest.fixture
def world(transactional_db):
    people = make_personas()
    sandbox = make_sandbox()
    other = make_sandbox(2)
    episode = make_episode(annotator=people.annotator, finish=False)  # running
    Episode.objects.filter(pk=episode.pk).update(sandbox=sandbox)
    return people, sandbox, other, episode


def session_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def key_of(client: Client) -> str:
    return client.cookies[settings.SESSION_COOKIE_NAME].value


# --- sandbox_access ---------------------------------------------------------------------------------

ACCESS = {
    "annotator": "view",
    "reviewer": None,
    "researcher": "control",
    "admin": "control",
    "outsider": None,
}


@pytest.mark.parametrize("persona", list(ACCESS))
def test_access_matrix_over_the_personas(world, persona):
    people, sandbox, other, _ = world
    user = getattr(people, persona)
    assert sandbox_access(user=user, sandbox=sandbox) == ACCESS[persona]
    # The annotator's right comes from her running episode, which is on `sandbox` only.
    want_other = None if persona == "annotator" else ACCESS[persona]
    assert sandbox_access(user=user, sandbox=other) == want_other
    visible = set(sandboxes_visible_to(user=user).values_list("pk", flat=True))
    assert (sandbox.pk in visible) == (ACCESS[persona] is not None)
    assert (other.pk in visible) == (want_other is not None)


def test_anonymous_and_inactive_users_have_no_access(world):
    from django.contrib.auth.models import AnonymousUser

    people, sandbox, _, _ = world
    assert sandbox_access(user=AnonymousUser(), sandbox=sandbox) is None
    people.admin.is_active = False
    people.admin.save()
    assert sandbox_access(user=people.admin, sandbox=sandbox) is None


def test_the_lease_holder_controls_and_loses_it_with_the_lease(world):
    people, sandbox, _, _ = world
    now = timezone.now()
    lease = Lease.objects.create(
        sandbox=sandbox, holder=f"user:{people.outsider.pk}", user=people.outsider,
        acquired_at=now, heartbeat_at=now, expires_at=now + timedelta(minutes=5),
    )  # fmt: skip
    assert sandbox_access(user=people.outsider, sandbox=sandbox) == "control"
    Lease.objects.filter(pk=lease.pk).update(state="released", ended_at=now)
    assert sandbox_access(user=people.outsider, sandbox=sandbox) is None


def test_view_sandbox_without_run_rollouts_only_views(world):
    people, sandbox, _, _ = world
    user = people.outsider
    user.user_permissions.add(
        Permission.objects.get(codename="view_sandbox", content_type__app_label="sandboxes")
    )
    user = type(user).objects.get(pk=user.pk)  # drop the permission cache
    assert sandbox_access(user=user, sandbox=sandbox) == "view"


def test_a_finished_episode_gives_its_annotator_no_view(world):
    people, sandbox, _, episode = world
    Episode.objects.filter(pk=episode.pk).update(status="finished", finished_at=timezone.now())
    assert sandbox_access(user=people.annotator, sandbox=sandbox) is None


# --- tickets -----------------------------------------------------------------------------------------


def test_a_ticket_opens_only_its_user_session_sandbox_and_transport(world):
    people, sandbox, other, _ = world
    carol = session_of(people.researcher)
    t = ticket_issue(user=people.researcher, session_key=key_of(carol), sandbox=sandbox, mode="control",
                     transport="vnc")  # fmt: skip
    claims = ticket_check(ticket=t, user=people.researcher, session_key=key_of(carol), sandbox_id=sandbox.pk,
                          transport="vnc")  # fmt: skip
    assert (claims.user_id, claims.sandbox_id, claims.mode, claims.transport) == (
        people.researcher.pk,
        sandbox.pk,
        "control",
        "vnc",
    )
    cases = {
        "another user": dict(user=people.admin),
        "another session": dict(session_key=key_of(session_of(people.researcher))),
        "another sandbox": dict(sandbox_id=other.pk),
        "another transport": dict(transport="screencast"),
    }
    for reason, change in cases.items():
        args = dict(ticket=t, user=people.researcher, session_key=key_of(carol), sandbox_id=sandbox.pk,
                    transport="vnc")  # fmt: skip
        args.update(change)
        with pytest.raises(TicketError) as err:
            ticket_check(**args)
        assert reason in err.value.reason


def test_a_tampered_ticket_is_refused(world):
    people, sandbox, other, _ = world
    carol = session_of(people.researcher)
    t = ticket_issue(user=people.researcher, session_key=key_of(carol), sandbox=sandbox, mode="view",
                     transport="vnc")  # fmt: skip
    payload = signing.loads(t, salt=tickets.SALT)
    forged = signing.dumps({**payload, "b": other.pk}, salt="another-salt")
    flipped = t[:-2] + ("A" if t[-2] != "A" else "B") + t[-1]
    for bad in (forged, flipped, "garbage", ""):
        with pytest.raises(TicketError):
            ticket_check(ticket=bad, user=people.researcher, session_key=key_of(carol), sandbox_id=other.pk,
                         transport="vnc")  # fmt: skip


def test_a_ticket_expires(world, settings):
    people, sandbox, _, _ = world
    settings.LIVE_TICKET_SECONDS = 60
    carol = session_of(people.researcher)
    t = ticket_issue(user=people.researcher, session_key=key_of(carol), sandbox=sandbox, mode="view",
                     transport="screencast")  # fmt: skip
    later = time.time() + 61
    with mock.patch("django.core.signing.time.time", return_value=later), pytest.raises(TicketError) as err:
        ticket_check(ticket=t, user=people.researcher, session_key=key_of(carol), sandbox_id=sandbox.pk,
                     transport="screencast")  # fmt: skip
    assert err.value.reason == "expired"


def test_a_right_lost_after_issue_refuses_the_ticket(world):
    people, sandbox, _, episode = world
    alice = session_of(people.annotator)
    t = ticket_issue(user=people.annotator, session_key=key_of(alice), sandbox=sandbox, mode="view",
                     transport="vnc")  # fmt: skip
    Episode.objects.filter(pk=episode.pk).update(status="finished", finished_at=timezone.now())
    with pytest.raises(TicketError, match="no longer allowed"):
        ticket_check(ticket=t, user=people.annotator, session_key=key_of(alice), sandbox_id=sandbox.pk,
                     transport="vnc")  # fmt: skip


def test_control_beyond_access_is_not_issued(world):
    people, sandbox, _, _ = world
    alice = session_of(people.annotator)
    with pytest.raises(PermissionDenied):
        ticket_issue(user=people.annotator, session_key=key_of(alice), sandbox=sandbox, mode="control",
                     transport="vnc")  # fmt: skip
    with pytest.raises(PermissionDenied):
        ticket_issue(user=people.outsider, session_key="x", sandbox=sandbox, mode="view", transport="vnc")


# --- the ticket view and the pages --------------------------------------------------------------------

# persona -> (ticket view, ticket control, live page, wall)
VIEWS = {
    "annotator": (200, 403, 200, 200),
    "reviewer": (404, 404, 404, 200),
    "researcher": (200, 200, 200, 200),
    "admin": (200, 200, 200, 200),
    "outsider": (404, 404, 404, 200),
}


@pytest.mark.parametrize("persona", list(VIEWS))
def test_ticket_view_and_pages_per_persona(world, persona):
    people, sandbox, _, _ = world
    client = session_of(getattr(people, persona))
    url = reverse("sandboxes:ticket", args=[sandbox.pk])
    view = client.post(url, {"mode": "view", "transport": "vnc"})
    control = client.post(url, {"mode": "control", "transport": "webrtc"})
    live = client.get(reverse("sandboxes:live", args=[sandbox.pk]))
    wall = client.get(reverse("sandboxes:wall"))
    assert (view.status_code, control.status_code, live.status_code, wall.status_code) == VIEWS[persona]
    if view.status_code == 200:
        body = view.json()
        assert body["url"].startswith(f"/ws/sandboxes/{sandbox.pk}/vnc/?ticket=")
        assert body["mode"] == "view" and body["expires_in"] == settings.LIVE_TICKET_SECONDS
        assert ticket_check(ticket=body["ticket"], user=getattr(people, persona), session_key=key_of(client),
                            sandbox_id=sandbox.pk, transport="vnc").mode == "view"  # fmt: skip
    if control.status_code == 403:
        assert "error" in control.json()
    if live.status_code == 200:
        assert b'data-testid="live"' in live.content
    tiles = wall.content.count(b'data-testid="wall-tile"')
    assert tiles == (0 if VIEWS[persona][2] == 404 else (1 if persona == "annotator" else 2))


def test_a_webrtc_ticket_carries_the_ice_servers_and_how_long_to_try(world, settings):
    people, sandbox, _, _ = world
    settings.LIVE_ICE_SERVERS = [{"urls": ["turn:turn.example.org:3478"], "username": "u", "credential": "c"}]
    settings.LIVE_WEBRTC_CONNECT_S = 5
    client = session_of(people.admin)
    url = reverse("sandboxes:ticket", args=[sandbox.pk])
    webrtc = client.post(url, {"mode": "view", "transport": "webrtc"}).json()
    assert webrtc["ice_servers"] == settings.LIVE_ICE_SERVERS and webrtc["connect_timeout_s"] == 5
    assert "ice_servers" not in client.post(url, {"mode": "view", "transport": "screencast"}).json()


def test_a_thumbnail_ticket_names_its_width_and_a_bad_one_is_refused(world):
    people, sandbox, _, _ = world
    client = session_of(people.admin)
    url = reverse("sandboxes:ticket", args=[sandbox.pk])
    thumb = client.post(url, {"mode": "view", "transport": "screencast", "fps": "2", "width": "480"})
    assert thumb.status_code == 200 and thumb.json()["url"].endswith("&fps=2&width=480")
    for bad in ("wide", "10", "99999"):
        refused = client.post(url, {"mode": "view", "transport": "screencast", "width": bad})
        assert refused.status_code == 400 and "width" in refused.json()["error"]


def test_the_servers_peer_uses_the_ice_servers() -> None:
    from sandbox_workers.live.webrtc import ScreenPeer

    servers = [
        {"urls": ["stun:stun.example.org:3478"]},
        {"urls": ["turn:t:3478"], "username": "u", "credential": "c"},
    ]
    peer = ScreenPeer(None, ice_servers=servers)  # type: ignore[arg-type]  # only configured
    config = peer.pc._RTCPeerConnection__configuration  # aiortc keeps it private
    assert [(s.urls, s.username, s.credential) for s in config.iceServers] == [
        (["stun:stun.example.org:3478"], None, None), (["turn:t:3478"], "u", "c")
    ]  # fmt: skip
    assert ScreenPeer(None).pc._RTCPeerConnection__configuration.iceServers == []  # type: ignore[arg-type]


def test_ticket_view_refuses_get_unknown_sandboxes_and_anonymous(world):
    people, sandbox, _, _ = world
    client = session_of(people.admin)
    assert client.get(reverse("sandboxes:ticket", args=[sandbox.pk])).status_code == 405
    assert client.post(reverse("sandboxes:ticket", args=[99999])).status_code == 404
    assert client.post(reverse("sandboxes:ticket", args=[sandbox.pk]), {"transport": "x"}).status_code == 400
    assert Client().post(reverse("sandboxes:ticket", args=[sandbox.pk])).status_code == 302


def test_watching_takes_the_shared_screencast_and_control_takes_novnc(world):
    people, sandbox, _, _ = world
    url = reverse("sandboxes:live", args=[sandbox.pk])

    def shown(user, query: str = "") -> tuple[str, str]:
        page = session_of(user).get(url + query).content.decode()
        live = page[page.index('data-testid="live"') :]
        transport = live.split('data-transport="', 1)[1].split('"', 1)[0]
        return transport, live.split('data-mode="', 1)[1].split('"', 1)[0]

    # Watching never opens an upstream of its own: every viewer shares the one capture.
    assert shown(people.annotator) == ("screencast", "view")
    assert shown(people.researcher) == ("screencast", "view")
    assert shown(people.researcher, "?mode=control") == ("vnc", "control")
    assert shown(people.researcher, "?transport=webrtc&mode=control") == ("webrtc", "control")
    assert shown(people.researcher, "?transport=screencast&mode=control") == ("screencast", "view")
    assert shown(people.annotator, "?mode=control") == ("screencast", "view")  # view access only
    assert shown(people.researcher, "?transport=nope") == ("screencast", "view")


def test_the_overview_links_to_live_views_and_the_wall(world):
    people, sandbox, _, _ = world
    page = session_of(people.researcher).get(reverse("sandboxes:overview")).content.decode()
    assert reverse("sandboxes:live", args=[sandbox.pk]) in page and reverse("sandboxes:wall") in page


# --- the sockets -------------------------------------------------------------------------------------


def ws_headers(client: Client | None) -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", b"http://localhost")]
    if client is not None:
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={key_of(client)}".encode()))
    return headers


def close_code(path: str, client: Client | None) -> int | None:
    async def scenario():
        communicator = WebsocketCommunicator(application, path, headers=ws_headers(client))
        connected, _ = await communicator.connect(timeout=10)
        assert connected  # accepted first, so a browser can read the close code
        output = await communicator.receive_output(timeout=10)
        await communicator.disconnect()
        return output

    output = async_to_sync(scenario)()
    assert output["type"] == "websocket.close", output
    return output.get("code")


@pytest.fixture
def sockets(world, settings):
    settings.CHANNEL_LAYERS = IN_MEMORY_LAYER
    settings.SANDBOX_HOST_TOKEN = "test-token"
    return world


@pytest.mark.parametrize("transport", ["vnc", "screencast", "webrtc"])
def test_sockets_admit_only_a_fitting_ticket(sockets, transport):
    people, sandbox, other, _ = sockets
    carol, eve = session_of(people.researcher), session_of(people.outsider)
    t = ticket_issue(user=people.researcher, session_key=key_of(carol), sandbox=sandbox, mode="view",
                     transport=transport)  # fmt: skip
    path = f"/ws/sandboxes/{sandbox.pk}/{transport}/?ticket={t}"
    assert close_code(path, None) == 4401  # anonymous
    assert close_code(path, eve) == 4403  # an outsider holding someone else's ticket
    assert close_code(f"/ws/sandboxes/{sandbox.pk}/{transport}/?ticket=bad", carol) == 4403
    assert close_code(f"/ws/sandboxes/{sandbox.pk}/{transport}/", carol) == 4403  # no ticket
    assert close_code(f"/ws/sandboxes/{other.pk}/{transport}/?ticket={t}", carol) == 4403
    assert close_code(path, session_of(people.researcher)) == 4403  # another session of the same user
    if transport == "vnc":
        # The right ticket gets past admission; the host at port 9 does not answer.
        assert close_code(path, carol) == 4502


def test_a_ticket_opens_one_socket_and_a_reconnect_takes_a_fresh_one(sockets):
    people, sandbox, _, _ = sockets
    carol = session_of(people.researcher)

    def fresh() -> str:  # what the page does before every (re)connect
        response = carol.post(
            reverse("sandboxes:ticket", args=[sandbox.pk]), {"mode": "view", "transport": "vnc"}
        )
        assert response.status_code == 200, response.content
        return response.json()["ticket"]

    first = fresh()
    path = f"/ws/sandboxes/{sandbox.pk}/vnc/?ticket={first}"
    # Admitted (the host at port 9 does not answer: 4502, the code the page reconnects on) ...
    assert close_code(path, carol) == 4502
    # ... once: the same ticket again is refused, however soon.
    assert close_code(path, carol) == 4403
    with pytest.raises(TicketError, match="already used"):
        ticket_check(ticket=first, user=people.researcher, session_key=key_of(carol), sandbox_id=sandbox.pk,
                     transport="vnc")  # fmt: skip
    second, third = fresh(), fresh()
    assert len({first, second, third}) == 3  # even asked for in the same millisecond
    assert close_code(f"/ws/sandboxes/{sandbox.pk}/vnc/?ticket={second}", carol) == 4502
    assert close_code(f"/ws/sandboxes/{sandbox.pk}/vnc/?ticket={third}", carol) == 4502


@pytest.mark.slow
def test_a_ticket_presented_at_once_to_two_processes_opens_one_socket(world, settings):
    # The used mark is an atomic add in the cache every web process shares: the real Redis here.
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    import redis
    from django.db import connection

    prefix = f"test-{uuid.uuid4().hex}"
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": settings.REDIS_URL,
                    "KEY_PREFIX": prefix}
    }  # fmt: skip
    people, sandbox, _, _ = world
    carol = session_of(people.researcher)
    t = ticket_issue(user=people.researcher, session_key=key_of(carol), sandbox=sandbox, mode="view",
                     transport="vnc")  # fmt: skip

    def present(_: int) -> str:
        try:
            ticket_check(ticket=t, user=people.researcher, session_key=key_of(carol), sandbox_id=sandbox.pk,
                         transport="vnc")  # fmt: skip
            return "admitted"
        except TicketError as exc:
            return exc.reason
        finally:
            connection.close()

    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            outcomes = sorted(pool.map(present, range(8)))
    finally:
        client = redis.Redis.from_url(settings.REDIS_URL)
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)
    assert outcomes == ["admitted"] + ["already used"] * 7
