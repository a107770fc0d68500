"""The analyses of a run through its partitioned events dataset (io/stream.py), never loading the run in memory.

One call per analysis, each over `Parts` (lazy scans, windows in submission order, zone ranges), calling the pure
streaming functions of analysis/streaming.py; `analyse` runs a chosen set and returns one dict. Nothing here parses
arguments or prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import polars as pl

from .analysis.params import CACHE_MIB, CHAIN_WINDOW, NTS_MIB, PAGE_KIB, SWEEP_MIB
from .io.stream import Parts
from .units import MIB

ANALYSES = ("zones", "opcodes", "cells", "cluster", "chains", "frag", "cachesim")
#: columns the ordered and per-zone passes read
PASS_COLUMNS = ["op", "nsid", "slba", "nlb", "zone"]


def zones(parts: Parts, meta: dict[str, Any]) -> pl.DataFrame:
    from .analysis.streaming import zone_table_lazy

    return zone_table_lazy(parts.scan(), meta["nr_zones"], meta["lba_bytes"])


def opcodes(parts: Parts, meta: dict[str, Any]) -> pl.DataFrame:
    from .analysis.streaming import opcode_table_lazy

    return opcode_table_lazy(parts.scan(), meta["lba_bytes"])


def cells(parts: Parts, meta: dict[str, Any], cells_per_zone: int = 32) -> pl.DataFrame:
    from .analysis.streaming import cell_counts_lazy

    return cell_counts_lazy(parts.scan(), meta, cells_per_zone)


def cluster(parts: Parts, meta: dict[str, Any], params: Any = None) -> dict[str, Any]:
    """The hot zones (analysis/cluster.py) from one pass over the reads in time order (per-cell aggregates); the
    KFold scores come from hashed folds (streaming.ClusterCellStream), the time validation is exact."""
    from .analysis.cluster import check_params, cluster_from_cells
    from .analysis.params import ClusterParams
    from .analysis.streaming import ENGINE, ClusterCellStream

    params = params or ClusterParams()
    check_params(params)
    where = pl.col("op").cast(pl.String) == "read"
    n = parts.scan().filter(where).select(pl.len()).collect(engine=ENGINE).item()
    acc = ClusterCellStream(meta, params, n)
    for frame in parts.ordered(["slba"], where):
        acc.feed(frame)
    res = cluster_from_cells(acc.cells(), meta, params)
    res["folds"] = "hash"
    return res


def chains(parts: Parts, meta: dict[str, Any], op: str = "read", nts_mib: float = NTS_MIB,
           window: int = CHAIN_WINDOW) -> dict[str, Any]:
    from .analysis.streaming import chains_report_stream

    where = (pl.col("op").cast(pl.String) == op) & (pl.col("nlb") > 0)
    return chains_report_stream(parts.ordered(PASS_COLUMNS, where), op, int(nts_mib * MIB), meta["lba_bytes"],
                                window)


def frag(parts: Parts, meta: dict[str, Any]) -> pl.DataFrame:
    from .analysis.streaming import frag_table_stream

    top = parts.scan().select(pl.col("zone").max()).collect(engine="streaming").item()
    n_zones = max(meta["nr_zones"], int(top) + 1) if top is not None else meta["nr_zones"]
    where = pl.col("op").cast(pl.String).is_in(["read", "write", "write_zeroes", "zone_append"])
    return frag_table_stream(parts.by_zone_range(PASS_COLUMNS, where), n_zones, meta["lba_bytes"],
                             meta["zone_size_lba"])


def cachesim(parts: Parts, meta: dict[str, Any], cache_mib: float = CACHE_MIB, page_kib: int = PAGE_KIB,
             hot_zones: list[int] | None = None, sweep: bool = True) -> dict[str, Any]:
    """lru, zone_lru, static_best at cache_mib and the exact LRU curve at every size of SWEEP_MIB, in one pass.
    Hot zones: given, else the workload's (meta.json), else none."""
    from .analysis.streaming import cachesim_stream

    hot = hot_zones if hot_zones is not None else list(meta.get("workload", {}).get("hot_zones", []))
    where = (pl.col("op").cast(pl.String) == "read") & (pl.col("nlb") > 0)
    return cachesim_stream(parts.ordered(PASS_COLUMNS, where), meta, cache_mib, page_kib, hot,
                           SWEEP_MIB if sweep else ())


def shards(parts: Parts, meta: dict[str, Any], rate: float, cache_mib: float = CACHE_MIB, page_kib: int = PAGE_KIB,
           hot_zones: list[int] | None = None, seed: int = 0) -> dict[str, Any]:
    """SHARDS estimate of every policy but Belady's (analysis/shards.py) from the dataset's files as they lie: only
    the sample is put in submission order, the trace is never sorted."""
    from .analysis.cachesim import POLICIES
    from .analysis.shards import estimate

    hot = hot_zones if hot_zones is not None else list(meta.get("workload", {}).get("hot_zones", []))
    where = (pl.col("op").cast(pl.String) == "read") & (pl.col("nlb") > 0)
    return estimate(parts.unordered(["op", "slba", "nlb"], where), meta, cache_mib, page_kib, hot, rate, seed,
                    tuple(p for p in POLICIES if p != "belady"))


STAGES: dict[str, Callable[[Parts, dict[str, Any]], Any]] = {
    "zones": zones, "opcodes": opcodes, "cells": cells, "cluster": cluster, "chains": chains, "frag": frag,
    "cachesim": cachesim}


def analyse(parts: Parts, meta: dict[str, Any], which: tuple[str, ...] = ANALYSES) -> dict[str, Any]:
    """Run the chosen analyses; frames come back as lists of row dicts, with each analysis' time in seconds."""
    out: dict[str, Any] = {"rows": parts.rows, "seconds": {}}
    for name in which:
        t = time.perf_counter()
        res = STAGES[name](parts, meta)
        out["seconds"][name] = time.perf_counter() - t
        out[name] = res.to_dicts() if isinstance(res, pl.DataFrame) else res
    return out
