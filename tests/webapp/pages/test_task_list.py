"""The Tasks page a page at a time: filters by suite, platform, profile, publication and check state
(kept in the URL), counts of what they match, page links that keep the filters (href beside hx-get)."""

from __future__ import annotations

import html
import re

import pytest

from tests.factories import make_task
from tests.webapp.pages.conftest import ClientFor
from tests.webapp.pages.html import count_testid, text
from webapp.catalog.models import Task
from webapp.catalog.services import suite_get_or_create
from webapp.catalog.views import TASKS_PER_PAGE

pytestmark = pytest.mark.django_db
URL = "/tasks/"


def links(body: str, testid: str) -> tuple[str, str]:
    """(href, hx-get) of the link carrying data-testid=`testid`."""
    tag = re.search(rf'<a [^>]*data-testid="{testid}"[^>]*>', body)
    assert tag, f"no {testid} link"
    href = re.search(r'href="([^"]*)"', tag.group(0))
    hx = re.search(r'hx-get="([^"]*)"', tag.group(0))
    assert href and hx, tag.group(0)
    return html.unescape(href.group(1)), html.unescape(hx.group(1))


@pytest.fixture
def catalog() -> dict[str, int]:
    """120 browser tasks in suite "big" (every third published), 3 desktop ones with checks in
    different states, one checked before check states existed."""
    big = suite_get_or_create(slug="big", name="Big suite")
    # In bulk (the page reads rows; make_task's validation of each would cost seconds here).
    rows = [
        Task(slug=f"big/t{i:03d}", title=f"Big {i}", instruction="Click OK.", platform="browser",
             env_profile="browser", is_published=i % 3 == 0)
        for i in range(120)
    ]  # fmt: skip
    big.tasks.add(*Task.objects.bulk_create(rows))
    for slug, verification in [
        ("desk/failed", {"status": "failed", "reason": "the oracle scored 0"}),
        ("desk/waiting", {"status": "waiting", "reason": "no sandbox"}),
        ("desk/legacy-ok", {"ok": True}),
    ]:
        make_task(slug=slug, platform="desktop", env_profile="desktop")
        Task.objects.filter(slug=slug).update(verification=verification, is_published=slug.endswith("ok"))
    return {"big": 120, "published": 41}


def test_the_list_comes_a_page_at_a_time_and_its_links_keep_the_filters(
    client_for: ClientFor, catalog: dict[str, int]
) -> None:
    client = client_for("annotator")
    first = client.get(URL, {"suite": "big"})
    assert count_testid(first, "task-row") == TASKS_PER_PAGE
    assert "Page 1 of 3" in text(first) and 'data-testid="task-count">120 tasks<' in text(first)
    href, hx = links(text(first), "page-next")
    assert href == hx == "?suite=big&page=2"
    last = client.get(URL + href)
    assert count_testid(last, "task-row") == TASKS_PER_PAGE
    assert "Big 50" in text(last) and "Big 49" not in text(last)
    third = client.get(URL, {"suite": "big", "page": "3"})
    assert count_testid(third, "task-row") == 20 and 'data-testid="page-next"' not in text(third)
    assert links(text(third), "page-prev")[0] == "?suite=big&page=2"
    assert count_testid(client.get(URL, {"suite": "big", "page": "99"}), "task-row") == 20  # the last
    bad = client.get(URL, {"page": "²"})
    assert bad.status_code == 400 and "page must be a whole number" in text(bad)


def test_filters_and_counts_narrow_by_profile_publication_and_check_state(
    client_for: ClientFor, catalog: dict[str, int]
) -> None:
    client = client_for("researcher")
    every = text(client.get(URL))
    assert 'data-testid="task-count">123 tasks<' in every
    assert 'data-testid="count-published">41 published<' in every
    assert ">1 failed<" in every and ">1 waiting for a sandbox<" in every and ">1 passed<" in every
    assert ">120 never checked<" in every

    def slugs(**params: str) -> list[str]:
        return re.findall(r'<a href="/tasks/\d+/">([^<]+)</a>', text(client.get(URL, params)))

    assert slugs(profile="desktop") == ["desk/failed", "desk/legacy-ok", "desk/waiting"]
    assert slugs(check="failed") == ["desk/failed"]
    assert slugs(check="passed") == ["desk/legacy-ok"]  # its verdict, from before check states
    assert slugs(check="waiting", profile="desktop") == ["desk/waiting"]
    assert slugs(published="1", platform="desktop") == ["desk/legacy-ok"]
    assert slugs(q="t11", suite="big") == [f"big/t{i}" for i in range(110, 120)]
    narrowed = text(client.get(URL, {"profile": "desktop"}))
    assert 'data-testid="task-count">3 tasks<' in narrowed and ">1 published<" in narrowed
    # A count narrows to its state and keeps the other filters; the form comes with it (its select).
    href, hx = links(narrowed, "count-failed")
    assert href == hx == "?profile=desktop&check=failed"
    part = text(client.get(URL + href, headers={"HX-Request": "true", "HX-Target": "task-browser"}))
    assert part.lstrip().startswith('<div id="task-browser">') and "<html" not in part
    assert '<option value="failed" selected>' in part and '<option value="desktop" selected>' in part
    assert links(narrowed, "clear-filters")[0] == "/tasks/"


def test_a_tasks_page_shows_an_instance_of_its_instruction_and_the_template_apart(
    client_for: ClientFor,
) -> None:
    from agent_core.tasks.spec import parse_task

    spec = {
        "format": "flywheel-task/1",
        "id": "desk/count",
        "title": "Count lines",
        "instruction": "How many lines does ~/{{file}} have?",
        "platform": "desktop",
        "profile": "desktop",
        "params": {"file": {"choice": ["notes.txt", "todo.txt"]}},
        "checker": {"checks": [{"probe": {"op": "answer"}, "metric": "exact_match", "expected": "3"}]},
    }
    task = make_task(slug="desk/count", instruction=spec["instruction"], spec=spec)
    body = text(client_for("annotator").get(f"/tasks/{task.pk}/"))
    drawn = parse_task(spec).draw_params(0)["file"]
    shown = re.search(r'<blockquote data-testid="instruction">([^<]*)</blockquote>', body)
    assert shown and shown.group(1) == f"How many lines does ~/{drawn} have?"
    assert "The instance seed 0 draws" in body
    assert 'data-testid="instruction-template"' in body  # the template, labelled as such, folded away
