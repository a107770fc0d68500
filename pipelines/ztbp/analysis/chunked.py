"""The analyses over a run too large for memory: lazy polars queries on the streaming engine, and chunked passes
where order matters. Every function gives the same result as its in-memory counterpart (tests/test_streaming.py).

Order-free aggregates take a LazyFrame of events (any order, e.g. every partition of io/parts.py):
  zone_table_lazy    == zones.zone_table          opcode_table_lazy == opcodes.opcode_table
  cell_counts_lazy   == the per-cell read counts the clustering works on (cluster.read_cells' counts)
Exact percentiles (nearest rank, as polars' quantile(q, "nearest")) come from a radix select: a few streaming
group-bys over 8-bit digits of the value, never holding a column in memory (exact_quantiles).

Order-dependent passes take an iterator of frames in submission order (io/parts.Parts.ordered) and keep only
bounded state between frames:
  chains_report_stream == chains.chains_report   (a chain is final once its last request leaves the window)
  CacheStream          == cachesim's lru, zone_lru, static_best and the LRU sweep, from one pass: the policies of
                          cache_policies.py fed frame by frame, and the exact LRU stack distances (Mattson,
                          cache_policies.StackDistances) whose memory grows with the distinct pages, not the trace.
                          Belady needs every next use (a pass backwards over the whole trace): at scale it is
                          estimated by analysis/shards.py.
  ClusterCellStream    == cluster.read_cells with folds="hash": reads per cell, time window and held-out fold,
                          from each read's rank in time order (cluster.cluster_from_cells then tunes DBSCAN and
                          applies the hot rule on those cells, as run_cluster does). scikit-learn's shuffled KFold
                          needs a permutation of every read, so the streamed folds come from a hash of the rank;
                          the time validation (the default, which picks the pair) is exact.
Per-zone passes take an iterator of frames that each hold every event of a disjoint set of zones
(io/parts.Parts.by_zone_range), each range as its files' frames:
  frag_table_stream    == frag.frag_table   (extents merged frame by frame: memory bounded by one range's extents)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numba
import numpy as np
import polars as pl

from ..errors import ZtbpError
from .cache_policies import ONLINE, REGISTRY, StackDistances
from .cachesim import page_requests
from .chains import (
    DEFAULT_WINDOW,
    add_chain_key,
    chain_cdf_weighted,
    chain_slot,
    chain_summary_weighted,
    size_cdf_weighted,
)
from .frag import DIRECTIONS, NLB_BITS, frag_frame, table_rows, zone_fragments
from .opcodes import QUANTILES, opcode_count_exprs, opcode_keys, opcode_order
from .params import CHAIN_OPS
from .zones import zone_count_exprs, zone_frame

ENGINE = "streaming"
#: radix of the exact percentiles: a step's histogram has up to 2^DIGIT_BITS rows per (group, quantile). At 16 bits
#: the last step of the per-zone latency percentiles of a 1 B-event run holds millions of groups (12 GiB on the
#: streaming engine); at 8 bits it holds a few thousand rows, for two more passes over the data (a 32-bit value).
DIGIT_BITS = 8


# --- exact percentiles ------------------------------------------------------------------------------------------

def _rank_expr(n: pl.Expr, q: float) -> pl.Expr:
    """chains.nearest_rank as an expression."""
    x = (n - 1).cast(pl.Float64) * q
    return (x.floor() + ((x - x.floor()) >= 0.5).cast(pl.Float64)).cast(pl.UInt64)


class RadixSelect:
    """Exact nearest-rank quantiles of a non-negative integer column per group, by radix select over DIGIT_BITS-bit
    digits.

    Each step is a query that counts rows per (group, digit) among the rows whose higher digits are already fixed;
    `run(query)` evaluates a query — over one LazyFrame on the streaming engine (exact_quantiles), or over every
    partition on a cluster and summed (batch.py) — so no step holds the column in memory. Digits above the
    largest value are skipped."""

    def __init__(self, keys: list[str], value: str, qs: dict[str, float]) -> None:
        self.keys, self.value, self.qs = keys, value, qs

    def prepare(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        return lf.select(*self.keys, pl.col(self.value).cast(pl.UInt64).alias("_v"))

    def stats_query(self, lf: pl.LazyFrame) -> pl.LazyFrame:
        """Per group: rows (_n, summed over partitions) and the largest value (_max, max over partitions)."""
        return self.prepare(lf).group_by(self.keys).agg(pl.len().cast(pl.UInt64).alias("_n"),
                                                        pl.col("_v").max().alias("_max"))

    def start(self, stats: pl.DataFrame) -> tuple[pl.DataFrame, list[int]]:
        """The target rank of every (group, q) and the digit shifts to run."""
        top = int(stats["_max"].max()) if stats.height else 0
        t = pl.concat([stats.select(*self.keys, "_n").with_columns(
            pl.lit(name).alias("_q"), _rank_expr(pl.col("_n"), q).alias("_r")) for name, q in self.qs.items()]
        ).with_columns(pl.lit(0, pl.UInt64).alias("_hi"))
        return t, [s for s in range(64 - DIGIT_BITS, -1, -DIGIT_BITS) if top >> s or s == 0]  # 64 % DIGIT_BITS == 0

    def hist_query(self, lf: pl.LazyFrame, t: pl.DataFrame, s: int) -> pl.LazyFrame:
        """Rows per (group, fixed prefix, next digit) among the rows whose prefix is still wanted (_c, summed)."""
        hi = pl.col("_v") // (1 << (s + DIGIT_BITS)) if s + DIGIT_BITS < 64 else pl.lit(0, pl.UInt64)
        digit = (pl.col("_v") // (1 << s)) % (1 << DIGIT_BITS)
        want = t.select(*self.keys, "_hi").unique().lazy()
        return (self.prepare(lf).with_columns(hi.cast(pl.UInt64).alias("_hi"), digit.cast(pl.UInt64).alias("_d"))
                .join(want, on=[*self.keys, "_hi"], how="semi")
                .group_by(*self.keys, "_hi", "_d").agg(pl.len().cast(pl.UInt64).alias("_c")))

    def step(self, t: pl.DataFrame, hist: pl.DataFrame) -> pl.DataFrame:
        """Fix one more digit of every (group, q): the digit whose cumulative count passes the remaining rank."""
        keys = self.keys
        j = (t.join(hist, on=[*keys, "_hi"]).sort("_d")
             .with_columns(pl.col("_c").cum_sum().over([*keys, "_q"]).alias("_cum")))
        pick = j.filter(pl.col("_cum") > pl.col("_r")).group_by([*keys, "_q"], maintain_order=True).first()
        return pick.select(*keys, "_q", "_n", (pl.col("_r") - (pl.col("_cum") - pl.col("_c"))).alias("_r"),
                           (pl.col("_hi") * (1 << DIGIT_BITS) + pl.col("_d")).alias("_hi"))

    def result(self, t: pl.DataFrame) -> pl.DataFrame:
        if t.height == 0:
            return t.select(self.keys).with_columns(pl.lit(None, pl.UInt64).alias(k) for k in self.qs)
        return t.pivot(on="_q", index=self.keys, values="_hi").select(*self.keys, *self.qs)

    def run(self, lf_run: Callable[[Callable[[pl.LazyFrame], pl.LazyFrame]], pl.DataFrame]) -> pl.DataFrame:
        """The quantiles, with lf_run(query) evaluating a query over all the data."""
        stats = lf_run(self.stats_query)
        if stats.height == 0:
            return self.result(stats)
        t, shifts = self.start(stats)
        for s in shifts:
            t = self.step(t, lf_run(lambda lf, t=t, s=s: self.hist_query(lf, t, s)))
        return self.result(t)


def exact_quantiles(lf: pl.LazyFrame, keys: list[str], value: str, qs: dict[str, float]) -> pl.DataFrame:
    """Per group of `keys`: the nearest-rank quantile of `value` for every q of `qs` (output column -> q), exactly
    as polars' quantile(q, "nearest"), from streaming group-bys (RadixSelect)."""
    return RadixSelect(keys, value, qs).run(lambda query: query(lf).collect(engine=ENGINE))


