"""Benchmark: `ztbp ingest` of a synthetic run against polars reading the same CSV, each a whole process, side by
side in one run (target: ingest ≤ 1.5× the bare read).

Run with `just bench-ingest` (READS commands, default 3,000,000; ROUNDS pairs, default 5). The run is written once
by `ztbp synth`; each round runs the bare read (`polars.read_csv` of raw/nvme.csv in a fresh interpreter, what any
reader of the file pays) and the ingest (a fresh `python -m ztbp.cli ingest`, derived/ removed first, so every
round ingests from scratch: read, typed parse and checks, digest, sort, events.parquet) in turn, and the ratio is
taken pair by pair, so a machine whose speed drifts moves both. Then one ingest's steps are timed in-process.
Prints medians, min and max; the figures are a benchmark, not a timed test: these machines vary by 8–12 % from
run to run, more with other work on them.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.5
BARE = "import sys, polars as pl; pl.read_csv(sys.argv[1], skip_rows=1)"


def wall(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True)
    return time.perf_counter() - t0


def phases(run: Path) -> list[tuple[str, float]]:
    """One ingest's steps timed in this process: read, parse and check (with the digest beside them), the zone
    column and the sort into submission order, events.parquet written."""
    from ztbp.io import nvme
    from ztbp.paths import RunPaths

    paths = RunPaths(run)
    meta, header, report = nvme.open_source(paths)
    t0 = time.perf_counter()
    df, _, _ = nvme._read_body(paths.nvme_csv, header, meta["zone_size_lba"], report)
    t1 = time.perf_counter()
    df = nvme.submission_order(nvme.with_zone(df, meta["zone_size_lba"]))
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        nvme._write_events(df, Path(tmp) / "events.parquet")
    t3 = time.perf_counter()
    return [("read, parse, check, digest", t1 - t0), ("zone and sort", t2 - t1), ("events.parquet written", t3 - t2)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python pipelines/benchmarks/bench_ingest.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--reads", type=int, default=3_000_000, help="read commands of the run (default 3,000,000)")
    ap.add_argument("--rounds", type=int, default=5, help="pairs of runs (default 5)")
    args = ap.parse_args(argv)
    if not 1 <= args.rounds <= 50 or not 1000 <= args.reads <= 100_000_000:
        ap.error("--rounds in [1, 50], --reads in [1000, 100000000]")
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        run = Path(tmp) / "run"
        subprocess.run([sys.executable, "-m", "ztbp.cli", "synth", str(run), "--reads", str(args.reads)],
                       capture_output=True, check=True)
        csv = run / "raw" / "nvme.csv"
        bare_cmd = [sys.executable, "-c", BARE, str(csv)]
        ingest_cmd = [sys.executable, "-m", "ztbp.cli", "ingest", str(run)]
        wall(bare_cmd)  # warm-up: the file in the page cache, the interpreter's files too
        bare, ing = [], []
        for _ in range(args.rounds):
            bare.append(wall(bare_cmd))
            shutil.rmtree(run / "derived", ignore_errors=True)
            ing.append(wall(ingest_cmd))
        ratios = [i / b for i, b in zip(ing, bare, strict=True)]
        size = csv.stat().st_size
        print(f"bench-ingest: {args.reads:,} reads ({size / 2**20:,.0f} MiB of CSV), {args.rounds} pairs, whole "
              "process each")
        for label, xs in (("bare polars.read_csv", bare), ("ztbp ingest", ing)):
            print(f"  {label:<22} median {statistics.median(xs):6.3f} s  (min {min(xs):.3f}, max {max(xs):.3f})")
        med = statistics.median(ratios)
        print(f"  ingest / bare          median {med:6.2f}×   (min {min(ratios):.2f}, max {max(ratios):.2f}; "
              f"target ≤ {TARGET}: {'met' if med <= TARGET else 'MISSED'})")
        print("  where an ingest's time goes (its steps, in this process, after the imports):")
        for name, t in phases(run):
            print(f"    {t:6.3f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
