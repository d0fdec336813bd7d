"""The games suite's figures: each game's reference player and doing nothing on seeds 1..5, and how
much faster than real time a recorded game replays on an accelerated page clock.

    python bench/games_bench.py [--games snake,2048] [--seeds 1,2,3,4,5] [--rate 8]

Per game it prints the reference player's raw and normalised score per seed and doing nothing's
score; then it replays the reference player's recorded input log (game_state "inputs") of the first
seed on a fresh page, once with the page clock accelerated (`rate`) and once at real time, each up to
the tick the recorded game reached (`stop_at`), and prints the wall seconds of each for the same game
time, their ratio (target >= 4x) and whether the final score, tick and view are identical to the
recorded game's (determinism).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_core.agent import run_episode
from agent_core.policies import make_policy
from agent_core.suites import games
from agent_core.tasks.runner import prepare
from agent_core.tasks.spec import parse_task
from sandbox_workers.agent_env import SandboxEnv
from sandbox_workers.base import Profile
from sandbox_workers.providers.browser import BrowserProvider


def replay(browser: BrowserProvider, played: dict[str, Any], rate: float) -> tuple[float, dict[str, Any]]:
    """Wall seconds to replay `played` up to its tick at `rate` (page clock), and the state it ends in."""
    params = {"game": played["game"], "seed": played["seed"], "paused": False, "rate": rate,
              "replay": played["inputs"], "stop_at": played["tick"]}  # fmt: skip
    browser.call("game_start", params)
    t0 = time.perf_counter()
    state = browser.call("game_state", {})
    end = (played["tick"], len(played["inputs"]))  # the inputs of the last tick apply at its boundary
    while not state["over"] and (state["tick"], len(state["inputs"])) < end:
        time.sleep(0.01)
        state = browser.call("game_state", {})
    wall = time.perf_counter() - t0
    return wall, state


def main() -> None:
    """Play, score and replay each game; print one block of figures per game."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--games", default=",".join(games.GAME_NAMES))
    ap.add_argument("--seeds", default="1,2,3,4,5")
    ap.add_argument("--rate", type=float, default=8.0)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    root = Path(tempfile.mkdtemp(prefix="games-bench-"))
    root.chmod(0o755)
    profile = Profile(name="b", provider="browser")
    browser = BrowserProvider(sandbox_id="games-bench", profile=profile, root=root / "sb")
    browser.start()
    env = SandboxEnv(browser, platform="browser")
    try:
        for name in args.games.split(","):
            try:
                info = games.info(name)
            except games.UnknownGame as exc:
                print(f"{name}: skipped ({exc})")
                continue
            spec = parse_task(games.task_doc(name))
            raws, rewards, noop, first = [], [], [], None
            for seed in seeds:
                out = run_episode(env, make_policy("oracle"), prepare(spec, env, seed=seed))
                state = env.call("game_state")
                raws.append(state["score"])
                rewards.append(out.reward)
                first = first or state
                out = run_episode(env, make_policy("noop"), prepare(spec, env, seed=seed))
                noop.append(out.reward)
            print(f"{name}: target {info.target:g}, baseline {info.baseline:g}")
            print(f"  reference raw {raws} normalised {[round(r, 2) for r in rewards]} (steps cap 40)")
            print(f"  doing nothing normalised {noop}")
            assert first is not None
            fast_s, fast = replay(browser, first, args.rate)
            real_s, real = replay(browser, first, 1.0)
            same = all(s[k] == first[k] for s in (fast, real) for k in ("score", "tick", "view", "over"))
            ratio = real_s / fast_s if fast_s > 0 else float("inf")
            print(
                f"  replay of seed {seeds[0]}: {first['tick']} ticks, {len(first['inputs'])} inputs; "
                f"rate {args.rate:g}: {fast_s:.2f} s, real time: {real_s:.2f} s, speed-up {ratio:.1f}x; "
                f"identical score, tick and view: {same}"
            )
    finally:
        browser.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