# --- order-free tables ------------------------------------------------------------------------------------------

def zone_table_lazy(events: pl.LazyFrame, nr_zones: int, lba_bytes: int) -> pl.DataFrame:
    """zones.zone_table over a LazyFrame, on the streaming engine."""
    agg = events.group_by("zone").agg(*zone_count_exprs(lba_bytes)).collect(engine=ENGINE)
    lat = exact_quantiles(events.filter(pl.col("op") == "read"), ["zone"], "lat_ns", {"p50": 0.5, "p99": 0.99})
    return zone_frame(agg.join(lat, on="zone", how="left").with_columns(
        (pl.col("p50") / 1000).alias("read_lat_p50_us"), (pl.col("p99") / 1000).alias("read_lat_p99_us")), nr_zones)


def opcode_table_lazy(events: pl.LazyFrame, lba_bytes: int) -> pl.DataFrame:
    """opcodes.opcode_table over a LazyFrame, on the streaming engine."""
    ev = opcode_keys(events)
    agg = ev.group_by("op", "zone_action").agg(*opcode_count_exprs(lba_bytes)).collect(engine=ENGINE)
    qs = exact_quantiles(ev, ["op", "zone_action"], "lat_ns", dict(QUANTILES))
    agg = agg.join(qs.with_columns(pl.col(k).cast(pl.Int64) for k, _ in QUANTILES), on=["op", "zone_action"])
    return opcode_order(agg)


