"""Six games of the games suite (flappy, stacker, maze, whack, cards, typing) in a real (confined) browser
sandbox, through the agent loop and the suite's own task documents.

Per game and seed 1..5: the reference player reaches the game's target (reward 1) within its step limit,
saying what it sees at every step; doing nothing scores 0; and a random player that presses the game's
own keys and clicks its canvas for as many steps as the task allows stays at or below the baseline
(reward 0). `make verify-suites` runs every game and seed; `make test` runs one game on one seed: typing,
a game whose clock runs whatever the player does.
"""

from __future__ import annotations

import os
import random
import string
from collections.abc import Callable, Iterator

import pytest

from agent_core import actions as A
from agent_core.agent import run_episode
from agent_core.policies import make_policy
from agent_core.suites import games as suite
from agent_core.tasks.runner import evaluate, prepare
from agent_core.tasks.spec import parse_task
from agent_core.thoughts import is_placeholder_thought
from sandbox_workers.agent_env import SandboxEnv
from sandbox_workers.providers.browser import BrowserProvider
from tests.sandbox_workers.conftest import describe, started_browser
from tests.sweeps import sample

pytestmark = [
    pytest.mark.slow,
    pytest.mark.sweep,
    pytest.mark.skipif(not os.access("/usr/bin/chromium", os.X_OK), reason="no Chromium"),
]
GAMES = ("flappy", "stacker", "maze", "whack", "cards", "typing")
SEEDS = (1, 2, 3, 4, 5)
CASES = sample(((game, seed) for game in GAMES for seed in SEEDS), lambda c: c == ("typing", 2))
RANDOM_TRIES = 2


ARROWS = ("ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown")


def _arrows(r: random.Random, w: int, h: int) -> A.Action:
    return A.Press(key=r.choice(ARROWS))


RANDOM_MOVES: dict[str, Callable[[random.Random, int, int], A.Action]] = {
    # (flappy: its keys and short waits)
    "flappy": lambda r, w, h: r.choice((A.Press(key=" "), A.Press(key="ArrowUp"), A.Wait(seconds=0.1))),
    "stacker": lambda r, w, h: A.Press(key=r.choice((*ARROWS, " "))),
    "maze": _arrows,
    "whack": lambda r, w, h: r.choice((A.Click(x=r.randrange(w), y=r.randrange(h)), A.Wait(seconds=0.1))),
    "cards": lambda r, w, h: A.Click(x=r.randrange(w), y=r.randrange(h)),
    "typing": lambda r, w, h: A.Press(key=r.choice(string.ascii_lowercase)),
}
"""A random player's move in each game: one of the game's own controls (waiting included where time runs)."""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserProvider]:
    with started_browser(tmp_path_factory, "gamesg2", 79) as provider:
        yield provider


@pytest.fixture(scope="module")
def env(browser: BrowserProvider) -> SandboxEnv:
    return SandboxEnv(browser, platform="browser")


def raw_score(env: SandboxEnv) -> float:
    return float(env.call("game_state")["score"])


@pytest.mark.parametrize(("game", "seed"), CASES)
def test_reference_player_reaches_the_target_and_doing_nothing_scores_zero(
    env: SandboxEnv, game: str, seed: int
) -> None:
    info = suite.info(game)
    spec = parse_task(suite.task_doc(game))
    assert spec.oracle == f"games/{game}"
    outcome = run_episode(env, make_policy("oracle"), prepare(spec, env, seed=seed))
    score = raw_score(env)
    assert score >= info.target, f"{game} seed {seed}: raw {score} < {info.target}; {describe(outcome)}"
    assert outcome.reward == 1.0, describe(outcome)
    assert len(outcome.steps) <= info.max_steps
    # Reference play is SFT data: every step says what it sees and why, never a stand-in.
    stand_ins = [(s.index, s.thought) for s in outcome.steps if is_placeholder_thought(s.thought)]
    assert not stand_ins, stand_ins

    outcome = run_episode(env, make_policy("noop"), prepare(spec, env, seed=seed))
    assert outcome.reward == 0.0, describe(outcome)
    assert raw_score(env) <= info.baseline


@pytest.mark.parametrize(("game", "seed"), CASES)
def test_random_player_stays_at_or_below_the_baseline(env: SandboxEnv, game: str, seed: int) -> None:
    info = suite.info(game)
    spec = parse_task(suite.task_doc(game))
    scores = []
    for attempt in range(RANDOM_TRIES):
        prepared = prepare(spec, env, seed=seed)
        start = prepared.setup["start"]
        r = random.Random(f"{game}:{seed}:{attempt}")  # noqa: S311 - a baseline, not security
        for _ in range(info.max_steps):
            env.act(RANDOM_MOVES[game](r, int(start["width"]), int(start["height"])))
        scores.append(raw_score(env))
        assert evaluate(prepared, env).reward == 0.0, (game, seed, scores)
    assert max(scores) <= info.baseline, (game, seed, scores)
