"""Agreement maths on small hand-computed inputs."""

from __future__ import annotations

import pytest

from webapp.reviews.agreement import cohen_kappa, first_error_agreement, pooled, rater_pairs


def test_kappa_of_a_textbook_table() -> None:
    # 50 items: both yes 20, A yes / B no 5, A no / B yes 10, both no 15.
    pairs = [("y", "y")] * 20 + [("y", "n")] * 5 + [("n", "y")] * 10 + [("n", "n")] * 15
    k = cohen_kappa(pairs)
    # p_o = 35/50 = 0.7; p_e = (25*30 + 25*20) / 2500 = 0.5; κ = 0.2 / 0.5 = 0.4
    assert k.n == 50
    assert k.observed == pytest.approx(0.7)
    assert k.expected == pytest.approx(0.5)
    assert k.kappa == pytest.approx(0.4)


def test_perfect_agreement_over_two_classes_is_one() -> None:
    k = cohen_kappa([("accepted", "accepted"), ("rejected", "rejected")])
    assert k.kappa == pytest.approx(1.0)


def test_systematic_disagreement_is_negative() -> None:
    k = cohen_kappa([("a", "r"), ("r", "a")])
    # p_o = 0, p_e = 0.5 -> κ = -1
    assert k.kappa == pytest.approx(-1.0)


def test_kappa_is_undefined_without_shared_items() -> None:
    k = cohen_kappa([])
    assert k.kappa is None and k.n == 0 and "no shared" in k.note


def test_kappa_is_undefined_when_everyone_said_the_same() -> None:
    k = cohen_kappa([(True, True)] * 3)
    assert k.kappa is None
    assert k.observed == 1.0
    assert "undefined" in k.note and "True" in k.note


def test_one_rater_constant_the_other_not_gives_zero() -> None:
    # A always accepts, B accepts 1 of 2: p_o = 0.5, p_e = 1 * 0.5 = 0.5 -> κ = 0.
    k = cohen_kappa([("a", "a"), ("a", "r")])
    assert k.kappa == pytest.approx(0.0)


def test_first_error_exact_rate_and_mean_distance() -> None:
    fe = first_error_agreement([(3, 3), (2, 5), (None, None), (None, 4)])
    assert fe.n == 4
    assert fe.exact == pytest.approx(0.5)  # (3,3) and (None,None)
    assert fe.n_both == 2
    assert fe.mean_abs_diff == pytest.approx(1.5)  # (0 + 3) / 2


def test_first_error_degenerate_cases_say_why() -> None:
    assert first_error_agreement([]).exact is None
    only_none = first_error_agreement([(None, 2), (None, None)])
    assert only_none.mean_abs_diff is None and only_none.n_both == 0 and only_none.note
    assert only_none.exact == pytest.approx(0.5)


def test_rater_pairs_keep_only_shared_items_and_the_last_judgement() -> None:
    triples = [
        ("e1", "bob", "acc"),
        ("e1", "amy", "rej"),
        ("e2", "bob", "acc"),
        ("e2", "cat", "acc"),
        ("e3", "amy", "acc"),  # nobody else judged e3
        ("e1", "bob", "rej"),  # bob changed his mind on e1: the last one counts
    ]
    pairs = {(p.first, p.second): p for p in rater_pairs(triples)}
    assert set(pairs) == {("amy", "bob"), ("bob", "cat")}
    assert pairs[("amy", "bob")].items == ("e1",)
    assert pairs[("amy", "bob")].values == (("rej", "rej"),)
    assert pairs[("bob", "cat")].values == (("acc", "acc"),)
    assert sorted(pooled(pairs.values())) == [("acc", "acc"), ("rej", "rej")]
