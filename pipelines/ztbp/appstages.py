"""The stages of application runs (`ztbp capture-app`): I/Os per operation of a phase and the per-file layout,
called by the CLI (`ztbp appops`, `ztbp files`) and the application notebook. Nothing here parses arguments or
prints."""

from __future__ import annotations

from typing import Any

import polars as pl

from .analysis import appops, files
from .contract import read_meta
from .errors import ZtbpError
from .io.app import load_appops, load_cachestat, load_files, load_nvme_tid
from .paths import resolve_run


def _phase_window(meta: dict[str, Any], phase: str) -> tuple[int | None, int | None]:
    if phase == "all":
        return None, None
    for p in meta.get("app", {}).get("phases", []):
        if p["phase"] == phase:
            return int(p["start_ns"]), int(p["end_ns"])
    known = [p["phase"] for p in meta.get("app", {}).get("phases", [])]
    raise ZtbpError(f"phase {phase!r} is not in this run (phases: {', '.join(known) or 'none'}; or 'all')")


def appops_result(run_dir: str, phase: str = "readrandom") -> dict[str, Any]:
    """I/Os per operation of one phase of an application run (the figures `ztbp appops` prints)."""
    run = resolve_run(run_dir)
    meta = read_meta(run)
    start, end = _phase_window(meta, phase)
    ops = appops.in_window(load_appops(run), "start_ns", start, end)
    io = appops.in_window(load_nvme_tid(run), "ts_ns", start, end)
    att = appops.attribute(ops, io)
    per = appops.per_op(ops, att, meta["lba_bytes"])
    out = {"run": run.run_id, "phase": phase, **appops.summarize(per, att)}
    db = next((p.get("db_bench", {}) for p in meta.get("app", {}).get("phases", []) if p["phase"] == phase), {})
    out["db_bench"] = db.get(phase, {})
    if run.probe_csv("cachestat").is_file():
        rates = appops.cache_rates(load_cachestat(run))
        out["caches"] = appops.cache_summary(appops.in_window(rates, "ts_ns", start, end))
        if ops.height:
            out["caches_during_ops"] = appops.cache_summary(appops.intervals_within(
                rates, int(ops["start_ns"].min()), int(ops["end_ns"].max())))
    return out


def files_result(run_dir: str, phase: str = "readrandom") -> dict[str, Any]:
    """Per-file layout and reads per file (reads of `phase`)."""
    run = resolve_run(run_dir)
    meta = read_meta(run)
    start, end = _phase_window(meta, phase)
    f = load_files(run)
    frags = files.fragments(f, meta["zone_size_lba"] * meta["lba_bytes"])
    table = files.per_file(f, frags)
    reads = appops.in_window(load_nvme_tid(run), "ts_ns", start, end).filter(
        pl.col("op") == "read")
    per, outside = files.reads_per_file(frags, reads, meta["lba_bytes"])
    table = table.join(per, on="path", how="left").with_columns(
        pl.col("reads").fill_null(0), pl.col("bytes_read").fill_null(0))
    return {"run": run.run_id, "phase": phase, **files.layout_summary(table, per, outside),
            "table": table.to_dicts()}
