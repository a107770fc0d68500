"""The Table-I breakdown of request latency by layer, from the rows of raw/layers.csv (probes/layers.bt).

Each row is one completed request with the time it spent in each layer (probes/FORMAT.md, "raw/layers.csv"). The
layers of a row add up to its end-to-end time; this module averages them, checks that the layer means add up to
the measured end-to-end mean (the residual), splits them by op and size or by zone, and cross-checks the device
time against `lat_ns` of the NVMe probe for the same requests.
"""

from __future__ import annotations

import statistics
from typing import Any

import polars as pl

from ..contract import LAYER_MODES as MODES
from ..contract import LAYER_OPS as OPS
from ..contract import LAYER_STACKS as STACKS
from .params import LAYER_GROUP_KEYS as GROUP_KEYS

#: (column, layer name) in the order of Table I: down the stack, then the way back up.
LAYERS: tuple[tuple[str, str], ...] = (
    ("crossing_ns", "kernel crossing"), ("syscall_ns", "syscall"), ("vfs_ns", "vfs"), ("fs_ns", "file system"),
    ("block_ns", "block"), ("driver_ns", "nvme driver"), ("device_ns", "device"), ("completion_ns", "completion"),
)
__all__ = ["GROUP_KEYS", "LAYERS", "MODES", "OPS", "STACKS", "layers_report"]
#: The layer means must add up to the measured end-to-end mean within this fraction.
SUM_TOLERANCE = 0.05


def present_layers(df: pl.DataFrame) -> list[tuple[str, str]]:
    """The layers that exist in these rows' stacks: no file-system row on the raw device, no VFS row when every
    request was asynchronous (io_uring and aio call read_iter directly)."""
    out = []
    for col, name in LAYERS:
        if col == "fs_ns" and df.height and not df["stack"].is_in(["ext4", "btrfs"]).any():
            continue
        if col == "vfs_ns" and df.height and not (df["mode"] == "sync").any():
            continue
        out.append((col, name))
    return out


def _stats(s: pl.Series) -> dict[str, int]:
    if s.len() == 0:
        return {"mean_ns": 0, "p50_ns": 0, "p99_ns": 0}
    return {"mean_ns": round(float(s.mean())),  # type: ignore[arg-type]
            "p50_ns": int(s.quantile(0.5, "nearest")),  # type: ignore[arg-type]
            "p99_ns": int(s.quantile(0.99, "nearest"))}  # type: ignore[arg-type]


