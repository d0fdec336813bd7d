"""The dashboards' figures in the Prometheus text format, read through the same selectors.

One collector per request on a fresh registry: every scrape reads the database (and the broker)
now, and nothing is kept in process memory, so any web process answers the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from webapp.dashboards.health import COUNTERS, health_now
from webapp.dashboards.stats import annotation_throughput, success_by_policy_and_task, success_over_time
from webapp.episodes.models import Episode

RATIO_WINDOW_HOURS = 24


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _add(metric: GaugeMetricFamily, labels: list[str], value: Any) -> None:
    """Add a sample, leaving out the unknown (None) ones: no value is better than a made-up one."""
    if value is not None:
        metric.add_metric(labels, float(value))


def latest_round() -> dict[str, Any] | None:
    """The latest closed flywheel round's number, P(V=1) and episode count, or None."""
    try:
        from webapp.datasets.models import FlywheelIteration
    except ImportError:  # pragma: no cover (the datasets app is part of the project)
        return None
    closed = (
        FlywheelIteration.objects.filter(status=FlywheelIteration.Status.FINISHED).order_by("-number").first()
    )
    if closed is None:
        return None
    stats = closed.stats if isinstance(closed.stats, dict) else {}
    p_v1, episodes = stats.get("p_v1"), stats.get("episodes")
    return {
        "round": closed.number,
        "p_v1": float(p_v1) if isinstance(p_v1, int | float) and not isinstance(p_v1, bool) else None,
        "episodes": int(episodes) if isinstance(episodes, int) and not isinstance(episodes, bool) else None,
    }


