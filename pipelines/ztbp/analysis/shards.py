"""SHARDS-style spatially sampled cache simulation, for every policy of analysis/cache_policies.py.

SHARDS (Waldspurger et al., FAST '15) samples by *page*, not by request: page p is kept when hash(p) mod 2^24 < rate
* 2^24, so every request of a sampled page is kept and every request of an unsampled page is dropped — the reuse
pattern of each kept page is intact. The sampled trace is simulated with the cache scaled by the same rate
(round(capacity * rate), at least one page), and its hit ratio estimates the full trace's. This module runs every
policy (lru, zone_lru, static_best, belady) on the sampled trace with the simulator's own policy objects
(analysis/cache_policies.py), and `compare` reports the error against the exact figures and the speed-up. The rate
is fixed (the "fixed-rate" SHARDS). Beside the plain estimate, each result carries SHARDS_adj (Waldspurger et al.,
FAST '15, section 4.3): the sample holds N_s requests where N × R were expected, and the difference is counted as
hits (the first bucket of the reuse-distance histogram), i.e. hit_adj = 1 − misses_s / (N × R) — it removes the
error of having drawn a few too many or too few requests, most of it when one heavily read page is in or out of the
sample. The hash is splitmix64's finaliser with a seed, so runs are reproducible and different seeds give
independent samples; `compare` over several seeds reports the mean absolute error of both estimates.

At scale, `Sampler` takes the reads frame by frame and keeps only the sampled requests: at rate 0.001, a billion
page requests leave about a million. Frames may come in any order when they carry `ts_ns` and `row` (the
partitioned dataset's files as they are): the sample is put in submission order at the end, so the whole trace
need not be sorted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import polars as pl

from ..errors import ZtbpError
from ..units import check_limit
from .cache_policies import REGISTRY, PageStream, run_policies
from .cachesim import POLICIES, page_requests, page_touches
from .hashing import mix64

MODULUS = 1 << 24


def page_hash(pages: np.ndarray, seed: int = 0) -> np.ndarray:
    """A uniform 64-bit hash of each page number (splitmix64's finaliser of page + seed)."""
    return mix64(pages, seed)


def sampled(pages: np.ndarray, rate: float, seed: int = 0) -> np.ndarray:
    """Mask of the requests whose page is in the spatial sample at `rate`."""
    if not 0 < rate <= 1:
        raise ZtbpError(f"sampling rate {rate} must be in (0, 1]")
    threshold = np.uint64(round(rate * MODULUS))
    return (page_hash(pages, seed) % np.uint64(MODULUS)) < threshold


def scaled_capacity(capacity: int, rate: float) -> int:
    return max(1, round(capacity * rate))


def effective_rate(rate: float) -> float:
    """The rate the hash threshold really samples at (a multiple of 2^-24)."""
    return round(rate * MODULUS) / MODULUS


def adjusted(hit_ratio: dict[str, float], sampled_requests: int, requests: int, rate: float) -> dict[str, float]:
    """SHARDS_adj: each policy's misses over the expected sample size N × R instead of the drawn one."""
    expected = requests * effective_rate(rate)
    if expected <= 0:
        return dict(hit_ratio)
    return {p: min(1.0, max(0.0, 1.0 - (1.0 - h) * sampled_requests / expected)) for p, h in hit_ratio.items()}


def hit_ratios(pages: np.ndarray, zones: np.ndarray, capacity: int, hot_zones: list[int],
               policies: tuple[str, ...] = POLICIES) -> dict[str, float]:
    """Hit ratio of every policy over a page sequence (sampled or not): the policies of cache_policies.py on its
    pages renumbered by rank."""
    n = max(1, pages.size)
    uniq, ids = np.unique(pages, return_inverse=True)
    stream = PageStream(ids.astype(np.int64), zones, int(uniq.size))
    hits = run_policies(stream, capacity, hot_zones, [p for p in REGISTRY if p in policies])
    return {p: h / n for p, h in hits.items()}


class Sampler:
    """Keeps the sampled page requests (and their zones) of the reads fed: frames in submission order, or frames in
    any order that carry `ts_ns` and `row` (sorted by them, stably, at the end)."""

    def __init__(self, meta: dict[str, Any], page_kib: int, rate: float, seed: int = 0) -> None:
        self.lba_bytes = meta["lba_bytes"]
        self.page_bytes = page_kib * 1024
        self.zone_bytes = meta["zone_size_lba"] * meta["lba_bytes"]
        self.rate, self.seed = rate, seed
        self.requests = 0
        self._pages: list[np.ndarray] = []
        self._zones: list[np.ndarray] = []
        self._keys: list[np.ndarray] = []  # ts_ns, row of each kept page request (unordered feeding)
        self._keyed: bool | None = None  # whether the frames fed carry ts_ns and row (all of them or none)

    def feed(self, frame: pl.DataFrame) -> None:
        reads = frame.filter((pl.col("op").cast(pl.String) == "read") & (pl.col("nlb") > 0))
        pages, n = page_touches(reads.with_columns(pl.col("op").cast(pl.String)), self.lba_bytes, self.page_bytes)
        self.requests += pages.size
        keep = sampled(pages, self.rate, self.seed)
        self._pages.append(pages[keep])
        self._zones.append(pages[keep] * self.page_bytes // self.zone_bytes)
        keyed = "ts_ns" in frame.columns and "row" in frame.columns
        if self._keyed is None:
            self._keyed = keyed
        elif keyed != self._keyed:
            raise ValueError("the SHARDS sampler was fed frames with ts_ns and row and frames without: feed every "
                             "frame in submission order, or every frame with ts_ns and row so it can sort them")
        if keyed:
            keys = np.stack([np.repeat(reads[c].to_numpy().astype(np.int64), n) for c in ("ts_ns", "row")])
            self._keys.append(keys[:, keep])

    def trace(self) -> tuple[np.ndarray, np.ndarray]:
        """The kept page requests and their zones, in submission order."""
        cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64))  # noqa: E731
        pages, zones = cat(self._pages), cat(self._zones)
        if self._keyed:
            keys = np.concatenate(self._keys, axis=1)
            order = np.lexsort((keys[1], keys[0]))  # stable: a read's pages keep their order
            pages, zones = pages[order], zones[order]
        return pages, zones


