"""`ztbp frag`: fragmentation per zone — contiguous fragments read and written, and the gaps between them.

For each zone and each direction (read; write = write + write_zeroes), take the LBA ranges [slba, slba + nlb) that
the run touched, merge overlapping and adjacent ranges, and count the resulting contiguous fragments. The gaps are
the untouched LBA ranges between consecutive fragments of the same zone. A zone written once from its start has one
write fragment and no gap; a zone read at scattered 4 KiB pages has many read fragments separated by gaps whose
size tells how far apart the reads land. Zone appends are not placed (their LBA is chosen by the device and the
trace holds only the zone start), so they are counted, not fragmented. See docs/metrics.md.
"""

from __future__ import annotations

import argparse
from typing import Any

import polars as pl

from .cli import emit
from .contract import read_meta
from .ingest import load_events
from .paths import run_paths

DIRECTIONS: dict[str, tuple[str, ...]] = {"read": ("read",), "write": ("write", "write_zeroes")}


def fragments(events: pl.DataFrame, ops: tuple[str, ...]) -> pl.DataFrame:
    """Merged contiguous fragments per zone: zone, start LBA, end LBA (exclusive), gap before it (LBAs)."""
    ev = (events.filter(pl.col("op").is_in(list(ops)) & (pl.col("nlb") > 0))
          .select("zone", pl.col("slba").cast(pl.Int64).alias("start"),
                  (pl.col("slba").cast(pl.Int64) + pl.col("nlb").cast(pl.Int64)).alias("end"))
          .sort("zone", "start"))
    if ev.height == 0:
        return pl.DataFrame(schema={"zone": pl.UInt32, "start": pl.Int64, "end": pl.Int64, "gap": pl.Int64})
    reach = pl.col("end").cum_max().shift(1).over("zone")  # furthest end seen before this range in the zone
    ev = ev.with_columns(reach.alias("_reach"))
    ev = ev.with_columns(
        (pl.col("_reach").is_null() | (pl.col("start") > pl.col("_reach"))).alias("_new"),
    ).with_columns(pl.col("_new").cast(pl.UInt32).cum_sum().alias("_frag"))
    return (ev.group_by("zone", "_frag", maintain_order=True)
            .agg(pl.col("start").first(), pl.col("end").max(),
                 (pl.col("start").first() - pl.col("_reach").first()).alias("gap"))
            .drop("_frag"))


def frag_table(events: pl.DataFrame, nr_zones: int, lba_bytes: int) -> pl.DataFrame:
    """One row per zone with the read and write fragment and gap figures (bytes)."""
    out = pl.DataFrame({"zone": pl.arange(0, nr_zones, eager=True).cast(pl.UInt32)})
    for d, ops in DIRECTIONS.items():
        f = fragments(events, ops)
        agg = f.group_by("zone").agg(
            pl.len().cast(pl.UInt64).alias(f"{d}_fragments"),
            ((pl.col("end") - pl.col("start")).sum() * lba_bytes).cast(pl.UInt64).alias(f"{d}_bytes_covered"),
            pl.col("gap").drop_nulls().len().cast(pl.UInt64).alias(f"{d}_gaps"),
            (pl.col("gap").drop_nulls().mean() * lba_bytes).alias(f"{d}_gap_bytes_mean"),
            (pl.col("gap").drop_nulls().max() * lba_bytes).cast(pl.UInt64).alias(f"{d}_gap_bytes_max"),
        )
        out = out.join(agg, on="zone", how="full", coalesce=True)
    counts = [c for c in out.columns if c.endswith(("_fragments", "_covered", "_gaps"))]
    appends = events.filter(pl.col("op") == "zone_append").group_by("zone").agg(pl.len().alias("appends"))
    out = out.join(appends, on="zone", how="left").with_columns(
        pl.col(counts).fill_null(0), pl.col("appends").fill_null(0).cast(pl.UInt64))
    return out.sort("zone")


def frag_summary(table: pl.DataFrame) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for d in DIRECTIONS:
        touched = table.filter(pl.col(f"{d}_fragments") > 0)
        res[d] = {
            "zones_touched": touched.height,
            "fragments": int(touched[f"{d}_fragments"].sum()) if touched.height else 0,
            "fragments_per_zone_mean": float(touched[f"{d}_fragments"].mean()) if touched.height else 0.0,
            "fragments_per_zone_max": int(touched[f"{d}_fragments"].max()) if touched.height else 0,
        }
    return res


def frag_text(table: pl.DataFrame, summary: dict[str, Any]) -> str:
    lines = []
    for d, s in summary.items():
        lines.append(f"frag ({d}): {s['zones_touched']} zones touched, {s['fragments']} fragments, "
                     f"{s['fragments_per_zone_mean']:.1f} per zone on average, {s['fragments_per_zone_max']} at most")
    lines.append(f"{'zone':>5} {'rd frags':>9} {'rd gap mean':>12} {'wr frags':>9} {'wr gap max':>11}")
    for r in table.filter((pl.col("read_fragments") > 0) | (pl.col("write_fragments") > 0)).iter_rows(named=True):
        rg = "-" if r["read_gap_bytes_mean"] is None else f"{r['read_gap_bytes_mean'] / 1024:.0f} KiB"
        wg = "-" if r["write_gap_bytes_max"] is None else f"{r['write_gap_bytes_max'] / 1024:.0f} KiB"
        lines.append(f"{r['zone']:>5} {r['read_fragments']:>9} {rg:>12} {r['write_fragments']:>9} {wg:>11}")
    return "\n".join(lines)


def _cmd(args: argparse.Namespace) -> int:
    rp = run_paths(args.run)
    meta = read_meta(rp)
    table = frag_table(load_events(rp), meta["nr_zones"], meta["lba_bytes"])
    summary = frag_summary(table)
    emit({"summary": summary, "zones": table.to_dicts()}, args.json, frag_text(table, summary))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("frag", help="contiguous fragments read / written per zone and their gaps")
    p.add_argument("run", help="run directory")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd)
