"""`ztbp cachesim`: hit ratios of a device read cache under the project's four policies and libCacheSim's general
ones, over the run's reads.

The device cache holds `cache_mib / page_kib` pages. Every read command touches the pages its LBA range covers;
each page touch is one request. All policies start with an empty cache and count the first touch of a page as a
miss (compulsory misses), so the figures are comparable:

- lru: plain LRU.
- zone_lru: the zone-recognition LRU of ZTBP Algorithm 4. One list; pages of hot (recognised) zones are inserted at
  the head, other pages at `l_head`, the first position after the hot segment; a hit moves a hot page to the head
  and a normal page to `l_head`; when the cache is full, the tail is evicted before the new page is inserted. Normal
  pages therefore always leave before hot ones; a normal page arriving at a cache full of hot pages evicts the
  least recently used hot page.
  Implemented as two LRU segments (hot, normal) evicting from the normal segment first — the same list order.
- static_best: hindsight — the cache is reserved for the `cache_pages` most-read pages of the whole trace; each is
  loaded on its first touch and never evicted; other pages are not cached.
- belady: Belady's MIN with bypass — on a miss, evict the cached page whose next use is furthest in the future, or
  do not cache the new page if its own next use is further still. Optimal for any cache of this size, so it bounds
  every other figure from above.

General policies that need no clustering come from libCacheSim (PyPI `libcachesim`), on the same page stream, each
page an object of size 1 in a cache of `cache_pages` objects: arc, lirs, s3fifo, twoq (2Q), wtinylfu (W-TinyLFU),
sieve. `best_general` names the best of them, and `zone_lru_vs_best_general` says what zone-LRU adds to it. The
project keeps its own LRU and Belady: on 1 M page requests its LRU takes 0.03 s against libCacheSim's 0.17 s (the
same hits, checked by a test), and its Belady (MIN with bypass, optimal: checked by exhaustive search) takes as long
as libCacheSim's Belady, which does not bypass and misses a few hits.

This module is the simulator's core: it turns a run's reads into the page stream (`Trace`) and runs the policies of
analysis/cache_policies.py (its REGISTRY) on it, and libCacheSim's through the runner a caller passes in
(`GeneralPolicies`: io/libcachesim.py, which writes the page stream to libCacheSim's trace file). The streamed
path (streaming.CacheStream) and the sampled path (shards.py) run the same policy objects.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import polars as pl

from ..errors import ZtbpError
from .cache_policies import REGISTRY, PageStream, dense_ids, lru_sweep, run_policies
from .params import SWEEP_MIB

#: the project's policies (analysis/cache_policies.py), in the order results list them
POLICIES = tuple(REGISTRY)
#: libCacheSim's general policies: result key -> class name in the libcachesim package.
GENERAL: dict[str, str] = {"arc": "ARC", "lirs": "LIRS", "s3fifo": "S3FIFO", "twoq": "TwoQ", "wtinylfu": "WTinyLFU",
                           "sieve": "Sieve"}


class GeneralPolicies(Protocol):
    """What runs libCacheSim's general policies on a page stream (io/libcachesim.py): hits per capacity, one dict
    of class name -> hits (None: a cache too small for the policy) per capacity, and the library's version."""

    def hits(self, ids: np.ndarray, capacities: list[int], policies: tuple[str, ...]
             ) -> list[dict[str, int | None]]: ...

    def version(self) -> str: ...


