"""Hot-zone benchmark (`just bench-cluster`, part of `just bench`): clustering time on large devices, and the cache
policies' speed — the project's LRU and Belady against libCacheSim's — on one page stream.

Target (issue: analysis at drive scale): 16,384 zones of 32 MiB — a 512 GiB drive; 16 TB of 1 GiB zones has as many
— cluster in ≤ 10 s of wall time (the whole of the clustering: both validations over the grid, its widening, the
final fit and the hot rule). The device is read all over: READS reads, a share of HOT_SHARE (0.6) on five hot zones
spread over the device, the rest uniform over every zone (cells of 1 MiB: 524,288 of them at 16,384 zones). Up to
IN_MEMORY reads the run is made in memory and clustered as `ztbp cluster` does (`run_cluster`, KFold's folds);
beyond, the reads are made and counted chunk by chunk as `ztbp stream` counts a dataset (ClusterCellStream: per
cell, time window and hashed fold; `count_s`), then clustered from those counts (`cluster_from_cells`). The first
call of each numba kernel compiles it (cached on disk afterwards); the figures are of a second, warm call, and the
compile time is printed beside them. Timings on a shared 2-core machine are noisy: the CPU time (all threads) is
printed beside the wall time; compare figures from one run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

TARGET_S = 10.0
TARGET_ZONES = 16384
HOT_SHARE = 0.6
IN_MEMORY = 20_000_000
COUNT_CHUNK = 10_000_000


def _hot_zones(zones: int) -> tuple[int, ...]:
    """Five hot zones spread over the device."""
    return tuple(sorted({max(0, min(zones - 1, int(zones * f))) for f in (0.001, 0.17, 0.37, 0.71, 0.98)}))


def cluster_case(zones: int, reads: int, seed: int = 1, hot_share: float = HOT_SHARE) -> dict[str, Any]:
    import numpy as np
    import polars as pl

    from ztbp.acquire.synth import PAGE, SynthGeometry, SynthOptions, plan, read_pages, synthesize
    from ztbp.analysis.chunked import ClusterCellStream
    from ztbp.analysis.cluster import cluster_from_cells, run_cluster
    from ztbp.analysis.params import ClusterParams

    geo = SynthGeometry(nr_zones=zones)
    hot = _hot_zones(zones)
    opts = SynthOptions(hot_zones=hot, hot_share=hot_share, region=None, prefill=False)
    meta = {"zone_size_lba": geo.zone_size_lba, "nr_zones": zones, "lba_bytes": geo.lba_bytes}
    count_s, path = 0.0, "in memory (KFold folds)"
    if reads <= IN_MEMORY:
        events = synthesize("hotzones", reads, seed, geo, opts)
        s, cpu = time.perf_counter(), time.process_time()
        r = run_cluster(events, meta)
    else:  # counted on the fly, as the streaming path counts a dataset
        p, rng = plan("hotzones", geo, opts), np.random.default_rng(seed)
        stream = ClusterCellStream(meta, ClusterParams(), reads)
        s = time.perf_counter()
        for lo in range(0, reads, COUNT_CHUNK):
            pages = read_pages(p, min(COUNT_CHUNK, reads - lo), rng, geo, seed)
            stream.feed(pl.DataFrame({"slba": pages.astype(np.uint64) * (PAGE // geo.lba_bytes)}))
        cells = stream.cells()
        count_s, path = time.perf_counter() - s, "counted on the fly (hashed folds)"
        s, cpu = time.perf_counter(), time.process_time()
        r = cluster_from_cells(cells, meta)
    dt, cpu = time.perf_counter() - s, time.process_time() - cpu
    return {"zones": zones, "zone_mib": geo.zone_bytes >> 20, "reads": reads, "hot_share": hot_share, "path": path,
            "count_s": count_s, "cells_read": r["cells_read"], "seconds": dt, "cpu_seconds": cpu,
            "fits": len(r["grid"]) * 10, "widened": len(r.get("widened", [])), "hot_zones": sorted(r["hot_zones"]),
            "expected": list(hot), "exact": sorted(r["hot_zones"]) == list(hot), "peak_rss_mib": _peak_mib()}


def _peak_mib() -> float:
    """This process's peak resident set so far, MiB (Linux)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def policy_speed(reads: int, seed: int = 7) -> dict[str, Any]:
    """CPU seconds of each policy over the page stream of a paper80 run of `reads` reads at 64 MiB (16,384 pages)."""
    from ztbp.acquire.synth import synthesize
    from ztbp.analysis.cache_policies import belady_hits, lru_hits
    from ztbp.analysis.cachesim import GENERAL, Trace
    from ztbp.io.libcachesim import hits

    tr = Trace(synthesize("paper80", reads, seed), {"zone_size_lba": 8192, "nr_zones": 64, "lba_bytes": 4096}, 4)
    cap = tr.capacity(64)
    out: dict[str, Any] = {"requests": tr.requests, "cache_pages": cap, "seconds": {}, "hits": {}}

    def timed(name: str, fn: Any) -> None:
        s = time.process_time()  # CPU time: all of it in this process (libCacheSim runs in it too)
        out["hits"][name] = int(fn())
        out["seconds"][name] = time.process_time() - s

    timed("project lru", lambda: lru_hits(tr.ids, cap))
    timed("project belady", lambda: belady_hits(tr.ids, cap))
    for name in ("LRU", "Belady", *GENERAL.values()):
        if name == "Belady":
            timed("libCacheSim Belady", lambda: _lcs_belady(tr.ids, cap))
        else:
            timed(f"libCacheSim {name}", lambda n=name: hits(tr.ids, [cap], (n,))[0][n])
    return out


