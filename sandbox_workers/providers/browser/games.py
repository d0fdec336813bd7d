"""The games suite's operations of the browser sandbox: game_start, game_state, game_names.

The games (agent_core/suites/games/html: one page, game.html?game=<name>&seed=<n>, and a runtime every
game uses) are bound read-only at /opt/games in a confined sandbox. A game's logic runs on page timers,
so the page's CDP virtual clock is its clock:

- paused (the default): the game is stepped: its ticks run only when the provider says, `step_ms` of
  game time (the game's tick unless told otherwise) after every GUI action, so a policy that thinks
  for a minute costs no game time and every action costs the same; a `wait(seconds)` costs that much
  game time (and no wall time). The page itself keeps its ordinary clock: rendering, input and
  screenshots never wait on a paused page clock, and taking one never moves the game. The quantum
  holds until the page changes (goto, reset, miniwob_start, restore, another game_start).
- paused=false: the game ticks on page timers, and page time runs at `rate` × the wall clock (1: true
  real time on a fresh page; 0.5: slowed for a person demonstrating; 8: a recorded game replayed
  fast, on the CDP virtual clock).
- game_clock {paused, rate?} switches a started game between the two (a person demonstrating).

game_state is privileged (checkers and reference players read it through `call`, which no agent action
reaches): the score, whether the game is over, the tick, the game's own view (board, hidden things)
and the input log. None of it is in the page's DOM. game_start's `replay` (a recorded input log) is
privileged too: the runtime applies each input at the tick it was recorded at (and `stop_at` stops
the game after that many ticks, to compare a replay with the game it recorded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from playwright.async_api import Error as PlaywrightError

from agent_core import actions as A
from sandbox_workers import miniwob
from sandbox_workers.base import EnvError, SandboxError
from sandbox_workers.providers.browser.gamefiles import GameRun, game_names, html_dir
from sandbox_workers.providers.browser.session import NAV_TIMEOUT_MS, BrowserSession

MAX_SEED = 2**53 - 1  # JavaScript numbers hold integers exactly up to here
MAX_REPLAY = 100_000
_STATE_JS = "() => (window.FlywheelGame ? window.FlywheelGame._state() : null)"
_INFO_JS = "() => (window.FlywheelGame ? window.FlywheelGame._info() : null)"
_START_JS = "(opts) => window.FlywheelGame._start(opts)"
_ADVANCE_JS = "(n) => window.FlywheelGame._advance(n)"
_CLOCK_JS = "(opts) => window.FlywheelGame._clock(opts)"


class GameParamsError(SandboxError, ValueError):
    """A game_* argument the browser sandbox rejects (unknown game, bad seed, …)."""


def _number(params: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo < value <= hi:
        raise GameParamsError(f"game_start: {key} must be a number in ({lo:g}, {hi:g}]")
    return float(value)


def _replay(value: Any) -> list[list[Any]] | None:
    """A recorded input log, checked in shape here (the runtime checks it again)."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_REPLAY:
        raise GameParamsError(f"game_start: replay must be a list of at most {MAX_REPLAY} inputs")
    out = []
    for i, item in enumerate(value):
        ok = isinstance(item, list | tuple) and len(item) == 3
        tick, kind, payload = item if ok else (None, None, None)
        ok = ok and isinstance(tick, int) and not isinstance(tick, bool) and tick >= 0
        ok = ok and (
            (kind == "key" and isinstance(payload, str) and 0 < len(payload) <= 32)
            or (
                kind == "click"
                and isinstance(payload, list | tuple)
                and len(payload) == 2
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in payload)
            )
        )
        if not ok:
            want = "[tick, 'key', key] or [tick, 'click', [x, y]]"
            raise GameParamsError(f"game_start: replay[{i}] must be {want}")
        out.append([tick, kind, list(payload or ()) if kind == "click" else payload])
    return out


