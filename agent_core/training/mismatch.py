"""The engine/trainer log-prob mismatch of an RL iteration, by turn index (as verl's rollout-probs diff).

For each token the trainer trains on, |π_old − π_rollout|: π_old is the trainer's log-probability of
the sampled token (its current weights, on the prompt it rebuilt and checked against the engine's
stamp), π_rollout the one the engine recorded. Measured only on turns the current version sampled:
there it is the engine/trainer gap itself (kernels, dtype, the LoRA path), while a rollout a version
behind adds the policy's own change, reported apart (``rl/logprob_mismatch_lagged_mean``, with the share of
tokens it holds). Per iteration: the mean and max over its tokens, and by the turn's index in its
episode (``turn_<k>``; the last bucket, ``turn_9+``, holds every later turn).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

TURNS = 9
"""Turn indices told apart; later turns share the last bucket (``turn_9+``)."""


class Mismatch:
    """|π_old − π_rollout| of the iteration's tokens so far, by turn index."""

    def __init__(self) -> None:
        self.by_turn: dict[int, list[float]] = defaultdict(list)
        self.lagged: list[float] = []

    def note(
        self, turn_index: int, old: Sequence[float], rollout: Sequence[float], *, on_policy: bool = True
    ) -> None:
        """One sample's tokens (`old`: the trainer's log-probs, `rollout`: the engine's); `on_policy`:
        the version that sampled them is the one scoring them."""
        gaps = [abs(a - b) for a, b in zip(old, rollout, strict=False)]
        if not on_policy:
            self.lagged.extend(gaps)
        elif gaps:
            self.by_turn[min(max(turn_index, 0), TURNS)].extend(gaps)

    def report(self, metrics: dict[str, float], *, rebuild_differs: int = 0) -> None:
        """The iteration's figures into `metrics` (rl/logprob_mismatch_mean, _max, /turn_<k> and
        _max/turn_<k>; rl/rebuild_differs: turns so far whose rebuilt prompt was not the engine's);
        then start the next iteration's."""
        gaps = [g for by_turn in self.by_turn.values() for g in by_turn]
        if gaps:
            metrics["rl/logprob_mismatch_mean"] = sum(gaps) / len(gaps)
            metrics["rl/logprob_mismatch_max"] = max(gaps)
            for k, by_turn in sorted(self.by_turn.items()):
                label = f"{k}+" if k == TURNS else str(k)
                metrics[f"rl/logprob_mismatch/turn_{label}"] = sum(by_turn) / len(by_turn)
                metrics[f"rl/logprob_mismatch_max/turn_{label}"] = max(by_turn)
        if self.lagged:
            metrics["rl/logprob_mismatch_lagged_mean"] = sum(self.lagged) / len(self.lagged)
            metrics["rl/logprob_mismatch_lagged_share"] = len(self.lagged) / (len(self.lagged) + len(gaps))
        if rebuild_differs:
            metrics["rl/rebuild_differs"] = float(rebuild_differs)
        self.by_turn.clear()
        self.lagged.clear()
