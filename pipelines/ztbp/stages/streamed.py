"""The analyses of a run through its partitioned events dataset (io/parts.py), never loading the run in memory.

One call per analysis on a `Run` opened without its events (`load(RUN, events=False)`): each reads `run.parts`
(lazy scans, windows in submission order, zone ranges) and calls the pure streaming functions of
analysis/chunked.py. Nothing here parses arguments or prints.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ..analysis.params import CACHE_MIB, CHAIN_WINDOW, NTS_MIB, PAGE_KIB, SWEEP_MIB
from ..io.run import Run
from ..units import MIB, check_limit
from .trace import check_cache_params, check_chain_params

#: columns the ordered and per-zone passes read
PASS_COLUMNS = ["op", "nsid", "slba", "nlb", "zone"]


def _workload_hot(meta: dict[str, Any], hot_zones: list[int] | None) -> list[int]:
    """Hot zones: given, else the workload's (meta.json), else none."""
    return hot_zones if hot_zones is not None else list(meta.get("workload", {}).get("hot_zones") or [])


def _reads() -> pl.Expr:
    return (pl.col("op").cast(pl.String) == "read") & (pl.col("nlb") > 0)


def zones(run: Run) -> pl.DataFrame:
    from ..analysis.chunked import zone_table_lazy

    return zone_table_lazy(run.parts.scan(), run.nr_zones, run.lba_bytes)


def opcodes(run: Run) -> pl.DataFrame:
    from ..analysis.chunked import opcode_table_lazy

    return opcode_table_lazy(run.parts.scan(), run.lba_bytes)


def cells(run: Run, cells_per_zone: int = 32) -> pl.DataFrame:
    from ..analysis.chunked import cell_counts_lazy

    return cell_counts_lazy(run.parts.scan(), run.meta, cells_per_zone)


def cluster(run: Run, params: Any = None) -> dict[str, Any]:
    """The hot zones (analysis/cluster.py) from one pass over the reads in time order (per-cell aggregates); the
    KFold scores come from hashed folds (streaming.ClusterCellStream), the time validation is exact."""
    from ..analysis.chunked import ENGINE, ClusterCellStream
    from ..analysis.cluster import check_params, cluster_from_cells
    from ..analysis.params import ClusterParams

    params = params or ClusterParams()
    check_params(params)
    parts = run.parts
    where = pl.col("op").cast(pl.String) == "read"
    n = parts.scan().filter(where).select(pl.len()).collect(engine=ENGINE).item()
    acc = ClusterCellStream(run.meta, params, n)
    for frame in parts.ordered(["slba"], where):
        acc.feed(frame)
    res = cluster_from_cells(acc.cells(), run.meta, params)
    res["folds"] = "hash"
    return res


def chains(run: Run, op: str = "read", nts_mib: float = NTS_MIB, window: int = CHAIN_WINDOW) -> dict[str, Any]:
    from ..analysis.chunked import chains_report_stream

    check_chain_params(nts_mib, window)
    where = (pl.col("op").cast(pl.String) == op) & (pl.col("nlb") > 0)
    return chains_report_stream(run.parts.ordered(PASS_COLUMNS, where), op, int(nts_mib * MIB), run.lba_bytes,
                                window)


def frag(run: Run) -> pl.DataFrame:
    from ..analysis.chunked import frag_table_stream
    from ..analysis.frag import table_zones

    parts, meta = run.parts, run.meta
    nr = meta["nr_zones"]
    beyond = parts.scan().filter(pl.col("zone") >= nr).select(pl.col("zone").unique()).collect(engine="streaming")
    where = pl.col("op").cast(pl.String).is_in(["read", "write", "write_zeroes", "zone_append"])
    return frag_table_stream(parts.by_zone_range(PASS_COLUMNS, where), table_zones(nr, beyond["zone"].to_numpy()),
                             meta["lba_bytes"], meta["zone_size_lba"])


def cachesim(run: Run, cache_mib: float = CACHE_MIB, page_kib: int = PAGE_KIB, hot_zones: list[int] | None = None,
             sweep: bool = True) -> dict[str, Any]:
    """lru, zone_lru, static_best at cache_mib and the exact LRU curve at every size of SWEEP_MIB, in one pass.
    Hot zones: given, else the workload's (meta.json), else none."""
    from ..analysis.chunked import cachesim_stream

    check_cache_params(cache_mib, page_kib)
    return cachesim_stream(run.parts.ordered(PASS_COLUMNS, _reads()), run.meta, cache_mib, page_kib,
                           _workload_hot(run.meta, hot_zones), SWEEP_MIB if sweep else ())


def shards(run: Run, rate: float, cache_mib: float = CACHE_MIB, page_kib: int = PAGE_KIB,
           hot_zones: list[int] | None = None, seed: int = 0) -> dict[str, Any]:
    """SHARDS estimate of every policy but Belady's (analysis/shards.py) from the dataset's files as they lie: only
    the sample is put in submission order, the trace is never sorted."""
    from ..analysis.cachesim import POLICIES
    from ..analysis.shards import estimate

    check_cache_params(cache_mib, page_kib)
    check_limit("rate", rate, "--rates")
    check_limit("seed", seed)
    return estimate(run.parts.unordered(["op", "slba", "nlb"], _reads()), run.meta, cache_mib, page_kib,
                    _workload_hot(run.meta, hot_zones), rate, seed, tuple(p for p in POLICIES if p != "belady"))