def layer_rows(df: pl.DataFrame, layers: list[tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """Table I: one entry per layer with mean, p50, p99 (ns) and share of the summed means."""
    layers = present_layers(df) if layers is None else layers
    rows = [{"layer": name, **_stats(df[col])} for col, name in layers]
    total = sum(float(df[col].mean() or 0.0) for col, _ in layers) if df.height else 0.0
    for r, (col, _) in zip(rows, layers, strict=True):
        r["share"] = round(float(df[col].mean() or 0.0) / total, 6) if total > 0 else 0.0
    return rows


def sum_check(df: pl.DataFrame, layers: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """Do the layer means add up to the measured end-to-end mean? The residual, absolute and relative."""
    layers = present_layers(df) if layers is None else layers
    e2e = float(df["e2e_ns"].mean() or 0.0) if df.height else 0.0
    total = sum(float(df[col].mean() or 0.0) for col, _ in layers) if df.height else 0.0
    resid = e2e - total
    frac = resid / e2e if e2e else 0.0
    return {"e2e_mean_ns": round(e2e), "sum_of_layer_means_ns": round(total), "residual_ns": round(resid),
            "residual_frac": round(frac, 6), "tolerance": SUM_TOLERANCE, "within_tolerance": abs(frac) <= SUM_TOLERANCE}


def clean(df: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    """Drop and count the rows a layer of which is negative (a stamp out of order: the probe's pairing failed)
    and those with no device time (the completion stamp was never taken: a tracepoint program is skipped when
    the completion interrupt arrives while another BPF program runs on that CPU, and the probe then gives the
    device's time to the driver). Count, and keep, the requests that caused more than one NVMe command."""
    neg = pl.any_horizontal([pl.col(c) < 0 for c, _ in LAYERS] + [pl.col("e2e_ns") <= 0])
    no_dev = ~neg & (pl.col("device_ns") == 0)
    counts = df.select(neg.sum().alias("negative_layer"), no_dev.sum().alias("no_device_time"))
    kept = df.filter(~neg & ~no_dev)
    return kept, {"negative_layer": int(counts["negative_layer"][0]),
                  "no_device_time": int(counts["no_device_time"][0]),
                  "multi_command": int((kept["nrq"] > 1).sum())}


def _group_list(df: pl.DataFrame, keys: list[str], layers: list[tuple[str, str]]) -> list[dict[str, Any]]:
    cols = [GROUP_KEYS[k] for k in keys]
    out = []
    for key_vals, g in sorted(df.group_by(cols), key=lambda kv: tuple(str(v) for v in kv[0])):
        entry: dict[str, Any] = dict(zip(keys, key_vals, strict=True))
        entry["layers"] = layer_rows(g, layers)
        entry["stats"] = {"requests": g.height, "e2e": _stats(g["e2e_ns"]), "sum_check": sum_check(g, layers)}
        out.append(entry)
    return out


def match_commands(df: pl.DataFrame, nv: pl.DataFrame, lba_bytes: int) -> pl.DataFrame:
    """The NVMe command (row `event` of the events `nv`) of each layer row (`row` of `df`) that has one.

    A layer row is matched to the NVMe command of its op at its start sector (`slba × lba_bytes / 512`) that was
    submitted between the row's start and end; the first such command when several are.
    """
    cmd = nv.with_row_index("event").select(
        "event", pl.col("ts_ns").cast(pl.Int64).alias("nv_ts"), pl.col("op").cast(pl.Utf8).alias("op"),
        (pl.col("slba").cast(pl.Int64) * (lba_bytes // 512)).alias("sector"))
    lay = df.select("ts_ns", "e2e_ns", "op", "sector").with_row_index("row")
    return (lay.join(cmd, on=["op", "sector"], how="inner")
            .filter((pl.col("nv_ts") >= pl.col("ts_ns")) & (pl.col("nv_ts") <= pl.col("ts_ns") + pl.col("e2e_ns")))
            .sort("row", "nv_ts", "event").unique("row", keep="first", maintain_order=True).select("row", "event"))


def cross_check(df: pl.DataFrame, nv: pl.DataFrame | None, lba_bytes: int) -> dict[str, Any] | None:
    """Device time of the layer probe vs `lat_ns` of the NVMe probe (events `nv`), request by request
    (`match_commands`). Returns the medians of both and their relative difference.
    """
    if nv is None or df.height == 0 or nv.height == 0:
        return None
    pairs = match_commands(df, nv, lba_bytes)
    if pairs.height == 0:
        return {"matched": 0, "rows": df.height}
    m = (pairs.join(df.select("device_ns").with_row_index("row"), on="row")
         .join(nv.select(pl.col("lat_ns").cast(pl.Int64)).with_row_index("event"), on="event"))
    dev = float(m["device_ns"].median())  # type: ignore[arg-type]
    lat = float(m["lat_ns"].median())  # type: ignore[arg-type]
    return {"matched": m.height, "rows": df.height, "layers_device_p50_ns": round(dev),
            "nvme_lat_p50_ns": round(lat), "rel_diff": round((dev - lat) / lat, 6) if lat else None,
            "within_10pct": bool(lat and abs(dev - lat) <= 0.10 * lat)}


def bench_summary(bench: dict[str, Any] | None) -> dict[str, Any] | None:
    """fio IOPS without and with the layer probe in one boot (raw/bench.json of `just bench-layers`): means, ratio
    of the means, and the spread: the standard deviation of the per-round ratios (each round's run with the probe
    over the run without it just before) and the coefficient of variation of the runs without it."""
    if not bench:
        return None
    without, with_probe = bench["iops_without"], bench["iops_with"]
    off, on = sum(without) / len(without), sum(with_probe) / len(with_probe)
    per_round = [w / o for o, w in zip(without, with_probe, strict=True) if o]
    return {"engine": bench.get("engine"), "fs": bench.get("fs"), "iodepth": bench.get("iodepth"),
            "rounds": len(without), "iops_without": round(off, 1), "iops_with": round(on, 1),
            "ratio": round(on / off, 4) if off else None,
            "ratio_sd": round(statistics.stdev(per_round), 4) if len(per_round) > 1 else None,
            "without_cv": round(statistics.stdev(without) / off, 4) if len(without) > 1 and off else None,
            "lost_events_with": bench.get("lost_events_with")}


def fio_compare(fio_rows: list[dict[str, Any]] | None, e2e_mean_ns: float, op: str | None) -> dict[str, Any] | None:
    """fio's own completion latency (user space, around the system call for sync engines) next to the probe's
    kernel-side end-to-end time: what the layers do not see (user space, the entry/exit instructions)."""
    rows = [r for r in fio_rows or [] if r["dir"] == (op or "read")]
    ios = sum(r["ios"] for r in rows)
    if not ios:
        return None
    clat = sum(r["clat_mean_us"] * r["ios"] for r in rows) / ios * 1000
    return {"clat_mean_ns": round(clat), "ios": ios, "iops": round(sum(r["iops"] for r in rows), 1),
            "kernel_e2e_over_fio_clat": round(e2e_mean_ns / clat, 4) if clat else None}


def layers_report(raw: pl.DataFrame, read: dict[str, Any], *, run_id: str, lba_bytes: int,
                  lost: int | None = None, events: pl.DataFrame | None = None,
                  fio_rows: list[dict[str, Any]] | None = None, bench: dict[str, Any] | None = None,
                  by: list[str] | None = None, op: str | None = None, mode: str | None = None) -> dict[str, Any]:
    """Everything `ztbp layers --json` prints, from the layer rows (raw) and what reading them skipped (read)."""
    df, excluded = clean(raw)
    if op:
        df = df.filter(pl.col("op") == op)
    if mode:
        df = df.filter(pl.col("mode") == mode)
    layers = present_layers(df)
    res: dict[str, Any] = {
        "run": run_id,
        "requests": df.height,
        "modes": dict(sorted(df.group_by("mode").len().iter_rows())),
        "stacks": dict(sorted(df.group_by("stack").len().iter_rows())),
        "layers": layer_rows(df, layers),
        "end_to_end": _stats(df["e2e_ns"]),
        "sum_check": sum_check(df, layers),
        "excluded": excluded,
        "read": read,
        "lost_events": lost,
    }
    by = by or []
    if any(k != "zone" for k in by):
        res["groups"] = _group_list(df, by, layers)
    zoned = df.filter(pl.col("zone") >= 0)
    res["zones"] = _group_list(zoned, ["zone"], layers) if zoned.height else []
    res["cross_check"] = cross_check(df, events, lba_bytes)
    res["bench"] = bench_summary(bench)
    res["fio"] = fio_compare(fio_rows, res["sum_check"]["e2e_mean_ns"], op)
    return res
