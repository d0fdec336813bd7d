"""A policy server's heartbeat through the real server: daphne with the token from its environment takes
the report over HTTP, answers with the adapters to hold, and the servers page shows the server."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import PASSWORD, make_personas
from tests.procs import daphne_server
from tests.webapp.policies.helpers import TOKEN, URL, report, served_version
from webapp.policies.models import PolicyServer

pytestmark = [pytest.mark.slow]


def test_a_heartbeat_over_http_registers_the_server_and_the_page_shows_it(
    transactional_db, tmp_path, monkeypatch
):
    make_personas()
    served_version("run-3-v2", path="/abs/adapter")
    monkeypatch.setenv("POLICY_SERVER_TOKEN", TOKEN)  # daphne's environment, as run.sh exports it
    with daphne_server(tmp_path) as base, httpx.Client(base_url=base, timeout=30) as http:
        refused = http.post(URL, json=report(), headers={"Authorization": "Bearer not-the-token-0123"})
        assert refused.status_code == 401
        bad = http.post(URL, json=report(state="up"), headers={"Authorization": f"Bearer {TOKEN}"})
        assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "state"

        answer = http.post(URL, json=report(), headers={"Authorization": f"Bearer {TOKEN}"})
        assert answer.status_code == 200, answer.text
        server = PolicyServer.objects.get(name="local-1")
        assert answer.json() == {
            "server_id": server.pk,
            "adapters": [{"name": "run-3-v2", "path": "/abs/adapter"}],
            "weights": None,
        }
        assert server.status == "online" and server.metrics["gen_tokens_per_s"] == 12.5

        login = http.get("/accounts/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)  # type: ignore[union-attr]
        logged_in = http.post(
            "/accounts/login/", data={"csrfmiddlewaretoken": csrf, "username": "carol", "password": PASSWORD}
        )
        assert logged_in.status_code == 302
        page = http.get("/policies/servers/")
        assert page.status_code == 200
        row = page.text.split('data-server="local-1"')[1].split("</tr>")[0]
        assert 'data-status="online"' in row and "run-3-v2" in row and "12.5 tok/s" in row
        fragment = http.get("/policies/servers/", headers={"HX-Request": "true"})
        assert fragment.text.lstrip().startswith('<div id="live"') and "local-1" in fragment.text
