"""Who may open which page: every persona against every page, the navigation, htmx fragments, methods."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote

import pytest
from django.http import HttpResponse
from django.urls import reverse

from tests.conftest import NAV
from tests.factories import make_task
from tests.webapp.pages.conftest import ClientFor, World
from tests.webapp.pages.html import count_testid, nav_links, text

PERSONAS = ("anonymous", "annotator", "reviewer", "researcher", "admin", "outsider")
LOGIN = "login"  # 302 to the login page, coming back here afterwards
ADMIN_LOGIN = "admin-login"  # Django admin sends anyone who is not staff to its own login page

URLS: dict[str, Callable[[World], str]] = {
    "home": lambda w: reverse("dashboards:home"),
    "task_list": lambda w: reverse("catalog:task_list"),
    "task_detail": lambda w: reverse("catalog:task_detail", args=[w.task.pk]),
    "episode_list": lambda w: reverse("episodes:episode_list"),
    "episode_detail": lambda w: reverse("episodes:episode_detail", args=[w.episode.pk]),
    "step_screenshot": lambda w: reverse("episodes:step_screenshot", args=[w.episode.pk, 0]),
    "rollouts": lambda w: reverse("rollouts:batch_list"),
    "annotate": lambda w: reverse("annotation:queue"),
    "session": lambda w: reverse("annotation:session", args=[w.episode.pk]),
    "review_queue": lambda w: reverse("reviews:queue"),
    "dataset_list": lambda w: reverse("datasets:dataset_list"),
    "dataset_detail": lambda w: reverse("datasets:dataset_detail", args=[w.dataset.pk]),
    "version_detail": lambda w: reverse("datasets:version_detail", args=[w.dataset.versions.get().pk]),
    "version_diff": lambda w: (
        reverse("datasets:version_diff")
        + f"?a={w.dataset.versions.get().pk}&b="
        + str(w.dataset.versions.get().pk)
    ),
    "flywheel": lambda w: reverse("datasets:flywheel"),
    "training": lambda w: reverse("training:run_list"),
    "training_run": lambda w: reverse("training:run_detail", args=[w.run.pk]),
    "training_log": lambda w: reverse("training:run_log", args=[w.run.pk]),
    "training_compare": lambda w: reverse("training:run_compare") + f"?a={w.run.pk}&b={w.run.pk}",
    "sandboxes": lambda w: reverse("sandboxes:overview"),
    "policy_servers": lambda w: reverse("policies:servers"),
    "dash_rollouts": lambda w: reverse("dashboards:rollouts"),
    "dash_success": lambda w: reverse("dashboards:success"),
    "dash_health": lambda w: reverse("dashboards:health"),
    "dash_annotation": lambda w: reverse("dashboards:annotation"),
    "tokens": lambda w: reverse("accounts:tokens"),
    "admin_index": lambda w: reverse("admin:index"),
}

# What each persona gets, in PERSONAS order. The episode is the annotator's own and nobody reviews it,
# so the reviewer and the outsider get 404 (not 403: episode ids cannot be probed).
MATRIX: dict[str, tuple[int | str, ...]] = {
    #                  anonymous    annotator    reviewer     researcher   admin outsider
    "home":            (LOGIN,      200,         200,         200,         200,  200),
    "task_list":       (LOGIN,      200,         200,         200,         200,  403),
    "task_detail":     (LOGIN,      200,         200,         200,         200,  403),
    "episode_list":    (LOGIN,      200,         200,         200,         200,  403),
    "episode_detail":  (LOGIN,      200,         404,         200,         200,  404),
    "step_screenshot": (LOGIN,      200,         404,         200,         200,  404),
    "rollouts":        (LOGIN,      403,         403,         200,         200,  403),
    "annotate":        (LOGIN,      200,         403,         403,         200,  403),
    "session":         (LOGIN,      200,         404,         200,         200,  404),
    "review_queue":    (LOGIN,      403,         200,         403,         200,  403),
    "dataset_list":    (LOGIN,      403,         403,         200,         200,  403),
    "dataset_detail":  (LOGIN,      403,         403,         200,         200,  403),
    "version_detail":  (LOGIN,      403,         403,         200,         200,  403),
    "version_diff":    (LOGIN,      403,         403,         200,         200,  403),
    "flywheel":        (LOGIN,      403,         403,         200,         200,  403),
    "training":        (LOGIN,      403,         403,         200,         200,  403),
    "training_run":    (LOGIN,      403,         403,         200,         200,  403),
    "training_log":    (LOGIN,      403,         403,         200,         200,  403),
    "training_compare": (LOGIN,     403,         403,         200,         200,  403),
    "sandboxes":       (LOGIN,      403,         403,         200,         200,  403),
    "policy_servers":  (LOGIN,      403,         403,         200,         200,  403),
    "dash_rollouts":   (LOGIN,      403,         403,         200,         200,  403),
    "dash_success":    (LOGIN,      403,         403,         200,         200,  403),
    "dash_health":     (LOGIN,      403,         403,         200,         200,  403),
    "dash_annotation": (LOGIN,      403,         403,         200,         200,  403),
    "tokens":          (LOGIN,      200,         200,         200,         200,  200),
    "admin_index":     (ADMIN_LOGIN, ADMIN_LOGIN, ADMIN_LOGIN, ADMIN_LOGIN, 200,  ADMIN_LOGIN),
}  # fmt: skip


HOME_CARDS = {
    "annotator": ["Demonstrate a task", "Your demonstrations"],
    "reviewer": ["Review trajectories"],
    "researcher": ["Rollouts", "Training", "Sandbox hosts"],
    "admin": [
        "Demonstrate a task", "Your demonstrations", "Review trajectories", "Rollouts", "Training",
        "Sandbox hosts", "People",
    ],
    "outsider": [],
}  # fmt: skip


def client_name(persona: str) -> str | None:
    return None if persona == "anonymous" else persona


def outcome(response: HttpResponse, url: str) -> int | str:
    """What a persona got, in MATRIX's terms; anything unexpected is spelled out for the diff."""
    if response.streaming:
        b"".join(response.streaming_content)  # read to the end, which closes the file
    if response.status_code == 302:
        location = response["Location"]
        if location == f"{reverse('accounts:login')}?next={quote(url)}":
            return LOGIN
        if location.startswith(reverse("admin:login")):
            return ADMIN_LOGIN
        return f"302 to {location}"
    if response.status_code == 403 and "Not allowed" not in text(response):
        return "403 without the not-allowed page"
    if response.status_code == 404 and "Not found" not in text(response):
        return "404 without the not-found page"
    return response.status_code


