"""Per-zone heat — reads, writes, appends, resets, bytes and read latency percentiles."""

from __future__ import annotations

from typing import Any

import polars as pl

ZONE_KEYS = ("zone", "reads", "writes", "appends", "resets", "read_bytes", "write_bytes",
             "read_lat_p50_us", "read_lat_p99_us")


def zone_count_exprs(lba_bytes: int) -> list[pl.Expr]:
    """The per-zone counts and bytes of the table (every column but the latency percentiles)."""
    op = pl.col("op")
    nbytes = pl.col("nlb").cast(pl.UInt64) * lba_bytes
    return [
        (op == "read").sum().alias("reads"),
        (op == "write").sum().alias("writes"),
        (op == "zone_append").sum().alias("appends"),
        (pl.col("zone_action") == "reset").sum().alias("resets"),
        nbytes.filter(op == "read").sum().alias("read_bytes"),
        nbytes.filter(op.is_in(["write", "zone_append"])).sum().alias("write_bytes"),
    ]


def zone_frame(agg: pl.DataFrame, nr_zones: int) -> pl.DataFrame:
    """Per-zone aggregates -> the table: every zone 0..nr_zones-1 (zeros where idle) and any beyond that appears."""
    all_zones = pl.DataFrame({"zone": pl.arange(0, nr_zones, eager=True).cast(pl.UInt32)})
    out = all_zones.join(agg, on="zone", how="full", coalesce=True).sort("zone")
    counts = ["reads", "writes", "appends", "resets", "read_bytes", "write_bytes"]
    return out.with_columns(pl.col(counts).fill_null(0).cast(pl.UInt64)).select(ZONE_KEYS)


def zone_table(events: pl.DataFrame, nr_zones: int, lba_bytes: int) -> pl.DataFrame:
    """One row per zone 0..nr_zones-1 (zeros where idle), plus any out-of-range zone that appears."""
    read_lat = pl.col("lat_ns").filter(pl.col("op") == "read")
    return zone_frame(events.group_by("zone").agg(
        *zone_count_exprs(lba_bytes),
        (read_lat.quantile(0.5, "nearest") / 1000).alias("read_lat_p50_us"),
        (read_lat.quantile(0.99, "nearest") / 1000).alias("read_lat_p99_us"),
    ), nr_zones)


def zones_json(table: pl.DataFrame) -> dict[str, Any]:
    return {"zones": table.to_dicts()}
