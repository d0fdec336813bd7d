"""The door through the real server: daphne answers bodies over the limit with 413 (with a length and
chunked), NUL characters and out-of-range numbers with 400s that say why, and throttles logins."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import PASSWORD, make_personas
from tests.procs import BIN, child_db_env, free_port, port_open, process
from webapp.accounts.services import api_token_create

pytestmark = [pytest.mark.slow]

LIMIT = 100_000


def test_daphne_refuses_bad_input_with_4xx_that_say_why(transactional_db, tmp_path):
    people = make_personas()
    _, token = api_token_create(user=people.researcher, name="door")
    port = free_port()
    env = {**child_db_env(), "UPLOAD_MAX_BYTES": str(LIMIT)}
    args = [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"]
    api = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def chunks() -> Iterator[bytes]:  # no Content-Length: the server finds out while reading
        yield b'{"slug": "'
        for _ in range(LIMIT // 1000 + 10):
            yield b"x" * 1000
        yield b'"}'

    with (
        process(args, ready=port_open(port), env=env, log_path=tmp_path / "daphne.log"),
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http,
    ):
        big = http.post("/api/v1/tasks", content=b'{"slug": "' + b"x" * LIMIT + b'"}', headers=api)
        assert (big.status_code, big.json()) == (
            413,
            {"detail": f"the request body is larger than the {LIMIT} bytes accepted"},
        )
        chunked = http.post("/api/v1/tasks", content=chunks(), headers=api)
        assert chunked.status_code == 413, chunked.text[:300]
        nul = http.post("/api/v1/tasks", json={"title": "a\x00b"}, headers=api)
        assert nul.status_code == 400 and nul.json()["errors"] == [
            {"field": "title", "message": "title may not contain NUL characters"}
        ]
        huge = http.get(f"/api/v1/episodes?offset={2**70}", headers=api)
        assert huge.status_code == 400 and huge.json()["errors"][0]["field"] == "offset"

        # Pages, logged in through the form: a huge filter is a 400 page, and wrong passwords lock.
        def login(password: str) -> httpx.Response:
            page = http.get("/accounts/login/")
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)  # type: ignore[union-attr]
            return http.post(
                "/accounts/login/",
                data={"csrfmiddlewaretoken": csrf, "username": "carol", "password": password},
            )

        assert login(PASSWORD).status_code == 302
        page = http.get(f"/episodes/?task={2**70}")
        assert page.status_code == 400 and "task must be a whole number" in page.text
        form = http.post(
            "/accounts/tokens/new/",
            data={"name": "x" * LIMIT, "csrfmiddlewaretoken": http.cookies["csrftoken"]},
        )
        assert form.status_code == 413
        http.post("/accounts/logout/", data={"csrfmiddlewaretoken": http.cookies["csrftoken"]})
        codes = [login("wrong").status_code for _ in range(11)]
        assert codes == [200] * 10 + [429]
        refused = login(PASSWORD)
        assert refused.status_code == 429 and "Too many failed log-ins" in refused.text
