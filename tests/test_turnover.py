"""analysis/turnover.py: how long an A/B block must be for a cache to turn over after the configuration switches."""

from __future__ import annotations

import numpy as np
import pytest

from ztbp.analysis.turnover import BLOCK_FACTOR, settle_point, thirds, turnover
from ztbp.errors import ZtbpError

ZONE_PAGES = 8192
HOT = [1, 7, 11, 15, 19]


def draw(rng: np.random.Generator, n: int, share: float, zones: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """paper80-like reads: `share` of them uniform over five hot zones' pages, the rest over the other zones."""
    on_hot = rng.random(n) < share
    cold = [z for z in range(zones) if z not in HOT]
    pages = np.where(on_hot, rng.choice(HOT, n) * ZONE_PAGES, rng.choice(cold, n) * ZONE_PAGES)
    ids = (pages + rng.integers(0, ZONE_PAGES, n)).astype(np.int64)
    return ids, np.isin(ids // ZONE_PAGES, HOT)


def test_settle_point_by_hand() -> None:
    # steady = mean of the second half = 0.5; windows of 4: 0.0, 0.25, 0.5, 0.5 -> first near window is the third
    hits = np.array([0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 1, 0, 1], dtype=np.bool_)
    s = settle_point(hits, 4, 0.01)
    assert s.steady == 0.5
    # the tolerance widens to two standard errors of a window (2 * sqrt(0.25 / 4) = 0.5): 0.0 is within it
    assert s.settle_reads == 0
    big = np.repeat(hits, 1000)  # windows of 4,000: 0.0, 0.0, 0.25, 0.25 then 0.5 ... (tolerance 0.016)
    assert settle_point(big, 4000, 0.01).settle_reads == 8000


def test_a_pass_that_never_settles_says_none() -> None:
    # windows of 1,000: eight of 0.0, then 1.0, 0.0; the second half's mean 0.2 is no window's (tolerance 0.025)
    hits = np.r_[np.zeros(8000), np.ones(1000), np.zeros(1000)].astype(np.bool_)
    assert settle_point(hits, 1000, 0.01).settle_reads is None
    step = np.r_[np.zeros(3000), np.ones(7000)].astype(np.bool_)  # settles where the ones start
    assert settle_point(step, 1000, 0.01).settle_reads == 3000


@pytest.mark.parametrize("share", [0.8, 0.6])
def test_priority_caches_gain_and_plain_lru_does_not(share: float) -> None:
    rng = np.random.default_rng(7)
    passes = tuple(draw(rng, 120_000, share) for _ in range(3))
    fork, zone, lru = (turnover(passes, 16_384, p) for p in ("fork", "zone_lru", "lru"))
    for r in (fork, zone):
        assert r["gain"] > 0.04  # protected hot pages: several points of hit ratio
        assert r["settle_on_reads"] is not None and r["settle_on_reads"] > 0
        assert r["block_reads"] is None or r["block_reads"] >= BLOCK_FACTOR * r["settle_on_reads"]
    # the negative control: plain LRU ignores the configuration, so nothing moves when it switches
    assert abs(lru["gain"]) < 0.01 and lru["settle_on_reads"] == 0 and lru["settle_off_reads"] == 0


def test_no_reads_on_the_listed_zones_no_gain() -> None:
    rng = np.random.default_rng(3)
    passes = tuple(draw(rng, 60_000, 0.0) for _ in range(3))
    for p in ("fork", "zone_lru", "lru"):
        assert abs(turnover(passes, 16_384, p)["gain"]) < 0.01


def test_thirds_cuts_one_trace_in_order() -> None:
    ids = np.arange(10, dtype=np.int64)
    parts = thirds(ids, ids % 2 == 0)
    assert [p[0].tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert parts[1][1].tolist() == [False, True, False]


def test_bad_arguments_are_one_clear_error() -> None:
    ids = np.arange(20_000, dtype=np.int64)
    ok = (ids, ids < 0)
    with pytest.raises(ZtbpError, match="one of fork"):
        turnover((ok, ok, ok), 100, "arc")
    with pytest.raises(ZtbpError, match="positive size"):
        turnover((ok, ok, ok), 0, "lru")
    with pytest.raises(ZtbpError, match="three passes"):
        turnover((ok, ok), 100, "lru")
    with pytest.raises(ZtbpError, match="two windows"):
        turnover((ok, ok, ok), 100, "lru", window=15_000)
