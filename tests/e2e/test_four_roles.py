"""The four roles' first hour, in one real Chromium against the running platform.

daphne, one Celery worker on every queue (interactive, sandboxes, rollouts, datasets) and a real desktop
sandbox host. An admin assigns a task to an annotator; the annotator demonstrates it in the live view,
which stays open (and its sockets up) for a minute while a researcher asks for control, drives, hands it
back, and launches rollouts on a chosen task with chosen seeds; the admin assigns the reviews; a reviewer
replays each trajectory with the instruction it was given and its final screen, sends the demonstration
back and accepts a rollout; the admin closes the round from the flywheel page, and the sent-back
demonstration is kept out of SFT. Every page counts its WebSocket closes (an init script): none may close
under a page that is still open.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.conftest import Personas
from tests.e2e import test_flywheel
from tests.e2e.test_demonstration import WATCH_SOCKETS, login, screen_point
from tests.procs import wait_for
from tests.webapp.annotation.conftest import note_reads, note_task
from webapp.annotation.models import Assignment
from webapp.catalog.models import Task
from webapp.catalog.services import suite_get_or_create, suite_load
from webapp.datasets.models import DatasetMembership, FlywheelIteration
from webapp.datasets.rounds import CT_DATASET, SFT_DATASET
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.reviews.models import Review
from webapp.rollouts.models import RolloutBatch

pytestmark = pytest.mark.slow
platform = test_flywheel.platform  # the same platform: daphne, a worker on every queue, a desktop host

TASKS = ["desktop/terminal/count-lines", "desktop/editor/append-line"]
CHOSEN = TASKS[0]
# The annotator's live view stays up at least this long before the sockets are checked: past every idle
# timeout on its way (redis-py's 5 s read, daphne's 20 s ping and 30 s ping timeout, each twice over).
# test_socket_lifetime.py holds sockets idle past the Redis ones alone, cheaply.
HOLD_S = 65


def as_role(browser: Browser, url: str, username: str) -> Page:
    """Log in through the form, with the socket counter in every page of the context."""
    page = login(browser, url, username)
    page.context.add_init_script(WATCH_SOCKETS)
    page.on("console", lambda m: print(f"[{username} console] {m.type}: {m.text}"))
    page.on("pageerror", lambda e: print(f"[{username} pageerror] {e}"))
    return page


def sockets(page: Page) -> dict[str, list[dict[str, Any]]]:
    return page.evaluate("window.__sockets")  # type: ignore[no-any-return]


def until(predicate: Any, what: str, timeout: float = 180) -> None:
    assert wait_for(predicate, timeout=timeout, interval=0.3), f"timed out waiting for {what}"


def test_admin_annotator_researcher_and_reviewer_in_their_first_hour(
    platform: str, browser: Browser, personas: Personas
) -> None:
    task = note_task()
    suite_load(name="desktop")
    Task.objects.filter(slug__in=TASKS).update(is_published=True)
    suite = suite_get_or_create(slug="roles-e2e", name="Roles e2e")
    suite.tasks.add(*Task.objects.filter(slug__in=TASKS))
    PolicyVersion.objects.create(name="oracle", backend="oracle")

    # The admin assigns the note task to the annotator from the annotation page.
    admin = as_role(browser, platform, personas.admin.get_username())
    admin.get_by_role("link", name="Annotate").click()
    form = admin.get_by_test_id("assign-form")
    form.locator("select[name=task]").select_option(label=task.slug)
    form.locator("select[name=annotator]").select_option(label=personas.annotator.get_username())
    form.get_by_label("Note", exact=True).fill("Write the note, please")
    form.get_by_role("button", name="Assign").click()
    assigned = Assignment.objects.filter(task=task, annotator=personas.annotator)
    until(assigned.exists, "the assignment")

    # The annotator starts it from their queue; the live view connects and stays open from here on.
    annotator = as_role(browser, platform, personas.annotator.get_username())
    annotator.get_by_role("link", name="Annotate").click()
    queue = annotator.get_by_test_id("assignments")
    expect(queue).to_contain_text("Write the note, please")
    queue.get_by_role("button", name="Start").click()
    expect(annotator.get_by_test_id("recorder")).to_be_visible(timeout=90_000)
    opened_at = time.monotonic()
    demo = Episode.objects.get(task=task, annotator=personas.annotator)
    live = "() => document.querySelector('[data-testid=session]').dataset.live"
    connected = wait_for(lambda: annotator.evaluate(live) == "connected", timeout=30, interval=0.3)
    assert connected, (annotator.evaluate(live), sockets(annotator))
    expect(annotator.get_by_test_id("control")).to_have_text("control: you")
    annotator.get_by_test_id("thought").fill("A terminal has focus in the middle; I click into it first.")
    annotator.wait_for_timeout(300)
    annotator.mouse.click(*screen_point(annotator, 640, 360))
    expect(annotator.get_by_test_id("steps").locator("li")).to_have_count(1, timeout=20_000)

    # The researcher watches the demonstration, asks for control, gets it from the annotator, drives
    # (a click, recorded), and hands it back; the annotator takes it again.
    researcher = as_role(browser, platform, personas.researcher.get_username())
    researcher.goto(f"/annotate/episodes/{demo.pk}/")
    expect(researcher.get_by_test_id("session")).to_have_attribute("data-ready", "1")
    until(lambda: researcher.evaluate(live) == "connected", "the researcher's live view", 30)
    researcher.get_by_role("button", name="Take control").click()
    expect(annotator.get_by_test_id("control-text")).to_contain_text("asks for control")
    annotator.get_by_role("button", name="Hand back").click()
    expect(researcher.get_by_test_id("control")).to_have_text("control: you")
    expect(annotator.get_by_role("button", name="Take control")).to_be_visible()
    researcher.mouse.click(*screen_point(researcher, 600, 380))
    expect(annotator.get_by_test_id("steps").locator("li")).to_have_count(2, timeout=20_000)
    researcher.get_by_role("button", name="Hand back").click()
    annotator.get_by_role("button", name="Take control").click()
    expect(annotator.get_by_test_id("control")).to_have_text("control: you")
    assert sockets(researcher)["closed"] == [], sockets(researcher)

    # The researcher launches rollouts of one chosen task of the suite, on seeds 3 and 4.
    researcher.goto("/rollouts/")
    launch = researcher.get_by_test_id("launch-form")
    launch.locator("[name=suite]").select_option(label=str(suite))
    launch.locator("[name=policy]").select_option(label=str(PolicyVersion.objects.get(name="oracle")))
    launch.locator("[name=tasks]").fill(CHOSEN)
    launch.locator("[name=seeds]").fill("3-4")
    launch.get_by_role("button", name="Launch").click()
    expect(researcher.get_by_test_id("seeds")).to_have_text("seeds 3–4")
    batch = RolloutBatch.objects.get(suite=suite)
    until(lambda: RolloutBatch.objects.get(pk=batch.pk).status == "finished", "the rollout batch", 240)
    rollouts = list(Episode.objects.filter(batch=batch).order_by("seed"))
    assert [(e.task.slug, e.seed, e.reward) for e in rollouts] == [(CHOSEN, 3, 1.0), (CHOSEN, 4, 1.0)]
    researcher.reload()
    expect(researcher.get_by_test_id("batch-status")).to_have_text("finished")

    # A minute later the annotator's live view is still up: no socket of the page ever closed, and
    # the screen still answers. They finish the note and submit.
    remaining = HOLD_S - (time.monotonic() - opened_at)
    print(f"the live view is up {time.monotonic() - opened_at:.0f} s; held {max(remaining, 0):.0f} s more")
    if remaining > 0:
        annotator.wait_for_timeout(remaining * 1000)
    held = sockets(annotator)
    assert held["opened"] and held["closed"] == [], held
    assert annotator.evaluate(live) == "connected"
    annotator.get_by_test_id("thought").fill("Control is mine again; I click into the terminal to type.")
    annotator.wait_for_timeout(300)
    annotator.mouse.click(*screen_point(annotator, 640, 360))
    expect(annotator.get_by_test_id("steps").locator("li")).to_have_count(3, timeout=20_000)
    annotator.keyboard.type("echo hello > note.txt")
    annotator.keyboard.press("Enter")
    expect(annotator.get_by_test_id("steps").locator("li")).to_have_count(4, timeout=20_000)
    # Like a person, submit once the shell has run the line (the keys are in; bash may not have yet).
    note_reads(demo, "hello")
    annotator.get_by_test_id("submit").click()
    expect(annotator.get_by_test_id("reward")).to_have_text("Reward: 1", timeout=30_000)
    demo.refresh_from_db()
    assert demo.status == "finished" and demo.reward == 1.0
    assert [s.actor for s in demo.steps.order_by("index")] == ["human"] * 4

    # The admin assigns the demonstration and the seed-3 rollout to the reviewer.
    admin.goto("/reviews/assign/")
    for episode in (demo, rollouts[0]):
        row = admin.get_by_test_id("unreviewed-row").filter(
            has=admin.get_by_role("link", name=str(episode.pk), exact=True)
        )
        row.get_by_label(f"Reviewer for episode {episode.pk}").select_option(
            label=personas.reviewer.get_username()
        )
        row.get_by_role("button", name="Assign").click()
    until(lambda: Review.objects.filter(reviewer=personas.reviewer).count() == 2, "two reviews assigned")

    # The reviewer replays each with the instruction it was given and its final screen.
    reviewer = as_role(browser, platform, personas.reviewer.get_username())
    rollout_review = Review.objects.get(episode=rollouts[0])
    reviewer.goto(f"/reviews/{rollout_review.pk}/")
    instruction = reviewer.get_by_test_id("instruction")
    expect(instruction).to_have_text(rollouts[0].instruction)
    assert "{{" not in instruction.inner_text() and rollouts[0].instruction != rollouts[0].task.instruction
    reviewer.keyboard.press("End")
    expect(reviewer.get_by_test_id("replay-index")).to_have_text("result")
    expect(reviewer.get_by_test_id("review-final")).to_be_visible()
    reviewer.get_by_test_id("quality-select").select_option("4")
    reviewer.get_by_test_id("accept").click()
    expect(reviewer.get_by_test_id("verdict-state")).to_have_text("Accepted")

    demo_review = Review.objects.get(episode=demo)
    reviewer.goto(f"/reviews/{demo_review.pk}/")
    expect(reviewer.get_by_test_id("instruction")).to_have_text(demo.instruction)
    reviewer.keyboard.press("End")
    expect(reviewer.get_by_test_id("replay-index")).to_have_text("result")
    reviewer.get_by_test_id("send-back-comment").fill("Write the thought before each click, not after.")
    reviewer.get_by_test_id("send-back").click()
    expect(reviewer.get_by_test_id("verdict-state")).to_have_text("Sent Back")
    annotator.goto("/annotate/")
    expect(annotator.get_by_test_id("sent-back")).to_contain_text("1 of your trajectories was sent back")

    # The admin closes the round from the flywheel page: the sent-back demonstration is no SFT data.
    admin.goto("/datasets/flywheel/")
    admin.get_by_test_id("close-round").click()
    expect(admin.get_by_test_id("round-row")).to_have_count(1, timeout=120_000)
    until(lambda: FlywheelIteration.objects.filter(status="finished").exists(), "the round to close", 60)
    members = DatasetMembership.objects.filter(version__dataset__name=SFT_DATASET)
    assert set(members.values_list("episode_id", flat=True)) == {e.pk for e in rollouts}
    ct = DatasetMembership.objects.filter(version__dataset__name=CT_DATASET)
    assert demo.pk in set(ct.values_list("episode_id", flat=True))
    admin.get_by_role("link", name=f"{SFT_DATASET}@v1").click()
    expect(admin.get_by_test_id("member-row")).to_have_count(2)
    expect(admin.get_by_test_id("members")).not_to_contain_text(f"#{demo.pk}")

    for page in (admin, annotator, researcher, reviewer):
        assert not [c for c in sockets(page)["closed"] if c["code"] not in (1000, 1001)], sockets(page)
        page.context.close()