def test_matrix_covers_every_page() -> None:
    assert MATRIX.keys() == URLS.keys()
    assert all(len(row) == len(PERSONAS) for row in MATRIX.values())


@pytest.mark.parametrize("page", list(MATRIX))
def test_page_access(page: str, world: World, client_for: ClientFor) -> None:
    # One test per page comparing the whole row: a failure shows every persona's outcome at once.
    url = URLS[page](world)
    got = {persona: outcome(client_for(client_name(persona)).get(url), url) for persona in PERSONAS}
    assert got == dict(zip(PERSONAS, MATRIX[page], strict=True))


@pytest.mark.parametrize(
    ("url_name", "args"),
    [
        ("catalog:task_detail", [999999]),
        ("episodes:episode_detail", [999999]),
        ("episodes:step_screenshot", [999999, 0]),
        ("datasets:dataset_detail", [999999]),
    ],
)
def test_missing_rows_are_not_found_even_for_admin(
    url_name: str, args: list[int], world: World, client_for: ClientFor
) -> None:
    assert client_for("admin").get(reverse(url_name, args=args)).status_code == 404


@pytest.mark.parametrize("persona", list(NAV))
def test_navigation_shows_only_the_sections_the_role_opens(
    persona: str, world: World, client_for: ClientFor
) -> None:
    client = client_for(persona)
    links = nav_links(client.get(reverse("dashboards:home")))
    assert [label for label, _ in links] == NAV[persona]
    for label, href in links:
        assert client.get(href).status_code == 200, f"{persona}'s nav link {label} ({href}) does not open"


