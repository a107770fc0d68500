"""Per-zone heat — reads, writes, appends, resets, bytes and read latency percentiles."""

from __future__ import annotations

from typing import Any

import polars as pl

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
