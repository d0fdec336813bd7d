"""Small rolling latency logs for the host's status page and heartbeats."""

from __future__ import annotations

from collections import defaultdict, deque


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0–100) of `values` by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


class LatencyLog:
    """The last `size` latencies (ms) per operation name."""

    def __init__(self, size: int = 200) -> None:
        self._values: defaultdict[str, deque[float]] = defaultdict(lambda: deque(maxlen=size))

    def add(self, ms: float, op: str = "all") -> None:
        """Record one latency of `op`."""
        self._values[op].append(ms)

    def summary(self) -> dict[str, dict[str, float]]:
        """Per operation: count, p50 and p95 in ms (rounded to 0.1 ms)."""
        out = {}
        for op, values in self._values.items():
            data = list(values)
            out[op] = {
                "n": float(len(data)),
                "p50": round(percentile(data, 50), 1),
                "p95": round(percentile(data, 95), 1),
            }
        return out
