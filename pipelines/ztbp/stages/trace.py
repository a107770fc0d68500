"""The analyses of a run's NVMe trace in memory, one call each on a loaded `Run` (events read once, io/run.py).

Each calls the pure analysis of analysis/ and keeps the results worth keeping in the run's derived/ folder
(io/derived.py). Nothing here parses arguments or prints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from ..analysis.params import CHAIN_WINDOW, NTS_MIB, RECOMMEND_GAIN, TRAIN_SHARE, ClusterParams
from ..errors import ZtbpError
from ..io.derived import cached
from ..io.run import Run
from ..units import KIB, MIB, check_limit


def zones(run: Run) -> pl.DataFrame:
    """Per-zone reads, writes, appends, resets, bytes and read latency percentiles (analysis/zones.py)."""
    from ..analysis.zones import zone_table

    return zone_table(run.events, run.nr_zones, run.lba_bytes)


def opcodes(run: Run, op: str | None = None) -> pl.DataFrame:
    """Latency per NVMe opcode and zone action (analysis/opcodes.py), of every command or of one `op`."""
    from ..analysis.opcodes import opcode_table

    events = run.events if not op else run.events.filter(pl.col("op").cast(pl.String) == op)
    return opcode_table(events, run.lba_bytes)


def chains(run: Run, op: str = "read", nts_mib: float = NTS_MIB, window: int = CHAIN_WINDOW) -> dict[str, Any]:
    """Sequential chains of `op` and their share at or above the Natural Transfer Size (analysis/chains.py)."""
    from ..analysis.chains import chains_report

    check_chain_params(nts_mib, window)
    return chains_report(run.events, op, int(nts_mib * MIB), run.lba_bytes, window)


def check_chain_params(nts_mib: float, window: int) -> None:
    """The Natural Transfer Size (MiB) and the chain window in their ranges (units.LIMITS)."""
    check_limit("nts-mib", nts_mib)
    check_limit("chain-window", window, "--window")


def check_cache_params(cache_mib: float, page_kib: int) -> None:
    """A cache size and page in their ranges (units.LIMITS), the cache holding at least one page."""
    check_limit("cache-mib", cache_mib)
    check_limit("page-kib", page_kib)
    if not cache_mib * MIB >= page_kib * KIB:
        raise ZtbpError(f"a cache of {cache_mib} MiB holds no page of {page_kib} KiB: give a cache of at least one "
                        "page (the paper's device cache is 64 MiB of 4 KiB pages)")


def frag(run: Run) -> pl.DataFrame:
    """Contiguous fragments read and written per zone and the gaps between them (analysis/frag.py)."""
    from ..analysis.frag import frag_table

    return frag_table(run.events, run.nr_zones, run.lba_bytes, run.zone_size_lba)


def cluster(run: Run, params: ClusterParams = ClusterParams(),
            on_fit: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """DBSCAN hot zones of the run (analysis/cluster.py), kept in derived/cluster.json per parameters and trace."""
    from ..analysis.cluster import run_cluster

    return cached(run, "cluster", params.key(), lambda: run_cluster(run.events, run.meta, params, on_fit))


def check_zones(run: Run, zones: list[int]) -> list[int]:
    bad = [z for z in zones if z >= run.nr_zones]
    if bad:
        raise ZtbpError(f"hot zones {bad} are beyond the device's {run.nr_zones} zones")
    return zones


def simulate(run: Run, cache_mib: float, page_kib: int, hot_zones: list[int], with_sweep: bool = False,
             general: bool = True, policies: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Hit ratios of every cache policy on the run's reads (analysis/cachesim.py); general: also libCacheSim's
    general policies. `policies` names a subset instead (their hit ratios only, no sweep)."""
    from ..analysis.cachesim import Trace
    from ..analysis.cachesim import simulate as sim
    from ..io import libcachesim

    check_cache_params(cache_mib, page_kib)
    hot = check_zones(run, hot_zones)
    if policies is not None:
        return Trace(run.events, run.meta, page_kib).hit_ratios(cache_mib, hot, policies, libcachesim)
    return sim(run.events, run.meta, cache_mib, page_kib, hot, with_sweep, libcachesim if general else None)


def config(run: Run, cache_mib: float, page_kib: int, params: ClusterParams = ClusterParams(),
           train_share: float = TRAIN_SHARE, min_gain: float = RECOMMEND_GAIN,
           predicted: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's cache configuration, learnt on the first `train_share` of its reads and judged on the rest: the
    zones found there, the five sent, their hit ratios on the held-out reads and whether to send them. Pass a
    simulation of the whole run already made (`simulate`) to reuse it when it is for the zones sent."""
    from ..analysis.cachesim import Trace, time_split
    from ..analysis.cluster import run_cluster
    from ..writeback.config import make_config, sent_zones

    check_limit("min-gain", min_gain)
    check_limit("train-share", train_share)
    check_cache_params(cache_mib, page_kib)
    train, _, train_reads, test_reads = time_split(run.events, train_share)
    cl = run_cluster(train, run.meta, params)
    zones = [s["zone"] for s in sent_zones(cl.get("zone_scores", []))]
    held = Trace(run.events, run.meta, page_kib).held_out(cache_mib, zones, train_reads)
    held_out = {"train_share": train_share, "train_reads": train_reads, "test_reads": test_reads,
                "hot_zones": zones, **held, "gain": held["zone_lru"] - held["lru"]}
    if predicted is None or (sorted(predicted.get("hot_zones") or []), predicted.get("cache_mib"),
                             predicted.get("page_kib")) != (sorted(zones), cache_mib, page_kib):
        predicted = simulate(run, cache_mib, page_kib, zones, general=False)
    return make_config(run.meta, run.run_id, cl, predicted, held_out, cache_mib, params, min_gain)


def layers(run: Run, by: list[str] | None = None, op: str | None = None, mode: str | None = None
           ) -> dict[str, Any]:
    """The Table-I layer breakdown of a run with raw/layers.csv (analysis/layers.py), cross-checked against the
    run's NVMe trace, fio's own latency and the probe-overhead bench when the run has them."""
    from ..analysis.layers import layers_report

    raw, rep = run.layers
    try:
        fio_rows = run.fio_rows()
    except ZtbpError:
        fio_rows = None  # an unreadable fio.json drops the fio comparison only
    return layers_report(raw, rep.as_dict(), run_id=run.run_id, lba_bytes=run.lba_bytes,
                         lost=run.meta.get("lost_events", {}).get("layers"),
                         events=run.events if run.paths.nvme_csv.is_file() else None, fio_rows=fio_rows,
                         bench=run.bench(), by=by, op=op, mode=mode)
