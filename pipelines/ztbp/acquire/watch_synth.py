"""Synthetic reads for `ztbp watch`: start LBAs drawn hot, Zipf or uniform, and a replay of phases of them as the
probe's batches. The session warms its analysis up on them (control/watch.warm_up); the tests and the watch
benchmark (pipelines/benchmarks/bench_watch.py) feed sessions with them.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import numpy as np
import polars as pl

from ..errors import ZtbpError
from ..io.probe_lines import BATCH_LINES, Batch


def synthetic_slba(kind: str, n: int, meta: dict[str, Any], rng: np.random.Generator, hot: tuple[int, ...] = (),
                   hot_share: float = 0.8, zipf: float = 0.9) -> np.ndarray:
    """Start LBAs of n one-block reads: "hot" (hot_share of them on the zones `hot`, the rest uniform), "zipf"
    (pages ranked by a Zipf law scattered over the device: no hot zone) or "uniform"."""
    zl, nz = meta["zone_size_lba"], meta["nr_zones"]
    if kind == "hot":
        on = rng.random(n) < hot_share
        zone = np.where(on, np.asarray(hot, dtype=np.int64)[rng.integers(0, len(hot), n)], rng.integers(0, nz, n))
        return zone * zl + rng.integers(0, zl, n)
    if kind == "zipf":
        span = zl * nz
        ranks = np.minimum(rng.zipf(1 + zipf, n) - 1, span - 1) if zipf > 0 else rng.integers(0, span, n)
        return scattered(span)[ranks]
    if kind == "uniform":
        return rng.integers(0, zl * nz, n)
    raise ZtbpError(f"synthetic phase {kind!r}: hot, zipf or uniform")


@lru_cache(maxsize=4)
def scattered(span: int) -> np.ndarray:
    """Where the Zipf pattern's page of each popularity rank lies: one fixed permutation of the device's LBAs, made
    once per device (drawing it for every batch cost 1.8 µs a read, more than the session's own pipeline)."""
    perm = np.random.default_rng(12345).permutation(span)
    perm.flags.writeable = False
    return perm


def replay(phases: list[tuple[str, int, tuple[int, ...]]], meta: dict[str, Any], seed: int = 0,
           batch: int = BATCH_LINES, rate: float = 100_000.0) -> Iterator[Batch]:
    """A synthetic stream of one-block reads: phases of (kind, commands, hot zones), `rate` commands a second."""
    rng = np.random.default_rng(seed)
    t = 0
    step = int(1e9 / rate)
    for kind, n, hot in phases:
        for lo in range(0, n, batch):
            m = min(batch, n - lo)
            slba = synthetic_slba(kind, m, meta, rng, hot)
            ts = t + step * np.arange(m, dtype=np.uint64)
            t += step * m
            yield Batch(pl.DataFrame({"ts_ns": ts, "lat_ns": np.full(m, 100_000, dtype=np.uint64),
                                      "op": pl.repeat("read", m, eager=True), "slba": slba.astype(np.uint64),
                                      "nlb": np.ones(m, dtype=np.uint32)}))
