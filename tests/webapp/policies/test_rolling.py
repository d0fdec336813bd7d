"""Rolling full-weight updates through the heartbeat: one server of a line restarts at a time on the
line's newest weights, and only while another still serves."""

from __future__ import annotations

import pytest
from django.test import override_settings

from tests.webapp.policies.helpers import TOKEN, beat, report, served_version, server
from webapp.policies.models import PolicyServer

pytestmark = pytest.mark.django_db


@pytest.fixture
def line():
    old = served_version("tiny-served", kind="base", model_name="tiny", base="tiny", path="/m/tiny")
    return old


def heartbeat(name: str, base: str, state: str = "serving") -> dict:
    with override_settings(POLICY_SERVER_TOKEN=TOKEN):
        resp = beat(report(name=name, base_model=base, state=state, models=[{"id": base, "kind": "base"}]))
    assert resp.status_code == 200, resp.content
    return resp.json()


def test_no_newer_weights_no_restart(line):
    assert heartbeat("a", "tiny")["weights"] is None


def test_servers_move_to_promoted_full_weights_one_at_a_time(line):
    heartbeat("a", "tiny")
    heartbeat("b", "tiny")
    served_version(
        "tiny-v2",
        kind="base",
        model_name="tiny-v2",
        base="tiny-v2",
        path="/m/v2",
        lineage={"line": "tiny-served"},
    )
    first = heartbeat("a", "tiny")["weights"]
    assert first == {"name": "tiny-v2", "path": "/m/v2"}
    assert PolicyServer.objects.get(name="a").status == "starting"  # its turn, taken
    # b keeps serving while a restarts.
    assert heartbeat("b", "tiny")["weights"] is None
    heartbeat("a", "tiny-v2", state="restarting")
    assert heartbeat("b", "tiny")["weights"] is None
    # a serves the new weights: now b's turn; a is not asked again.
    assert heartbeat("a", "tiny-v2")["weights"] is None
    assert heartbeat("b", "tiny")["weights"] == {"name": "tiny-v2", "path": "/m/v2"}


def test_a_lone_server_restarts_anyway_and_a_retired_target_is_not_taken(line):
    heartbeat("a", "tiny")
    v2 = served_version(
        "tiny-v2",
        kind="base",
        model_name="tiny-v2",
        base="tiny-v2",
        path="/m/v2",
        lineage={"line": "tiny-served"},
    )
    v2.is_active = False
    v2.save()
    assert heartbeat("a", "tiny")["weights"] is None
    v2.is_active = True
    v2.save()
    assert heartbeat("a", "tiny")["weights"]["name"] == "tiny-v2"


def test_no_turn_while_the_only_peer_is_not_serving(line):
    heartbeat("a", "tiny")
    heartbeat("b", "tiny", state="starting")
    served_version(
        "tiny-v2",
        kind="base",
        model_name="tiny-v2",
        base="tiny-v2",
        path="/m/v2",
        lineage={"line": "tiny-served"},
    )
    assert heartbeat("a", "tiny")["weights"] is None
    # Another line's newer weights are not this line's.
    server("c", models=["other"])
    served_version("other-v2", kind="base", model_name="o2", base="o2", path="/m/o2", lineage={"line": "zzz"})
    assert heartbeat("c", "other")["weights"] is None
