"""DART's curation: rollouts and step caps that follow success, the pool, step and version filters."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from agent_core.rl import Curator, ExperiencePool, group_by_task, latest_k, top_entropy_mask, within_lag
from agent_core.rl.episodes import RLEpisode, RLTurn


def curator(**overrides: int) -> Curator:
    kwargs = {"min_rollouts": 2, "max_rollouts": 8, "window": 4, "max_steps": 15, "length_margin": 2}
    kwargs |= {"min_steps_cap": 4} | overrides
    return Curator(**kwargs)


def episode(task: str, reward: float, *, version: int = 0, seed: int = 0) -> RLEpisode:
    turn = RLTurn(
        messages=[{"role": "user", "content": [{"type": "text", "text": f"do {task}"}]}],
        a11y="[1] button 'OK'",
        response_ids=(5, 6, 7),
        rollout_logprobs=(-0.5, -1.0, -0.25),
        parsed=True,
    )
    return RLEpisode(
        task_id=task,
        seed=seed,
        reward=reward,
        turns=(turn,),
        policy_version=version,
        episode_id=f"{task}-{seed}",
    )


def test_unseen_task_gets_the_most_rollouts_and_the_full_step_budget() -> None:
    c = curator()
    assert c.success_rate("t") is None
    assert c.rollouts("t") == 8
    assert c.length_cap("t") == 15


def test_rollouts_and_step_cap_follow_recent_success() -> None:
    c = curator()
    c.record("t", success=False, steps=15)
    c.record("t", success=False, steps=15)
    assert c.success_rate("t") == 0.0
    assert (c.rollouts("t"), c.length_cap("t")) == (8, 15)  # no success yet: everything
    c.record("t", success=True, steps=5)
    # rate 1/3: 8 - 6 * 1/3 = 6; cap = 5 + 2 = 7
    assert (c.rollouts("t"), c.length_cap("t")) == (6, 7)
    c.record("t", success=True, steps=9)
    # rate 2/4: 8 - 3 = 5; cap = longest success 9 + 2 = 11
    assert (c.rollouts("t"), c.length_cap("t")) == (5, 11)
    for _ in range(4):
        c.record("t", success=True, steps=1)
    # only the last 4 count: rate 1 -> min_rollouts; cap = max(min_steps_cap 4, 1 + 2) = 4
    assert c.success_rate("t") == 1.0
    assert (c.rollouts("t"), c.length_cap("t")) == (2, 4)
    c.record("other", success=True, steps=40)
    assert c.length_cap("other") == 15  # never above max_steps
    assert c.rollouts("t") == 2  # tasks are independent


def test_rollouts_round_half_up() -> None:
    c = curator()
    for ok in (True, False, False, False):
        c.record("t", success=ok, steps=3)
    assert c.rollouts("t") == 7  # 8 - 6 * 0.25 = 6.5 -> 7


def test_curator_state_round_trips_through_json() -> None:
    c = curator()
    for ok, steps in ((True, 3), (False, 15), (True, 6)):
        c.record("a", success=ok, steps=steps)
    c.record("b", success=False, steps=15)
    restored = curator()
    restored.load_state_dict(json.loads(json.dumps(c.state_dict())))
    for task in ("a", "b", "never"):
        assert restored.success_rate(task) == c.success_rate(task)
        assert restored.rollouts(task) == c.rollouts(task)
        assert restored.length_cap(task) == c.length_cap(task)


def test_curator_refuses_inconsistent_settings() -> None:
    with pytest.raises(ValueError, match="min_rollouts"):
        curator(min_rollouts=9)
    with pytest.raises(ValueError, match="window"):
        curator(window=0)


def test_pool_keeps_the_newest_successes_per_task_instance() -> None:
    pool = ExperiencePool(2, max_age=2)
    pool.add(episode("a", 0.0, seed=1))
    assert len(pool) == 0
    for _ in range(3):
        pool.add(episode("a", 1.0, seed=2))
    pool.add(episode("a", 1.0, seed=3))
    pool.add(episode("b", 1.0, seed=2))
    assert len(pool) == 4  # a#2: its newest 2; a#3; b#2
    pool.add(RLEpisode("a", 4, 1.0, (), 0))  # a success with no turn teaches nothing: not pooled
    assert len(pool) == 4


def test_pool_injects_a_success_into_an_all_failed_group_of_its_instance() -> None:
    pool = ExperiencePool(2, max_age=2)
    pool.add(episode("a", 1.0, seed=7, version=0))
    pool.add(episode("a", 1.0, seed=7, version=1))
    group = [episode("a", 0.0, seed=7), episode("a", 0.0, seed=7), episode("a", 0.5, seed=7)]
    out, injected = pool.inject(group)
    assert injected
    assert out[:2] == group[:2]
    assert out[2].seed == 7 and out[2].injected and out[2].success  # the newest pooled success
    assert out[2].policy_version == 1
    assert group[2].reward == 0.5  # the caller's list is left alone
    # an injected episode is not pooled a second time
    pool.add(out[2])
    assert len(pool) == 2


def test_pool_leaves_groups_alone_when_it_should() -> None:
    pool = ExperiencePool(2, max_age=2)
    pool.add(episode("a", 1.0))
    mixed = [episode("a", 0.0), episode("a", 1.0, seed=1)]
    assert pool.inject(mixed) == (mixed, False)  # a success in the group already
    other = [episode("b", 0.0)]
    assert pool.inject(other) == (other, False)  # nothing pooled for b
    assert pool.inject([]) == ([], False)
    empty = ExperiencePool(0, max_age=2)
    empty.add(episode("a", 1.0))
    assert len(empty) == 0


def test_pool_state_round_trips_through_json_as_episodes() -> None:
    pool = ExperiencePool(3, max_age=2)
    pool.add(episode("a", 1.0, seed=1, version=4))
    pool.add(episode("b", 1.0, seed=2, version=5))
    restored = ExperiencePool(3, max_age=2)
    restored.load_state_dict(json.loads(json.dumps(pool.state_dict())))
    assert len(restored) == 2
    out, injected = restored.inject([episode("a", 0.0, seed=1)])
    assert injected
    assert isinstance(out[0], RLEpisode) and isinstance(out[0].turns[0], RLTurn)
    expected = episode("a", 1.0, seed=1, version=4)
    assert out[0] == RLEpisode(**{**expected.__dict__, "injected": True})


def test_top_entropy_mask_keeps_the_highest() -> None:
    ent = [0.1, 0.5, 0.3, 0.5, 0.2]
    assert top_entropy_mask(ent, 0.4) == [False, True, False, True, False]  # ceil(2.0) = 2
    assert top_entropy_mask(ent, 0.5) == [False, True, True, True, False]  # ceil(2.5) = 3
    assert top_entropy_mask(ent, 0.8) == [False, True, True, True, True]  # drops the lowest
    assert top_entropy_mask([1.0, 1.0, 1.0], 0.5) == [True, True, False]  # ties: lower index first
    assert sum(top_entropy_mask([float(i) for i in range(10)], 0.7)) == 7  # not 8 from 7.000000000000001
    assert top_entropy_mask([], 0.8) == []
    assert top_entropy_mask(ent, 1.0) == [True] * 5


def test_latest_k_keeps_the_k_newest_versions() -> None:
    eps = [SimpleNamespace(policy_version=v, task_id="t") for v in (0, 1, 2, 3, 3)]
    kept = latest_k(eps, current_version=3, k=2, versions_seen=[0, 1, 2, 3])
    assert [e.policy_version for e in kept] == [2, 3, 3]
    # the current version counts even before it was seen
    kept = latest_k(eps, current_version=2, k=2, versions_seen=[0, 1])
    assert [e.policy_version for e in kept] == [1, 2]


def test_within_lag() -> None:
    assert within_lag(3, 4, 1)
    assert not within_lag(2, 4, 1)
    assert within_lag(4, 4, 0)
    assert not within_lag(3, 4, 0)


def test_group_by_task_preserves_order() -> None:
    eps = [SimpleNamespace(task_id=t, n=i) for i, t in enumerate("abab c".replace(" ", ""))]
    groups = group_by_task(eps)
    assert list(groups) == ["a", "b", "c"]
    assert [e.n for e in groups["a"]] == [0, 2]
    assert [e.n for e in groups["b"]] == [1, 3]
