"""Latency percentiles and counts per NVMe op and zone action, from the NVMe trace.

The ZNS commands that matter for a zoned drive — read, write, zone append, zone management send (one line per
action: reset, finish, open, close, offline, with `_all` for Select All) and zone management receive — each get
count, errors (non-zero status), bytes, and the mean, p50, p90, p99, p99.9 and maximum of `lat_ns`
(nearest-rank percentiles). Latency is submission → completion as the NVMe probe measures it (FORMAT.md).
"""

from __future__ import annotations

from typing import Any, TypeVar

import polars as pl

#: Display order: the ZNS data path first, then zone management, then the rest.
OP_ORDER: tuple[str, ...] = ("read", "write", "zone_append", "zone_mgmt_send", "zone_mgmt_recv", "write_zeroes",
                             "flush", "dsm", "other")
QUANTILES: tuple[tuple[str, float], ...] = (("p50_ns", 0.5), ("p90_ns", 0.9), ("p99_ns", 0.99),
                                            ("p999_ns", 0.999))
KEYS: tuple[str, ...] = ("op", "zone_action", "count", "errors", "bytes", "mean_ns", *(k for k, _ in QUANTILES),
                         "max_ns")
Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)


def opcode_keys(events: Frame) -> Frame:
    """The events with op and zone_action as strings (no action: ""), the keys of the table."""
    return events.with_columns(pl.col("op").cast(pl.Utf8), pl.col("zone_action").cast(pl.Utf8).fill_null(""))


def opcode_count_exprs(lba_bytes: int) -> list[pl.Expr]:
    """The table's columns but the percentiles, per (op, zone_action) group."""
    lat = pl.col("lat_ns").cast(pl.Int64)
    return [pl.len().cast(pl.Int64).alias("count"),
            (pl.col("status") != 0).sum().cast(pl.Int64).alias("errors"),
            (pl.col("nlb").cast(pl.Int64) * lba_bytes).sum().alias("bytes"),
            lat.mean().round(0).cast(pl.Int64).alias("mean_ns"),
            lat.max().alias("max_ns")]


def opcode_order(agg: pl.DataFrame) -> pl.DataFrame:
    """The table's rows in OP_ORDER then by action, its columns in KEYS order."""
    order = {op: i for i, op in enumerate(OP_ORDER)}
    rank = pl.col("op").replace_strict(order, default=len(order), return_dtype=pl.Int64)
    return agg.with_columns(rank.alias("_rank")).sort("_rank", "zone_action").select(KEYS)


def opcode_table(events: pl.DataFrame, lba_bytes: int) -> pl.DataFrame:
    """One row per (op, zone_action) present in the trace, in OP_ORDER then by action."""
    lat = pl.col("lat_ns").cast(pl.Int64)
    agg = opcode_keys(events).group_by("op", "zone_action").agg(
        *opcode_count_exprs(lba_bytes), *[lat.quantile(q, "nearest").cast(pl.Int64).alias(k) for k, q in QUANTILES])
    return opcode_order(agg)


def opcodes_json(table: pl.DataFrame, run_id: str) -> dict[str, Any]:
    return {"run": run_id, "commands": int(table["count"].sum()) if table.height else 0,
            "opcodes": table.to_dicts()}
