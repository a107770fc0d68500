"""The cache policies of the simulator (analysis/cachesim.py), as plug-ins.

A policy sees a page stream: dense page ids 0..n_pages-1 in request order and, for each request, whether it is to
a hot (recognised) zone. `REGISTRY` maps each policy's name to an object with the two operations the simulator's
paths need:

- `start(capacity)`: an empty cache of `capacity` pages fed frame by frame (`feed(ids, hot)` returns the hits of
  those requests and adds them to `hits`); only for an `online` policy (Belady needs every request's next use,
  so it takes the whole stream at once).
- `hits(stream, capacity, hot_zones)`: hits over a whole PageStream from an empty cache; for an online policy,
  its run fed the stream as one frame.

The in-memory path (cachesim.Trace), the streamed path (streaming.CacheStream) and the sampled path (shards.py)
all run these objects, so each policy is one piece of code. `StackDistances` is LRU at every cache size at once
(Mattson's stack distances over a Fenwick tree), for the LRU curve of both the in-memory and the streamed path.
`SegmentedLRU.feed_hits` gives each request's hit, and `sticky` keeps a page in the segment it entered with, as
NVMeVirt's cache keeps an entry's priority: analysis/device_replay.py replays that device with it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import numba
import numpy as np

NEVER = np.iinfo(np.int64).max


def grown(a: np.ndarray, n: int, fill: Any = None) -> np.ndarray:
    """`a` with room for at least n entries (at least doubled when it grows): old entries kept, new ones `fill`
    (None: left uninitialised, for entries the caller writes before reading)."""
    if n <= a.size:
        return a
    size = max(n, 2 * a.size)
    out = np.empty(size, dtype=a.dtype) if fill is None else np.full(size, fill, dtype=a.dtype)
    out[: a.size] = a
    return out


def dense_ids(pages: np.ndarray | list[int]) -> tuple[np.ndarray, int]:
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


def next_use(ids: np.ndarray) -> np.ndarray:
    """Index of the next request for the same page (NEVER if none)."""
    order = np.argsort(ids, kind="stable")
    nxt = np.full(ids.size, NEVER, dtype=np.int64)
    same = ids[order[1:]] == ids[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


class PageStream:
    """The page requests a policy runs on: dense ids (0..n_pages-1) and the zone of each request; the next use of
    every request is computed once, when a policy first asks for it."""

    def __init__(self, ids: np.ndarray, zones: np.ndarray, n_pages: int) -> None:
        self.ids, self.zones, self.n_pages = ids, zones, n_pages
        self._nxt: np.ndarray | None = None

    def hot(self, hot_zones: Sequence[int]) -> np.ndarray:
        """Whether each request is to one of `hot_zones`."""
        return np.isin(self.zones, np.asarray(hot_zones, dtype=np.int64))

    def next_use(self) -> np.ndarray:
        if self._nxt is None:
            self._nxt = next_use(self.ids)
        return self._nxt


class PolicyRun(Protocol):
    """One cache fed frame by frame: `feed` returns the hits of those requests; `hits` counts them all."""

    hits: int

    def feed(self, ids: np.ndarray, hot: np.ndarray | None) -> int: ...


# --- LRU and zone-LRU (ZTBP Algorithm 4) -----------------------------------------------------------------------

@numba.njit(cache=True)
def segmented_lru_pass(ids: np.ndarray, hot: np.ndarray, capacity: int, nxt: np.ndarray, prv: np.ndarray,
                       cached: np.ndarray, seg_len: np.ndarray, seg: np.ndarray, sticky: bool,
                       hit_out: np.ndarray) -> int:
    """Algorithm 4 on array-linked lists, resumable: segment 1 (hot) before l_head, segment 0 (normal) after it.
    Page p is node p + 2; nodes 0 and 1 head the normal and the hot segment; the state arrays carry over between
    calls (SegmentedLRU). Returns the hits of this call, and marks them in hit_out when it is not empty.

    With every page normal this is plain LRU. When the cache is full, the list's tail — the tail of the normal
    segment, or of the hot segment when no normal page is cached — is evicted before the new page enters. A hit
    moves the page to the head of the segment of this request (`sticky`: of the segment it entered with, seg[p]).
    """
    hits = 0
    record = hit_out.size > 0
    for i in range(ids.size):
        p = ids[i] + 2
        s = 1 if hot[i] else 0
        if cached[p]:
            hits += 1
            if record:
                hit_out[i] = True
            nxt[prv[p]] = nxt[p]  # unlink ...
            prv[nxt[p]] = prv[p]
            if sticky:
                s = seg[p]
            elif seg[p] != s:
                seg_len[seg[p]] -= 1
                seg_len[s] += 1
        else:
            if seg_len[0] + seg_len[1] >= capacity:
                v = 0 if seg_len[0] > 0 else 1
                t = prv[v]  # tail of the victim segment
                nxt[prv[t]] = nxt[t]
                prv[nxt[t]] = prv[t]
                cached[t] = False
                seg_len[v] -= 1
            cached[p] = True
            seg_len[s] += 1
        seg[p] = s
        nxt[p] = nxt[s]  # ... and insert at the head of its segment
        prv[p] = s
        prv[nxt[s]] = p
        nxt[s] = p
    return hits


class SegmentedLRU:
    """An Algorithm-4 cache of `capacity` pages (zone_aware=False: every page normal, plain LRU), its state grown
    to the highest page fed. `sticky`: a page keeps the segment it entered with when it is hit again (as
    NVMeVirt's cache keeps an entry's priority), instead of taking the segment of the request that hits it."""

    def __init__(self, capacity: int, zone_aware: bool = True, sticky: bool = False) -> None:
        self.capacity, self.zone_aware, self.sticky = capacity, zone_aware, sticky
        self.nxt = np.arange(2, dtype=np.int64)
        self.prv = np.arange(2, dtype=np.int64)
        self.cached = np.zeros(2, dtype=np.bool_)
        self.seg = np.zeros(2, dtype=np.int8)
        self.seg_len = np.zeros(2, dtype=np.int64)
        self.hits = 0

    def feed(self, ids: np.ndarray, hot: np.ndarray | None = None) -> int:
        return self._pass(ids, hot, np.zeros(0, dtype=np.bool_))

    def feed_hits(self, ids: np.ndarray, hot: np.ndarray | None = None) -> np.ndarray:
        """Whether each request hit (the plug-in's per-request view; `feed` only counts)."""
        out = np.zeros(ids.size, dtype=np.bool_)
        self._pass(ids, hot, out)
        return out

    def _pass(self, ids: np.ndarray, hot: np.ndarray | None, hit_out: np.ndarray) -> int:
        if ids.size == 0 or self.capacity <= 0:
            return 0
        n = int(ids.max()) + 3
        if n > self.nxt.size:
            self.nxt, self.prv = grown(self.nxt, n), grown(self.prv, n)
            self.cached, self.seg = grown(self.cached, n, False), grown(self.seg, n, 0)
        if hot is None or not self.zone_aware:
            hot = np.zeros(ids.size, dtype=np.bool_)
        h = int(segmented_lru_pass(ids, hot, self.capacity, self.nxt, self.prv, self.cached, self.seg_len,
                                   self.seg, self.sticky, hit_out))
        self.hits += h
        return h


def lru_hits(pages: np.ndarray | list[int], capacity: int) -> int:
    """Hits of plain LRU over a sequence of page ids."""
    return SegmentedLRU(capacity, zone_aware=False).feed(dense_ids(pages)[0])


# --- static_best: the most-read pages, in hindsight --------------------------------------------------------------

def static_best_from_counts(counts: np.ndarray, capacity: int) -> int:
    """Hits of a cache reserved for the `capacity` most-requested pages (requests per page in `counts`): every
    request to them but the first."""
    cut = max(0, counts.size - capacity)
    top = np.partition(counts, cut)[cut:] if cut else counts
    return int((top[top > 0] - 1).sum())


class PageCounts:
    """Requests per page of the requests fed; `hits` is static_best's at `capacity` over them (it is known only
    once the stream has ended, so `feed` returns 0)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.counts = np.zeros(0, dtype=np.int64)

    def feed(self, ids: np.ndarray, hot: np.ndarray | None = None) -> int:
        if ids.size:
            c = np.bincount(ids)
            self.counts = grown(self.counts, c.size, 0)
            self.counts[: c.size] += c
        return 0

    @property
    def hits(self) -> int:
        return static_best_from_counts(self.counts, self.capacity)


# --- Belady's MIN with bypass ------------------------------------------------------------------------------------

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


# --- the registry ------------------------------------------------------------------------------------------------

class Policy:
    """A policy as the simulator runs it (see the module's docstring). `online`: it can be fed frame by frame
    (`start`); `uses_hot`: it reads the hot mask."""

    name: ClassVar[str]
    online: ClassVar[bool] = True
    uses_hot: ClassVar[bool] = False

    def start(self, capacity: int) -> PolicyRun:
        raise NotImplementedError(f"{self.name} needs the whole stream at once")

    def hits(self, stream: PageStream, capacity: int, hot_zones: Sequence[int]) -> int:
        run = self.start(capacity)
        run.feed(stream.ids, stream.hot(hot_zones) if self.uses_hot else None)
        return run.hits


class LRU(Policy):
    name = "lru"

    def start(self, capacity: int) -> SegmentedLRU:
        return SegmentedLRU(capacity, zone_aware=False)


class ZoneLRU(Policy):
    name = "zone_lru"
    uses_hot = True

    def start(self, capacity: int) -> SegmentedLRU:
        return SegmentedLRU(capacity)


class StaticBest(Policy):
    name = "static_best"

    def start(self, capacity: int) -> PageCounts:
        return PageCounts(capacity)


class Belady(Policy):
    name = "belady"
    online = False

    def hits(self, stream: PageStream, capacity: int, hot_zones: Sequence[int]) -> int:
        return belady_hits(stream.ids, capacity, stream.next_use())


REGISTRY: dict[str, Policy] = {p.name: p for p in (LRU(), ZoneLRU(), StaticBest(), Belady())}
#: the policies a frame-by-frame pass can run (Belady needs the whole stream)
ONLINE = tuple(name for name, p in REGISTRY.items() if p.online)


def run_policies(stream: PageStream, capacity: int, hot_zones: Sequence[int], names: Sequence[str]
                 ) -> dict[str, int]:
    """Hits of each named policy over the whole stream, each from an empty cache of `capacity` pages."""
    return {name: REGISTRY[name].hits(stream, capacity, hot_zones) for name in names}


# --- LRU at every size: stack distances ------------------------------------------------------------------------

@numba.njit(cache=True)
def _fenwick_add(tree: np.ndarray, i: int, v: int) -> None:
    k = i + 1
    while k < tree.size:
        tree[k] += v
        k += k & (-k)


@numba.njit(cache=True)
def _fenwick_sum(tree: np.ndarray, i: int) -> int:
    """Sum of positions 0..i-1."""
    s = 0
    k = i
    while k > 0:
        s += tree[k]
        k -= k & (-k)
    return s


@numba.njit(cache=True)
def _fenwick_build(ones: np.ndarray) -> np.ndarray:
    tree = np.zeros(ones.size + 1, dtype=np.int64)
    for i in range(ones.size):
        k = i + 1
        tree[k] += ones[i]
        j = k + (k & (-k))
        if j < tree.size:
            tree[j] += tree[k]
    return tree


@numba.njit(cache=True)
def _stack_pass(ids: np.ndarray, last: np.ndarray, tree: np.ndarray, clock: np.ndarray, hist: np.ndarray
                ) -> int:
    """LRU stack distances of `ids`, resumable: last[p] is the time slot of p's last use (-1 never), tree marks the
    slots in use, clock[0] the next slot. Distances are counted into hist (grown by the caller when it reports
    the index it needs); returns -1 when done, else the index reached when the tree or hist ran out (k << 1 | 0
    for tree full, k << 1 | 1 for hist too small) so the caller can compact or grow and resume at k."""
    for k in range(ids.size):
        if clock[0] + 1 >= tree.size:
            return k << 1
        p = ids[k]
        j = last[p]
        t = clock[0]
        if j >= 0:
            d = _fenwick_sum(tree, t) - _fenwick_sum(tree, j + 1)
            if d >= hist.size:
                return (k << 1) | 1
            hist[d] += 1
            _fenwick_add(tree, j, -1)
        _fenwick_add(tree, t, 1)
        last[p] = t
        clock[0] = t + 1
    return -1


class StackDistances:
    """LRU hits at every cache size from one pass (Mattson): the histogram of LRU stack distances (distinct pages
    since a page's last use), counted over a Fenwick tree of the live pages' last uses. The tree has `tree_slots`
    time slots; when they run out the live ones are renumbered in time order (and the tree doubled when half of
    it is live), so memory grows with the distinct pages, not the stream."""

    def __init__(self, tree_slots: int = 1 << 20, pages: int = 1 << 16) -> None:
        self.last = np.full(pages, -1, dtype=np.int64)
        self.tree = np.zeros(tree_slots + 1, dtype=np.int64)
        self.clock = np.zeros(1, dtype=np.int64)
        self.hist = np.zeros(pages, dtype=np.int64)

    def _compact(self) -> None:
        """Renumber the live last-use slots 0..k-1 in time order and rebuild the tree (grow it when half full)."""
        live = np.flatnonzero(self.last >= 0)
        order = live[np.argsort(self.last[live], kind="stable")]
        k = order.size
        size = self.tree.size
        if 2 * (k + 1) > size:
            size = 2 * size
        self.last[order] = np.arange(k, dtype=np.int64)
        ones = np.zeros(size - 1, dtype=np.int64)
        ones[:k] = 1
        self.tree = _fenwick_build(ones)
        self.clock[0] = k

    def feed(self, ids: np.ndarray) -> None:
        if ids.size == 0:
            return
        self.last = grown(self.last, int(ids.max()) + 1, -1)
        start = 0
        while start < ids.size:
            r = _stack_pass(ids[start:], self.last, self.tree, self.clock, self.hist)
            if r < 0:
                break
            start += r >> 1
            if r & 1:
                self.hist = grown(self.hist, 2 * self.hist.size, 0)
            else:
                self._compact()

    def hits(self, capacity: int) -> int:
        """LRU hits with a cache of `capacity` pages: the requests at a stack distance below it."""
        return int(self.hist[: max(0, capacity)].sum())


def lru_sweep(ids: np.ndarray, capacities: list[int]) -> list[float]:
    """LRU hit ratios for many cache sizes in one pass (Mattson stack distances)."""
    if ids.size == 0:
        return [0.0 for _ in capacities]
    ids = ids.astype(np.int64)
    n_pages = int(ids.max()) + 1
    sd = StackDistances(tree_slots=ids.size + 1, pages=n_pages)  # room for the whole stream: no compaction
    sd.feed(ids)
    return [float(sd.hits(c)) / ids.size for c in capacities]
