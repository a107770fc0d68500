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
analysis/cache_policies.py (its REGISTRY) and libCacheSim's on it. The streamed path (streaming.CacheStream) and the
sampled path (shards.py) run the same policy objects.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
#: Smallest cache, in pages, the general policies are run with: below 100 pages a sub-queue of some holds no page in
#: libCacheSim 0.3.5 (W-TinyLFU's 1 % window: 0 hits; 2Q's queues: 0 hits below 5 pages; S3-FIFO's 10 % queue and
#: W-TinyLFU's segments below 10 / 5 pages: the library aborts the process). Smaller caches report None for them.
MIN_PAGES: dict[str, int] = dict.fromkeys(GENERAL.values(), 100)
#: libCacheSim's oracleGeneral binary trace: clock time, object id, object size, next access (virtual time).
ORACLE_GENERAL = np.dtype([("time", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access", "<i8")])


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


@contextmanager
def oracle_trace(ids: np.ndarray) -> Iterator[Path]:
    """The page ids as a libCacheSim oracleGeneral trace in a temporary file (its fast C reader), every page an
    object of size 1 (so a capacity is a number of pages); removed afterwards."""
    rows = np.zeros(ids.size, dtype=ORACLE_GENERAL)
    rows["time"] = np.arange(ids.size) // 1000
    rows["obj_id"] = ids.astype(np.uint64) + 1
    rows["obj_size"] = 1
    rows["next_access"] = -1
    with tempfile.TemporaryDirectory(prefix="ztbp-lcs-") as tmp:
        path = Path(tmp) / "pages.oracleGeneral.bin"
        rows.tofile(path)
        yield path


def libcachesim_hits(ids: np.ndarray, capacities: list[int], policies: tuple[str, ...]
                     ) -> list[dict[str, int | None]]:
    """Hits of libCacheSim policies (class names, e.g. "LRU", "ARC") over page ids, one dict per capacity (None for a
    capacity below the policy's MIN_PAGES).

    The pages go to libCacheSim through oracle_trace.
    """
    import libcachesim as lcs

    n = ids.size
    out: list[dict[str, int | None]] = [{} for _ in capacities]
    if n == 0:
        return [dict.fromkeys(policies, 0) for _ in capacities]
    with oracle_trace(ids) as path:
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        for cap, row in zip(capacities, out, strict=True):
            for name in policies:
                if cap <= 0:
                    row[name] = 0
                    continue
                if cap < MIN_PAGES.get(name, 1):
                    row[name] = None
                    continue
                miss_ratio = getattr(lcs, name)(cap, hashpower=20).process_trace(reader)[0]
                row[name] = n - round(miss_ratio * n)
    return out


@contextmanager
def _c_stdout_silenced() -> Iterator[None]:
    """File descriptor 1 to /dev/null for the duration (what C code prints there; Python's own stdout is flushed)."""
    import ctypes

    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            try:
                yield
            finally:
                libc.fflush(None)  # C's stdio buffers what it printed (a pipe is fully buffered): drop it here
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def libcachesim_sampled(ids: np.ndarray, capacity: int, rate: float, policies: tuple[str, ...] = ("LRU",),
                        salt: int = 0) -> dict[str, float]:
    """Hit ratio of libCacheSim policies on libCacheSim's own spatial sample of the page stream (its reader's
    SPATIAL_SAMPLER at `rate`, its own hash of the object id salted by `salt`) with a cache of `capacity` pages
    (scale it by the rate beforehand): a peer of analysis/shards.py's sampler. The Sampler object must outlive the
    reader (the binding keeps a bare pointer to it: dropping it crashes libcachesim 0.3.5)."""
    import libcachesim as lcs
    from libcachesim import libcachesim_python as native

    if ids.size == 0:
        return dict.fromkeys(policies, 0.0)
    out: dict[str, float] = {}
    with oracle_trace(ids) as path:
        for name in policies:
            with _c_stdout_silenced():  # the C sampler prints its ratio on stdout (and would spoil --json)
                sampler = native.Sampler(rate, native.SamplerType.SPATIAL_SAMPLER)
                sampler.sampling_salt = salt
                params = native.ReaderInitParam(sampler=sampler)
                reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE, reader_init_params=params)
                out[name] = 1.0 - getattr(lcs, name)(max(1, capacity), hashpower=20).process_trace(reader)[0]
            del reader, params, sampler
    return out


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

    def hit_ratios(self, cache_mib: float, hot_zones: list[int], policies: tuple[str, ...] = POLICIES
                   ) -> dict[str, float]:
        cap = self.capacity(cache_mib)
        n = max(1, self.requests)
        hits = run_policies(self.stream, cap, hot_zones, [p for p in REGISTRY if p in policies])
        out: dict[str, float] = {p: h / n for p, h in hits.items()}
        general = [p for p in GENERAL if p in policies]
        if general:
            hits = libcachesim_hits(self.ids, [cap], tuple(GENERAL[p] for p in general))[0]
            out.update({p: _ratio(hits[GENERAL[p]], n) for p in general})
        return out

    def sweep(self, sizes_mib: tuple[float, ...], hot_zones: list[int], general: bool = True
              ) -> list[dict[str, float]]:
        caps = [self.capacity(m) for m in sizes_mib]
        lru = lru_sweep(self.ids, caps)
        lcs = libcachesim_hits(self.ids, caps, tuple(GENERAL.values())) if general else [{} for _ in caps]
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
             with_sweep: bool = False, general: bool = True) -> dict[str, Any]:
    """Hit ratios of every policy at cache_mib (and at every size of SWEEP_MIB with with_sweep); general: also
    libCacheSim's general policies."""
    if cache_mib <= 0:
        raise ZtbpError("--cache-mib must be positive")
    bad = [z for z in hot_zones if z >= meta["nr_zones"]]
    if bad:
        raise ZtbpError(f"hot zones {bad} are beyond the device's {meta['nr_zones']} zones")
    tr = Trace(events, meta, page_kib)
    out: dict[str, Any] = {"requests": tr.requests, "read_commands": tr.read_commands, "cache_mib": cache_mib,
                           "page_kib": page_kib, "cache_pages": tr.capacity(cache_mib), "hot_zones": hot_zones}
    out.update(tr.hit_ratios(cache_mib, hot_zones, POLICIES + (tuple(GENERAL) if general else ())))
    if general:
        out.update(best_general(out))
        out["libcachesim"] = _libcachesim_version()
    if with_sweep:
        out["sweep"] = tr.sweep(SWEEP_MIB, hot_zones, general)
    return out


def _libcachesim_version() -> str:
    from importlib.metadata import version

    return version("libcachesim")
