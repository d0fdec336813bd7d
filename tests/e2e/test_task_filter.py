"""The tasks list filters live through htmx while the person types."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Request, expect

from tests.conftest import Personas
from tests.e2e.conftest import OpenAs
from tests.factories import make_task

pytestmark = pytest.mark.slow

TITLES = [
    "Book a calendar slot",
    "Move a calendar event",
    "Send an email",
    "Reply to an email",
    "Resize a window",
]


def test_task_list_filters_as_you_type_without_a_page_load(personas: Personas, open_as: OpenAs) -> None:
    for title in TITLES:
        make_task(title=title)
    page = open_as("annotator")
    htmx_requests: list[Request] = []
    page.on("request", lambda r: htmx_requests.append(r) if r.headers.get("hx-request") else None)
    page.goto("/tasks/")
    rows = page.get_by_test_id("task-row")
    expect(rows).to_have_count(5)
    page.wait_for_function("typeof window.htmx === 'object'")
    page.evaluate("window.sameDocument = true")  # gone if the browser loads a new page

    page.get_by_label("Search").press_sequentially("calendar", delay=20)
    expect(rows).to_have_count(2)
    assert sorted(rows.locator("td:first-child .muted").all_inner_texts()) == [
        "Book a calendar slot",
        "Move a calendar event",
    ]
    expect(page.get_by_test_id("task-count")).to_have_text("2 tasks")
    expect(page).to_have_url(re.compile(r"/tasks/\?.*q=calendar"))  # hx-push-url keeps the URL shareable

    page.get_by_label("Search").fill("email")
    expect(rows.filter(has_text="email")).to_have_count(2)  # waits for the swap: the count alone stays 2
    expect(rows).to_have_count(2)
    page.get_by_label("Search").fill("nothing like this")
    expect(rows).to_have_count(0)
    expect(page.get_by_text("No task matches.")).to_be_visible()
    page.get_by_label("Search").fill("")
    expect(rows).to_have_count(5)

    assert page.evaluate("window.sameDocument") is True
    assert htmx_requests, "no request carried HX-Request"
    assert all(r.url.split("?")[0].endswith("/tasks/") for r in htmx_requests)


def test_task_pages_and_filters_survive_a_reload(personas: Personas, open_as: OpenAs) -> None:
    from webapp.catalog.models import Task

    for i in range(70):
        make_task(slug=f"many/t{i:02d}", title=f"Many {i:02d}")
    make_task(slug="other/x", title="Other")
    Task.objects.filter(slug="many/t03").update(verification={"status": "failed", "reason": "oracle 0"})
    page = open_as("annotator")
    page.goto("/tasks/")
    rows = page.get_by_test_id("task-row")
    expect(rows).to_have_count(50)
    page.wait_for_function("typeof window.htmx === 'object'")
    page.evaluate("window.sameDocument = true")
    page.get_by_label("Search").press_sequentially("many", delay=20)
    expect(page.get_by_test_id("task-count")).to_have_text("70 tasks")
    # "ma" matches the same 70 tasks: the results of the last keystroke are in once the URL says "many"
    # (a pager of an earlier keystroke's results would page through "ma").
    expect(page).to_have_url(re.compile(r"[?&]q=many(&|$)"))
    page.get_by_test_id("page-next").click()
    expect(page.get_by_test_id("page-of")).to_have_text("Page 2 of 2")
    expect(rows).to_have_count(20)
    expect(page).to_have_url(re.compile(r"/tasks/\?q=many&page=2$"))
    assert page.evaluate("window.sameDocument") is True  # htmx swapped the results, no page load

    page.reload()
    expect(page.get_by_test_id("page-of")).to_have_text("Page 2 of 2")
    expect(page.get_by_label("Search")).to_have_value("many")
    expect(rows.first).to_contain_text("many/t50")

    # A count narrows the list and the form follows it (its select), so typing next keeps it.
    page.wait_for_function("typeof window.htmx === 'object'")
    page.get_by_test_id("count-failed").click()
    expect(rows).to_have_count(1)
    expect(page.get_by_label("Check")).to_have_value("failed")
    page.get_by_label("Search").fill("t0")
    expect(page.get_by_test_id("task-count")).to_have_text("1 task")
    expect(page).to_have_url(re.compile(r"check=failed"))
    page.reload()
    expect(page.get_by_label("Check")).to_have_value("failed")
    expect(rows).to_have_count(1)
