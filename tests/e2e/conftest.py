"""One real daphne and one real Chromium for the end-to-end tests, and pages logged in as a persona.

The server and the browser live as long as this package's tests: daphne only needs the test database
to exist, each test commits its rows (`transactional_db`) and pytest-django empties the tables after
it, under the running server.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from playwright.sync_api import Browser, Page, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from tests.conftest import Personas, make_personas
from tests.procs import CHROMIUM, CHROMIUM_ARGS, daphne_server

OpenAs = Callable[[str | None], Page]


@pytest.fixture(scope="package")
def server(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of daphne serving the app on the test database."""
    log_dir: Path = tmp_path_factory.mktemp("daphne")
    with daphne_server(log_dir) as url:
        yield url


@pytest.fixture(scope="package")
def browser(server: str) -> Iterator[Browser]:
    # Playwright's sync API keeps an event loop running in this thread, and Django refuses ORM
    # calls from a thread with a running loop (SynchronousOnlyOperation). The tests, and
    # pytest-django's flush after each of them, are plain sync code, so allow it while the browser is
    # open. Depending on `server` starts daphne first, so it never inherits the flag.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]


@pytest.fixture
def personas(transactional_db: None) -> Personas:
    """The shared personas, committed so that the server process sees them."""
    return make_personas()


def session_cookie(user: Any, base_url: str) -> dict[str, str]:
    """A session cookie for `user`, as if they had logged in (the session row is committed).

    One test logs in through the form; the others start logged in, which keeps them short.
    """
    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return {"name": name, "value": client.cookies[name].value, "url": base_url}


@pytest.fixture
def open_as(browser: Browser, server: str, personas: Personas) -> Iterator[OpenAs]:
    """open_as("annotator") -> a page in a fresh browser context logged in as that persona."""
    contexts = []

    def open_page(persona: str | None) -> Page:
        context = browser.new_context(base_url=server)
        context.set_default_timeout(10_000)
        if persona is not None:
            context.add_cookies([session_cookie(getattr(personas, persona), server)])  # type: ignore[list-item]
        contexts.append(context)
        return context.new_page()

    yield open_page
    # Let the pages' last requests (lazy thumbnails, polls) finish before the tables are emptied under
    # the server: a request still querying while the flush truncates can deadlock on PostgreSQL.
    for context in contexts:
        for page in context.pages:
            with contextlib.suppress(PlaywrightError):
                page.wait_for_load_state("networkidle", timeout=5_000)
        context.close()
