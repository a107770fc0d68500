"""`ztbp cachesim`: hit ratios of a device read cache under four policies, over the run's reads.

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
"""

from __future__ import annotations

import heapq
from typing import Any

import numba
import numpy as np
import polars as pl

from ..errors import ZtbpError
from .params import SWEEP_MIB

POLICIES = ("lru", "zone_lru", "static_best", "belady")
NEVER = np.iinfo(np.int64).max


def page_requests(events: pl.DataFrame, lba_bytes: int, page_bytes: int, zone_bytes: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Page number of every page touch of the run's reads, in submission order, and the zone of each."""
    reads = events.filter((pl.col("op") == "read") & (pl.col("nlb") > 0))
    start = reads["slba"].to_numpy().astype(np.int64) * lba_bytes
    end = start + reads["nlb"].to_numpy().astype(np.int64) * lba_bytes
    first = start // page_bytes
    n = (end - 1) // page_bytes - first + 1
    if n.size and n.max() == 1:
        pages = first
    else:
        pages = np.repeat(first, n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
    return pages, pages * page_bytes // zone_bytes


@numba.njit(cache=True)
def _segmented_lru(ids: np.ndarray, hot: np.ndarray, n_pages: int, capacity: int) -> int:
    """Algorithm 4 on array-linked lists: segment 1 (hot) before l_head, segment 0 (normal) after it.

    With every page normal this is plain LRU. When the cache is full, the list's tail — the tail of the normal
    segment, or of the hot segment when no normal page is cached — is evicted before the new page enters.
    """
    # nodes 0..n_pages-1 are pages; n_pages + s is the sentinel of segment s (head side = nxt of the sentinel)
    nxt = np.empty(n_pages + 2, dtype=np.int64)
    prv = np.empty(n_pages + 2, dtype=np.int64)
    for s in range(2):
        nxt[n_pages + s] = n_pages + s
        prv[n_pages + s] = n_pages + s
    cached = np.zeros(n_pages, dtype=np.bool_)
    seg_len = np.zeros(2, dtype=np.int64)
    hits = 0
    for i in range(ids.size):
        p = ids[i]
        s = 1 if hot[i] else 0
        head = n_pages + s
        if cached[p]:
            hits += 1
            nxt[prv[p]] = nxt[p]  # unlink ...
            prv[nxt[p]] = prv[p]
        else:
            if seg_len[0] + seg_len[1] >= capacity:
                v = 0 if seg_len[0] > 0 else 1
                t = prv[n_pages + v]  # tail of the victim segment
                nxt[prv[t]] = nxt[t]
                prv[nxt[t]] = prv[t]
                cached[t] = False
                seg_len[v] -= 1
            cached[p] = True
            seg_len[s] += 1
        nxt[p] = nxt[head]  # ... and insert at the head of its segment
        prv[p] = head
        prv[nxt[head]] = p
        nxt[head] = p
    return hits


def _dense(pages: np.ndarray | list[int]) -> tuple[np.ndarray, int]:
    """Page ids 0..n-1 for the policy kernels: the page numbers themselves when they are small enough to index
    arrays directly (a 2 GiB device has 524,288 pages of 4 KiB), else their rank among the distinct pages."""
    arr = np.asarray(pages, dtype=np.int64)
    if arr.size == 0:
        return arr, 0
    top = int(arr.max())
    if arr.min() >= 0 and top < max(1 << 24, 4 * arr.size):
        return arr, top + 1
    uniq, ids = np.unique(arr, return_inverse=True)
    return ids.astype(np.int64), int(uniq.size)


def lru_hits(pages: np.ndarray | list[int], capacity: int) -> int:
    """Hits of plain LRU over a sequence of page ids."""
    ids, n = _dense(pages)
    if ids.size == 0 or capacity <= 0:
        return 0
    return int(_segmented_lru(ids, np.zeros(ids.size, dtype=np.bool_), n, capacity))


def zone_lru_hits(pages: np.ndarray | list[int], hot: np.ndarray | list[bool], capacity: int) -> int:
    """Hits of the zone-recognition LRU (Algorithm 4); hot[i] tells whether request i is to a hot zone."""
    ids, n = _dense(pages)
    if ids.size == 0 or capacity <= 0:
        return 0
    return int(_segmented_lru(ids, np.asarray(hot, dtype=np.bool_), n, capacity))


def static_best_hits(ids: np.ndarray, capacity: int) -> int:
    counts = np.bincount(ids)
    cut = max(0, counts.size - capacity)
    top = np.partition(counts, cut)[cut:] if cut else counts
    return int((top[top > 0] - 1).sum())


def next_use(ids: np.ndarray) -> np.ndarray:
    """Index of the next request for the same page (NEVER if none)."""
    order = np.argsort(ids, kind="stable")
    nxt = np.full(ids.size, NEVER, dtype=np.int64)
    same = ids[order[1:]] == ids[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


@numba.njit(cache=True)
def _belady_hits(ids: np.ndarray, nxt: np.ndarray, n_pages: int, capacity: int) -> int:
    never = np.iinfo(np.int64).max
    cur = np.full(n_pages, -1, dtype=np.int64)  # next use of each cached page; -1 = not cached
    heap = [(np.int64(0), np.int64(0))]  # (-next use, page); lazy deletion
    heap.pop()
    size = 0
    hits = 0
    for i in range(ids.size):
        p = ids[i]
        nx = nxt[i]
        if cur[p] >= 0:
            hits += 1
            cur[p] = nx
            heapq.heappush(heap, (-nx, p))
            continue
        if nx == never:
            continue  # never used again: bypass
        if size < capacity:
            cur[p] = nx
            heapq.heappush(heap, (-nx, p))
            size += 1
            continue
        while True:  # furthest valid entry
            negn, q = heap[0]
            if cur[q] == -negn:
                break
            heapq.heappop(heap)
        if -negn > nx:
            heapq.heappop(heap)
            cur[q] = -1
            cur[p] = nx
            heapq.heappush(heap, (-nx, p))
        # else: bypass, the incoming page is needed later than everything cached
    return hits


def belady_hits(ids: np.ndarray, capacity: int, nxt: np.ndarray | None = None) -> int:
    if ids.size == 0 or capacity <= 0:
        return 0
    nxt = next_use(ids) if nxt is None else nxt
    return int(_belady_hits(ids.astype(np.int64), nxt, int(ids.max()) + 1, capacity))


@numba.njit(cache=True)
def _stack_distances(ids: np.ndarray, n_pages: int) -> np.ndarray:
    """LRU stack distance of every request (distinct pages since its last use; -1 = first use). Fenwick tree."""
    n = ids.size
    tree = np.zeros(n + 1, dtype=np.int64)
    last = np.full(n_pages, -1, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        p = ids[i]
        j = last[p]
        if j < 0:
            out[i] = -1
        else:
            # number of marked positions in (j, i): distinct pages touched since j
            s = 0
            k = i
            while k > 0:
                s += tree[k]
                k -= k & (-k)
            k = j + 1
            while k > 0:
                s -= tree[k]
                k -= k & (-k)
            out[i] = s
            k = j + 1
            while k <= n:
                tree[k] -= 1
                k += k & (-k)
        k = i + 1
        while k <= n:
            tree[k] += 1
            k += k & (-k)
        last[p] = i
    return out


def lru_sweep(ids: np.ndarray, capacities: list[int]) -> list[float]:
    """LRU hit ratios for many cache sizes in one pass (Mattson stack distances)."""
    if ids.size == 0:
        return [0.0 for _ in capacities]
    d = _stack_distances(ids.astype(np.int64), int(ids.max()) + 1)
    d = np.sort(d[d >= 0])
    return [float(np.searchsorted(d, c, side="left")) / ids.size for c in capacities]


class Trace:
    """The page requests of one run, prepared once for every policy and cache size."""

    def __init__(self, events: pl.DataFrame, meta: dict[str, Any], page_kib: int) -> None:
        if page_kib <= 0:
            raise ZtbpError("--page-kib must be positive")
        self.page_bytes = page_kib * 1024
        self.zone_bytes = meta["zone_size_lba"] * meta["lba_bytes"]
        self.pages, self.zones = page_requests(events, meta["lba_bytes"], self.page_bytes, self.zone_bytes)
        self.read_commands = int(((events["op"] == "read") & (events["nlb"] > 0)).sum())
        self.ids, self.n_pages = _dense(self.pages)
        self._nxt: np.ndarray | None = None

    @property
    def requests(self) -> int:
        return int(self.pages.size)

    def _lru(self, hot: np.ndarray, capacity: int) -> int:
        if self.ids.size == 0 or capacity <= 0:
            return 0
        return int(_segmented_lru(self.ids, hot, self.n_pages, capacity))

    def nxt(self) -> np.ndarray:
        if self._nxt is None:
            self._nxt = next_use(self.ids)
        return self._nxt

    def capacity(self, cache_mib: float) -> int:
        return int(cache_mib * (1 << 20) // self.page_bytes)

    def hit_ratios(self, cache_mib: float, hot_zones: list[int], policies: tuple[str, ...] = POLICIES
                   ) -> dict[str, float]:
        cap = self.capacity(cache_mib)
        n = max(1, self.requests)
        out: dict[str, float] = {}
        if "lru" in policies:
            out["lru"] = self._lru(np.zeros(self.ids.size, dtype=np.bool_), cap) / n
        if "zone_lru" in policies:
            out["zone_lru"] = self._lru(np.isin(self.zones, np.asarray(hot_zones, dtype=np.int64)), cap) / n
        if "static_best" in policies:
            out["static_best"] = static_best_hits(self.ids, cap) / n
        if "belady" in policies:
            out["belady"] = belady_hits(self.ids, cap, self.nxt()) / n
        return out

    def sweep(self, sizes_mib: tuple[float, ...], hot_zones: list[int]) -> list[dict[str, float]]:
        caps = [self.capacity(m) for m in sizes_mib]
        lru = lru_sweep(self.ids, caps)
        rows = []
        for m, lr in zip(sizes_mib, lru, strict=True):
            r = self.hit_ratios(m, hot_zones, ("zone_lru", "static_best", "belady"))
            rows.append({"cache_mib": m, "lru": lr, **r})
        return rows


def simulate(events: pl.DataFrame, meta: dict[str, Any], cache_mib: float, page_kib: int, hot_zones: list[int],
             with_sweep: bool = False) -> dict[str, Any]:
    """Hit ratios of every policy at cache_mib (and at every size of SWEEP_MIB with with_sweep)."""
    if cache_mib <= 0:
        raise ZtbpError("--cache-mib must be positive")
    bad = [z for z in hot_zones if z >= meta["nr_zones"]]
    if bad:
        raise ZtbpError(f"hot zones {bad} are beyond the device's {meta['nr_zones']} zones")
    tr = Trace(events, meta, page_kib)
    out: dict[str, Any] = {"requests": tr.requests, "read_commands": tr.read_commands, "cache_mib": cache_mib,
                           "page_kib": page_kib, "cache_pages": tr.capacity(cache_mib), "hot_zones": hot_zones}
    out.update(tr.hit_ratios(cache_mib, hot_zones))
    if with_sweep:
        out["sweep"] = tr.sweep(SWEEP_MIB, hot_zones)
    return out
