"""How many reads a cache needs to turn over after its configuration is switched: the length an A/B block must
have for its hit ratio to be the configuration's and not the previous block's.

A cache switched from off to on (or back) keeps what the other setting put in it; its hit ratio moves to the new
setting's over the next reads, as misses replace what it holds. A block shorter than that measures mostly the
move. `turnover` feeds a cache model three passes of reads — off, then on, then off again — and reads, from the hit
vector of each switched pass, after how many reads the hit ratio of a window first comes within `tolerance`
of that setting's steady value (the mean over the pass's second half).

The policies are the ones the project's devices run (analysis/cache_policies.SegmentedLRU):
- `fork`: NVMeVirt's ZTBP fork, a priority LRU whose entries keep the priority they entered with (with the check
  off every miss enters protected);
- `zone_lru`: the paper's Algorithm 4 (a hit moves the page to the head of the segment of this request);
- `lru`: plain LRU, which the configuration cannot change (its two steady values are the same).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ZtbpError
from .cache_policies import SegmentedLRU

POLICIES = ("fork", "zone_lru", "lru")
#: a block this many times the slower turnover spends at least three quarters of its reads at the new setting
BLOCK_FACTOR = 4


@dataclass(frozen=True)
class Switch:
    """One switched pass: the steady hit ratio it settles at and the reads it took to settle (None: never)."""

    steady: float
    settle_reads: int | None


def _cache(policy: str, capacity: int) -> SegmentedLRU:
    if policy not in POLICIES:
        raise ZtbpError(f"cache policy {policy!r}: one of {', '.join(POLICIES)}")
    if capacity <= 0:
        raise ZtbpError(f"cache of {capacity} entries: give a positive size")
    return SegmentedLRU(capacity, zone_aware=policy != "lru", sticky=policy == "fork")


def settle_point(hits: np.ndarray, window: int, tolerance: float) -> Switch:
    """The steady hit ratio of a pass (mean of its second half) and the reads before the first window of `window`
    reads (windows start at multiples of `window`) whose hit ratio is within `tolerance` of it — the tolerance
    widened to two standard errors of a window's hit ratio where that is larger, so the noise of a window does not
    read as a move."""
    n = hits.size
    if n < 2 * window:
        raise ZtbpError(f"{n:,} reads: a turnover needs at least two windows of {window:,}")
    steady = float(hits[n // 2:].mean())
    tol = max(tolerance, 2 * float(np.sqrt(steady * (1 - steady) / window)))
    k = n // window
    means = hits[:k * window].reshape(k, window).mean(axis=1)
    near = np.flatnonzero(np.abs(means - steady) <= tol)
    return Switch(steady, int(near[0]) * window if near.size else None)


def turnover(passes: tuple[tuple[np.ndarray, np.ndarray], ...], capacity: int, policy: str, window: int = 5_000,
             tolerance: float = 0.01) -> dict[str, Any]:
    """The reads the cache of `policy` and `capacity` entries needs to settle after the configuration is switched
    on and then off again. `passes` is three (ids, hot) pairs of requests in order — dense page ids and the mask of
    the listed zones' reads — read with the configuration off (to warm the cache), on, and off again: three
    stretches of one trace (`thirds`) or three draws of one workload, never the same reads three times (a cache
    that holds the end of one pass would hit the start of its replay). Returns each switch's steady hit ratio and
    settle point, the gain at steady state, and the block length that leaves the move at most a quarter of a block
    (BLOCK_FACTOR × the slower switch; None when a pass never settled)."""
    if len(passes) != 3 or any(ids.size != hot.size for ids, hot in passes):
        raise ZtbpError("a turnover takes three passes (off, on, off), each with one hot flag per request")
    cache = _cache(policy, capacity)

    def off_mask(n: int) -> np.ndarray:  # the fork's misses enter protected while its check is off
        return np.full(n, policy == "fork", dtype=np.bool_)

    (warm, _), (on_ids, on_hot), (off_ids, _) = passes
    cache.feed(warm, off_mask(warm.size))
    on = settle_point(cache.feed_hits(on_ids, on_hot), window, tolerance)
    off = settle_point(cache.feed_hits(off_ids, off_mask(off_ids.size)), window, tolerance)
    slower = None if on.settle_reads is None or off.settle_reads is None else max(on.settle_reads,
                                                                                  off.settle_reads)
    return {"policy": policy, "capacity": capacity, "requests": [int(ids.size) for ids, _ in passes],
            "window": window, "tolerance": tolerance, "steady_off": round(off.steady, 4),
            "steady_on": round(on.steady, 4), "gain": round(on.steady - off.steady, 4),
            "settle_on_reads": on.settle_reads, "settle_off_reads": off.settle_reads,
            "block_reads": None if slower is None else max(window, BLOCK_FACTOR * slower)}


def thirds(ids: np.ndarray, hot: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """A trace cut into three consecutive passes for `turnover`."""
    cut = [0, ids.size // 3, 2 * ids.size // 3, ids.size]
    return tuple((ids[a:b], hot[a:b]) for a, b in zip(cut, cut[1:], strict=False))
