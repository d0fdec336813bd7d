"""An OSWorld LibreOffice Calc task on a real desktop with the real LibreOffice (the project's own task in
OSWorld's format, agent_core.suites.osworld_samples): its input downloaded by the host's fetch from an
offline mirror, opened in Calc, saved with ctrl+s by its postconfig, and scored by OSWorld's own
compare_table against a reference file from the mirror: doing nothing scores 0, the scripted solution,
typed through the sandbox's own input path, scores 1."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_core.suites import osworld_samples
from agent_core.tasks.oracles import OracleContext, get_oracle
from agent_core.tasks.osworld import import_osworld_task
from agent_core.tasks.runner import evaluate, prepare
from sandbox_workers.agent_env import SandboxEnv
from sandbox_workers.profiles import OFFICE_PROFILE

pytestmark = [pytest.mark.slow, pytest.mark.osworld]


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, osworld_mirror: Path) -> Path:
    monkeypatch.setenv("FLYWHEEL_VAR_DIR", str(tmp_path / "var"))
    return osworld_mirror


def office_env(xdesktop_factory: Callable[..., Any], name: str = "office") -> SandboxEnv:
    sizes = {k: v for k, v in OFFICE_PROFILE.items() if k in ("width", "height", "memory_mb")}
    options = {**OFFICE_PROFILE["options"], "start_timeout_s": 60}
    return SandboxEnv(xdesktop_factory(name, options=options, **sizes), platform="desktop")


def test_a_calc_task_scores_0_untouched_and_1_solved_by_osworlds_compare_table(
    xdesktop_factory: Callable[..., Any], mirror: Path
) -> None:
    doc = osworld_samples.TASKS["libreoffice_calc"]
    spec = import_osworld_task(doc, id_prefix="osworld/libreoffice_calc")
    env = office_env(xdesktop_factory)
    t0 = time.monotonic()
    prepared = prepare(spec, env)
    titles = [w["title"] for w in env.call("windows")["windows"]]
    assert "quarters.xlsx - LibreOffice Calc" in titles, titles
    print(f"setup with LibreOffice open: {time.monotonic() - t0:.1f} s")
    # The session runs in OSWorld's locale.
    assert env.exec("locale | grep ^LANG=").stdout.strip() == "LANG=en_US.UTF-8"

    untouched = evaluate(prepared, env)
    assert untouched.reward == 0.0, untouched.details
    assert untouched.details[0]["expected"] == {"file": "quarters_gold.xlsx", "bytes": len(
        osworld_samples.FILES[f"{osworld_samples.BASE}/calc/quarters_gold.xlsx"]()
    )}  # fmt: skip

    # The scripted solution, each action performed through the sandbox's own input path.
    ctx = OracleContext(env=env, params={}, setup={}, instruction=prepared.instruction)
    for action in get_oracle(spec.id)(ctx):
        env.act(action)
    solved = evaluate(prepared, env)
    assert solved.reward == 1.0, solved.details
