"""Review pages: who may open and act, the htmx forms, assignment, sent-back work and agreement."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import Personas
from tests.factories import make_episode, make_task
from tests.webapp.pages.conftest import ClientFor
from tests.webapp.reviews.conftest import ReviewWorld
from webapp.accounts.roles import Role
from webapp.accounts.services import user_create
from webapp.reviews.models import Review, StepLabel
from webapp.reviews.services import review_assign, review_decide

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


def page(world: ReviewWorld) -> str:
    return reverse("reviews:review", args=[world.review.pk])


def post(client: Client, name: str, world: ReviewWorld, data: dict[str, str], htmx: bool = True):  # type: ignore[no-untyped-def]
    return client.post(reverse(f"reviews:{name}", args=[world.review.pk]), data, headers=HTMX if htmx else {})


def state(world: ReviewWorld) -> str:
    return Review.objects.get(pk=world.review.pk).state


def labels_json(body: str) -> dict:  # type: ignore[type-arg]
    found = re.search(r'<script id="review-labels-data" type="application/json">(.*?)</script>', body, re.S)
    assert found, body
    return json.loads(found.group(1))


def test_reviewer_opens_the_review_and_it_starts(world: ReviewWorld, client_for: ClientFor) -> None:
    response = client_for("reviewer").get(page(world))
    assert response.status_code == 200
    body = response.content.decode()
    assert body.count('data-testid="step"') == 3
    assert 'data-testid="label-wrong"' in body and 'data-testid="accept"' in body
    assert state(world) == Review.State.IN_PROGRESS


@pytest.mark.parametrize(
    ("persona", "status"), [("outsider", 403), ("annotator", 403), ("researcher", 200), ("admin", 200)]
)
def test_who_may_open_a_review(world: ReviewWorld, client_for: ClientFor, persona: str, status: int) -> None:
    response = client_for(persona).get(page(world))
    assert response.status_code == status
    assert state(world) == Review.State.ASSIGNED  # only the reviewer's own opening starts it
    if status == 200:
        assert 'data-testid="label-wrong"' not in response.content.decode() or persona == "admin"


def test_another_reviewer_gets_not_found_and_cannot_act(world: ReviewWorld, client_for: ClientFor) -> None:
    user_create(username="grace", password="x", roles=[Role.REVIEWER])
    grace = Client()
    grace.login(username="grace", password="x")
    assert grace.get(page(world)).status_code == 404
    for name, data in [
        ("label", {"step": "0", "label": "wrong"}),
        ("first_error", {"step": "0"}),
        ("correct", {"step": "0", "action_text": "press(key='enter')"}),
        ("decide", {"verdict": "accept", "quality": "5"}),
    ]:
        assert post(grace, name, world, data).status_code == 403
    assert state(world) == Review.State.ASSIGNED
    assert not StepLabel.objects.exists()


@pytest.mark.parametrize("persona", ["outsider", "annotator", "researcher"])
def test_outsiders_cannot_act(world: ReviewWorld, client_for: ClientFor, persona: str) -> None:
    client = client_for(persona)
    assert post(client, "label", world, {"step": "0", "label": "wrong"}).status_code == 403
    assert post(client, "decide", world, {"verdict": "reject", "reason": "x"}).status_code == 403
    assert state(world) == Review.State.ASSIGNED


def test_get_is_not_allowed_on_the_action_endpoints(world: ReviewWorld, client_for: ClientFor) -> None:
    assert client_for("reviewer").get(reverse("reviews:label", args=[world.review.pk])).status_code == 405


def test_label_first_error_and_correction_through_htmx(world: ReviewWorld, client_for: ClientFor) -> None:
    client = client_for("reviewer")
    client.get(page(world))
    response = post(client, "label", world, {"step": "1", "label": "wrong", "note": "clicked the wrong box"})
    assert response.status_code == 200
    assert labels_json(response.content.decode())["labels"]["1"]["label"] == "wrong"

    response = post(client, "first_error", world, {"step": "1"})
    assert labels_json(response.content.decode())["first_error_step"] == 1

    response = post(
        client,
        "correct",
        world,
        {"step": "1", "thought": "OK is left", "action_text": "click(start_box='(0,0)')"},
    )
    assert response.status_code == 200
    data = labels_json(response.content.decode())["labels"]["1"]
    assert data["corrected_action"] == {"type": "click", "x": 0, "y": 0}
    assert data["corrected_thought"] == "OK is left"

    bad = post(client, "correct", world, {"step": "1", "action_text": "click(start_box='(oops"})
    assert bad.status_code == 400
    assert 'data-testid="review-error"' in bad.content.decode()
    assert "not a valid action" in bad.content.decode()
    row = StepLabel.objects.get(review=world.review, step__index=1)
    assert row.corrected_action_text == "click(start_box='(0,0)')"  # the bad text changed nothing

    cleared = post(client, "first_error", world, {"clear": "1"})
    assert labels_json(cleared.content.decode())["first_error_step"] is None
    # Clearing the label keeps the correction (a blank correction takes that away, and the row with it).
    post(client, "label", world, {"step": "1", "label": "clear"})
    row = StepLabel.objects.get(review=world.review, step__index=1)
    assert (row.label, row.corrected_action_text) == ("", "click(start_box='(0,0)')")
    post(client, "correct", world, {"step": "1", "thought": "", "action_text": ""})
    assert not StepLabel.objects.filter(review=world.review).exists()


def test_a_plain_form_post_redirects_back_to_the_step(world: ReviewWorld, client_for: ClientFor) -> None:
    response = post(client_for("reviewer"), "label", world, {"step": "2", "label": "correct"}, htmx=False)
    assert response.status_code == 302
    assert response["Location"] == page(world) + "?step=2"


def test_verdicts_through_htmx(world: ReviewWorld, client_for: ClientFor) -> None:
    client = client_for("reviewer")
    client.get(page(world))
    missing = post(client, "decide", world, {"verdict": "accept"})
    assert missing.status_code == 400
    assert "quality" in missing.content.decode()
    assert state(world) == Review.State.IN_PROGRESS

    done = post(client, "decide", world, {"verdict": "accept", "quality": "4"})
    assert done.status_code == 200 and done["HX-Redirect"] == page(world)
    review = Review.objects.get(pk=world.review.pk)
    assert (review.state, review.quality) == (Review.State.ACCEPTED, 4)

    body = client.get(page(world)).content.decode()
    assert 'data-testid="accept"' not in body  # decided: read-only
    assert body.count('data-testid="history-row"') == 3
    assert post(client, "decide", world, {"verdict": "reject", "reason": "x"}).status_code == 400


def test_other_decided_reviews_show_once_this_one_is_decided(
    world: ReviewWorld, client_for: ClientFor, personas: Personas
) -> None:
    grace = user_create(username="grace", password="x", roles=[Role.REVIEWER])
    theirs = review_assign(episode=world.episode, reviewer=grace, assigned_by=personas.admin)
    review_decide(review=theirs, actor=grace, verdict="reject", reason="wrong field")
    client = client_for("reviewer")
    assert 'data-testid="other-reviews"' not in client.get(page(world)).content.decode()
    post(client, "decide", world, {"verdict": "accept", "quality": "3"})
    body = client.get(page(world)).content.decode()
    assert 'data-testid="other-reviews"' in body and "grace" in body and "disagrees" in body


def test_queue_links_to_the_review_page(world: ReviewWorld, client_for: ClientFor) -> None:
    body = client_for("reviewer").get(reverse("reviews:queue")).content.decode()
    assert f'href="{page(world)}"' in body


def test_sent_back_page_resubmit_and_fork_form(
    world: ReviewWorld, client_for: ClientFor, personas: Personas
) -> None:
    review_decide(review=world.review, actor=personas.reviewer, verdict="send_back", comment="redo step 2")
    annotator = client_for("annotator")
    body = annotator.get(reverse("reviews:sent_back")).content.decode()
    assert "redo step 2" in body
    assert f'action="{reverse("annotation:fork", args=[world.episode.pk])}"' in body
    assert 'name="step"' in body
    assert client_for("reviewer").get(reverse("reviews:sent_back")).status_code == 403

    colleague = user_create(username="frank", password="x", roles=[Role.ANNOTATOR])
    other = Client()
    other.force_login(colleague)
    assert other.post(reverse("reviews:resubmit", args=[world.review.pk])).status_code == 403
    assert state(world) == Review.State.SENT_BACK

    response = annotator.post(reverse("reviews:resubmit", args=[world.review.pk]), {"comment": "fixed"})
    assert response.status_code == 302
    assert state(world) == Review.State.ASSIGNED
    assert "redo step 2" not in annotator.get(reverse("reviews:sent_back")).content.decode()


def test_assignment_page_for_admins(world: ReviewWorld, client_for: ClientFor, personas: Personas) -> None:
    unreviewed = make_episode(annotator=personas.annotator, steps=1, reward=0.0)
    for persona in ("reviewer", "researcher", "annotator"):
        assert client_for(persona).get(reverse("reviews:assign")).status_code == 403
    admin = client_for("admin")
    body = admin.get(reverse("reviews:assign")).content.decode()
    assert body.count('data-testid="unreviewed-row"') == 1  # the world's episode already has a review
    admin.post(reverse("reviews:assign_one"), {"episode": unreviewed.pk, "reviewer": personas.reviewer.pk})
    assert Review.objects.filter(episode=unreviewed, reviewer=personas.reviewer).exists()

    more = [make_episode(annotator=personas.annotator, steps=1, reward=1.0) for _ in range(2)]
    admin.post(reverse("reviews:assign_auto"), {"per_episode": "1"})
    assert all(Review.objects.filter(episode=e).count() == 1 for e in more)
    assert admin.get(reverse("reviews:assign")).content.decode().count('data-testid="unreviewed-row"') == 0


def test_agreement_page(world: ReviewWorld, client_for: ClientFor, personas: Personas) -> None:
    grace = user_create(username="grace", password="x", roles=[Role.REVIEWER])
    review_decide(review=world.review, actor=personas.reviewer, verdict="accept", quality=5)
    theirs = review_assign(episode=world.episode, reviewer=grace, assigned_by=personas.admin)
    review_decide(review=theirs, actor=grace, verdict="accept", quality=4)
    task = make_task()
    frank = user_create(username="frank", password="x", roles=[Role.ANNOTATOR])
    make_episode(task=task, annotator=personas.annotator, steps=1, reward=1.0)
    make_episode(task=task, annotator=frank, steps=1, reward=0.0)

    assert client_for("reviewer").get(reverse("reviews:agreement")).status_code == 403
    body = client_for("researcher").get(reverse("reviews:agreement")).content.decode()
    assert "bob · grace" in body
    assert "alice · frank" in body
    # One shared trajectory, both accepted: κ undefined, said so.
    assert "undefined: every judgement was" in body
