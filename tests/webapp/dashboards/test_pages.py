"""The dashboard pages render the selectors' figures; the wall's fragment keeps live screens mounted."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.factories import make_episode, make_task
from tests.webapp.dashboards.conftest import ended, heartbeat
from tests.webapp.pages.html import count_testid, text
from webapp.datasets.models import FlywheelIteration
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.reviews.services import review_assign, review_decide
from webapp.sandboxes.models import Sandbox

pytestmark = pytest.mark.django_db


def cell(body: str, row_testid: str, key_attr: str, key: str, testid: str) -> str:
    """The text of the cell `testid` in the row whose `key_attr` is `key`."""
    row = re.search(rf'<tr data-testid="{row_testid}" {key_attr}="{re.escape(key)}">(.*?)</tr>', body, re.S)
    assert row, f"no {row_testid} for {key}"
    found = re.search(rf'data-testid="{testid}">(.*?)</td>', row.group(1), re.S)
    assert found, f"no {testid} cell in {row_testid} {key}"
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


def test_wall_shows_each_running_rollout_and_its_latest_thought_and_action(client_for) -> None:
    policy = PolicyVersion.objects.create(name="wall-policy", backend="oracle")
    task = make_task(slug="wall/task", max_steps=12)
    screenless = make_episode(task=task, steps=2, finish=False)
    Episode.objects.filter(pk=screenless.pk).update(policy_version=policy)
    host = heartbeat("wall-host", sandboxes=[{"profile": "miniwob", "state": "leased"}])
    live = make_episode(task=task, steps=1, finish=False)
    Episode.objects.filter(pk=live.pk).update(sandbox=Sandbox.objects.get(host=host))
    make_episode(task=task, steps=1, reward=1.0)  # ended: not on the wall
    response = client_for("researcher").get(reverse("dashboards:rollouts"))
    body = text(response)
    assert response.status_code == 200
    assert count_testid(response, "rollout-tile") == 2
    assert "wall-policy" in body and "step 2 / 12" in body and "step 1" in body
    assert "click(start_box=&#x27;(10,5)&#x27;)" in body
    assert f'src="/episodes/{screenless.pk}/steps/1/thumb.jpg"' in body
    sandbox = Sandbox.objects.get(host=host)
    assert f'id="thumb-{live.pk}-{sandbox.pk}" hx-preserve="true" data-sandbox="{sandbox.pk}"' in body
    assert f'href="/episodes/{live.pk}/"' in body


def test_wall_fragment_is_the_tiles_alone_and_keeps_polling(client_for) -> None:
    make_episode(steps=1, finish=False)
    fragment = client_for("admin").get(reverse("dashboards:rollouts"), headers={"HX-Request": "true"})
    body = text(fragment)
    assert body.lstrip().startswith('<div id="tiles"')
    assert 'hx-trigger="every 2s"' in body and "<nav" not in body and "<html" not in body
    assert fragment.status_code == 200 and count_testid(fragment, "rollout-tile") == 1


def test_wall_says_so_when_nothing_runs(client_for) -> None:
    response = client_for("researcher").get(reverse("dashboards:rollouts"))
    assert count_testid(response, "rollout-wall-empty") == 1


def test_success_page_tables(client_for) -> None:
    task = make_task(slug="page/success")
    policy = PolicyVersion.objects.create(name="page-policy", backend="oracle")
    ended(task, reward=1.0, policy=policy)
    ended(task, reward=0.0, policy=policy)
    ended(task, reward=0.0, policy=policy)
    ended(task, env_error=True, policy=policy)
    body = text(
        client_for("researcher").get(reverse("dashboards:success"), {"bucket": "hour", "since_days": "1"})
    )
    assert cell(body, "task-row", "data-task", "page/success", "rate") == "33%"
    assert cell(body, "policy-row", "data-policy", "page-policy", "rate") == "33%"
    assert "over 3 attempts (1 succeeded), 1 environment error" in re.sub(r"\s+", " ", body)
    assert "/api/v1/dashboards/success?bucket=hour&amp;since_days=1&amp;source=all" in body


def test_success_page_ignores_bad_parameters(client_for) -> None:
    response = client_for("researcher").get(
        reverse("dashboards:success"), {"bucket": "week", "since_days": "9999", "source": "x"}
    )
    assert response.status_code == 200
    assert "bucket=day&amp;since_days=14&amp;source=all" in text(response)


def test_health_page_tables_and_fragment(client_for) -> None:
    heartbeat(
        "page-host",
        sandboxes=[{"profile": "miniwob", "state": "leased"}, {"profile": "miniwob", "state": "idle"},
                   {"profile": "miniwob", "state": "idle"}, {"profile": "miniwob", "state": "idle"}],
        counters={"started": 10, "start_failed": 1, "replaced": 2},
        lease_wait={"n": 5.0, "p50": 7.0, "p95": 30.0},
    )  # fmt: skip
    client = client_for("researcher")
    body = text(client.get(reverse("dashboards:health")))
    assert cell(body, "host-row", "data-host", "page-host", "leased-live") == "1 / 4"
    assert cell(body, "host-row", "data-host", "page-host", "utilisation") == "25%"
    assert cell(body, "host-row", "data-host", "page-host", "lease-wait") == "7.0 / 30.0 ms (5)"
    # (1 failed start + 2 replaced) of the 11 starts tried.
    assert cell(body, "host-row", "data-host", "page-host", "crash-rate") == "0.273"
    assert cell(body, "host-row", "data-host", "page-host", "host-state").startswith("degraded")
    assert "3 of 11 sandbox starts since the host started failed or crashed later" in body
    assert cell(body, "profile-row", "data-profile", "miniwob", "utilisation") == "25%"
    assert re.search(
        r'data-queue="rollouts"><td>rollouts</td><td class="num" data-testid="depth">\d+</td>', body
    )
    fragment = text(client.get(reverse("dashboards:health"), headers={"HX-Request": "true"}))
    assert fragment.lstrip().startswith('<div id="now"') and "<canvas" not in fragment


def test_annotation_page_tables(client_for, personas) -> None:
    task = make_task()
    demo = ended(task, reward=1.0, annotator=personas.annotator, steps=4)
    ended(task, reward=1.0, annotator=personas.annotator, steps=2)
    review = review_assign(episode=demo, reviewer=personas.reviewer, assigned_by=personas.admin)
    review_decide(review=review, actor=personas.reviewer, verdict="reject", reason="misses a field")
    FlywheelIteration.objects.create(
        number=1, status="finished", finished_at=timezone.now(), stats={"p_v1": 0.625, "episodes": 8}
    )
    body = text(client_for("researcher").get(reverse("dashboards:annotation")))
    assert cell(body, "annotator-row", "data-annotator", "alice", "demos") == "2"
    assert cell(body, "annotator-row", "data-annotator", "alice", "steps") == "6"
    assert cell(body, "reviewer-row", "data-reviewer", "bob", "decisions") == "1"
    assert 'data-testid="round-p-v1">0.625<' in body


def test_dashboard_tabs_link_the_pages_a_person_may_open(client_for) -> None:
    body = text(client_for("admin").get(reverse("dashboards:success")))
    for name in ("rollouts", "success", "health", "annotation"):
        assert f'href="{reverse("dashboards:" + name)}"' in body
