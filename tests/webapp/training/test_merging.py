"""Merging local policies (parameter interpolation) from the API: refusals at once, the merge on a worker."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from django.test import override_settings
from torch.testing import assert_close

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from safetensors.torch import load_file  # noqa: E402

from tests.agent_core.rl.test_interpolate import mergeable_models  # noqa: E402
from tests.conftest import Personas  # noqa: E402
from tests.webapp.api.helpers import bearer_client, send  # noqa: E402
from webapp.common.queue import POLICY_MERGE  # noqa: E402
from webapp.policies.models import PolicyVersion
from webapp.policies.runtime import policy_for  # noqa: E402
from webapp.training.merging import policy_merge_execute  # noqa: E402
from webapp.training.models import PolicyMerge  # noqa: E402

pytestmark = pytest.mark.django_db

ELEMENTS = {"observation": "elements", "max_new_tokens": 8}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return mergeable_models(tmp_path_factory.mktemp("merge-models"))


@pytest.fixture
def policies(models: dict[str, Path]) -> dict[str, PolicyVersion]:
    def local(name: str, path: Path, config: dict[str, Any] | None = None) -> PolicyVersion:
        return PolicyVersion.objects.create(
            name=name, backend="local", model_name=str(path), config=config or {}
        )

    return {
        "a": local("sft-a", models["a"], ELEMENTS),
        "b": local("rl-b", models["b"]),
        "narrow": local("narrow", models["narrow"]),
        "oracle": PolicyVersion.objects.create(name="oracle", backend="oracle"),
    }


def post(user: Any, body: dict[str, Any]) -> Any:
    return send(bearer_client(user), "POST", "/policy-merges", body)


def test_a_merge_makes_a_local_policy_of_the_weighted_average(
    queued: Any,
    personas: Personas, policies: dict[str, PolicyVersion], models: dict[str, Path], tmp_path: Path,
    django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    with override_settings(VAR_DIR=tmp_path), django_capture_on_commit_callbacks(execute=True):
        r = post(personas.admin, {"sources": [{"policy": "sft-a", "weight": 0.25},
                                              {"policy": policies["b"].pk, "weight": 0.75}]})  # fmt: skip
    assert r.status_code == 202, r.content
    body = r.json()
    assert (body["status"], body["policy"], body["name"]) == ("pending", None, "merge-sft-a-rl-b")
    assert queued.of(POLICY_MERGE) == [(body["id"],)]

    with override_settings(VAR_DIR=tmp_path):
        merge = policy_merge_execute(merge_id=body["id"])
        assert merge is not None and merge.status == "finished", merge and merge.error
        assert policy_merge_execute(merge_id=body["id"]) is None  # a second delivery does nothing
        done = send(bearer_client(personas.researcher), "GET", f"/policy-merges/{body['id']}").json()
        policy = PolicyVersion.objects.get(pk=done["policy"]["id"])
        model_dir = policy.model_dir()
        assert model_dir is not None and model_dir.is_relative_to(tmp_path)
        merged = load_file(str(model_dir / "model.safetensors"))
        sd_a = load_file(str(models["a"] / "model.safetensors"))
        sd_b = load_file(str(models["b"] / "model.safetensors"))
        for key, tensor in merged.items():
            assert_close(tensor, 0.25 * sd_a[key] + 0.75 * sd_b[key])
        # The first source's config (its observation among it) and where it came from.
        assert policy.backend == "local" and policy.config == ELEMENTS
        assert policy.lineage["merged_from"] == [
            {"policy": "sft-a", "weight": 0.25},
            {"policy": "rl-b", "weight": 0.75},
        ]
        assert json.loads((model_dir / "flywheel_lineage.json").read_text())["weights"] == [0.25, 0.75]
        out = policy_for(policy)  # rollouts and annotation can run it
        try:
            assert out.__class__.__name__ == "LocalPolicy"
        finally:
            out.close()
    assert done["status"] == "finished" and done["error"] == ""
    assert torch.is_tensor(next(iter(merged.values())))


@pytest.mark.parametrize(
    ("sources", "field", "message"),
    [
        ([("sft-a", 0.5), ("narrow", 0.5)], "sources", "differ in the architecture: hidden_size: 64 vs 32"),
        ([("sft-a", 0.6), ("rl-b", 0.6)], "weights", "weights must sum to 1, they sum to 1.2"),
        ([("sft-a", -0.5), ("rl-b", 1.5)], "weights", "weight 0 is -0.5"),
        ([("sft-a", 1.0)], "sources", "at least two policies"),
        ([("sft-a", 0.5), ("sft-a", 0.5)], "sources", "appears twice"),
        ([("sft-a", 0.5), ("oracle", 0.5)], "sources", "oracle is a oracle policy: only local models"),
        ([("sft-a", 0.5), ("nobody", 0.5)], "sources", "there is no policy 'nobody'"),
    ],
)
def test_a_mismatch_is_refused_at_once_naming_it(
    personas: Personas, policies: dict[str, PolicyVersion], sources: list[tuple[str, float]], field: str,
    message: str,
) -> None:  # fmt: skip
    r = post(personas.admin, {"sources": [{"policy": p, "weight": w} for p, w in sources]})
    assert r.status_code == 400, r.content
    assert r.json()["field"] == field and message in r.json()["detail"], r.json()
    assert not PolicyMerge.objects.exists()


def test_the_paths_in_a_refusal_are_named_as_policies(
    personas: Personas, policies: dict[str, PolicyVersion]
) -> None:
    r = post(
        personas.admin, {"sources": [{"policy": "sft-a", "weight": 0.5}, {"policy": "narrow", "weight": 0.5}]}
    )
    assert "configs of policy sft-a and policy narrow differ" in r.json()["detail"], r.json()


def test_names_must_be_free_slugs(personas: Personas, policies: dict[str, PolicyVersion]) -> None:
    two = [{"policy": "sft-a", "weight": 0.5}, {"policy": "rl-b", "weight": 0.5}]
    assert post(personas.admin, {"sources": two, "name": "Not A Slug"}).json()["field"] == "name"
    assert "exists already" in post(personas.admin, {"sources": two, "name": "rl-b"}).json()["detail"]


def test_every_input_at_fault_is_named_at_once(
    personas: Personas, policies: dict[str, PolicyVersion]
) -> None:
    sources = [{"policy": "sft-a", "weight": 0.6}, {"policy": "rl-b", "weight": 0.6}]
    body = post(personas.admin, {"sources": sources, "name": "Not A Slug"}).json()
    assert [e["field"] for e in body["errors"]] == ["weights", "name"], body
    assert "sum to 1.2" in body["errors"][0]["message"] and "not a slug" in body["errors"][1]["message"]
    assert not PolicyMerge.objects.exists()


def test_only_those_who_launch_training_merge(personas: Personas, policies: dict[str, PolicyVersion]) -> None:
    two = [{"policy": "sft-a", "weight": 0.5}, {"policy": "rl-b", "weight": 0.5}]
    assert post(personas.researcher, {"sources": two}).status_code == 403
    assert post(personas.annotator, {"sources": two}).status_code == 403
    assert send(bearer_client(personas.annotator), "GET", "/policy-merges/1").status_code == 403


def test_a_merge_whose_source_went_away_fails_with_the_reason(
    queued: Any,
    personas: Personas, policies: dict[str, PolicyVersion], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    with override_settings(VAR_DIR=tmp_path), django_capture_on_commit_callbacks(execute=True):
        body = post(personas.admin, {"sources": [{"policy": "sft-a", "weight": 0.5},
                                                 {"policy": "rl-b", "weight": 0.5}]}).json()  # fmt: skip
    PolicyVersion.objects.filter(name="rl-b").update(model_name=str(tmp_path / "gone"))
    with override_settings(VAR_DIR=tmp_path):
        merge = policy_merge_execute(merge_id=body["id"])
    assert merge is not None and merge.status == "failed" and merge.finished_at is not None
    assert "policy rl-b has no model directory on disk" in merge.error
    assert merge.policy is None and not (tmp_path / "policies" / "merged").exists()


def test_a_broker_that_is_down_fails_the_merge_saying_so(
    queued: Any,
    personas: Personas, policies: dict[str, PolicyVersion], monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    queued.down = ConnectionError("redis is down")
    with django_capture_on_commit_callbacks(execute=True):
        body = post(personas.admin, {"sources": [{"policy": "sft-a", "weight": 0.5},
                                                 {"policy": "rl-b", "weight": 0.5}]}).json()  # fmt: skip
    merge = PolicyMerge.objects.get(pk=body["id"])
    assert merge.status == "failed" and "task queue is unavailable" in merge.error


# --- the form on the Training page -----------------------------------------------------------------


def test_the_training_page_merges_two_policies_and_lists_the_merge(
    queued: Any,
    client_for: Any, policies: dict[str, PolicyVersion], monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    from django.urls import reverse

    admin = client_for("admin")
    page = admin.get(reverse("training:run_list")).content.decode()
    assert 'data-testid="merge-form"' in page and "No merges yet." in page
    form = {
        "policy_a": policies["a"].pk,
        "policy_b": policies["b"].pk,
        "weight_a": "0.3",
        "name": "half-half",
    }
    with django_capture_on_commit_callbacks(execute=True):
        r = admin.post(reverse("training:policy_merge"), form, follow=True)
    merge = PolicyMerge.objects.get()
    assert [(s["name"], s["weight"]) for s in merge.sources] == [("sft-a", 0.3), ("rl-b", 0.7)]
    page = r.content.decode()
    assert f"Merge #{merge.pk} queued: it makes policy half-half." in page
    assert 'data-testid="merge-row" data-status="pending"' in page and "sft-a (0.3) + rl-b (0.7)" in page

    # A refusal comes back as a message naming the problem; nothing is queued.
    r = admin.post(reverse("training:policy_merge"), {**form, "policy_b": policies["narrow"].pk}, follow=True)
    refused = r.content.decode()
    # Every problem at once: the sources do not match, and the name is taken by the merge above.
    assert "Merge refused: sources: configs of policy sft-a and policy narrow differ" in refused
    assert "name: a policy called &#x27;half-half&#x27; exists already or is being made" in refused
    r = admin.post(reverse("training:policy_merge"), {**form, "weight_a": "lots"}, follow=True)
    assert "must be a number from 0 to 1" in r.content.decode()
    assert PolicyMerge.objects.count() == 1

    # Researchers see the merges but have no form, and cannot post one.
    researcher = client_for("researcher")
    page = researcher.get(reverse("training:run_list")).content.decode()
    assert 'data-testid="merge-form"' not in page and 'data-testid="merge-row"' in page
    assert researcher.post(reverse("training:policy_merge"), form).status_code == 403
