"""`ztbp layers`: the Table-I breakdown of request latency by layer, from raw/layers.csv (probes/layers.bt).

Each row of raw/layers.csv is one completed request with the time it spent in each layer (probes/FORMAT.md,
"raw/layers.csv"). The layers of a row add up to its end-to-end time; this module averages them, checks that the
layer means add up to the measured end-to-end mean (the residual), splits them by op and size or by zone, and
cross-checks the device time against `lat_ns` of the NVMe probe for the same requests.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from .cli import emit
from .contract import parse_version_line, read_meta
from .errors import FormatError, MissingRunError, ZtbpError
from .ingest import load_events
from .paths import RunPaths, run_paths

LAYERS_VERSION_LINE = "# ztbp layers v1"
LAYERS_COLUMNS: tuple[str, ...] = (
    "ts_ns", "tid", "mode", "op", "bytes", "dev", "sector", "zone", "nrq", "e2e_ns", "crossing_ns", "syscall_ns",
    "vfs_ns", "fs_ns", "block_ns", "driver_ns", "device_ns", "completion_ns", "stack",
)
#: (column, layer name) in the order of Table I: down the stack, then the way back up.
LAYERS: tuple[tuple[str, str], ...] = (
    ("crossing_ns", "kernel crossing"), ("syscall_ns", "syscall"), ("vfs_ns", "vfs"), ("fs_ns", "file system"),
    ("block_ns", "block"), ("driver_ns", "nvme driver"), ("device_ns", "device"), ("completion_ns", "completion"),
)
MODES: tuple[str, ...] = ("sync", "io_uring", "aio")
STACKS: tuple[str, ...] = ("ext4", "btrfs", "bdev")
OPS: tuple[str, ...] = ("read", "write")
GROUP_KEYS: dict[str, str] = {"op": "op", "size": "bytes", "zone": "zone", "mode": "mode", "stack": "stack"}
#: The layer means must add up to the measured end-to-end mean within this fraction.
SUM_TOLERANCE = 0.05
_INT_COLS = [c for c in LAYERS_COLUMNS if c not in ("mode", "op", "dev", "stack")]
_SCHEMA: dict[str, Any] = {c: pl.Int64 for c in _INT_COLS} | {"mode": pl.Utf8, "op": pl.Utf8, "dev": pl.Utf8,
                                                               "stack": pl.Utf8}
_MAX_SHOWN = 5


@dataclass
class LayersReadReport:
    """What reading raw/layers.csv kept and skipped (never silently)."""

    rows: int = 0
    skipped: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    first_lines: list[tuple[int, str]] = field(default_factory=list)

    def skip(self, line_no: int, reason: str) -> None:
        self.skipped += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if len(self.first_lines) < _MAX_SHOWN:
            self.first_lines.append((line_no, reason))

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "skipped": self.skipped, "reasons": self.reasons,
                "first_skipped_lines": [{"line": n, "reason": r} for n, r in self.first_lines]}


def _parse_line(parts: list[str]) -> dict[str, Any] | str:
    """One data line → a row dict, or the reason it does not parse."""
    if len(parts) < len(LAYERS_COLUMNS):
        return f"{len(parts)} fields, expected {len(LAYERS_COLUMNS)}"
    row: dict[str, Any] = {}
    for name, val in zip(LAYERS_COLUMNS, parts, strict=False):
        if name in _INT_COLS:
            try:
                row[name] = int(val)
            except ValueError:
                return f"non-numeric {name}"
        else:
            row[name] = val
    if row["mode"] not in MODES:
        return "unknown mode"
    if row["op"] not in OPS:
        return "unknown op"
    return row


def read_layers(path: Path) -> tuple[pl.DataFrame, LayersReadReport]:
    """Read a `# ztbp layers v1` file: typed rows, and a report of the lines that were skipped."""
    rep = LayersReadReport()
    with path.open(encoding="utf-8", errors="replace") as f:
        first = f.readline()
        parse_version_line(first, "layers", 1, path)
        header = f.readline().rstrip("\r\n").split(",")
        if header[: len(LAYERS_COLUMNS)] != list(LAYERS_COLUMNS):
            raise FormatError(f"{path}: line 2 is not the layers v1 header; expected "
                              f"{','.join(LAYERS_COLUMNS)} (see probes/FORMAT.md).")
        rows: list[dict[str, Any]] = []
        for line_no, line in enumerate(f, start=3):
            text = line.strip()
            if not text:
                continue
            parsed = _parse_line(text.split(","))
            if isinstance(parsed, str):
                rep.skip(line_no, parsed)
            else:
                rows.append(parsed)
    rep.rows = len(rows)
    df = pl.DataFrame(rows, schema=_SCHEMA) if rows else pl.DataFrame(schema=_SCHEMA)
    return df.select(LAYERS_COLUMNS), rep


def load_layers(run: RunPaths) -> tuple[pl.DataFrame, LayersReadReport]:
    csv = run.probe_csv("layers")
    if not csv.is_file():
        raise MissingRunError(f"layer breakdown: not captured in this run ({csv} is missing). Capture one with the "
                              "layer probe: `just capture-layers` (see probes/layers.bt).")
    return read_layers(csv)


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


def cross_check(df: pl.DataFrame, run: RunPaths, lba_bytes: int) -> dict[str, Any] | None:
    """Device time of the layer probe vs `lat_ns` of the NVMe probe, request by request.

    A layer row is matched to the NVMe command of its op at its start sector (`slba × lba_bytes / 512`) that was
    submitted between the row's start and end. Returns the medians of both and their relative difference.
    """
    if not run.nvme_csv.is_file() or df.height == 0:
        return None
    nv = load_events(run)
    if nv.height == 0:
        return None
    nv = nv.select(pl.col("ts_ns").cast(pl.Int64).alias("nv_ts"), pl.col("lat_ns").cast(pl.Int64),
                   pl.col("op").cast(pl.Utf8).alias("op"),
                   (pl.col("slba").cast(pl.Int64) * (lba_bytes // 512)).alias("sector"))
    lay = df.select("ts_ns", "e2e_ns", "device_ns", "op", "sector").with_row_index("row")
    m = (lay.join(nv, on=["op", "sector"], how="inner")
         .filter((pl.col("nv_ts") >= pl.col("ts_ns")) & (pl.col("nv_ts") <= pl.col("ts_ns") + pl.col("e2e_ns")))
         .unique("row", keep="first"))
    if m.height == 0:
        return {"matched": 0, "rows": df.height}
    dev = float(m["device_ns"].median())  # type: ignore[arg-type]
    lat = float(m["lat_ns"].median())  # type: ignore[arg-type]
    return {"matched": m.height, "rows": df.height, "layers_device_p50_ns": round(dev),
            "nvme_lat_p50_ns": round(lat), "rel_diff": round((dev - lat) / lat, 6) if lat else None,
            "within_10pct": bool(lat and abs(dev - lat) <= 0.10 * lat)}


def bench_summary(run: RunPaths) -> dict[str, Any] | None:
    """raw/bench.json (written by `just bench-layers`): fio IOPS without and with the layer probe, same boot."""
    path = run.raw / "bench.json"
    if not path.is_file():
        return None
    try:
        b = json.loads(path.read_text())
        without = [float(v) for v in b["iops_without"]]
        with_probe = [float(v) for v in b["iops_with"]]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise FormatError(f"{path} is not a bench result ({e}); re-run `just bench-layers`.") from None
    if not without or not with_probe:
        raise FormatError(f"{path} holds no IOPS figures; re-run `just bench-layers`.")
    off, on = sum(without) / len(without), sum(with_probe) / len(with_probe)
    return {"engine": b.get("engine"), "fs": b.get("fs"), "iodepth": b.get("iodepth"), "rounds": len(without),
            "iops_without": round(off, 1), "iops_with": round(on, 1), "ratio": round(on / off, 4) if off else None,
            "lost_events_with": b.get("lost_events_with")}


def fio_compare(run: RunPaths, e2e_mean_ns: float, op: str | None) -> dict[str, Any] | None:
    """fio's own completion latency (user space, around the system call for sync engines) next to the probe's
    kernel-side end-to-end time: what the layers do not see (user space, the entry/exit instructions)."""
    if not run.fio_json.is_file():
        return None
    from .report import fio_rows  # lazy: report imports the analysis modules

    try:
        rows = [r for r in fio_rows(run.fio_json) if r["dir"] == (op or "read")]
    except ZtbpError:
        return None
    ios = sum(r["ios"] for r in rows)
    if not ios:
        return None
    clat = sum(r["clat_mean_us"] * r["ios"] for r in rows) / ios * 1000
    return {"clat_mean_ns": round(clat), "ios": ios, "iops": round(sum(r["iops"] for r in rows), 1),
            "kernel_e2e_over_fio_clat": round(e2e_mean_ns / clat, 4) if clat else None}


def layers_report(run: RunPaths, by: list[str] | None = None, op: str | None = None,
                  mode: str | None = None) -> dict[str, Any]:
    """Everything `ztbp layers --json` prints."""
    meta = read_meta(run)
    raw, rep = load_layers(run)
    df, excluded = clean(raw)
    if op:
        df = df.filter(pl.col("op") == op)
    if mode:
        df = df.filter(pl.col("mode") == mode)
    layers = present_layers(df)
    res: dict[str, Any] = {
        "run": run.run_id,
        "requests": df.height,
        "modes": dict(sorted(df.group_by("mode").len().iter_rows())),
        "stacks": dict(sorted(df.group_by("stack").len().iter_rows())),
        "layers": layer_rows(df, layers),
        "end_to_end": _stats(df["e2e_ns"]),
        "sum_check": sum_check(df, layers),
        "excluded": excluded,
        "read": rep.as_dict(),
        "lost_events": meta.get("lost_events", {}).get("layers"),
    }
    by = by or []
    if any(k != "zone" for k in by):
        res["groups"] = _group_list(df, by, layers)
    zoned = df.filter(pl.col("zone") >= 0)
    res["zones"] = _group_list(zoned, ["zone"], layers) if zoned.height else []
    res["cross_check"] = cross_check(df, run, meta["lba_bytes"])
    res["bench"] = bench_summary(run)
    res["fio"] = fio_compare(run, res["sum_check"]["e2e_mean_ns"], op)
    return res


def _us(ns: float) -> str:
    return f"{ns / 1000:.2f}"


def layers_text(res: dict[str, Any]) -> str:
    lines = [f"{res['requests']} requests ({', '.join(f'{k} {v}' for k, v in res['modes'].items()) or 'none'}; "
             f"stack {', '.join(res['stacks']) or '-'})",
             f"{'layer':<16} {'mean µs':>9} {'p50 µs':>9} {'p99 µs':>9} {'share':>7}"]
    for r in res["layers"]:
        lines.append(f"{r['layer']:<16} {_us(r['mean_ns']):>9} {_us(r['p50_ns']):>9} {_us(r['p99_ns']):>9} "
                     f"{r['share']:>7.1%}")
    e, s = res["end_to_end"], res["sum_check"]
    lines.append(f"{'end-to-end':<16} {_us(e['mean_ns']):>9} {_us(e['p50_ns']):>9} {_us(e['p99_ns']):>9}")
    lines.append(f"sum of layer means {_us(s['sum_of_layer_means_ns'])} µs vs measured end-to-end "
                 f"{_us(s['e2e_mean_ns'])} µs: residual {_us(s['residual_ns'])} µs ({s['residual_frac']:.2%}, "
                 f"{'within' if s['within_tolerance'] else 'OUTSIDE'} {s['tolerance']:.0%})")
    x = res.get("cross_check")
    if x and x.get("matched"):
        lines.append(f"device vs nvme.csv lat_ns ({x['matched']} of {x['rows']} requests matched): median "
                     f"{_us(x['layers_device_p50_ns'])} vs {_us(x['nvme_lat_p50_ns'])} µs "
                     f"({x['rel_diff']:+.1%})")
    fio = res.get("fio")
    if fio and fio.get("kernel_e2e_over_fio_clat"):
        lines.append(f"fio's own mean completion latency {_us(fio['clat_mean_ns'])} µs ({fio['iops']:.0f} IOPS): the "
                     f"probe's end-to-end covers {fio['kernel_e2e_over_fio_clat']:.1%} of it (the rest is user space "
                     "and the syscall entry/exit instructions)")
    b = res.get("bench")
    if b:
        lines.append(f"probe overhead ({b['fs']}, {b['engine']}, {b['rounds']} rounds): fio {b['iops_without']:.0f} "
                     f"IOPS without, {b['iops_with']:.0f} with the layer probe: ratio {b['ratio']:.3f}; lost events "
                     f"{b['lost_events_with']}")
    ex = res["excluded"]
    if ex["negative_layer"] or ex["no_device_time"] or res["read"]["skipped"]:
        lines.append(f"left out: {ex['negative_layer']} rows with a negative layer, {ex['no_device_time']} without "
                     f"a device completion stamp, {res['read']['skipped']} lines that did not parse")
    for g in res.get("groups", []):
        label = ", ".join(f"{k}={g[k]}" for k in g if k not in ("layers", "stats"))
        parts = ", ".join(f"{r['layer']} {_us(r['mean_ns'])}" for r in g["layers"])
        lines.append(f"  {label} ({g['stats']['requests']} requests): {parts} µs")
    if res["zones"]:
        lines.append(f"per zone: {len(res['zones'])} zones (see --json)")
    return "\n".join(lines)


def parse_by(text: str | None) -> list[str]:
    if not text:
        return []
    keys = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in keys if k not in GROUP_KEYS]
    if bad:
        raise ZtbpError(f"--by {text!r}: unknown key {bad[0]!r}; use a comma list of {', '.join(GROUP_KEYS)}")
    return keys


def _cmd(args: argparse.Namespace) -> int:
    res = layers_report(run_paths(args.run), parse_by(args.by), args.op, args.mode)
    emit(res, args.json, layers_text(res))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("layers", help="Table-I latency breakdown by layer (needs raw/layers.csv)")
    p.add_argument("run", help="run directory")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--by", help="also split by these keys: comma list of op,size,zone,mode,stack")
    p.add_argument("--op", choices=OPS, help="only requests of this op")
    p.add_argument("--mode", choices=MODES, help="only requests of this submission mode")
    p.set_defaults(func=_cmd)
