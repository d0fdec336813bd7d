"""The paired statistics of the RL evaluation protocol, against hand computations."""

from __future__ import annotations

import math
import statistics

import pytest

from agent_core.rl.evaluation import mean_success, paired, per_task


def _items(values: dict[str, list[float]]) -> dict[tuple[str, int], float]:
    return {(task, s): v for task, vs in values.items() for s, v in enumerate(vs)}


def test_mean_success_weighs_every_task_alike_whatever_its_number_of_seeds():
    outcomes = _items({"a": [1, 1, 1, 1], "b": [0, 0]})
    assert mean_success(outcomes) == 0.5  # not 4/6
    assert per_task(outcomes) == {"a": 1.0, "b": 0.0}


def test_paired_difference_mean_and_standard_error_by_hand():
    sft = [
        _items({"a": [0, 1], "b": [0, 0]}),
        _items({"a": [1, 1], "b": [0, 0]}),
        _items({"a": [0, 0], "b": [0, 1]}),
    ]
    rl = [
        _items({"a": [1, 1], "b": [0, 1]}),
        _items({"a": [1, 1], "b": [1, 0]}),
        _items({"a": [0, 1], "b": [0, 1]}),
    ]
    result = paired(sft, rl, resamples=400)
    # per seed: (1 + .5)/2 - (.5 + 0)/2 = .5; (1 + .5)/2 - (1 + 0)/2 = .25; (.5 + .5)/2 - (0 + .5)/2 = .25
    assert result.per_seed == pytest.approx((0.5, 0.25, 0.25))
    assert result.mean == pytest.approx(1 / 3)
    assert result.se == pytest.approx(statistics.stdev([0.5, 0.25, 0.25]) / math.sqrt(3))
    assert result.ci_low <= result.mean <= result.ci_high
    assert result.beats(2.0) == (result.mean > 2 * result.se)


def test_identical_arms_do_not_beat_each_other_and_noise_is_not_a_win():
    arm = [_items({"a": [0, 1, 1, 0], "b": [1, 0, 0, 1]}) for _ in range(3)]
    same = paired(arm, arm, resamples=200)
    assert same.mean == 0 and same.se == 0 and not same.beats()
    assert (same.ci_low, same.ci_high) == (0, 0)
    # one seed better, one worse: the mean is inside its noise
    a = [_items({"a": [0, 0]}), _items({"a": [1, 1]})]
    b = [_items({"a": [1, 1]}), _items({"a": [0, 0]})]
    noisy = paired(a, b, resamples=200)
    assert noisy.mean == 0 and not noisy.beats() and noisy.ci_low < 0 < noisy.ci_high


def test_a_single_training_seed_never_claims_a_win():
    result = paired([_items({"a": [0, 0]})], [_items({"a": [1, 1]})], resamples=50)
    assert result.mean == 1 and result.se == 0 and not result.beats()


def test_arms_on_different_items_are_refused_not_silently_paired():
    with pytest.raises(ValueError, match="different test items"):
        paired([_items({"a": [0, 1]})], [_items({"a": [0]})])
    with pytest.raises(ValueError, match="other items"):
        paired([_items({"a": [0, 1]}), _items({"b": [0, 1]})], [_items({"a": [0, 1]}), _items({"b": [0, 1]})])
    with pytest.raises(ValueError, match="same number"):
        paired([_items({"a": [0]})], [])
