"""A version the platform's policy servers serve runs on every alive server that serves its model now,
and a rollout of one that no server serves fails with a PolicyError that says so."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from django.test import override_settings

from agent_core.policies.base import PolicyError
from tests.webapp.policies.helpers import served_version, server
from webapp.policies.models import PolicyVersion
from webapp.policies.runtime import policy_for
from webapp.policies.selectors import server_urls_for, version_ready

pytestmark = [pytest.mark.django_db, pytest.mark.engine]


@override_settings(POLICY_SERVER_GRACE_S=30)
def test_a_served_version_goes_to_every_alive_server_of_its_model():
    version = served_version("run-3-v2")
    server("a", models=["tiny-policy", "run-3-v2"], url="http://10.0.0.1:8100/v1")
    server("b", models=["tiny-policy", "run-3-v2"], url="http://10.0.0.2:8100/v1")
    server("c", models=["tiny-policy"], url="http://10.0.0.3:8100/v1")  # not holding the adapter
    server("d", models=["tiny-policy", "run-3-v2"], status="offline", url="http://10.0.0.4:8100/v1")
    server("e", models=["tiny-policy", "run-3-v2"], status="starting", url="http://10.0.0.5:8100/v1")
    server("f", models=["tiny-policy", "run-3-v2"], age_s=31, url="http://10.0.0.6:8100/v1")  # silent

    assert server_urls_for("run-3-v2") == ["http://10.0.0.1:8100/v1", "http://10.0.0.2:8100/v1"]
    policy = policy_for(version)
    assert policy.base_url == "http://10.0.0.1:8100/v1"  # type: ignore[attr-defined]
    assert policy.base_urls == ("http://10.0.0.1:8100/v1", "http://10.0.0.2:8100/v1")  # type: ignore[attr-defined]
    assert policy.model == "run-3-v2"  # type: ignore[attr-defined]
    assert version_ready(version)


def test_more_servers_in_the_config_join_the_platforms():
    version = served_version("run-3-v2", config={"base_urls": ["http://gpu-box:8000/v1"], "temperature": 0.5})
    server("a", models=["tiny-policy", "run-3-v2"], url="http://10.0.0.1:8100/v1")
    policy = policy_for(version)
    assert policy.base_urls == ("http://10.0.0.1:8100/v1", "http://gpu-box:8000/v1")  # type: ignore[attr-defined]
    assert policy.temperature == 0.5  # type: ignore[attr-defined]
    version.config = {"base_urls": "http://gpu-box:8000/v1"}
    with pytest.raises(PolicyError, match="base_urls must be a list"):
        policy_for(version)


def test_a_served_base_model_is_asked_for_by_its_served_id():
    version = PolicyVersion.objects.create(
        name="tiny-served", backend="openai", serving={"base": "tiny-policy", "kind": "base", "path": "/w"}
    )
    server("a", models=["tiny-policy"], url="http://10.0.0.1:8100/v1")
    assert policy_for(version).model == "tiny-policy"  # type: ignore[attr-defined]


@override_settings(POLICY_SERVER_GRACE_S=30)
def test_no_server_serving_the_model_is_a_policy_error_naming_it():
    version = served_version("run-3-v2")
    server("c", models=["tiny-policy"])
    server("f", models=["tiny-policy", "run-3-v2"], age_s=60)
    assert not version_ready(version)
    with pytest.raises(PolicyError) as caught:
        policy_for(version)
    assert str(caught.value) == "policy run-3-v2: no policy server serves run-3-v2 right now"


def test_versions_with_their_own_endpoint_or_no_server_are_always_ready():
    endpoint = PolicyVersion.objects.create(
        name="hosted", backend="openai", endpoint_url="http://vllm.example:8000/v1", model_name="m"
    )
    assert version_ready(endpoint)
    assert policy_for(endpoint).base_urls == ("http://vllm.example:8000/v1",)  # type: ignore[attr-defined]
    assert version_ready(PolicyVersion.objects.create(name="oracle", backend="oracle"))


def test_an_openai_version_needs_an_endpoint_or_a_served_base():
    with pytest.raises(IntegrityError), transaction.atomic():
        PolicyVersion.objects.create(name="nowhere", backend="openai", model_name="m")
    with pytest.raises(IntegrityError), transaction.atomic():
        PolicyVersion.objects.create(name="no-base", backend="openai", serving={"kind": "lora", "path": "/a"})
    served = PolicyVersion.objects.create(name="served", backend="openai", serving={"base": "tiny-policy"})
    assert served.is_platform_served() and served.serving == {"base": "tiny-policy"}
