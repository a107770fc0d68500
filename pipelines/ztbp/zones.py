"""`ztbp zones`: per-zone heat — reads, writes, appends, resets, bytes and read latency percentiles."""

from __future__ import annotations

import argparse
from typing import Any

import polars as pl

from .cli import emit
from .contract import read_meta
from .ingest import load_events
from .paths import run_paths

ZONE_KEYS = ("zone", "reads", "writes", "appends", "resets", "read_bytes", "write_bytes",
             "read_lat_p50_us", "read_lat_p99_us")


def zone_table(events: pl.DataFrame, nr_zones: int, lba_bytes: int) -> pl.DataFrame:
    """One row per zone 0..nr_zones-1 (zeros where idle), plus any out-of-range zone that appears."""
    op = pl.col("op")
    nbytes = pl.col("nlb").cast(pl.UInt64) * lba_bytes
    is_read = op == "read"
    agg = events.group_by("zone").agg(
        is_read.sum().alias("reads"),
        (op == "write").sum().alias("writes"),
        (op == "zone_append").sum().alias("appends"),
        (pl.col("zone_action") == "reset").sum().alias("resets"),
        nbytes.filter(is_read).sum().alias("read_bytes"),
        nbytes.filter(op.is_in(["write", "zone_append"])).sum().alias("write_bytes"),
        (pl.col("lat_ns").filter(is_read).quantile(0.5, "nearest") / 1000).alias("read_lat_p50_us"),
        (pl.col("lat_ns").filter(is_read).quantile(0.99, "nearest") / 1000).alias("read_lat_p99_us"),
    )
    all_zones = pl.DataFrame({"zone": pl.arange(0, nr_zones, eager=True).cast(pl.UInt32)})
    out = all_zones.join(agg, on="zone", how="full", coalesce=True).sort("zone")
    counts = ["reads", "writes", "appends", "resets", "read_bytes", "write_bytes"]
    return out.with_columns(pl.col(counts).fill_null(0).cast(pl.UInt64)).select(ZONE_KEYS)


def zones_json(table: pl.DataFrame) -> dict[str, Any]:
    return {"zones": table.to_dicts()}


def zones_text(table: pl.DataFrame, top: int) -> str:
    total = max(1, int(table["reads"].sum()))
    shown = table.sort("reads", descending=True).head(top) if top else table
    lines = [f"{'zone':>5} {'reads':>10} {'share':>6} {'writes':>8} {'appends':>7} {'resets':>6} "
             f"{'p50 µs':>8} {'p99 µs':>8}"]
    for r in shown.iter_rows(named=True):
        p50 = "-" if r["read_lat_p50_us"] is None else f"{r['read_lat_p50_us']:.1f}"
        p99 = "-" if r["read_lat_p99_us"] is None else f"{r['read_lat_p99_us']:.1f}"
        lines.append(f"{r['zone']:>5} {r['reads']:>10} {r['reads'] / total:>6.1%} {r['writes']:>8} "
                     f"{r['appends']:>7} {r['resets']:>6} {p50:>8} {p99:>8}")
    if top and table.height > top:
        lines.append(f"(top {top} of {table.height} zones by reads; --top 0 shows all)")
    return "\n".join(lines)


def _cmd(args: argparse.Namespace) -> int:
    rp = run_paths(args.run)
    meta = read_meta(rp)
    table = zone_table(load_events(rp), meta["nr_zones"], meta["lba_bytes"])
    emit(zones_json(table), args.json, zones_text(table, args.top))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("zones", help="per-zone reads, writes, appends, resets, bytes, read latency")
    p.add_argument("run", help="run directory")
    p.add_argument("--json", action="store_true", help="machine-readable output (all zones)")
    p.add_argument("--top", type=int, default=16, help="text output: the N most-read zones (0 = all)")
    p.set_defaults(func=_cmd)
