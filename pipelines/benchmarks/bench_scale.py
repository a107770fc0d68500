"""Scale benchmarks (`just bench-scale`): beyond one machine's memory, and beyond one machine.

  ingest    N rows of synthetic `# ztbp nvme v1` CSV, written in chunks, then streamed to partitioned Parquet
            (io/parts.py): rows/s and peak RSS of the ingest, bytes of the CSV and of the dataset.
  analyses  N synthetic events written straight to partitioned Parquet (no CSV; or --dataset, written before),
            then every streaming analysis (zones, opcodes, cells, the clustering, chains, frag, the cache model in
            one pass) and the SHARDS estimates at 1 % and 0.1 % against the exact streamed figures, each in a
            process of its own: its time, CPU seconds and peak RSS.
  shards    SHARDS against the exact in-memory simulation of every policy (Belady too) on a run of N events.
  batch     R small synthetic runs analysed by `ztbp batch` on a 2-worker local cluster against the sequential
            loop: wall time of each, identical results; and one run's per-zone and per-cell aggregates over its
            partitions on the cluster against the streaming path.

Each measured step runs in a child process so its peak RSS is its own. Everything is written under --workdir
(default: a temporary folder, removed at the end unless --keep) and every step reports the bytes it wrote.
The synthetic workload is paper80-like: 90 % 4 KiB reads (80 % of them in 5 hot zones), 10 % 128 KiB sequential
writes, at 300 k commands/s (a real ZNS drive), 64 zones of 32 MiB. Timings on a shared 2-core machine are noisy.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ztbp.acquire.patterns import HOT_ZONES
from ztbp.contract import NVME_COLUMNS, NVME_VERSION_LINE, new_meta, write_meta
from ztbp.paths import RunPaths

CHUNK = 4_000_000
IOPS = 300_000.0
LBA_BYTES, ZONE_LBA, NR_ZONES = 4096, 8192, 64  # 64 zones of 32 MiB
HOT = np.array(HOT_ZONES)
TARGET_RSS_GIB = 4.0
SHARDS_SEEDS = 5  # samples per rate in the in-memory comparison (mean absolute error beside the first sample's)


def _paper80_pages(n: int, rng: np.random.Generator) -> np.ndarray:
    """4 KiB pages: 80 % in a uniformly chosen hot zone, else uniform in [10 MiB, 1 GiB) (the paper's paper80)."""
    hot = HOT[rng.integers(0, HOT.size, n)] * ZONE_LBA + rng.integers(0, ZONE_LBA, n)
    return np.where(rng.random(n) < 0.8, hot, rng.integers(10 * 256, 1024 * 256, n))


def synth_chunks(n: int, seed: int = 1, chunk: int = CHUNK) -> Iterator[pl.DataFrame]:
    """n events in the contract's columns, chunk by chunk, in submission order."""
    rng = np.random.default_rng(seed)
    t0 = 1_000_000_000.0
    wlba = 0
    done = 0
    while done < n:
        m = min(chunk, n - done)
        is_read = rng.random(m) < 0.9
        nr = int(is_read.sum())
        slba = np.empty(m, dtype=np.uint64)
        slba[is_read] = _paper80_pages(nr, rng).astype(np.uint64)
        nw = m - nr
        w = (wlba + 32 * np.arange(nw, dtype=np.int64)) % (NR_ZONES * ZONE_LBA)
        wlba = int((wlba + 32 * nw) % (NR_ZONES * ZONE_LBA))
        slba[~is_read] = w.astype(np.uint64)
        ts = t0 + np.cumsum(rng.exponential(1e9 / IOPS, m))
        t0 = float(ts[-1])
        lat = (np.where(is_read, 80_000.0, 40_000.0) * rng.lognormal(0.0, 0.35, m)).astype(np.uint64)
        idx = np.arange(done, done + m)
        yield pl.DataFrame({
            "ts_ns": ts.astype(np.uint64), "lat_ns": lat, "ctrl": np.zeros(m, np.uint32),
            "qid": (1 + idx % 4).astype(np.uint32), "cid": ((idx // 4) % 1024).astype(np.uint32),
            "nsid": np.ones(m, np.uint32), "opcode": np.where(is_read, 2, 1).astype(np.uint8),
            "op": np.where(is_read, "read", "write"), "slba": slba,
            "nlb": np.where(is_read, 1, 32).astype(np.uint32), "zone_action": np.full(m, ""),
            "status": np.zeros(m, np.uint16)}).select(NVME_COLUMNS)
        done += m


def _meta(rp: RunPaths, n: int) -> None:
    meta = new_meta(device="nvme0n1", lba_bytes=LBA_BYTES, zone_size_lba=ZONE_LBA, zone_cap_lba=ZONE_LBA,
                    nr_zones=NR_ZONES, synthetic=True, backend="bench",
                    workload={"name": "bench-paper80", "events": n, "hot_zones": HOT.tolist()})
    meta["lost_events"] = {"nvme": 0}
    write_meta(rp, meta)


def write_csv_run(root: Path, n: int) -> dict[str, Any]:
    rp = RunPaths(root)
    rp.raw.mkdir(parents=True, exist_ok=True)
    _meta(rp, n)
    t = time.perf_counter()
    with rp.nvme_csv.open("w") as f:
        f.write(NVME_VERSION_LINE + "\n" + ",".join(NVME_COLUMNS) + "\n")
        for df in synth_chunks(n):
            df.write_csv(f, include_header=False, quote_style="never")
    return {"csv_bytes": rp.nvme_csv.stat().st_size, "write_csv_s": time.perf_counter() - t}


def write_parts_run(root: Path, n: int) -> dict[str, Any]:
    from ztbp.io.layout import Layout
    from ztbp.io.parts import PartsWriter

    rp = RunPaths(root)
    _meta(rp, n)
    t = time.perf_counter()
    w = PartsWriter(rp.events_parts, Layout.for_meta(json.loads(rp.meta.read_text())))
    for df in synth_chunks(n):
        w.write(df.with_columns(pl.col("op").cast(pl.Enum(["read", "write"]))))
    m = w.close(ingest={"source": "bench: written straight to Parquet"})
    return {"parquet_bytes": m["bytes"], "files": m["files"], "write_parts_s": time.perf_counter() - t}


def _rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)


def _cpu_s() -> float:
    """CPU seconds of this process so far, user + system (on a shared machine, beside the wall time)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def child_ingest(root: Path) -> dict[str, Any]:
    from ztbp.io.parts import ingest_stream

    t = time.perf_counter()
    m = ingest_stream(RunPaths(root))
    s = time.perf_counter() - t
    return {"rows": m["rows"], "ingest_s": s, "rows_per_s": m["rows"] / s, "parquet_bytes": m["bytes"],
            "files": m["files"], "peak_rss_gib": _rss_gib(), "cpu_s": _cpu_s()}


def child_analysis(root: Path, name: str) -> dict[str, Any]:
    """One streamed stage (stages.STREAMED) of the dataset, in a process of its own: its time and peak RSS."""
    from ztbp import stages
    from ztbp.io.run import load

    run = load(root, events=False)
    res = stages.analyse_timed(run, (name,), "streamed")
    out: dict[str, Any] = {"rows": run.parts.rows, "seconds": res["seconds"][name], "peak_rss_gib": _rss_gib(),
                           "cpu_s": _cpu_s()}
    r = res[name]
    if name == "zones":
        out["hot_zones_by_reads"] = [z["zone"] for z in sorted(r, key=lambda z: -z["reads"])[:5]]
    elif name == "cluster":
        out["cluster"] = {k: r.get(k) for k in ("hot_zones", "eps", "min_samples", "silhouette", "reads",
                                                "cells_read", "widened")}
    elif name == "cachesim":
        out["cachesim"] = {k: r[k] for k in ("requests", "lru", "zone_lru", "static_best")}
    return out


def child_sample(root: Path, rate: str) -> dict[str, Any]:
    """SHARDS from the dataset's files as they lie (streamed.shards), in a process of its own."""
    from ztbp.io.run import load
    from ztbp.stages import streamed

    run = load(root, events=False)
    t = time.perf_counter()
    est = streamed.shards(run, float(rate), 64, 4, list(HOT_ZONES))
    return {**est, "seconds": time.perf_counter() - t, "peak_rss_gib": _rss_gib(), "cpu_s": _cpu_s()}


def child_shards(root: Path) -> dict[str, Any]:
    from ztbp.analysis.shards import compare
    from ztbp.io.libcachesim import sampled
    from ztbp.io.run import load

    run = load(root)
    res = compare(run.events, run.meta, 64, 4, list(HOT_ZONES), (0.01, 0.001), seeds=SHARDS_SEEDS, peer=sampled)
    res["peak_rss_gib"] = _rss_gib()
    return res


CHILDREN = {"ingest": child_ingest, "shards": child_shards, "analysis": child_analysis, "sample": child_sample}


def _child(kind: str, root: Path, *args: str) -> dict[str, Any]:
    p = subprocess.run([sys.executable, __file__, "--child", kind, str(root), *args],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"bench-scale: the {kind} child failed:\n{p.stderr[-4000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def bench_ingest(work: Path, rows: int) -> dict[str, Any]:
    root = work / "ingest"
    print(f"bench-scale ingest: writing {rows:,} CSV rows to {root}/raw/nvme.csv …", flush=True)
    w = write_csv_run(root, rows)
    print(f"  wrote {w['csv_bytes'] / 2**30:.2f} GiB of CSV in {w['write_csv_s']:.0f} s; streaming it …", flush=True)
    res = {**w, **_child("ingest", root)}
    res["meets_rss"] = res["peak_rss_gib"] <= TARGET_RSS_GIB
    print(f"  ingest {res['rows']:,} rows in {res['ingest_s']:.1f} s = {res['rows_per_s'] / 1e6:.2f} M rows/s, "
          f"({res['cpu_s']:.0f} CPU s), peak RSS {res['peak_rss_gib']:.2f} GiB, wrote "
          f"{res['parquet_bytes'] / 2**30:.2f} GiB of Parquet in {res['files']} files", flush=True)
    return res


def bench_analyses(work: Path, events: int, dataset: Path | None = None, only: tuple[str, ...] = ()
                   ) -> dict[str, Any]:
    """Every streaming analysis, and SHARDS at 1 % and 0.1 %, each in a process of its own (its own peak RSS), on
    `events` events written straight to partitioned Parquet — or on the run `dataset` written before."""
    from ztbp.stages import STREAMED

    if dataset is None:
        root = work / "analyses"
        print(f"bench-scale analyses: writing {events:,} events straight to {root}/derived/events-parts …",
              flush=True)
        res: dict[str, Any] = write_parts_run(root, events)
        print(f"  wrote {res['parquet_bytes'] / 2**30:.2f} GiB of Parquet in {res['files']} files in "
              f"{res['write_parts_s']:.0f} s; analysing …", flush=True)
    else:
        root, res = dataset, {"dataset": str(dataset)}
        print(f"bench-scale analyses: the dataset of {dataset}", flush=True)
    res["analyses"] = {}
    for name in [a for a in STREAMED if not only or a in only]:
        r = res["analyses"][name] = _child("analysis", root, name)
        res["rows"] = r["rows"]
        print(f"  {name:<9} {r['seconds']:8.1f} s  ({r['rows'] / r['seconds'] / 1e6:5.1f} M events/s)  peak RSS "
              f"{r['peak_rss_gib']:5.2f} GiB  {r['cpu_s']:6.0f} CPU s", flush=True)
    res["shards"] = []
    for rate in (0.01, 0.001) if "cachesim" in res["analyses"] else ():
        exact = res["analyses"]["cachesim"]["cachesim"]
        r = _child("sample", root, str(rate))
        r["speedup_vs_exact_stream"] = res["analyses"]["cachesim"]["seconds"] / r["seconds"]
        if r["hit_ratio"] is None:  # a sample that holds no request: no estimate
            print(f"  SHARDS {rate:.3f}: the sample holds no request of {r['requests']:,}: no estimate", flush=True)
            res["shards"].append(r)
            continue
        r["error"] = {p: r["hit_ratio"][p] - exact[p] for p in ("lru", "zone_lru", "static_best")}
        r["error_adj"] = {p: r["hit_ratio_adj"][p] - exact[p] for p in ("lru", "zone_lru", "static_best")}
        res["shards"].append(r)
        print(f"  SHARDS {rate:.3f}: {r['sampled_requests']:,} sampled, {r['seconds']:.1f} s "
              f"({r['speedup_vs_exact_stream']:.1f}x the exact streamed cache pass), peak RSS "
              f"{r['peak_rss_gib']:.2f} GiB, error " + ", ".join(f"{p} {e:+.4f}" for p, e in r["error"].items())
              + "; SHARDS_adj " + ", ".join(f"{p} {e:+.4f}" for p, e in r["error_adj"].items()), flush=True)
    res["peak_rss_gib"] = max(r["peak_rss_gib"] for r in [*res["analyses"].values(), *res["shards"]])
    res["meets_rss"] = res["peak_rss_gib"] <= TARGET_RSS_GIB
    print(f"  peak RSS of any step {res['peak_rss_gib']:.2f} GiB (target ≤ {TARGET_RSS_GIB})", flush=True)
    if "cluster" in res["analyses"]:
        c = res["analyses"]["cluster"]["cluster"]
        print(f"  hot zones {c['hot_zones']} (eps {c['eps']}, min_samples {c['min_samples']}) from {c['reads']:,} "
              f"reads in {c['cells_read']:,} cells", flush=True)
    return res


def bench_shards(work: Path, events: int) -> dict[str, Any]:
    from ztbp.io.nvme import ingest

    root = work / "shards"
    write_csv_run(root, events)
    ingest(RunPaths(root))
    res = _child("shards", root)
    print(f"bench-scale shards: {res['requests']:,} page requests, exact (every policy) "
          f"{res['exact_seconds']:.1f} s after {res['prepare_seconds']:.1f} s of preparation")
    for r in res["rates"]:
        print(f"  rate {r['rate']:.3f}: {r['sampled_requests']:,} sampled, {r['seconds']:.2f} s "
              f"({r['speedup']:.0f}x; {r['speedup_with_prepare']:.1f}x with preparation), error "
              + ", ".join(f"{p} {e:+.4f}" for p, e in r["error"].items()) + "; SHARDS_adj "
              + ", ".join(f"{p} {e:+.4f}" for p, e in r["error_adj"].items()), flush=True)
        print(f"    mean |error| over {r['seeds']} seeds: "
              + ", ".join(f"{p} {e:.4f}" for p, e in r["mean_abs_error"].items()) + "; SHARDS_adj "
              + ", ".join(f"{p} {e:.4f}" for p, e in r["mean_abs_error_adj"].items())
              + (f"; libCacheSim's spatial sampler lru {r['libcachesim']['mean_abs_error']:.4f}"
                 if "libcachesim" in r else ""), flush=True)
    return res


def bench_batch(work: Path, runs: int, reads: int) -> dict[str, Any]:
    from polars.testing import assert_frame_equal

    from ztbp.acquire.synth import write_run
    from ztbp.analysis.chunked import cell_counts_lazy, zone_table_lazy
    from ztbp.contract import read_meta
    from ztbp.control.batch import client, partition_aggregates, run_batch
    from ztbp.io.parts import Parts

    base = work / "batch"
    dirs = []
    for i in range(runs):
        d = base / f"run{i:03d}"
        write_run(d, ("paper80", "paper60", "uniform", "zipf", "seqread")[i % 5], reads, seed=i, overwrite=True)
        dirs.append(str(d))
    clear = (lambda: [shutil.rmtree(Path(d) / "derived", ignore_errors=True) for d in dirs])  # noqa: E731
    clear()
    seq = run_batch(dirs, sequential=True)
    clear()
    par = run_batch(dirs, workers=2)
    same = all(a.get("digest") == b.get("digest") and "digest" in a for a, b in zip(seq["runs"], par["runs"],
                                                                                     strict=True))
    res: dict[str, Any] = {"runs": runs, "reads_per_run": reads, "sequential_s": seq["seconds"],
                           "cluster_s": par["seconds"], "workers": par["workers"], "identical": same,
                           "bytes": _du(base)}
    print(f"bench-scale batch: {runs} runs of {reads:,} reads: sequential {seq['seconds']:.1f} s, 2-worker "
          f"cluster {par['seconds']:.1f} s ({seq['seconds'] / par['seconds']:.2f}x), identical: {same}", flush=True)
    big = work / "analyses"
    if (big / "derived" / "events-parts" / "dataset.json").is_file():
        meta = read_meta(RunPaths(big))
        parts = Parts(RunPaths(big).events_parts)
        t = time.perf_counter()
        lf = parts.scan()
        zs, cs = zone_table_lazy(lf, meta["nr_zones"], meta["lba_bytes"]), cell_counts_lazy(lf, meta, 32)
        stream_s = time.perf_counter() - t
        with client(None, 2) as c:
            t = time.perf_counter()
            agg = partition_aggregates(parts.root, meta, c)
            cluster_s = time.perf_counter() - t
        assert_frame_equal(agg["zones"], zs)
        assert_frame_equal(agg["cells"], cs)
        res["aggregates"] = {"rows": parts.rows, "files": len(parts.files()), "streaming_s": stream_s,
                             "cluster_s": cluster_s, "identical": True}
        print(f"  {parts.rows:,}-event run, zone + cell aggregates: streaming {stream_s:.1f} s, over its "
              f"{len(parts.files())} partitions on the cluster {cluster_s:.1f} s, identical", flush=True)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python pipelines/benchmarks/bench_scale.py", description=__doc__.splitlines()[0])
    ap.add_argument("steps", nargs="*", default=["ingest", "analyses", "shards", "batch"],
                    help="which benchmarks (default all): ingest analyses shards batch")
    ap.add_argument("--csv-rows", type=int, default=200_000_000, help="rows of the ingest CSV (default 200 M)")
    ap.add_argument("--events", type=int, default=1_000_000_000,
                    help="events of the partitioned run the analyses read (default 1 B)")
    ap.add_argument("--shards-events", type=int, default=20_000_000,
                    help="events of the in-memory run SHARDS is compared on (default 20 M)")
    ap.add_argument("--runs", type=int, default=50, help="runs of the batch benchmark (default 50)")
    ap.add_argument("--run-reads", type=int, default=20_000, help="reads per batch run (default 20 k)")
    ap.add_argument("--dataset", type=Path,
                    help="analyses: a run directory whose derived/events-parts was written before (nothing written)")
    ap.add_argument("--only", default="", help="analyses: a comma list of the analyses to run (default all; "
                                                "SHARDS runs with cachesim)")
    ap.add_argument("--workdir", type=Path, help="write here (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep what was written")
    ap.add_argument("--json-out", type=Path, help="also write the figures as JSON")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(CHILDREN[args.child[0]](Path(args.child[1]), *args.child[2:]), default=float))
        return 0
    work = args.workdir or Path(tempfile.mkdtemp(prefix="ztbp-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {}
    try:
        for step in args.steps:
            if step == "ingest":
                out["ingest"] = bench_ingest(work, args.csv_rows)
                if not args.keep:
                    shutil.rmtree(work / "ingest")
            elif step == "analyses":
                out["analyses"] = bench_analyses(work, args.events, args.dataset,
                                                 tuple(a for a in args.only.split(",") if a))
            elif step == "shards":
                out["shards"] = bench_shards(work, args.shards_events)
            elif step == "batch":
                out["batch"] = bench_batch(work, args.runs, args.run_reads)
            else:
                raise SystemExit(f"bench-scale: unknown step {step!r}")
    finally:
        if args.json_out:
            args.json_out.write_text(json.dumps(out, indent=2, default=float) + "\n")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