def estimate(frames: Iterable[pl.DataFrame], meta: dict[str, Any], cache_mib: float, page_kib: int,
             hot_zones: list[int], rate: float, seed: int = 0, policies: tuple[str, ...] = POLICIES
             ) -> dict[str, Any]:
    """SHARDS estimate of every policy's hit ratio from frames of events (in submission order, or all carrying ts_ns
    and row); a sample that holds no request gives no estimate (None, as in `compare`)."""
    s = Sampler(meta, page_kib, rate, seed)
    for f in frames:
        s.feed(f)
    pages, zones = s.trace()
    cap = int(cache_mib * (1 << 20) // s.page_bytes)
    est = hit_ratios(pages, zones, scaled_capacity(cap, rate), hot_zones, policies) if pages.size else None
    return {"rate": rate, "requests": s.requests, "sampled_requests": int(pages.size),
            "cache_pages": scaled_capacity(cap, rate), "hit_ratio": est,
            "hit_ratio_adj": adjusted(est, int(pages.size), s.requests, rate) if est is not None else None}


def _one_sample(pages: np.ndarray, zones: np.ndarray, rate: float, seed: int, capacity: int, hot_zones: list[int],
                exact: dict[str, float]) -> dict[str, Any]:
    """One spatial sample's estimate of every policy, plain and SHARDS_adj, and their errors against `exact`; a
    sample that holds no request gives no estimate (None: not a hit ratio of 0)."""
    keep = sampled(pages, rate, seed)
    n_kept = int(keep.sum())
    if n_kept == 0:
        return {"sampled_requests": 0, "hit_ratio": None, "error": None, "hit_ratio_adj": None, "error_adj": None}
    est = hit_ratios(pages[keep], zones[keep], capacity, hot_zones)
    adj = adjusted(est, n_kept, int(pages.size), rate)
    return {"sampled_requests": n_kept, "hit_ratio": est, "error": {p: est[p] - exact[p] for p in exact},
            "hit_ratio_adj": adj, "error_adj": {p: adj[p] - exact[p] for p in exact}}


def compare(events: pl.DataFrame, meta: dict[str, Any], cache_mib: float, page_kib: int, hot_zones: list[int],
            rates: tuple[float, ...] = (0.01, 0.001), seed: int = 0, seeds: int = 1,
            peer: Callable[..., dict[str, float]] | None = None) -> dict[str, Any]:
    """Exact hit ratios (every policy on the whole page trace) against the SHARDS estimate at each rate: error
    and speed-up, of the plain estimate and of SHARDS_adj. Each rate's entry is the sample of `seed`; with
    `seeds` > 1 the samples of seed, seed + 1, … also give each policy's mean absolute error (a small run's
    single-sample error is mostly luck). A sample that holds no request gives no estimate (None), and is left out
    of the means and counted (`empty_samples`). With `peer` (io/libcachesim.sampled), libCacheSim's own spatial
    sampler at the same rate and scaled cache gives its LRU estimate beside ours, salted by the same seeds.

    The page trace is prepared once (prepare_seconds); `speedup` compares simulating every policy on the whole
    trace with sampling it and simulating the sample; `speedup_with_prepare` adds the preparation to both sides
    (what a user waits for from events in memory). The kernels are compiled before anything is timed."""
    check_limit("cache-mib", cache_mib)
    check_limit("page-kib", page_kib)
    check_limit("seed", seed)
    check_limit("seeds", seeds)
    if not rates:
        raise ZtbpError("--rates: give at least one sampling rate, e.g. 0.01")
    for rate in rates:
        check_limit("rate", rate, "--rates")
    s = Sampler(meta, page_kib, 1.0, seed)
    t = time.perf_counter()
    pages, zones = page_requests(events, s.lba_bytes, s.page_bytes, s.zone_bytes)
    prepare = time.perf_counter() - t
    cap = int(cache_mib * (1 << 20) // s.page_bytes)
    hit_ratios(pages[:64], zones[:64], 8, hot_zones)  # compile / load the kernels outside the timings
    t = time.perf_counter()
    exact = hit_ratios(pages, zones, cap, hot_zones)
    exact_s = time.perf_counter() - t
    out: dict[str, Any] = {"requests": int(pages.size), "cache_mib": cache_mib, "page_kib": page_kib,
                           "cache_pages": cap, "hot_zones": hot_zones, "seed": seed, "exact": exact,
                           "prepare_seconds": prepare, "exact_seconds": exact_s, "rates": []}
    for rate in rates:
        scap = scaled_capacity(cap, rate)
        t = time.perf_counter()
        first = _one_sample(pages, zones, rate, seed, scap, hot_zones, exact)
        sec = time.perf_counter() - t
        entry: dict[str, Any] = {
            "rate": rate, "sampled_requests": first["sampled_requests"], "cache_pages": scap,
            **{k: first[k] for k in ("hit_ratio", "error", "hit_ratio_adj", "error_adj")}, "seconds": sec,
            "speedup": exact_s / sec if sec > 0 else float("inf"),
            "speedup_with_prepare": (prepare + exact_s) / (prepare + sec), "seeds": seeds}
        kept = [x for x in [first, *(_one_sample(pages, zones, rate, k, scap, hot_zones, exact)
                                     for k in range(seed + 1, seed + seeds))] if x["error"] is not None]
        entry["empty_samples"] = seeds - len(kept)
        for key, out_key in (("error", "mean_abs_error"), ("error_adj", "mean_abs_error_adj")):
            entry[out_key] = {p: float(np.mean([abs(x[key][p]) for x in kept])) if kept else None for p in exact}
        if peer is not None:
            ids = np.unique(pages, return_inverse=True)[1]
            t = time.perf_counter()
            lrus = [peer(ids, scap, rate, salt=k)["LRU"]
                    for k in range(seed, seed + seeds)]
            entry["libcachesim"] = {"policy": "lru", "hit_ratio": lrus[0], "error": lrus[0] - exact["lru"],
                                    "mean_abs_error": float(np.mean([abs(x - exact["lru"]) for x in lrus])),
                                    "seconds": (time.perf_counter() - t) / seeds}
        out["rates"].append(entry)
    return out
