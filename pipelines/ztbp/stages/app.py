"""The analyses of application runs (`ztbp capture-app`): I/Os per operation of a phase and the per-file layout,
one call each on a loaded `Run`, called by the CLI (`ztbp appops`, `ztbp files`) and the application notebook.
Nothing here parses arguments or prints."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..analysis import appops as appops_analysis
from ..analysis import file_layout
from ..errors import ZtbpError
from ..io.app import load_appops, load_cachestat, load_files, load_nvme_tid
from ..io.rows import RowsReport
from ..io.run import Run


def _read(reports: dict[str, Any], loaded: tuple[pl.DataFrame, RowsReport]) -> pl.DataFrame:
    """The rows of one raw file, what reading it skipped kept under its file name."""
    frame, report = loaded
    reports[report.file] = report.as_dict()
    return frame


def _phase_window(meta: dict[str, Any], phase: str) -> tuple[int | None, int | None]:
    if phase == "all":
        return None, None
    for p in meta.get("app", {}).get("phases", []):
        if p["phase"] == phase:
            return int(p["start_ns"]), int(p["end_ns"])
    known = [p["phase"] for p in meta.get("app", {}).get("phases", [])]
    raise ZtbpError(f"phase {phase!r} is not in this run (phases: {', '.join(known) or 'none'}; or 'all')")


def appops(run: Run, phase: str = "readrandom") -> dict[str, Any]:
    """I/Os per operation of one phase of an application run (the figures `ztbp appops` prints)."""
    meta = run.meta
    start, end = _phase_window(meta, phase)
    read: dict[str, Any] = {}
    ops = appops_analysis.in_window(_read(read, load_appops(run.paths)), "start_ns", start, end)
    io = appops_analysis.in_window(_read(read, load_nvme_tid(run.paths)), "ts_ns", start, end)
    att = appops_analysis.attribute(ops, io)
    per = appops_analysis.per_op(ops, att, meta["lba_bytes"])
    out = {"run": run.run_id, "phase": phase, **appops_analysis.summarize(per, att)}
    db = next((p.get("db_bench", {}) for p in meta.get("app", {}).get("phases", []) if p["phase"] == phase), {})
    out["db_bench"] = db.get(phase, {})
    if run.paths.probe_csv("cachestat").is_file():
        rates = appops_analysis.cache_rates(_read(read, load_cachestat(run.paths)))
        out["caches"] = appops_analysis.cache_summary(appops_analysis.in_window(rates, "ts_ns", start, end))
        if ops.height:
            out["caches_during_ops"] = appops_analysis.cache_summary(appops_analysis.intervals_within(
                rates, int(ops["start_ns"].min()), int(ops["end_ns"].max())))
    out["read"] = read
    return out


def files(run: Run, phase: str = "readrandom") -> dict[str, Any]:
    """Per-file layout and reads per file (reads of `phase`)."""
    meta = run.meta
    start, end = _phase_window(meta, phase)
    read: dict[str, Any] = {}
    f = _read(read, load_files(run.paths))
    frags = file_layout.fragments(f, meta["zone_size_lba"] * meta["lba_bytes"])
    table = file_layout.per_file(f, frags)
    reads = appops_analysis.in_window(_read(read, load_nvme_tid(run.paths)), "ts_ns", start, end).filter(
        pl.col("op") == "read")
    per, outside = file_layout.reads_per_file(frags, reads, meta["lba_bytes"])
    table = table.join(per, on="path", how="left").with_columns(
        pl.col("reads").fill_null(0), pl.col("bytes_read").fill_null(0))
    return {"run": run.run_id, "phase": phase, **file_layout.layout_summary(table, per, outside),
            "table": table.to_dicts(), "read": read}
