"""The games suite without a browser: its task documents, reward, setup op and reference players' logic
(a fake environment that answers game_state; the real games are played in
tests/sandbox_workers/test_games_real.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_core import actions as A
from agent_core.suites import games, suite_names, suite_tasks
from agent_core.suites.games import g2048, memory, snake, sokoban
from agent_core.tasks.metrics import get_metric
from agent_core.tasks.oracles import OracleContext, get_oracle, oracle_names
from agent_core.tasks.runner import evaluate, prepare
from agent_core.tasks.spec import TaskSpecError, parse_task
from tests.agent_core.fakes import FakeEnv


class GameEnv(FakeEnv):
    """Answers game_start and game_state like the browser sandbox, from a given state."""

    platform = "browser"

    def __init__(self, state: dict[str, Any]) -> None:
        super().__init__()
        self.state = state
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def call(self, method: str, **params: Any) -> Any:
        self.calls.append((method, params))
        if method == "game_state":
            return self.state
        return {"game": params.get("game"), "seed": params.get("seed")}


def test_twelve_games_in_a_fixed_order_and_the_suite_is_registered() -> None:
    assert len(games.GAME_NAMES) == len(set(games.GAME_NAMES)) == 12
    assert games.GAME_NAMES[:6] == ("2048", "snake", "breakout", "minesweeper", "memory", "sokoban")
    assert "games" in suite_names()


def test_every_game_is_a_scored_browser_task_with_a_reference_player() -> None:
    specs = suite_tasks("games")
    assert [s.id for s in specs] == [f"games/{n}" for n in games.GAME_NAMES]
    for spec in specs:
        name = spec.id.removeprefix("games/")
        info = games.info(name)
        assert (spec.platform, spec.profile, spec.family) == ("browser", "browser", "games")
        assert spec.oracle == spec.id and spec.id in oracle_names()
        (step,) = spec.setup
        assert (step.op, step.save_as) == ("game", "start")
        assert dict(step.args) == {"game": name, "paused": True, "step_ms": info.step_ms}
        (check,) = spec.checker.checks
        assert (check.probe.op, check.probe.args["method"], check.select) == ("call", "game_state", "score")
        assert check.metric == "game_score"
        assert dict(check.options) == {"baseline": info.baseline, "target": info.target}
        assert spec.limits.max_steps >= 40 and spec.instruction.strip()
        assert parse_task(json.loads(json.dumps(spec.to_dict()))) == spec


def test_the_reward_is_the_score_normalised_and_clipped() -> None:
    info = snake.INFO
    metric = get_metric("game_score")
    opts = {"baseline": info.baseline, "target": info.target}
    assert metric(info.target, None, **opts) == 1.0 == games.normalise(info.target + 5, info)
    assert metric(info.baseline, None, **opts) == 0.0 == games.normalise(info.baseline - 1, info)
    assert metric((info.target + info.baseline) / 2, None, **opts) == pytest.approx(0.5)
    assert metric(None, None, **opts) == 0.0
    with pytest.raises(ValueError, match="baseline < target"):
        metric(3, None, baseline=5, target=5)


def test_game_info_refuses_what_cannot_be_normalised() -> None:
    with pytest.raises(games.UnknownGame):
        games.GameInfo("chess", "Chess", "Play.", target=1, baseline=0, max_steps=10, step_ms=100)
    with pytest.raises(ValueError, match="target"):
        games.GameInfo("snake", "Snake", "Play.", target=0, baseline=0, max_steps=10, step_ms=100)
    with pytest.raises(games.UnknownGame, match="valid"):
        games.info("tetris")


def test_the_game_setup_op_starts_the_episodes_seed_and_the_checker_scores_the_raw_score() -> None:
    spec = parse_task(games.task_doc("2048"))
    env = GameEnv({"game": "2048", "score": 200, "over": False, "tick": 3, "view": {}, "inputs": []})
    prepared = prepare(spec, env, seed=7)  # type: ignore[arg-type]
    assert env.calls[0] == ("game_start", {"seed": 7, "game": "2048", "paused": True, "step_ms": 100})
    result = evaluate(prepared, env)  # type: ignore[arg-type]
    info = g2048.INFO
    assert result.reward == pytest.approx((200 - info.baseline) / (info.target - info.baseline))
    assert result.details[0]["artifact"] == 200  # the raw score is kept
    with pytest.raises(TaskSpecError, match="game"):
        parse_task({**games.task_doc("2048"), "setup": [{"op": "game"}]})


def _ctx(state: dict[str, Any]) -> OracleContext:
    return OracleContext(env=GameEnv(state), params={}, setup={}, instruction="play")  # type: ignore[arg-type]


def test_2048_slides_and_merges_like_the_page() -> None:
    board = ((2, 2, 4, 4), (0, 0, 0, 2), (2, 0, 2, 0), (8, 8, 8, 8))
    left, points = g2048.move(board, "left")
    assert left == ((4, 8, 0, 0), (2, 0, 0, 0), (4, 0, 0, 0), (16, 16, 0, 0))
    assert points == 4 + 8 + 4 + 32
    assert g2048.move(((2, 4, 8, 16),) * 4, "left") == (((2, 4, 8, 16),) * 4, 0)
    assert g2048.choose(((2, 4, 2, 4), (4, 2, 4, 2), (2, 4, 2, 4), (4, 2, 4, 2))) is None


def test_the_snake_player_steers_around_its_body() -> None:
    view = {"grid": 10, "snake": [[5, 5], [4, 5], [3, 5]], "dir": [1, 0], "apple": [2, 5]}
    ctx = _ctx({"game": "snake", "over": False, "score": 0, "tick": 0, "view": view})
    action = next(get_oracle("games/snake")(ctx))
    assert action in (A.Press(key="up"), A.Press(key="down"))  # never back into its own neck
    assert "column 3, row 6" in ctx.thought
    keys = snake._path(10, [(5, 5), (4, 5), (3, 5)], (1, 0), (2, 5))
    assert keys is not None and len(keys) == 5


def test_the_sokoban_player_finds_a_shortest_solution() -> None:
    rows = ["#######", "#     #", "# $ . #", "#  @  #", "#######"]
    walls = {(x, y) for y, r in enumerate(rows) for x, c in enumerate(r) if c == "#"}
    keys = sokoban.solve(walls, {(4, 2)}, frozenset({(2, 2)}), (3, 3))
    assert keys == ["left", "left", "up", "right", "right"]
    assert sokoban.solve(walls, {(4, 2)}, frozenset({(1, 1)}), (3, 3)) is None  # a box in a corner


def test_the_memory_player_takes_a_pair_it_remembers() -> None:
    faces = list("ABCDEFGHABCDEFGH")
    seen = [False] * 16
    seen[0] = seen[8] = True  # both A cards were turned over before
    view = {"grid": 4, "cell": 100, "faces": faces, "matched": [False] * 16, "up": [], "seen": seen}
    ctx = _ctx({"game": "memory", "over": False, "score": 0, "tick": 0, "view": view})
    assert next(get_oracle("games/memory")(ctx)) == A.Click(x=50, y=50)
    assert "both A cards" in ctx.thought
    view = {**view, "seen": [False] * 16}
    ctx = _ctx({"game": "memory", "over": False, "score": 0, "tick": 0, "view": view})
    assert next(memory.play(ctx)) == A.Click(x=50, y=50)  # nothing known: an unseen card
