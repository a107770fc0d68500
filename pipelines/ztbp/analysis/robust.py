"""Verdicts a reader can trust from few pairs of blocks: a family of measures controlled together (Holm), an
estimate one outlier pair cannot swing (the median of the pair differences; Hodges–Lehmann with its
distribution-free interval) and the number of pairs the noise measured asks for. Pure: numbers in, numbers out.

- Holm's step-down adjustment: with m measures each tested at 5 %, a device that changed nothing gets some
  "faster" or "slower" in up to 1 − 0.95^m of the loops (30 % for seven independent measures); Holm's adjusted
  p-values keep that family-wise rate at 5 % whatever the measures' dependence.
- Hodges–Lehmann: the median of the Walsh averages (d_i + d_j) / 2, i ≤ j, of the pair differences; its interval
  inverts the Wilcoxon signed-rank test (exact null distribution of W+), valid for any symmetric noise, so one
  wild block moves it by one rank, not by its size. With n pairs its confidence cannot exceed 1 − 2^(1−n): a 95 %
  interval needs 6 pairs (5 give at most 93.75 %, 3 at most 75 %).
- The pairs a target change needs: the paired t test's power from the noncentral t distribution, with the standard
  deviation of the pair differences measured, at the level a single true effect must pass in Holm's family
  (alpha / m).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

#: the most pairs pairs_needed looks at
MAX_PAIRS = 10_000


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's adjusted p-values, in the order given: sorted ascending, p_(k) × (m − k + 1), made non-decreasing,
    capped at 1."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def signed_rank_cdf(n: int) -> np.ndarray:
    """P(W+ ≤ k), k = 0 .. n(n+1)/2, of the Wilcoxon signed-rank statistic of n untied pairs under no effect."""
    p = np.zeros(n * (n + 1) // 2 + 1)
    p[0] = 1.0
    for rank in range(1, n + 1):  # each rank joins W+ with probability 1/2
        shifted = np.zeros_like(p)
        shifted[rank:] = p[:-rank]
        p = (p + shifted) / 2
    return np.cumsum(p)


def min_pairs(alpha: float) -> int:
    """The fewest pairs whose distribution-free (signed-rank) interval reaches 1 − alpha: 2^(1−n) ≤ alpha."""
    return max(2, math.ceil(1 - math.log2(alpha)))


def hodges_lehmann(d: Sequence[float], alpha: float) -> dict[str, Any]:
    """The Hodges–Lehmann estimate of the pair differences `d` and its distribution-free interval at 1 − alpha (the
    confidence reached, just above it: the statistic is discrete). None for the interval, with the most these pairs
    can reach, when there are too few."""
    x = np.asarray(d, dtype=float)
    n = x.size
    i, j = np.triu_indices(n)
    walsh = np.sort((x[i] + x[j]) / 2)
    est = float(np.median(walsh))
    cdf = signed_rank_cdf(n)
    inside = np.nonzero(cdf <= alpha / 2)[0]
    if inside.size == 0:
        best = 1 - 2 * float(cdf[0])
        return {"estimate": est, "ci": None, "level": None,
                "note": f"{n} pairs cannot give a {100 * (1 - alpha):g} % distribution-free interval (at most "
                        f"{100 * best:.2f} %; {min_pairs(alpha)} pairs are needed)"}
    c = int(inside[-1])
    return {"estimate": est, "ci": [float(walsh[c]), float(walsh[walsh.size - 1 - c])],
            "level": round(1 - 2 * float(cdf[c]), 4), "note": None}


def pairs_needed(sd: float, change: float, alpha: float, power: float) -> int | None:
    """The fewest pairs (≥ 2) for a paired t test at two-sided level `alpha` to find a true mean difference of
    `change` with probability `power`, when the pair differences have standard deviation `sd`; None past
    MAX_PAIRS."""
    from scipy import stats

    if change <= 0:
        raise ValueError("the change to find must be positive")
    if sd <= 0:
        return 2
    # from the normal approximation (which needs fewer) up, a window of candidates at a time: the power rises
    # with the pairs
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    lo = max(2, int((z * sd / change) ** 2) - 2)
    while lo <= MAX_PAIRS:
        n = np.arange(lo, min(lo + 64, MAX_PAIRS + 1))
        q = stats.t.ppf(1 - alpha / 2, n - 1)
        nc = change / sd * np.sqrt(n)
        got = stats.nct.sf(q, n - 1, nc) + stats.nct.cdf(-q, n - 1, nc) >= power
        if got.any():
            return int(n[np.argmax(got)])
        lo = int(n[-1]) + 1
    return None
