"""The games suite: twelve small HTML5 games written here, played in a browser sandbox.

Games are task environments with a score instead of a yes/no verdict: each game is one task
(`games/<name>`), seeded by the episode's seed, with a scripted reference player (its oracle) and a
reward normalised so that the reference player's score is 1 and doing nothing (or playing at random)
is 0: `normalise(score) = clip((score - baseline) / (target - baseline), 0, 1)`.

The pages live in html/ (one game.html, the runtime every game uses, a <name>.js per game), bound
read-only into the browser sandbox; the sandbox's game_start/game_state operations start a game and
read its privileged state (the browser provider's games module). Each game's Python module
beside this one gives `INFO = GameInfo(...)` and registers the reference player. Episodes run stepped:
every action costs the game `step_ms` of game time (a wait its seconds), however long the policy thinks,
and looking at the screen costs none.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import Any

from agent_core.tasks.spec import TaskSpec, parse_task

log = logging.getLogger(__name__)

PREFIX = "games/"
GAME_NAMES: tuple[str, ...] = (
    "2048", "snake", "breakout", "minesweeper", "memory", "sokoban",
    "flappy", "stacker", "maze", "whack", "cards", "typing",
)  # fmt: skip
"""Every game, in the suite's fixed order (G1's six, then G2's)."""
MODULES = {name: f"agent_core.suites.games.{'g2048' if name == '2048' else name}" for name in GAME_NAMES}
"""The Python module of each game (a module name cannot start with a digit)."""


class UnknownGame(KeyError):
    """A game name that is not one of GAME_NAMES (or whose module is missing)."""


@dataclass(frozen=True)
class GameInfo:
    """What the suite knows about one game."""

    name: str
    title: str
    instruction: str
    """What the player is told, the controls included."""
    target: float
    """The raw score the reference player reaches on every seed 1..5: normalised 1."""
    baseline: float
    """A raw score at or above what doing nothing and a random player get: normalised 0."""
    max_steps: int
    step_ms: float
    """Game time one agent step takes (the game stands still between actions)."""
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.name not in GAME_NAMES:
            raise UnknownGame(f"GameInfo.name {self.name!r} is not a game; valid: {', '.join(GAME_NAMES)}")
        if not self.target > self.baseline:
            raise ValueError(f"GameInfo({self.name}): target {self.target:g} must be above {self.baseline:g}")
        if not 1 <= self.max_steps <= 500 or not 0 < self.step_ms <= 60_000:
            raise ValueError(f"GameInfo({self.name}): max_steps in [1, 500] and step_ms in (0, 60000]")


def normalise(score: float, info: GameInfo) -> float:
    """The reward of raw `score`: 0 at the baseline or below, 1 at the target or above."""
    return max(0.0, min(1.0, (float(score) - info.baseline) / (info.target - info.baseline)))


def started_tick_ms(ctx: Any, default: float) -> float:
    """A game's tick as its game_start reported it (the setup's saved `start`), else `default`."""
    start: Any = ctx.setup.get("start") if ctx.setup else None
    return float(start.get("tick_ms", default)) if isinstance(start, dict) else default


def _load(name: str) -> Any:
    try:
        return importlib.import_module(MODULES[name])
    except ModuleNotFoundError as exc:
        if exc.name != MODULES[name]:
            raise
        raise UnknownGame(f"game {name!r} has no module {MODULES[name]}") from None


def info(name: str) -> GameInfo:
    """The GameInfo of game `name`; UnknownGame lists the valid names."""
    if name not in MODULES:
        raise UnknownGame(f"unknown game {name!r}; valid: {', '.join(GAME_NAMES)}")
    found = getattr(_load(name), "INFO", None)
    if not isinstance(found, GameInfo) or found.name != name:
        raise UnknownGame(f"{MODULES[name]} has no INFO = GameInfo(name={name!r}, ...)")
    return found


def task_doc(name: str) -> dict[str, Any]:
    """The `flywheel-task/1` document of game `name`."""
    from agent_core.tasks.oracles import oracle_names

    g = info(name)
    doc: dict[str, Any] = {
        "id": PREFIX + name,
        "title": g.title,
        "description": (
            f"The game {g.title}, seeded by the episode. Reward: the score normalised, 0 at {g.baseline:g}"
            f" (doing nothing), 1 at {g.target:g} (the reference player)."
        ),
        "instruction": g.instruction,
        "platform": "browser",
        "profile": "browser",
        "family": "games",
        "setup": [{"op": "game", "game": name, "paused": True, "step_ms": g.step_ms, "save_as": "start"}],
        "limits": {"max_steps": g.max_steps, "max_seconds": max(120, 10 * g.max_steps)},
        "checker": {
            "checks": [
                {
                    "probe": {"op": "call", "method": "game_state"},
                    "select": "score",
                    "metric": "game_score",
                    "options": {"baseline": g.baseline, "target": g.target},
                }
            ]
        },
        "tags": ["games", *g.tags],
    }
    if PREFIX + name in oracle_names():
        doc["oracle"] = PREFIX + name
    return doc


def available() -> list[str]:
    """The games whose module is here, in GAME_NAMES order (a missing one is logged, never hidden)."""
    found = []
    for name in GAME_NAMES:
        try:
            info(name)
        except UnknownGame as exc:
            log.warning("games suite: %s", exc)
            continue
        found.append(name)
    return found


def tasks() -> list[TaskSpec]:
    """One validated task per game whose module is here, in GAME_NAMES order."""
    return [parse_task(task_doc(name)) for name in available()]


def load_all() -> None:
    """Import every game's module (registering its reference player); a missing one is logged."""
    for name in GAME_NAMES:
        try:
            _load(name)
        except UnknownGame as exc:
            log.warning("games suite: %s", exc)


load_all()