class GameCalls(BrowserSession):
    """The game_* operations and the per-action game quantum (mixed into BrowserProvider)."""

    if TYPE_CHECKING:

        async def _navigate(self, url: str) -> dict[str, Any]: ...  # BrowserProvider's

    def _games_base(self) -> str:
        if self._spec is None or not self._spec.games_base:
            raise GameParamsError("this browser sandbox was launched without the games folder")
        return self._spec.games_base

    def _game_file_url(self, url: str) -> str:
        """The canonical form of a file:// URL of the games folder, or GameParamsError."""
        try:
            return miniwob.allowed_file_url(url, base=self._games_base(), host_dir=html_dir())
        except miniwob.MiniWobError:
            base = self._games_base()
            raise GameParamsError(f"file:// URLs must be plain paths under file://{base}/") from None

    def _call_game_names(self, _params: dict[str, Any]) -> dict[str, Any]:
        return {"games": game_names()}

    def _call_game_start(self, params: dict[str, Any]) -> dict[str, Any]:
        game, seed = params.get("game"), params.get("seed", 0)
        names = game_names()
        if not isinstance(game, str) or game not in names:
            raise GameParamsError(f"game_start: unknown game {game!r}; valid: {', '.join(names)}")
        if isinstance(seed, bool) or not isinstance(seed, int) or not -MAX_SEED <= seed <= MAX_SEED:
            raise GameParamsError(f"game_start: seed must be an integer of at most {MAX_SEED} in size")
        paused = params.get("paused", True)
        if not isinstance(paused, bool):
            raise GameParamsError("game_start: paused must be true or false")
        rate = _number(params, "rate", 1.0, 0, 100)
        step = params.get("step_ms")
        step_ms = None if step is None else _number(params, "step_ms", 0, 0, 60_000)
        replay = _replay(params.get("replay"))
        stop_at = params.get("stop_at")
        if stop_at is not None and (isinstance(stop_at, bool) or not isinstance(stop_at, int) or stop_at < 0):
            raise GameParamsError("game_start: stop_at must be a number of ticks (an integer >= 0)")
        url = f"file://{self._games_base()}/game.html?game={game}&seed={seed}"
        self._game = None
        self._episode_task = None

        async def go() -> dict[str, Any]:
            nav = await self._navigate(url)
            if nav["error"]:
                raise EnvError(f"loading game {game} failed: {nav['error']}")
            info = await self.page.evaluate(_INFO_JS)
            if not info or not info.get("ready") or info.get("error"):
                why = (info or {}).get("error") or "the page did not define it"
                raise EnvError(f"game {game} did not load: {why}")
            clock = self._clock
            assert clock is not None
            if not paused and rate != 1.0:
                await clock.accelerate(rate)
            try:
                await self.page.evaluate(_START_JS, {"replay": replay, "stop_at": stop_at, "stepped": paused})
            except PlaywrightError as exc:
                first = (exc.message or str(exc)).strip().splitlines()[0][:300]
                if "replay" in first:
                    raise GameParamsError(f"game_start: {first}") from None
                raise
            return info  # type: ignore[no-any-return]

        info = self._run(go, timeout=NAV_TIMEOUT_MS / 1000 + 10, what="game_start")
        tick_ms = float(info["tick_ms"])
        quantum = step_ms if step_ms is not None else tick_ms
        run = GameRun(game=game, seed=seed, tick_ms=tick_ms, quantum_ms=quantum, stepped=paused)
        self._game = run
        quantum = run.step_ms
        return {
            "game": game,
            "seed": seed,
            "url": url,
            "width": info["width"],
            "height": info["height"],
            "tick_ms": tick_ms,
            "step_ms": quantum,
            "paused": paused,
            "rate": None if paused else rate,
        }

    def _call_game_state(self, _params: dict[str, Any]) -> dict[str, Any]:
        run = self._game
        if run is None:
            raise GameParamsError("game_state: no game is running here (call game_start first)")

        async def go() -> Any:
            try:
                return await self.page.evaluate(_STATE_JS)
            except PlaywrightError as exc:
                if self.page.is_closed() or "context was destroyed" not in exc.message:
                    raise
                return None

        state = self._run(go, what="game_state")
        if not isinstance(state, dict) or state.get("game") != run.game:
            # The page is no longer the game (it cannot be left by playing, but say so, and score 0).
            return {"game": run.game, "seed": run.seed, "score": 0, "over": True, "tick": 0, "view": None,
                    "inputs": [], "reason": f"the page left the game: now at {self.page.url}"}  # fmt: skip
        return state

    def _call_game_clock(self, params: dict[str, Any]) -> dict[str, Any]:
        """Switch the running game between stepped (paused=true: time per action) and running on the page
        clock at `rate` (a person playing in real time, or slowed)."""
        run = self._game
        if run is None:
            raise GameParamsError("game_clock: no game is running here (call game_start first)")
        paused = params.get("paused", True)
        if not isinstance(paused, bool):
            raise GameParamsError("game_clock: paused must be true or false")
        rate = _number(params, "rate", 1.0, 0, 100)

        async def go() -> Any:
            clock = self._clock
            assert clock is not None
            if paused:
                await self.page.evaluate(_CLOCK_JS, {"stepped": True})
                await clock.realtime()
            else:
                if rate != 1.0:
                    await clock.accelerate(rate)
                else:
                    await clock.realtime()
                await self.page.evaluate(_CLOCK_JS, {"stepped": False})

        self._run(go, what="game_clock")
        run.stepped, run.carry_ms = paused, 0.0
        return {"game": run.game, "paused": paused, "rate": None if paused else rate, "step_ms": run.step_ms}

    def _game_stepped(self) -> bool:
        """Whether the page plays a stepped game (its actions cost game time, not page time)."""
        return self._game is not None and self._game.stepped

    async def _game_quantum(self, action: A.Action) -> None:
        """After an action on a stepped game, its ticks for the run's step (a wait: for the wait)."""
        run = self._game
        if run is None or not run.stepped:
            return
        ms = float(action.seconds) * 1000 if isinstance(action, A.Wait) else run.quantum_ms
        ticks = run.ticks_for(ms)
        if ticks:
            await self.page.evaluate(_ADVANCE_JS, ticks)

    def _game_clear(self) -> None:
        """The page is changing: no game runs on it any more."""
        self._game = None
