"""I/Os per application operation (the BPF-oF question: how many dependent device I/Os does one Get cost?).

Attribution rule: an NVMe command belongs to the operation during which the same thread issued it — its `tid`
(the thread that set the command up, raw/nvme.csv) equals the operation's `tid` (raw/appops.csv) and its
submission time lies in [start_ns, end_ns]. Everything else in the phase's window is *unattributed* and counted,
by thread: background work (RocksDB's flush and compaction threads, btrfs/f2fs workers, kworkers that dispatched a
request the block layer had to retry) and asynchronous I/O whose submitter is not the operation's thread
(io_uring's SQPOLL or io-wq workers) land there, never silently dropped. io_uring submitted inline by the
operation's own thread is attributed like a synchronous read.

Dependent-I/O chain depth of an operation: the number of serial device round trips — its commands sorted by
submission, a new round starts when a command is submitted after every earlier command of the operation completed.

Cache rates follow bcc's cachestat and dcstat over raw/cachestat.csv's running totals.
"""

from __future__ import annotations

from typing import Any

import polars as pl


def in_window(df: pl.DataFrame, col: str, start_ns: int | None, end_ns: int | None) -> pl.DataFrame:
    """Rows whose `col` lies in [start_ns, end_ns] (None: open)."""
    if start_ns is not None:
        df = df.filter(pl.col(col) >= start_ns)
    if end_ns is not None:
        df = df.filter(pl.col(col) <= end_ns)
    return df


def attribute(ops: pl.DataFrame, io: pl.DataFrame) -> pl.DataFrame:
    """Each NVMe command (ts_ns, lat_ns, tid, op, nlb, ...) with the op_id of the operation it belongs to (null when
    none: unattributed). Operations of one thread do not overlap, so the candidate is the latest one of that
    thread that started at or before the command."""
    o = ops.select(pl.col("tid").cast(pl.Int64), pl.col("start_ns").cast(pl.Int64), pl.col("end_ns").cast(pl.Int64),
                   pl.col("op_id"), pl.col("op").alias("app_op")).sort("start_ns")
    c = io.with_columns(pl.col("tid").cast(pl.Int64), pl.col("ts_ns").cast(pl.Int64)).sort("ts_ns")
    j = c.join_asof(o, left_on="ts_ns", right_on="start_ns", by="tid", strategy="backward",
                    check_sortedness=False)
    inside = pl.col("op_id").is_not_null() & (pl.col("ts_ns") <= pl.col("end_ns"))
    return j.with_columns(pl.when(inside).then(pl.col("op_id")).otherwise(None).alias("op_id"),
                          pl.when(inside).then(pl.col("app_op")).otherwise(None).alias("app_op")
                          ).drop("start_ns", "end_ns")


def _rounds(ts: list[int], end: list[int]) -> int:
    rounds, horizon = 0, -1
    for t, e in zip(ts, end, strict=True):
        if t >= horizon:
            rounds += 1
            horizon = e
        else:
            horizon = max(horizon, e)
    return rounds


def per_op(ops: pl.DataFrame, attributed: pl.DataFrame, lba_bytes: int, io_ops: tuple[str, ...] = ("read",)
           ) -> pl.DataFrame:
    """One row per operation: its device I/Os (of `io_ops`), bytes, device time, chain depth and time split."""
    a = attributed.filter(pl.col("op_id").is_not_null() & pl.col("op").is_in(list(io_ops))).sort("ts_ns")
    agg = a.group_by("op_id").agg(
        pl.len().alias("ios"), (pl.col("nlb") * lba_bytes).sum().alias("bytes"),
        pl.col("lat_ns").sum().alias("device_ns"), pl.col("ts_ns"), (pl.col("ts_ns") + pl.col("lat_ns")).alias("_end"))
    depth = [_rounds(t, e) for t, e in zip(agg["ts_ns"].to_list(), agg["_end"].to_list(), strict=True)]
    agg = agg.with_columns(pl.Series("chain_depth", depth, dtype=pl.Int64)).drop("ts_ns", "_end")
    out = ops.join(agg, on="op_id", how="left").with_columns(
        pl.col("ios").fill_null(0).cast(pl.Int64), pl.col("bytes").fill_null(0).cast(pl.Int64),
        pl.col("device_ns").fill_null(0).cast(pl.Int64), pl.col("chain_depth").fill_null(0).cast(pl.Int64),
        (pl.col("end_ns") - pl.col("start_ns")).cast(pl.Int64).alias("op_ns"))
    return out.with_columns((pl.col("op_ns") - pl.col("device_ns")).clip(lower_bound=0).alias("app_ns"))