def page_requests(events: pl.DataFrame, lba_bytes: int, page_bytes: int, zone_bytes: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Page number of every page touch of the run's reads, in submission order, and the zone of each."""
    pages, _ = page_touches(events, lba_bytes, page_bytes)
    return pages, pages * page_bytes // zone_bytes


def page_touches(events: pl.DataFrame, lba_bytes: int, page_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """Page number of every page touch of the run's reads, and the number of touches of each read command."""
    reads = events.filter((pl.col("op") == "read") & (pl.col("nlb") > 0))
    start = reads["slba"].to_numpy().astype(np.int64) * lba_bytes
    end = start + reads["nlb"].to_numpy().astype(np.int64) * lba_bytes
    first = start // page_bytes
    n = (end - 1) // page_bytes - first + 1
    if n.size and n.max() == 1:
        pages = first
    else:
        pages = np.repeat(first, n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
    return pages, n


def best_general(r: dict[str, Any]) -> dict[str, Any]:
    """The best of the general policies in r, and what zone-LRU adds to it."""
    best = max((k for k in GENERAL if r.get(k) is not None), key=lambda k: r[k])
    return {"best_general": {"policy": best, "hit_ratio": r[best]},
            "zone_lru_vs_best_general": r["zone_lru"] - r[best]}


def _ratio(hits: int | None, n: int) -> float | None:
    return None if hits is None else hits / n


class Trace:
    """The page requests of one run, prepared once for every policy and cache size."""

    def __init__(self, events: pl.DataFrame, meta: dict[str, Any], page_kib: int) -> None:
        if page_kib <= 0:
            raise ZtbpError("--page-kib must be positive")
        self.page_bytes = page_kib * 1024
        self.zone_bytes = meta["zone_size_lba"] * meta["lba_bytes"]
        self.pages, self.touches = page_touches(events, meta["lba_bytes"], self.page_bytes)
        self.zones = self.pages * self.page_bytes // self.zone_bytes
        self.read_commands = int(self.touches.size)
        self.ids, self.n_pages = dense_ids(self.pages)
        self.stream = PageStream(self.ids, self.zones, self.n_pages)

    @property
    def requests(self) -> int:
        return int(self.pages.size)

    def held_out(self, cache_mib: float, hot_zones: list[int], reads: int) -> dict[str, Any]:
        """LRU and zone-LRU hit ratios on the page requests of the read commands after the first `reads` ones, the
        cache warmed by those first reads under the same policy."""
        start = int(self.touches[:reads].sum())
        cap = self.capacity(cache_mib)
        n = self.requests - start
        hot = np.isin(self.zones, np.asarray(hot_zones, dtype=np.int64))
        out: dict[str, Any] = {"requests": n, "lru": 0.0, "zone_lru": 0.0}
        if n > 0 and cap > 0:
            for name in ("lru", "zone_lru"):
                run = REGISTRY[name].start(cap)
                run.feed(self.ids[:start], hot[:start])  # the warm-up
                out[name] = run.feed(self.ids[start:], hot[start:]) / n
        return out

    def capacity(self, cache_mib: float) -> int:
        return int(cache_mib * (1 << 20) // self.page_bytes)

    def hit_ratios(self, cache_mib: float, hot_zones: list[int], policies: tuple[str, ...] = POLICIES,
                   general: GeneralPolicies | None = None) -> dict[str, float]:
        """Hit ratios of `policies` at cache_mib; the general ones among them run through `general`."""
        cap = self.capacity(cache_mib)
        n = max(1, self.requests)
        hits = run_policies(self.stream, cap, hot_zones, [p for p in REGISTRY if p in policies])
        out: dict[str, float] = {p: h / n for p, h in hits.items()}
        names = [p for p in GENERAL if p in policies]
        if names:
            if general is None:
                raise ValueError(f"policies {names} need libCacheSim's runner (general=)")
            hits = general.hits(self.ids, [cap], tuple(GENERAL[p] for p in names))[0]
            out.update({p: _ratio(hits[GENERAL[p]], n) for p in names})
        return out

    def sweep(self, sizes_mib: tuple[float, ...], hot_zones: list[int], general: GeneralPolicies | None = None
              ) -> list[dict[str, float]]:
        caps = [self.capacity(m) for m in sizes_mib]
        lru = lru_sweep(self.ids, caps)
        lcs = [{} for _ in caps] if general is None else general.hits(self.ids, caps, tuple(GENERAL.values()))
        n = max(1, self.requests)
        rows = []
        for m, lr, g in zip(sizes_mib, lru, lcs, strict=True):
            r = self.hit_ratios(m, hot_zones, ("zone_lru", "static_best", "belady"))
            rows.append({"cache_mib": m, "lru": lr, **r, **{p: _ratio(g[c], n) for p, c in GENERAL.items() if c in g}})
        return rows


def time_split(events: pl.DataFrame, train_share: float) -> tuple[pl.DataFrame, pl.DataFrame, int, int]:
    """The events before and from the read that ends the first `train_share` of the reads (rows in time order),
    and the read commands on each side."""
    if not 0 < train_share < 1:
        raise ZtbpError(f"--train-share {train_share}: give a share in (0, 1), e.g. 0.5")
    is_read = ((events["op"] == "read") & (events["nlb"] > 0)).to_numpy()
    n = int(is_read.sum())
    k = int(round(n * train_share))
    cut = int(np.flatnonzero(is_read)[k]) if k < n else events.height
    return events.head(cut), events.slice(cut), k, n - k


def simulate(events: pl.DataFrame, meta: dict[str, Any], cache_mib: float, page_kib: int, hot_zones: list[int],
             with_sweep: bool = False, general: GeneralPolicies | None = None) -> dict[str, Any]:
    """Hit ratios of every policy at cache_mib (and at every size of SWEEP_MIB with with_sweep); with `general`
    (io/libcachesim.py), also libCacheSim's general policies."""
    if cache_mib <= 0:
        raise ZtbpError("--cache-mib must be positive")
    bad = [z for z in hot_zones if z >= meta["nr_zones"]]
    if bad:
        raise ZtbpError(f"hot zones {bad} are beyond the device's {meta['nr_zones']} zones")
    tr = Trace(events, meta, page_kib)
    out: dict[str, Any] = {"requests": tr.requests, "read_commands": tr.read_commands, "cache_mib": cache_mib,
                           "page_kib": page_kib, "cache_pages": tr.capacity(cache_mib), "hot_zones": hot_zones}
    policies = POLICIES if general is None else POLICIES + tuple(GENERAL)
    out.update(tr.hit_ratios(cache_mib, hot_zones, policies, general))
    if general is not None:
        out.update(best_general(out))
        out["libcachesim"] = general.version()
    if with_sweep:
        out["sweep"] = tr.sweep(SWEEP_MIB, hot_zones, general)
    return out