def _lcs_belady(ids: Any, cap: int) -> int:
    """libCacheSim's Belady, given each request's next use (it needs the oracle)."""
    import tempfile

    import libcachesim as lcs
    import numpy as np

    from ztbp.analysis.cache_policies import NEVER, next_use
    from ztbp.io.libcachesim import ORACLE_GENERAL

    nxt = next_use(ids)
    rows = np.zeros(ids.size, dtype=ORACLE_GENERAL)
    rows["time"] = np.arange(ids.size)
    rows["obj_id"] = ids.astype(np.uint64) + 1
    rows["obj_size"] = 1
    rows["next_access"] = np.where(nxt == NEVER, -1, nxt)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.bin"
        rows.tofile(path)
        mr = lcs.Belady(cap, hashpower=20).process_trace(lcs.TraceReader(str(path),
                                                                        lcs.TraceType.ORACLE_GENERAL_TRACE))[0]
    return ids.size - round(mr * ids.size)


def run_bench(zones: list[int], reads: list[int], policy_reads: int, hot_share: float = HOT_SHARE) -> dict[str, Any]:
    s = time.perf_counter()
    cluster_case(64, 20_000)  # compiles the numba kernels (or loads them from the cache)
    warmup = time.perf_counter() - s
    cases = [cluster_case(z, n, hot_share=hot_share) for z in zones for n in reads]
    big = [c for c in cases if c["zones"] >= TARGET_ZONES]
    res: dict[str, Any] = {"warmup_s": warmup, "cluster": cases, "target_s": TARGET_S, "load_average": os.getloadavg(),
                           "meets": all(c["seconds"] <= TARGET_S and c["exact"] for c in big) if big else None,
                           "meets_cpu": all(c["cpu_seconds"] <= TARGET_S and c["exact"] for c in big) if big else None}
    if policy_reads:
        res["policies"] = policy_speed(policy_reads)
    return res


def report(res: dict[str, Any]) -> str:
    ok = {True: "ok", False: "MISSED", None: f"(no {TARGET_ZONES:,}-zone case)"}
    load = ", ".join(f"{v:.1f}" for v in res["load_average"])
    lines = [f"bench-cluster: numba warm-up {res['warmup_s']:.1f} s; load average {load} (wall time suffers when the "
             "machine is busy: CPU time beside it)"]
    for c in res["cluster"]:
        found = "exact" if c["exact"] else f"WRONG: {c['hot_zones']}"
        counted = f", counted in {c['count_s']:.1f} s" if c["count_s"] else ""
        lines.append(f"  {c['zones']:>5} zones of {c['zone_mib']} MiB, {c['reads']:,} reads ({c['path']}{counted}), "
                     f"{c['cells_read']:,} cells: {c['seconds']:6.2f} s wall, {c['cpu_seconds']:5.2f} s CPU "
                     f"({c['fits']} fits, grid widened {c['widened']}x; peak RSS {c['peak_rss_mib']:,.0f} MiB); "
                     f"hot zones {found}")
    verdict = ok[res["meets"]]
    if res["meets"] is False and res["meets_cpu"]:
        verdict = "MISSED on wall time only: the CPU time meets it (the machine is busy)"
    lines.append(f"  target: {TARGET_ZONES:,} zones in ≤ {TARGET_S:g} s  {verdict}")
    if "policies" in res:
        p = res["policies"]
        lines.append(f"  cache policies over {p['requests']:,} page requests at {p['cache_pages']:,} pages:")
        for name, secs in p["seconds"].items():
            lines.append(f"    {name:<22} {secs:6.2f} s CPU  {p['hits'][name]:>9,} hits")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python pipelines/benchmarks/bench_cluster.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--zones", default=f"1024,4096,{TARGET_ZONES}", help="comma-separated zone counts (32 MiB zones)")
    ap.add_argument("--reads", default="1000000",
                    help=f"comma-separated reads of the clustering cases (default 1 M; above {IN_MEMORY:,} counted on "
                         "the fly)")
    ap.add_argument("--hot-share", type=float, default=HOT_SHARE, help="share of the reads on the five hot zones")
    ap.add_argument("--policy-reads", type=int, default=1_000_000,
                    help="reads of the cache-policy speed case (0: skip it; default 1 M)")
    ap.add_argument("--json-out", type=Path, help="also write the figures as JSON")
    args = ap.parse_args(argv)
    try:
        zones = [int(z) for z in args.zones.split(",") if z.strip()]
        reads = [int(n) for n in args.reads.split(",") if n.strip()]
    except ValueError:
        ap.error(f"--zones {args.zones!r} / --reads {args.reads!r}: give counts separated by commas, e.g. 1024,4096")
    if not zones or not reads or min(zones) < 16 or min(reads) < 1000 or not 0 <= args.hot_share <= 1:
        ap.error("--zones ≥ 16, --reads ≥ 1000 (at least one each), --hot-share in [0, 1]")
    res = run_bench(zones, reads, args.policy_reads, args.hot_share)
    print(report(res))
    if args.json_out:
        args.json_out.write_text(json.dumps(res, indent=2) + "\n")
    return 0 if res["meets_cpu"] is not False else 1  # a busy machine alone does not fail `just bench`


if __name__ == "__main__":
    sys.exit(main())