class FlywheelCollector(Collector):
    """Episodes, success, environment health, queues, annotation and the latest flywheel round."""

    def collect(self) -> Iterator[Metric]:
        yield from self._episodes()
        yield from self._health()
        yield from self._annotation()
        yield from self._round()

    def _episodes(self) -> Iterator[Metric]:
        running = _gauge("flywheel_episodes_running", "Episodes running now", ["source"])
        counts = dict.fromkeys(("human", "agent", "mixed"), 0)
        for source in Episode.objects.filter(status=Episode.Status.RUNNING).values_list("source", flat=True):
            counts[source] = counts.get(source, 0) + 1
        for source, n in sorted(counts.items()):
            running.add_metric([source], n)
        yield running

        ended = CounterMetricFamily(
            "flywheel_episodes_ended",
            "Ended episodes per task, policy and outcome (success, failure, env_error, aborted), all time",
            labels=["task", "policy", "outcome"],
        )
        for row in success_by_policy_and_task():
            for outcome in ("success", "failure", "env_error", "aborted"):
                ended.add_metric([row["task"], row["policy"], outcome], row[outcome])
        yield ended

        window = success_over_time(bucket="hour", count=RATIO_WINDOW_HOURS)
        by_task = _gauge(
            "flywheel_task_success_ratio",
            f"Successes over attempts (finished, no env_error) per task, last {RATIO_WINDOW_HOURS} h",
            ["task"],
        )
        for row in window["tasks"]:
            _add(by_task, [row["task"]], row["rate"])
        yield by_task
        by_policy = _gauge(
            "flywheel_policy_success_ratio",
            f"Successes over attempts per policy version, last {RATIO_WINDOW_HOURS} h",
            ["policy"],
        )
        for row in window["policies"]:
            _add(by_policy, [row["policy"]], row["rate"])
        yield by_policy

    def _health(self) -> Iterator[Metric]:
        health = health_now()
        up = _gauge("flywheel_sandbox_host_up", "1 if the sandbox host heartbeated recently", ["host"])
        live = _gauge("flywheel_pool_sandboxes", "Live (not stopped) sandboxes", ["host"])
        leased = _gauge("flywheel_pool_leased", "Leased sandboxes", ["host"])
        util_host = _gauge("flywheel_pool_utilisation_ratio", "Leased over live sandboxes per host", ["host"])
        wait = _gauge(
            "flywheel_lease_wait_ms", "Lease wait on the host (recent leases)", ["host", "quantile"]
        )
        reset_host = _gauge(
            "flywheel_reset_latency_ms",
            "Reset latency, n-weighted over the host's sandboxes",
            ["host", "quantile"],
        )
        events = CounterMetricFamily(
            "flywheel_sandbox_events", "Sandbox pool events since the host started", labels=["host", "event"]
        )
        crash = _gauge(
            "flywheel_sandbox_crash_ratio",
            "(start_failed + replaced) over (started + start_failed) since the host started",
            ["host"],
        )
        env_host = _gauge(
            "flywheel_env_error_ratio_by_host", "env_error share of episodes ended in the last 24 h", ["host"]
        )
        for h in health["hosts"]:
            name = h["host"]
            up.add_metric([name], 1.0 if h["alive"] else 0.0)
            live.add_metric([name], h["live"])
            leased.add_metric([name], h["leased"])
            _add(util_host, [name], h["utilisation"])
            _add(wait, [name, "0.5"], h["lease_wait_p50"])
            _add(wait, [name, "0.95"], h["lease_wait_p95"])
            _add(reset_host, [name, "0.5"], h["reset_p50"])
            _add(reset_host, [name, "0.95"], h["reset_p95"])
            for event in COUNTERS:
                events.add_metric([name, event], h[event])
            _add(crash, [name], h["crash_rate"])
            _add(env_host, [name], h["env_error_rate"])
        yield from (up, live, leased, util_host, wait, reset_host, events, crash, env_host)

        p_live = _gauge("flywheel_profile_sandboxes", "Live sandboxes per profile (hosts alive)", ["profile"])
        p_leased = _gauge(
            "flywheel_profile_leased", "Leased sandboxes per profile (hosts alive)", ["profile"]
        )
        p_cap = _gauge("flywheel_profile_capacity", "Most sandboxes per profile (hosts alive)", ["profile"])
        p_util = _gauge(
            "flywheel_profile_utilisation_ratio", "Leased over live sandboxes per profile", ["profile"]
        )
        p_reset = _gauge(
            "flywheel_profile_reset_latency_ms", "Reset latency, n-weighted over the profile's sandboxes",
            ["profile", "quantile"],
        )  # fmt: skip
        p_env = _gauge(
            "flywheel_env_error_ratio_by_profile",
            "env_error share of episodes ended in the last 24 h",
            ["profile"],
        )
        for p in health["profiles"]:
            name = p["profile"]
            p_live.add_metric([name], p["live"])
            p_leased.add_metric([name], p["leased"])
            p_cap.add_metric([name], p["capacity"])
            _add(p_util, [name], p["utilisation"])
            _add(p_reset, [name, "0.5"], p["reset_p50"])
            _add(p_reset, [name, "0.95"], p["reset_p95"])
            _add(p_env, [name], p["env_error_rate"])
        yield from (p_live, p_leased, p_cap, p_util, p_reset, p_env)

        broker = _gauge("flywheel_broker_up", "1 if the Celery broker answered", [])
        broker.add_metric([], 0.0 if health["broker"] != "ok" else 1.0)
        yield broker
        depth = _gauge("flywheel_queue_depth", "Messages waiting in each Celery queue", ["queue"])
        for q in health["queues"]:
            _add(depth, [q["queue"]], q["depth"])
        yield depth

    def _annotation(self) -> Iterator[Metric]:
        data = annotation_throughput(days=1)
        demos = _gauge("flywheel_demonstrations_today", "Demonstrations finished today (UTC)", ["annotator"])
        steps = _gauge("flywheel_demonstration_steps_today", "Steps of those demonstrations", ["annotator"])
        median = _gauge(
            "flywheel_demonstration_median_seconds",
            "Median demonstration duration today (UTC)",
            ["annotator"],
        )
        for row in data["annotators"]:
            demos.add_metric([row["annotator"]], row["demonstrations"])
            steps.add_metric([row["annotator"]], row["steps"])
            _add(median, [row["annotator"]], row["median_seconds"])
        yield from (demos, steps, median)
        decisions = _gauge(
            "flywheel_review_decisions_today",
            "Review decisions today (UTC) per verdict",
            ["reviewer", "verdict"],
        )
        for row in data["reviewers"]:
            for verdict in ("accepted", "rejected", "sent_back"):
                decisions.add_metric([row["reviewer"], verdict], row[verdict])
        yield decisions
        kappa = _gauge(
            "flywheel_reviewer_agreement_kappa",
            "Cohen's kappa of accept/reject between two reviewers (first=all, second=pairs: pooled)",
            ["first", "second"],
        )
        shared = _gauge(
            "flywheel_reviewer_agreement_items", "Trajectories both reviewers decided", ["first", "second"]
        )
        agreement = data["agreement"]["reviews"]
        for p in [*agreement["pairs"], *([agreement["overall"]] if agreement["overall"] else [])]:
            _add(kappa, [p["first"], p["second"]], p["kappa"]["kappa"])
            shared.add_metric([p["first"], p["second"]], p["n"])
        yield from (kappa, shared)

    def _round(self) -> Iterator[Metric]:
        last = latest_round()
        p_v1 = _gauge(
            "flywheel_round_p_v1", "Share of the latest closed round's trajectories judged good", ["round"]
        )
        episodes = _gauge(
            "flywheel_round_episodes", "Episodes in the latest closed flywheel round", ["round"]
        )
        if last is not None:
            _add(p_v1, [str(last["round"])], last["p_v1"])
            _add(episodes, [str(last["round"])], last["episodes"])
        yield from (p_v1, episodes)


def metrics_text() -> bytes:
    """One scrape: the text exposition of a fresh registry holding a FlywheelCollector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FlywheelCollector())
    return generate_latest(registry)