def summarize(per: pl.DataFrame, attributed: pl.DataFrame, io_ops: tuple[str, ...] = ("read",)) -> dict[str, Any]:
    """Per operation name: count, I/Os per op (mean, p50, p99, max, histogram), bytes per op, chain depth, time
    split; and the accounting of every command of `io_ops` in the window (attributed + unattributed = all)."""
    by_op: dict[str, Any] = {}
    for name in sorted(per["op"].unique().to_list()):
        p = per.filter(pl.col("op") == name)
        ios = p["ios"]
        hist = p.group_by("ios").len().sort("ios")
        op_ns = int(p["op_ns"].sum())
        by_op[name] = {
            "ops": p.height, "ios_mean": float(ios.mean() or 0), "ios_p50": float(ios.quantile(0.5) or 0),
            "ios_p99": float(ios.quantile(0.99, "higher") or 0), "ios_max": int(ios.max() or 0),
            "ios_hist": {int(k): int(v) for k, v in zip(hist["ios"], hist["len"], strict=True)},
            "bytes_mean": float(p["bytes"].mean() or 0), "chain_depth_mean": float(p["chain_depth"].mean() or 0),
            "chain_depth_p99": float(p["chain_depth"].quantile(0.99, "higher") or 0),
            "op_us_mean": float(p["op_ns"].mean() or 0) / 1e3,
            "device_share": float(p["device_ns"].sum()) / op_ns if op_ns else 0.0,
            "status_hist": {int(k): int(v) for k, v in p.group_by("status").len().sort("status").iter_rows()},
        }
    io = attributed.filter(pl.col("op").is_in(list(io_ops)))
    un = io.filter(pl.col("op_id").is_null())
    by_tid = un.group_by("tid").len().sort("len", descending=True).head(10)
    return {"ops": by_op, "io_ops": list(io_ops), "commands": io.height, "attributed": io.height - un.height,
            "unattributed": un.height,
            "unattributed_by_tid": {int(t): int(n) for t, n in by_tid.iter_rows()}}


def cache_rates(cs: pl.DataFrame) -> pl.DataFrame:
    """Per interval of raw/cachestat.csv (running totals): page-cache accesses, misses, hit ratio (bcc cachestat)
    and dentry lookups, misses, hit ratio (bcc dcstat)."""
    d = cs.sort("ts_ns").with_columns(
        *[pl.col(c).diff().alias(f"d_{c}") for c in cs.columns if c != "ts_ns"],
        pl.col("ts_ns").shift(1).alias("from_ns")).drop_nulls()
    d = d.with_columns(
        (pl.col("d_pc_access") - pl.col("d_buf_dirty")).clip(lower_bound=0).alias("pc_accesses"),
        (pl.col("d_pc_add") - pl.col("d_pc_dirty")).clip(lower_bound=0).alias("pc_misses"),
        pl.col("d_dc_ref").alias("dc_lookups"), pl.col("d_dc_miss").alias("dc_misses"))
    return d.select("from_ns", "ts_ns", "pc_accesses", "pc_misses", "dc_lookups", "dc_misses")


def intervals_within(rates: pl.DataFrame, start_ns: int, end_ns: int) -> pl.DataFrame:
    """The intervals of cache_rates() that lie wholly in [start_ns, end_ns]: e.g. while an application's operations
    ran, leaving out the start of its process (after a cache drop, loading its binary and libraries is page-cache
    misses too) and whatever ran around it."""
    return rates.filter((pl.col("from_ns") >= start_ns) & (pl.col("ts_ns") <= end_ns))


def cache_summary(rates: pl.DataFrame) -> dict[str, Any]:
    """Totals and hit ratios over the intervals given (a phase's window), and the seconds they cover."""
    acc, miss = int(rates["pc_accesses"].sum()), int(rates["pc_misses"].sum())
    look, dmiss = int(rates["dc_lookups"].sum()), int(rates["dc_misses"].sum())
    secs = float((rates["ts_ns"] - rates["from_ns"]).sum()) / 1e9 if rates.height else 0.0
    return {"seconds": round(secs, 3), "intervals": rates.height, "pc_accesses": acc, "pc_misses": min(miss, acc),
            "pc_hit_ratio": 1 - min(miss, acc) / acc if acc else None,
            "dc_lookups": look, "dc_misses": dmiss, "dc_hit_ratio": 1 - dmiss / look if look else None}
