"""Logging in through the real form, each role's navigation, and how the home page renders."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from playwright.sync_api import Browser, Locator, Page, expect

from tests.conftest import NAV, Personas
from tests.e2e.conftest import OpenAs
from tests.factories import make_episode, make_task
from tests.procs import ROOT
from webapp.catalog.models import Task
from webapp.reviews.services import review_assign

pytestmark = pytest.mark.slow

ROLE_CHIPS = {
    "annotator": ["annotator"],
    "reviewer": ["reviewer"],
    "researcher": ["researcher"],
    "admin": ["admin"],
    "outsider": ["no role"],
}
ADMIN_CARDS = [
    "Demonstrate a task", "Your demonstrations", "Review trajectories", "Rollouts", "Training",
    "Sandbox hosts", "People",
]  # fmt: skip
SCREENSHOTS = ROOT / "var" / "e2e-screenshots"


def nav(page: Page) -> Locator:
    return page.locator('nav[aria-label="Main"] a')


def test_new_user_logs_in_through_the_form_and_lands_home(
    browser: Browser, server: str, transactional_db: None
) -> None:
    out = io.StringIO()
    call_command("create_user", "newbie", "--role", "annotator", stdout=out)
    password = re.search(r"^password: (\S+)$", out.getvalue(), re.M)
    assert password is not None, out.getvalue()

    context = browser.new_context(base_url=server)
    context.set_default_timeout(10_000)
    try:
        page = context.new_page()
        page.goto("/")
        expect(page).to_have_url(f"{server}/accounts/login/?next=/")
        page.get_by_label("Username").fill("newbie")
        page.get_by_label("Password").fill(password[1])
        page.get_by_role("button", name="Log in").click()

        expect(page).to_have_url(f"{server}/")
        expect(page.get_by_role("heading", level=1)).to_have_text("Hello, newbie")
        expect(page.get_by_test_id("card").locator("h2")).to_have_text(
            ["Demonstrate a task", "Your demonstrations"]
        )
        expect(nav(page)).to_have_text(NAV["annotator"])
        expect(page.get_by_test_id("username")).to_have_text("newbie")

        page.get_by_role("button", name="Log out").click()
        expect(page).to_have_url(f"{server}/accounts/login/")
        page.goto("/")
        expect(page).to_have_url(f"{server}/accounts/login/?next=/")
    finally:
        context.close()


@pytest.mark.parametrize("persona", list(NAV))
def test_each_role_sees_its_own_navigation(persona: str, personas: Personas, open_as: OpenAs) -> None:
    page = open_as(persona)
    page.goto("/")
    expect(page.get_by_test_id("username")).to_have_text(getattr(personas, persona).get_username())
    expect(nav(page)).to_have_text(NAV[persona])
    expect(page.locator(".who .chip")).to_have_text(ROLE_CHIPS[persona])
    if persona == "outsider":
        expect(page.get_by_test_id("no-role")).to_be_visible()
        expect(page.get_by_test_id("card")).to_have_count(0)
    else:
        expect(page.get_by_test_id("no-role")).to_have_count(0)
        expect(page.get_by_test_id("card").first).to_be_visible()
    # Every link the navigation offers opens for this role.
    for href in [nav(page).nth(i).get_attribute("href") for i in range(nav(page).count())]:
        response = page.request.get(href or "")
        assert response.status == 200, f"{persona}: {href} -> {response.status}"


def test_admin_home_renders_with_styles_and_htmx(personas: Personas, open_as: OpenAs) -> None:
    make_task(title="Book a calendar slot")
    Task.objects.filter(pk=make_task(title="Send an email").pk).update(is_published=True)  # no service yet
    make_episode(steps=2, finish=False)  # an agent rollout still running
    demonstrated = make_episode(annotator=personas.admin, steps=1, reward=1.0)
    review_assign(episode=demonstrated, reviewer=personas.admin, assigned_by=personas.admin)

    page = open_as("admin")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto("/")
    cards = page.get_by_test_id("card")
    expect(cards.locator("h2")).to_have_text(ADMIN_CARDS)
    # published tasks, own demonstrations, reviews waiting, running rollouts, training, hosts, roleless
    expect(cards.locator(".big")).to_have_text(["1", "1", "1", "1", "0", "0", "1"])
    # The stylesheet and htmx come from collectstatic's output through whitenoise.
    topbar = page.evaluate("getComputedStyle(document.querySelector('.topbar')).backgroundColor")
    assert topbar == "rgb(17, 24, 39)"
    page.wait_for_function("typeof window.htmx === 'object'")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / "home-admin.png", full_page=True)
