"""Each of the project's OSWorld-format samples (agent_core.suites.osworld_samples, one per application)
on a real office desktop: its input files fetched by the host from the offline mirror, its setup run as
OSWorld's, scored by OSWorld's own metric function: doing nothing scores 0, the scripted solution, each
action through the sandbox's own input path, scores 1. `make test` runs every sample through Celery
(tests/webapp/rollouts/test_osworld_rollouts_real.py); this runs each alone, for working on one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_core.suites import osworld_samples
from agent_core.tasks.oracles import OracleContext, get_oracle
from agent_core.tasks.osworld import import_osworld_task
from agent_core.tasks.runner import evaluate, prepare
from tests import sweeps
from tests.sandbox_workers.test_osworld_office_real import mirror, office_env  # noqa: F401 - a fixture

pytestmark = [pytest.mark.slow, pytest.mark.osworld, pytest.mark.sweep]


@pytest.mark.parametrize("domain", sweeps.sample(sorted(osworld_samples.TASKS), lambda d: d == "os"))
def test_a_sample_scores_0_untouched_and_1_solved(
    domain: str,
    xdesktop_factory: Callable[..., Any],
    mirror: Path,  # noqa: F811
) -> None:
    doc = osworld_samples.TASKS[domain]
    spec = import_osworld_task(doc, id_prefix=f"osworld/{domain}")
    assert spec.id == osworld_samples.task_id(domain, doc)
    # Each on a desktop of its own, as episodes are: the evaluation changes the desktop (a postconfig
    # saves the document, quits the browser).
    env = office_env(xdesktop_factory, "untouched")
    untouched = evaluate(prepare(spec, env), env)
    assert untouched.reward == 0.0, untouched.details
    assert all(d["metric"] == "osworld" for d in untouched.details), untouched.details

    env = office_env(xdesktop_factory, "solved")
    prepared = prepare(spec, env)
    ctx = OracleContext(env=env, params={}, setup={}, instruction=prepared.instruction)
    for action in get_oracle(spec.id)(ctx):
        ctx.observation = env.act(action)
    solved = evaluate(prepared, env)
    assert solved.reward == 1.0, solved.details
