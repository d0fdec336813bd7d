"""The JSON endpoints the dashboards' charts read: shapes, figures, bad input, who may call them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.conftest import Personas
from tests.factories import make_episode, make_task
from tests.webapp.api.helpers import bearer_client, send
from tests.webapp.dashboards.conftest import ended, heartbeat
from webapp.dashboards.services import health_sample_take
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.sandboxes.models import Sandbox

pytestmark = pytest.mark.django_db


@pytest.fixture
def researcher(personas: Personas):
    return bearer_client(personas.researcher)


def test_success_endpoint_counts_per_task_and_policy(researcher) -> None:
    task = make_task(slug="api/success")
    policy = PolicyVersion.objects.create(name="pi-1", backend="oracle")
    for reward in (1.0, 1.0, 0.0):
        ended(task, reward=reward, policy=policy)
    ended(task, env_error=True, policy=policy)
    response = send(researcher, "GET", "/dashboards/success?bucket=day&since_days=3")
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["bucket"] == "day" and len(data["labels"]) == 3
    [row] = data["tasks"]
    assert (row["task"], row["attempts"], row["successes"], row["env_errors"]) == ("api/success", 3, 2, 1)
    assert row["rate"] == pytest.approx(2 / 3)
    assert row["attempts_series"][-1] == 3
    assert [(p["policy"], p["attempts"]) for p in data["policies"]] == [("pi-1", 3)]


def test_success_endpoint_hour_buckets_and_limits(researcher) -> None:
    data = send(researcher, "GET", "/dashboards/success?bucket=hour&since_days=2").json()
    assert len(data["labels"]) == 48 and data["bucket"] == "hour"
    too_long = send(researcher, "GET", "/dashboards/success?bucket=hour&since_days=30")
    assert too_long.status_code == 400
    assert "since_days" in too_long.json()["detail"]
    assert send(researcher, "GET", "/dashboards/success?bucket=week").status_code == 400
    assert send(researcher, "GET", "/dashboards/success?since_days=0").status_code == 400
    assert send(researcher, "GET", "/dashboards/success?source=robot").status_code == 400


def test_health_endpoints_now_and_over_time(researcher) -> None:
    heartbeat(
        "api-host",
        sandboxes=[{"profile": "miniwob", "state": "leased"}, {"profile": "miniwob", "state": "idle"}],
    )
    now = send(researcher, "GET", "/dashboards/health").json()
    assert [(h["host"], h["leased"], h["live"], h["utilisation"]) for h in now["hosts"]] == [
        ("api-host", 1, 2, 0.5)
    ]
    assert now["broker"] == "ok"
    assert {q["queue"] for q in now["queues"]} >= {"rollouts", "training", "sandboxes"}
    health_sample_take(now=timezone.now() - timedelta(minutes=10))
    health_sample_take()
    series = send(researcher, "GET", "/dashboards/health/series?since_hours=1").json()
    assert len(series["labels"]) == 2
    assert series["series"]["utilisation_by_profile"] == {"miniwob": [0.5, 0.5]}
    assert send(researcher, "GET", "/dashboards/health/series?since_hours=49").status_code == 400


def test_annotation_endpoint(researcher, personas: Personas) -> None:
    ended(make_task(), reward=1.0, annotator=personas.annotator, steps=2)
    data = send(researcher, "GET", "/dashboards/annotation?since_days=2").json()
    assert [(a["annotator"], a["demonstrations"], a["steps"]) for a in data["annotators"]] == [
        ("alice", 1, 2)
    ]
    assert data["annotators"][0]["per_day"] == [0, 1]
    assert data["agreement"]["reviews"]["overall"] is None


def test_rollouts_endpoint_lists_running_agent_episodes_with_their_latest_step(researcher, personas) -> None:
    policy = PolicyVersion.objects.create(name="pi-live", backend="oracle")
    task = make_task(slug="api/running", max_steps=9)
    running = make_episode(task=task, steps=3, finish=False)
    Episode.objects.filter(pk=running.pk).update(policy_version=policy)
    make_episode(task=task, steps=1, reward=1.0)  # ended
    make_episode(task=task, annotator=personas.annotator, steps=1, finish=False)  # a human demonstration
    data = send(researcher, "GET", "/dashboards/rollouts").json()
    assert data["count"] == 1
    [item] = data["items"]
    assert (item["episode"], item["task"], item["policy"], item["step"], item["max_steps"]) == (
        running.pk, "api/running", "pi-live", 3, 9,
    )  # fmt: skip
    assert item["thought"] == "step 2" and item["action"] == "click(start_box='(20,5)')"
    assert item["thumbnail"] == f"/episodes/{running.pk}/steps/2/thumb.jpg"
    assert item["sandbox"] is None


def test_rollout_on_a_live_sandbox_names_it(researcher) -> None:
    host = heartbeat("wall-host", sandboxes=[{"profile": "miniwob", "state": "leased"}])
    sandbox = Sandbox.objects.get(host=host)
    running = make_episode(steps=0, finish=False)
    Episode.objects.filter(pk=running.pk).update(sandbox=sandbox)
    [item] = send(researcher, "GET", "/dashboards/rollouts").json()["items"]
    assert item["sandbox"] == sandbox.pk and item["thumbnail"] is None and item["thought"] == ""
    Sandbox.objects.filter(pk=sandbox.pk).update(state=Sandbox.State.STOPPED)
    [item] = send(researcher, "GET", "/dashboards/rollouts").json()["items"]
    assert item["sandbox"] is None


@pytest.mark.parametrize(
    ("path", "needs"),
    [
        ("/dashboards/rollouts", "episodes.view_all_episodes"),
        ("/dashboards/success", "episodes.view_all_episodes"),
        ("/dashboards/health", "sandboxes.view_sandbox"),
        ("/dashboards/health/series", "sandboxes.view_sandbox"),
        ("/dashboards/annotation", "reviews.view_review"),
    ],
)
@pytest.mark.parametrize("persona", ["annotator", "reviewer", "outsider"])
def test_people_without_the_permission_are_refused(personas: Personas, client, path, needs, persona) -> None:
    response = send(bearer_client(getattr(personas, persona)), "GET", path)
    assert response.status_code == 403
    assert needs in response.json()["detail"]
    assert send(client, "GET", path).status_code == 401
    assert send(bearer_client(personas.admin), "GET", path).status_code == 200