def cell_counts_lazy(events: pl.LazyFrame, meta: dict[str, Any], cells_per_zone: int) -> pl.DataFrame:
    """Reads per read cell (cell, reads), as the clustering aggregates them (cluster.read_cells)."""
    from .cluster import cell_geometry

    cell_lba, n_cells = cell_geometry(meta, cells_per_zone)
    cell = pl.min_horizontal(pl.col("slba") // cell_lba, pl.lit(n_cells - 1)).cast(pl.Int64)
    return (events.filter(pl.col("op").cast(pl.String) == "read").group_by(cell.alias("cell"))
            .agg(pl.len().cast(pl.Int64).alias("reads")).sort("cell").collect(engine=ENGINE))


class ClusterCellStream:
    """Reads per (fold, cell) and (time window, cell) of reads fed in time order; `n_reads` (all of them) fixes
    the windows."""

    def __init__(self, meta: dict[str, Any], params: Any, n_reads: int) -> None:
        from .cluster import cell_geometry

        self.cell_lba, self.n_cells = cell_geometry(meta, params.cells_per_zone)
        self.seed, self.n_reads, self.seen = params.seed, n_reads, 0
        self.folds = np.zeros((5, self.n_cells), dtype=np.int64)
        self.windows = np.zeros((6, self.n_cells), dtype=np.int64)

    def feed(self, frame: pl.DataFrame) -> None:
        from .cluster import hash_folds, split_tables, time_window_of

        slba = frame["slba"].to_numpy()
        cell_of = np.minimum((slba // self.cell_lba).astype(np.int64), self.n_cells - 1)
        rank = self.seen + np.arange(cell_of.size, dtype=np.int64)
        f, w = split_tables(cell_of, hash_folds(rank, self.seed), time_window_of(rank, self.n_reads), self.n_cells)
        self.folds += f
        self.windows += w
        self.seen += cell_of.size

    def cells(self) -> Any:
        from .cluster import cells_from_tables

        if self.seen != self.n_reads:
            raise ZtbpError(f"the clustering pass saw {self.seen:,} reads of the {self.n_reads:,} counted")
        return cells_from_tables(self.folds, self.windows, self.cell_lba)


# --- chains -----------------------------------------------------------------------------------------------------

#: the chain key packs the nsid above the LBA's 52 bits (the LBA's low bits feed the hash of chains' table)
LBA_BITS = 52
CHAIN_GROUPS = 1 << 11


@numba.njit(cache=True)
def _chain_pass(key_start: np.ndarray, key_end: np.ndarray, nlb: np.ndarray, base: int, window: int,
                keys: np.ndarray, heads: np.ndarray, used: np.ndarray, below: np.ndarray, acc_req: np.ndarray,
                acc_lba: np.ndarray, live: np.ndarray, out_lba: np.ndarray, out_req: np.ndarray,
                counters: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """chains._chain_ids over one frame, resumable, with chains' own table operations (chain_slot,
    add_chain_key): request i (global index base + k) continues the chain of the most recent request j that ends
    at its start, not yet continued, with i - j <= window. The ring (window + 1 slots) holds each recent
    request's `below` link and, for the last request of an open chain, the chain's requests and LBAs. A chain
    whose last request leaves the ring is final: written to out_lba / out_req."""
    ring = below.size
    n_out = 0
    for k in range(key_start.size):
        i = base + k
        s = i % ring
        if i >= ring and live[s]:
            out_lba[n_out] = acc_lba[s]
            out_req[n_out] = acc_req[s]
            n_out += 1
            live[s] = False
        h = chain_slot(keys, key_start[k])
        j = heads[h] if keys[h] != -1 else -1
        if j >= 0 and i - j > window:
            heads[h] = -1
            j = -1
        if j >= 0:
            sj = j % ring
            acc_req[s] = acc_req[sj] + 1
            acc_lba[s] = acc_lba[sj] + nlb[k]
            live[sj] = False
            heads[h] = below[sj]
        else:
            acc_req[s] = 1
            acc_lba[s] = nlb[k]
            counters[0] += 1
        live[s] = True
        h = chain_slot(keys, key_end[k])  # request i's chain ends at key_end[k]: push i on that key's stack
        if keys[h] == -1:
            keys, heads, h = add_chain_key(keys, heads, used[0], key_end[k])
            used[0] += 1
        below[s] = heads[h]
        heads[h] = i
    return keys, heads, n_out


def _count_into(counts: dict[int, int], values: np.ndarray) -> None:
    """counts[v] += occurrences of v in values (non-negative integers)."""
    top = int(values.max())
    if top < 4 * values.size + 1024:
        c = np.bincount(values)
        u = np.flatnonzero(c)
        c = c[u]
    else:
        u, c = np.unique(values, return_counts=True)
    for a, b in zip(u.tolist(), c.tolist(), strict=True):
        counts[a] = counts.get(a, 0) + b


class ChainStream:
    """Sequential chains of one op over frames in submission order (see chains.py for the definition)."""

    def __init__(self, op: str, window: int = DEFAULT_WINDOW) -> None:
        if op not in CHAIN_OPS:
            raise ZtbpError(f"--op {op!r}: chains are defined for {', '.join(CHAIN_OPS)}")
        if window <= 0:
            raise ZtbpError("--window 0 (unlimited) keeps every request open: use the in-memory path")
        self.op, self.window = op, window
        self.keys = np.full(1024, -1, dtype=np.int64)
        self.heads = np.full(1024, -1, dtype=np.int64)
        self.used = np.zeros(1, dtype=np.int64)
        ring = window + 1
        self.below = np.full(ring, -1, dtype=np.int64)
        self.acc_req = np.zeros(ring, dtype=np.int64)
        self.acc_lba = np.zeros(ring, dtype=np.int64)
        self.live = np.zeros(ring, dtype=np.bool_)
        self.counters = np.zeros(1, dtype=np.int64)
        self.seen = 0
        self.final: dict[int, int] = {}  # chain LBAs -> chains
        self.max_req = 0
        self.sizes: dict[int, int] = {}  # request LBAs -> requests

    def _emit(self, lba: np.ndarray, req: np.ndarray) -> None:
        if lba.size == 0:
            return
        _count_into(self.final, lba)
        self.max_req = max(self.max_req, int(req.max()))

    def feed(self, frame: pl.DataFrame) -> None:
        """frame: events in submission order with op, nsid, slba, nlb (other ops are ignored)."""
        ev = frame.filter((pl.col("op").cast(pl.String) == self.op) & (pl.col("nlb") > 0))
        if ev.height == 0:
            return
        nsid = ev["nsid"].to_numpy().astype(np.int64)
        if nsid.max() >= CHAIN_GROUPS:
            raise ZtbpError(f"nsid {int(nsid.max())} is beyond the streaming chain key ({CHAIN_GROUPS} namespaces)")
        slba = ev["slba"].to_numpy().astype(np.int64)
        nlb = ev["nlb"].to_numpy().astype(np.int64)
        if int(slba.max()) + int(nlb.max()) >= 1 << LBA_BITS:
            raise ZtbpError(f"LBAs beyond 2^{LBA_BITS} do not fit the streaming chain key")
        _count_into(self.sizes, nlb)
        out_lba = np.empty(slba.size, dtype=np.int64)
        out_req = np.empty(slba.size, dtype=np.int64)
        group = nsid << LBA_BITS
        self.keys, self.heads, n = _chain_pass(slba | group, (slba + nlb) | group, nlb,
                                               self.seen, self.window, self.keys, self.heads, self.used, self.below,
                                               self.acc_req, self.acc_lba, self.live, out_lba, out_req,
                                               self.counters)
        self.seen += slba.size
        self._emit(out_lba[:n], out_req[:n])

    def close(self) -> None:
        """Every chain still open is final."""
        self._emit(self.acc_lba[self.live], self.acc_req[self.live])
        self.live[:] = False

    def report(self, nts_bytes: int, lba_bytes: int) -> dict[str, Any]:
        """chains.chains_report's dict (with the same values) from the chains seen."""
        lens = pl.DataFrame({"bytes": np.asarray(list(self.final), dtype=np.uint64) * lba_bytes,
                             "chains": np.asarray(list(self.final.values()), dtype=np.int64)},
                            schema={"bytes": pl.UInt64, "chains": pl.Int64})
        out = chain_summary_weighted(lens, self.op, nts_bytes, self.seen, self.max_req)
        out["window"] = self.window
        sizes = pl.DataFrame({"bytes": np.asarray(list(self.sizes), dtype=np.uint64) * lba_bytes,
                              "requests": np.asarray(list(self.sizes.values()), dtype=np.uint32)},
                             schema={"bytes": pl.UInt64, "requests": pl.UInt32})
        out["size_cdf"] = size_cdf_weighted(sizes).to_dicts()
        out["chain_cdf"] = chain_cdf_weighted(lens).to_dicts()
        return out


def chains_report_stream(frames: Iterable[pl.DataFrame], op: str, nts_bytes: int, lba_bytes: int,
                         window: int = DEFAULT_WINDOW) -> dict[str, Any]:
    cs = ChainStream(op, window)
    for f in frames:
        cs.feed(f)
    cs.close()
    return cs.report(nts_bytes, lba_bytes)


# --- fragmentation ----------------------------------------------------------------------------------------------

def frag_table_stream(zone_ranges: Iterable[Iterable[pl.DataFrame]], zones: int | np.ndarray, lba_bytes: int,
                      zone_size_lba: int, merge_at: int = 1 << 21) -> pl.DataFrame:
    """frag.frag_table from the events of disjoint zone ranges, each given as frames (its files). zones: the
    table's zone ids (frag.table_zones: the device's zones, then those beyond it the trace addresses), or a count
    n for zones 0..n-1.

    Memory is bounded by the extents of one zone range, not by its events: each frame's ranges are merged into
    extents (maximal runs of ranges in one zone, by their start, that touch or overlap — frag.zone_fragments' rule)
    and merged again with the range's extents so far once `merge_at` have piled up; a fragment is an extent."""
    ids = np.arange(zones, dtype=np.int64) if isinstance(zones, int) else zones
    stats = {d: np.zeros((ids.size, 5), dtype=np.int64) for d in DIRECTIONS}
    appends = np.zeros(ids.size, dtype=np.int64)
    op = pl.col("op").cast(pl.String)
    for frames in zone_ranges:
        pending: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {d: [] for d in DIRECTIONS}
        size = dict.fromkeys(DIRECTIONS, 0)
        for f in frames:
            for d, ops in DIRECTIONS.items():
                ev = f.filter(op.is_in(list(ops)) & (pl.col("nlb") > 0))
                start = ev["slba"].to_numpy().astype(np.int64)
                end = start + np.minimum(ev["nlb"].to_numpy().astype(np.int64), (1 << NLB_BITS) - 1)
                pending[d].append(_extents(start, end, zone_size_lba))
                size[d] += pending[d][-1][0].size
                if size[d] > merge_at:
                    pending[d] = [_extents(*map(np.concatenate, zip(*pending[d], strict=True)), zone_size_lba)]
                    size[d] = pending[d][0][0].size
            appended = f.filter(op == "zone_append")["zone"].to_numpy().astype(np.int64)
            appends += np.bincount(table_rows(appended, ids), minlength=ids.size)
        for d in DIRECTIONS:
            if pending[d]:
                start, end = _extents(*map(np.concatenate, zip(*pending[d], strict=True)), zone_size_lba)
                stats[d] += zone_fragments(start, end, table_rows(start // zone_size_lba, ids), ids.size)
    return frag_frame(stats, appends, ids, lba_bytes)


def _extents(start: np.ndarray, end: np.ndarray, zone_size_lba: int) -> tuple[np.ndarray, np.ndarray]:
    """Ranges [start, end) in any order -> their extents, sorted."""
    order = np.lexsort((end, start))
    return _merge_sorted(start[order], end[order], zone_size_lba)


@numba.njit(cache=True)
def _merge_sorted(start: np.ndarray, end: np.ndarray, zone_size_lba: int) -> tuple[np.ndarray, np.ndarray]:
    """Ranges sorted by start -> extents: a range joins the extent before it when both start in one zone and it
    starts at or before that extent's end (frag.zone_fragments' rule)."""
    out_s = np.empty(start.size, dtype=np.int64)
    out_e = np.empty(start.size, dtype=np.int64)
    k = -1
    zone = -1
    for i in range(start.size):
        z = start[i] // zone_size_lba
        if k < 0 or z != zone or start[i] > out_e[k]:
            k += 1
            out_s[k] = start[i]
            out_e[k] = end[i]
            zone = z
        elif end[i] > out_e[k]:
            out_e[k] = end[i]
    return out_s[: k + 1], out_e[: k + 1]


# --- the cache model ---------------------------------------------------------------------------------------------

class PageIds:
    """Page numbers as ids for the state arrays (indexed by page), with the highest seen; pages at or beyond
    `limit` (2^25 pages: a 128 GiB device at 4 KiB) are refused rather than allocating beyond memory."""

    def __init__(self, limit: int = 1 << 25) -> None:
        self.limit = limit
        self.n = 0

    def __call__(self, pages: np.ndarray) -> np.ndarray:
        if pages.size and int(pages.max()) >= self.limit:
            raise ZtbpError(f"page {int(pages.max())} is beyond the streaming cache model's {self.limit} pages: "
                            "use a larger --page-kib or the in-memory cachesim")
        if pages.size:
            self.n = max(self.n, int(pages.max()) + 1)
        return pages.astype(np.int64)


class CacheStream:
    """One pass over the reads in submission order: every online policy of analysis/cache_policies.py (lru,
    zone_lru, static_best) at one size, fed frame by frame, and with `sweep` the LRU stack distances (every cache
    size; LRU at this size is then read off them). Same figures as cachesim.simulate without Belady."""

    def __init__(self, meta: dict[str, Any], cache_mib: float, page_kib: int, hot_zones: list[int],
                 tree_slots: int = 1 << 20, sweep: bool = True) -> None:
        if page_kib <= 0:
            raise ZtbpError("--page-kib must be positive")
        if cache_mib <= 0:
            raise ZtbpError("--cache-mib must be positive")
        self.lba_bytes = meta["lba_bytes"]
        self.page_bytes = page_kib * 1024
        self.zone_bytes = meta["zone_size_lba"] * meta["lba_bytes"]
        self.cache_mib, self.page_kib = cache_mib, page_kib
        self.hot = np.asarray(hot_zones, dtype=np.int64)
        self.hot_zones = list(hot_zones)
        self.capacity = int(cache_mib * (1 << 20) // self.page_bytes)
        self.ids = PageIds()
        self.requests = 0
        self.read_commands = 0
        self.stack = StackDistances(tree_slots) if sweep else None
        # with the LRU curve at hand, LRU at this size is one point of it: no separate LRU run
        self.runs = {name: REGISTRY[name].start(self.capacity) for name in ONLINE if not (sweep and name == "lru")}

    def feed(self, frame: pl.DataFrame) -> None:
        """frame: events in submission order (op, slba, nlb); only the reads count."""
        reads = frame.filter((pl.col("op").cast(pl.String) == "read") & (pl.col("nlb") > 0))
        self.read_commands += reads.height
        pages, zones = page_requests(reads.with_columns(pl.col("op").cast(pl.String)), self.lba_bytes,
                                     self.page_bytes, self.zone_bytes)
        ids = self.ids(pages)
        if ids.size == 0:
            return
        self.requests += ids.size
        hot = np.isin(zones, self.hot)
        for run in self.runs.values():
            run.feed(ids, hot)
        if self.stack is not None:
            self.stack.feed(ids)

    def _hits(self, name: str) -> int:
        if name in self.runs:
            return self.runs[name].hits
        assert self.stack is not None
        return self.stack.hits(self.capacity)

    def result(self, sweep_mib: tuple[float, ...] = ()) -> dict[str, Any]:
        """cachesim.simulate's dict (belady left out; see analysis/shards.py); with sweep_mib (and `sweep`), the
        LRU hit ratio at each of those sizes."""
        n = max(1, self.requests)
        out: dict[str, Any] = {"requests": self.requests, "read_commands": self.read_commands,
                               "cache_mib": self.cache_mib, "page_kib": self.page_kib,
                               "cache_pages": self.capacity, "hot_zones": self.hot_zones,
                               **{name: self._hits(name) / n for name in ONLINE}}
        if sweep_mib:
            if self.stack is None:
                raise ValueError("a CacheStream made with sweep=False has no LRU curve")
            caps = [int(m * (1 << 20) // self.page_bytes) for m in sweep_mib]
            out["lru_sweep"] = [{"cache_mib": m, "lru": self.stack.hits(c) / max(1, self.requests) if self.requests
                                 else 0.0} for m, c in zip(sweep_mib, caps, strict=True)]
        return out


def cachesim_stream(frames: Iterable[pl.DataFrame], meta: dict[str, Any], cache_mib: float, page_kib: int,
                    hot_zones: list[int], sweep_mib: tuple[float, ...] = (), tree_slots: int = 1 << 20
                    ) -> dict[str, Any]:
    bad = [z for z in hot_zones if z >= meta["nr_zones"]]
    if bad:
        raise ZtbpError(f"hot zones {bad} are beyond the device's {meta['nr_zones']} zones")
    cs = CacheStream(meta, cache_mib, page_kib, hot_zones, tree_slots, sweep=bool(sweep_mib))
    for f in frames:
        cs.feed(f)
    return cs.result(sweep_mib)