def test_anonymous_login_page_has_no_navigation(client_for: ClientFor) -> None:
    response = client_for(None).get(reverse("accounts:login"))
    assert response.status_code == 200
    assert nav_links(response) == []
    assert "Log out" not in text(response)


@pytest.mark.parametrize("persona", list(HOME_CARDS))
def test_home_shows_the_cards_of_the_role(persona: str, client_for: ClientFor) -> None:
    response = client_for(persona).get(reverse("dashboards:home"))
    body = text(response)
    assert count_testid(response, "card") == len(HOME_CARDS[persona])
    for title in HOME_CARDS[persona]:
        assert f"<h2>{title}</h2>" in body
    assert ('data-testid="no-role"' in body) == (persona == "outsider")


def test_outsider_sees_the_no_role_chip_and_message(client_for: ClientFor) -> None:
    body = text(client_for("outsider").get(reverse("dashboards:home")))
    assert '<span class="chip">no role</span>' in body
    assert "You have no role yet" in body


@pytest.mark.parametrize(
    ("url_name", "row"), [("catalog:task_list", "task-row"), ("episodes:episode_list", "episode-row")]
)
def test_htmx_request_gets_only_the_results_fragment(
    url_name: str, row: str, world: World, client_for: ClientFor
) -> None:
    client = client_for("researcher")
    page = client.get(reverse(url_name))
    fragment = client.get(reverse(url_name), headers={"HX-Request": "true"})
    assert page.status_code == fragment.status_code == 200
    assert "<html" in text(page) and "<nav" in text(page)
    assert text(fragment).lstrip().startswith('<div id="results">')
    for whole_page_marker in ("<html", "<head", "<nav", "<form", "<h1>"):
        assert whole_page_marker not in text(fragment)
    assert count_testid(fragment, row) == count_testid(page, row) == 1


def test_htmx_task_filter_narrows_the_fragment(world: World, client_for: ClientFor) -> None:
    make_task(title="Send an email")
    make_task(title="Reply to an email")
    client = client_for("annotator")
    url = reverse("catalog:task_list")
    assert count_testid(client.get(url, headers={"HX-Request": "true"}), "task-row") == 3
    fragment = client.get(url, {"q": "email"}, headers={"HX-Request": "true"})
    assert count_testid(fragment, "task-row") == 2
    assert "2 tasks" in text(fragment)
    assert "Book a calendar slot" not in text(fragment)


def test_htmx_request_is_still_access_checked(client_for: ClientFor) -> None:
    assert (
        client_for("outsider").get(reverse("catalog:task_list"), headers={"HX-Request": "true"}).status_code
        == 403
    )
    anonymous = client_for(None).get(reverse("episodes:episode_list"), headers={"HX-Request": "true"})
    assert anonymous.status_code == 302


@pytest.mark.parametrize("page", [p for p in URLS if p not in ("admin_index",)])
def test_get_only_pages_reject_post(page: str, world: World, client_for: ClientFor) -> None:
    assert client_for("admin").post(URLS[page](world)).status_code == 405


@pytest.mark.parametrize(
    "url",
    [
        reverse("accounts:token_create"),
        reverse("accounts:token_revoke", args=[1]),
        reverse("accounts:logout"),
        reverse("training:run_launch"),
        reverse("training:run_stop", args=[1]),
        reverse("training:run_resume", args=[1]),
        reverse("training:checkpoint_promote", args=[1]),
    ],
)
@pytest.mark.parametrize("persona", ["anonymous", "annotator"])
def test_post_only_views_reject_get(url: str, persona: str, client_for: ClientFor) -> None:
    assert client_for(client_name(persona)).get(url).status_code == 405
