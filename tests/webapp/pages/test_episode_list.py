"""The Episodes page a page at a time: every episode reachable (the list stopped at 200), the filters kept
in the page links and in the address bar an htmx answer pushes."""

from __future__ import annotations

import html
import re

import pytest

from tests.conftest import Personas
from tests.factories import make_episode, make_task
from tests.webapp.pages.conftest import ClientFor
from tests.webapp.pages.html import count_testid, text
from webapp.episodes.views import EPISODES_PER_PAGE

pytestmark = pytest.mark.django_db


def test_every_episode_is_a_page_away_and_the_filters_stay(client_for: ClientFor, personas: Personas) -> None:
    task = make_task()
    ids = [make_episode(task=task, reward=1.0).pk for _ in range(EPISODES_PER_PAGE + 10)]
    make_episode(task=task, finish=False)  # running: filtered out below
    client = client_for("researcher")
    first = client.get("/episodes/", {"status": "finished", "source": ""})
    assert count_testid(first, "episode-row") == EPISODES_PER_PAGE
    assert 'data-testid="episode-count">60 episodes<' in text(first) and "Page 1 of 2" in text(first)
    tag = re.search(r'<a href="([^"]*)" hx-get="([^"]*)"[^>]*data-testid="page-next"', text(first))
    assert tag, "no next page link with an href beside its hx-get"
    href, hx = html.unescape(tag.group(1)), html.unescape(tag.group(2))
    assert href == hx == "?status=finished&page=2"  # the blank source filter left out
    last = client.get("/episodes/" + href, headers={"HX-Request": "true"})
    listed = {int(n) for n in re.findall(r'<a href="/episodes/(\d+)/">', text(last))}
    assert listed == set(ids[:10])  # the oldest ones, on the last page
    assert last["HX-Push-Url"] == "/episodes/?status=finished&page=2"
    assert client.get("/episodes/", {"page": "x"}).status_code == 400
