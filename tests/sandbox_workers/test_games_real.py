"""The games suite in a real (confined) browser sandbox: the provider's game operations and every game.

Every game's reference player must reach normalised reward 1 and doing nothing must score 0, on seeds
1..5 (`make verify-suites`); `make test` plays a fixed sample (two games, one seed) in ONE shared
sandbox, and checks the operations themselves: the per-action clock quantum, privileged state kept out
of the DOM, a recorded game replayed at 8× giving the same score and tick, bad arguments refused.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent_core import actions as A
from agent_core.agent import run_episode
from agent_core.policies import make_policy
from agent_core.suites import games
from agent_core.tasks.runner import prepare
from agent_core.tasks.spec import parse_task
from agent_core.thoughts import is_placeholder_thought
from sandbox_workers.agent_env import SandboxEnv
from sandbox_workers.providers.browser import BrowserProvider
from sandbox_workers.providers.browser.provider import InvalidParams
from tests.procs import wait_for
from tests.sandbox_workers.conftest import describe, started_browser
from tests.sweeps import sample

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.access("/usr/bin/chromium", os.X_OK), reason="no Chromium"),
]
SEEDS = (1, 2, 3, 4, 5)
SAMPLE = {("snake", 1), ("memory", 1)}


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserProvider]:
    with started_browser(tmp_path_factory, "games", 65) as provider:
        yield provider


@pytest.fixture(scope="module")
def env(browser: BrowserProvider) -> SandboxEnv:
    return SandboxEnv(browser, platform="browser")


@pytest.mark.sweep
@pytest.mark.parametrize(
    ("game", "seed"), sample(((g, s) for g in games.GAME_NAMES for s in SEEDS), lambda c: c in SAMPLE)
)
def test_reference_player_scores_one_and_doing_nothing_zero(env: SandboxEnv, game: str, seed: int) -> None:
    spec = parse_task(games.task_doc(game))
    assert spec.oracle == f"games/{game}", f"{game} has no reference player"
    outcome = run_episode(env, make_policy("oracle"), prepare(spec, env, seed=seed))
    raw = env.call("game_state")["score"]
    assert outcome.reward == 1.0, f"raw score {raw}: {describe(outcome)}"
    # The reference player stays within the suite's 40 actions (plus its closing `finished`).
    assert len(outcome.steps) <= 41, describe(outcome)
    stand_ins = [(s.index, s.thought) for s in outcome.steps[:-1] if is_placeholder_thought(s.thought)]
    assert not stand_ins and all(s.thought for s in outcome.steps), stand_ins

    outcome = run_episode(env, make_policy("noop"), prepare(spec, env, seed=seed))
    assert outcome.reward == 0.0, describe(outcome)


def test_game_time_moves_only_with_actions(browser: BrowserProvider) -> None:
    started = browser.call("game_start", {"game": "snake", "seed": 3})
    assert (started["tick_ms"], started["step_ms"], started["paused"]) == (100.0, 100.0, True)
    assert browser.call("game_state", {})["tick"] == 0
    time.sleep(0.5)  # thinking costs no game time, and neither does looking
    browser.observe()
    assert browser.call("game_state", {})["tick"] == 0
    browser.act(A.Press(key="down"))  # an action: one quantum (one tick)
    state = browser.call("game_state", {})
    assert state["tick"] == 1 and state["inputs"] == [[0, "key", "ArrowDown"]]
    assert state["view"]["dir"] == [0, 1]
    browser.act(A.Wait(seconds=0.3))  # a wait: that much page time
    assert browser.call("game_state", {})["tick"] == 4
    # A person's clock: the game runs on the page's timers (here at 4x), then stands still again (on
    # memory, which goes on however long nobody plays).
    assert browser.call("game_start", {"game": "memory", "seed": 3})["step_ms"] == 100.0
    running = browser.call("game_clock", {"paused": False, "rate": 4})
    assert (running["paused"], running["rate"], running["step_ms"]) == (False, 4, 0)
    assert wait_for(lambda: browser.call("game_state", {})["tick"] >= 8, 10, interval=0.05)
    assert browser.call("game_clock", {"paused": True})["step_ms"] == 100.0
    held = browser.call("game_state", {})["tick"]
    time.sleep(0.4)
    assert browser.call("game_state", {})["tick"] == held
    browser.act(A.Wait(seconds=0.25))  # 2 ticks, and 50 ms carried to the next action
    browser.act(A.Wait(seconds=0.05))
    assert browser.call("game_state", {})["tick"] == held + 3
    # A page opened afterwards is no game: no quantum, and game_state says so.
    browser.call("goto", {"url": "about:blank"})
    with pytest.raises(InvalidParams, match="no game"):
        browser.call("game_state", {})


def test_screens_after_many_clicks_cost_the_game_no_time(browser: BrowserProvider) -> None:
    """Looking is free however many clicks came before: the game is stepped, the page's clock runs (a
    paused page clock made each capture after a click slower, then time out, and ran the game while
    it waited)."""
    started = browser.call("game_start", {"game": "memory", "seed": 5})
    ticks_per_action = round(started["step_ms"] / started["tick_ms"])
    for i in range(16):
        browser.act(A.Click(x=40 + 20 * (i % 8), y=60 + 40 * (i // 8)))
        browser.observe()
        browser.observe()
        assert browser.call("game_state", {})["tick"] == (i + 1) * ticks_per_action


def test_hidden_state_stays_out_of_the_page(browser: BrowserProvider) -> None:
    browser.call("game_start", {"game": "memory", "seed": 2})
    faces = browser.call("game_state", {})["view"]["faces"]
    obs = browser.observe(a11y=True)
    dom = browser.call("dom", {"html": True})
    assert obs.dom is not None and "Score: 0" in obs.dom
    for text in (obs.dom, obs.a11y or "", dom["html"], str(dom["elements"])):
        # The shuffled deck (in any spelling) is nowhere in what an agent can read.
        assert "".join(faces) not in text and str(faces)[1:-1] not in text
    assert "view" not in obs.dom and "inputs" not in obs.dom


def test_a_recorded_game_replays_the_same_at_eight_times_speed(browser: BrowserProvider) -> None:
    browser.call("game_start", {"game": "snake", "seed": 4})
    for key in ("down", "right", "up", "right"):
        browser.act(A.Press(key=key))
        browser.act(A.Wait(seconds=0.2))
    browser.act(A.Wait(seconds=2.0))  # straight on into the right wall: the game ends
    played = browser.call("game_state", {})
    assert played["over"] and len(played["inputs"]) == 4
    replay = {"game": "snake", "seed": 4, "paused": False, "rate": 8, "replay": played["inputs"]}
    browser.call("game_start", replay)
    deadline = time.monotonic() + 20
    replayed = browser.call("game_state", {})
    while not replayed["over"] and time.monotonic() < deadline:
        time.sleep(0.05)
        replayed = browser.call("game_state", {})
    assert replayed == played


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"game": "chess"}, "unknown game"),
        ({"game": "snake", "seed": "7"}, "seed"),
        ({"game": "snake", "paused": "yes"}, "paused"),
        ({"game": "snake", "rate": 0}, "rate"),
        ({"game": "snake", "step_ms": -5}, "step_ms"),
        ({"game": "snake", "rate": 0}, "rate"),
        ({"game": "snake", "replay": [[0, "key"]]}, r"replay\[0\]"),
    ],
)
def test_bad_game_start_arguments_are_refused(
    browser: BrowserProvider, params: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidParams, match=field):
        browser.call("game_start", params)


def test_goto_opens_game_pages_only_under_the_games_folder(browser: BrowserProvider) -> None:
    assert "snake" in browser.call("game_names", {})["games"]
    assert browser._spec is not None
    base = f"file://{browser._spec.games_base}"
    nav = browser.call("goto", {"url": f"{base}/game.html?game=2048&seed=1&autostart=1"})
    assert nav["error"] is None and nav["title"] == "2048"
    for url in (f"{base}/../miniwob/x.html", f"{base}x/game.html", "file:///etc/passwd"):
        with pytest.raises(InvalidParams):
            browser.call("goto", {"url": url})
