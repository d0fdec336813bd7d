"""Where the games suite's pages are on the host, and what a browser sandbox's page is playing.

Kept apart from `games` (the game_* operations), which builds on the browser session: the session
needs these (its launch binds the folder, its page state holds the GameRun) and imports nothing back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sandbox_workers.base import EnvError

_NAME = re.compile(r"^[a-z0-9_-]{1,40}$")
NOT_GAMES = frozenset({"runtime"})
"""Scripts of the html/ folder that are not games."""


@cache
def html_dir() -> Path:
    """The games suite's html/ folder on the host (found without importing the suite)."""
    import agent_core

    path = Path(agent_core.__file__).resolve().parent / "suites" / "games" / "html"
    if not (path / "game.html").is_file() or not (path / "runtime.js").is_file():
        raise EnvError(f"the games suite has no game.html and runtime.js under {path}")
    return path


def game_names() -> list[str]:
    """Every game the html/ folder holds (a <name>.js beside the runtime), sorted."""
    try:
        folder = html_dir()
    except EnvError:
        return []
    return sorted(p.stem for p in folder.glob("*.js") if _NAME.match(p.stem) and p.stem not in NOT_GAMES)


@dataclass
class GameRun:
    """The game this sandbox's page is playing, as game_start started it."""

    game: str
    seed: int
    tick_ms: float
    quantum_ms: float
    """Game time each GUI action costs while the game is stepped."""
    stepped: bool
    """Whether ticks run only on actions (paused), else on the page's timers."""
    carry_ms: float = 0.0
    """Game time owed but less than a tick (a wait of 0.25 s on 100 ms ticks leaves 50 ms)."""

    @property
    def step_ms(self) -> float:
        """Game time a GUI action costs now (0: none, the game runs by itself)."""
        return self.quantum_ms if self.stepped else 0.0

    def ticks_for(self, ms: float) -> int:
        """Whole ticks `ms` more of game time makes (the rest is carried to the next)."""
        total = self.carry_ms + ms
        ticks = int(total // self.tick_ms)
        self.carry_ms = total - ticks * self.tick_ms
        return ticks
