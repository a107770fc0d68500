"""The statistics behind verdicts a reader can trust (analysis/robust.py) on known answers: Holm's adjusted
p-values, the signed-rank distribution's table values, Hodges-Lehmann's interval, the pairs a change needs."""

from __future__ import annotations

import pytest

from ztbp.analysis.robust import hodges_lehmann, holm, min_pairs, pairs_needed, signed_rank_cdf


def test_holm_adjusts_in_steps_and_keeps_the_order_given() -> None:
    # sorted 0.01, 0.03, 0.04, 0.5 times 4, 3, 2, 1, made non-decreasing: 0.04, 0.09, 0.09, 0.5
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm([0.3, 0.9]) == pytest.approx([0.6, 0.9]) and holm([0.7, 0.8]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_the_signed_rank_distribution_gives_the_tables_critical_values() -> None:
    # n = 8: P(W+ <= k) = 1, 2, 3, 5, 7 out of 256 for k = 0..4; the two-sided 5 % critical value is 3
    assert [round(p * 256) for p in signed_rank_cdf(8)[:5]] == [1, 2, 3, 5, 7]
    assert signed_rank_cdf(8)[-1] == pytest.approx(1.0)
    assert [min_pairs(a) for a in (0.05, 0.10, 0.01)] == [6, 5, 8]


def test_hodges_lehmann_and_its_distribution_free_interval() -> None:
    got = hodges_lehmann([1, 2, 3, 4, 5, 6, 7, 8], 0.05)
    assert got["estimate"] == 4.5 and got["ci"] == [2.0, 7.0] and got["level"] == 0.9609  # 1 - 2 x 5/256
    # one wild pair moves the estimate by at most a rank, never by its size (here not at: 8 -> 800 keeps 4.5)
    assert hodges_lehmann([1, 2, 3, 4, 5, 6, 7, 800], 0.05)["estimate"] == 4.5
    six = hodges_lehmann([0.1, 0.2, 0.15, 0.12, 0.3, 0.18], 0.05)
    assert six["ci"] == [0.1, 0.3] and six["level"] == 0.9688  # six pairs: min and max, 1 - 2/64
    five = hodges_lehmann([0.1, 0.2, 0.15, 0.12, 0.3], 0.05)
    assert five["ci"] is None and "at most 93.75 %" in five["note"]


def test_pairs_needed_matches_the_paired_t_tests_tables() -> None:
    # effect sizes 1 and 0.5 (change / SD) at 5 %, 80 % power: 10 and 34 pairs
    assert pairs_needed(1.0, 1.0, 0.05, 0.8) == 10 and pairs_needed(2.0, 1.0, 0.05, 0.8) == 34
    assert pairs_needed(0.0, 1.0, 0.05, 0.8) == 2
    assert pairs_needed(50.0, 0.01, 0.05, 0.8) is None  # past the most it looks at
    with pytest.raises(ValueError):
        pairs_needed(1.0, 0.0, 0.05, 0.8)
