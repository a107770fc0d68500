"""Text, tables and figures of application runs (`ztbp capture-app`): I/Os per operation, the per-file layout,
hot files against hot zones. What `ztbp appops` / `ztbp files` print and what the application notebook shows."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl

from .figures import Note, layout


def appops_text(r: dict[str, Any]) -> str:
    lines = [f"{r['run']} phase {r['phase']}: {r['commands']:,} reads, {r['attributed']:,} attributed to an "
             f"operation, {r['unattributed']:,} unattributed (background; by thread: {r['unattributed_by_tid']})"]
    for name, s in r["ops"].items():
        lines.append(f"  {name}: {s['ops']:,} ops; I/Os per op mean {s['ios_mean']:.2f}, p50 {s['ios_p50']:.0f}, "
                     f"p99 {s['ios_p99']:.0f}, max {s['ios_max']}; {s['bytes_mean'] / 1024:.1f} KiB/op; chain depth "
                     f"mean {s['chain_depth_mean']:.2f}; {s['op_us_mean']:.0f} us/op, device "
                     f"{100 * s['device_share']:.0f} %; histogram {s['ios_hist']}; status {s['status_hist']}")
    db = r.get("db_bench") or {}
    if db:
        lines.append(f"  db_bench: {db.get('operations')} operations, {db.get('micros_per_op')} us/op"
                     + (f", {db['found']} found" if "found" in db else ""))
    c = r.get("caches")
    if c:
        lines.append(f"  whole phase ({c['seconds']:.0f} s): " + caches_line(c))
    c = r.get("caches_during_ops")
    if c:
        lines.append(f"  while the operations ran ({c['seconds']:.0f} s of whole probe intervals): " + caches_line(c)
                     if c["intervals"] else "  while the operations ran: no whole probe interval (a row a second); "
                     "run more operations to measure the caches during them")
    return "\n".join(lines + skipped_lines(r.get("read", {})))


def skipped_lines(read: dict[str, Any]) -> list[str]:
    """One line per raw file of which reading skipped lines: how many, why, the first line numbers."""
    out = []
    for file, rep in read.items():
        if rep["skipped"]:
            why = ", ".join(f"{k} {v}" for k, v in rep["reasons"].items())
            first = ", ".join(str(x["line"]) for x in rep["first_skipped_lines"])
            out.append(f"  {file}: skipped {rep['skipped']} lines that do not parse ({why}; first: line {first})")
    return out


def caches_line(c: dict[str, Any]) -> str:
    ph, dh = c["pc_hit_ratio"], c["dc_hit_ratio"]
    return (f"page cache: {c['pc_accesses']:,} accesses, hit ratio {'n/a' if ph is None else f'{ph:.3f}'}; "
            f"dentry cache: {c['dc_lookups']:,} lookups, hit ratio {'n/a' if dh is None else f'{dh:.3f}'}")


def files_text(r: dict[str, Any]) -> str:
    lines = [f"{r['run']}: {r['files']} files ({r['sst_files']} SST), fragments per SST mean "
             f"{r['fragments_per_sst_mean']:.2f} (max {r['fragments_per_sst_max']}), zones per SST mean "
             f"{r['zones_per_sst_mean']:.2f}; {r['phase']} reads in files {r['reads_in_files']:,}, outside "
             f"{r['reads_outside_files']:,}",
             f"  {'file':<22} {'bytes':>10} {'ext':>4} {'frag':>4} {'zones':<14} {'gap max':>10} {'reads':>7}"]
    for t in r["table"]:
        zones = ",".join(map(str, t["zones"] or [])) or "-"
        lines.append(f"  {t['path']:<22} {t['file_bytes']:>10,} {t['extents']:>4} {t['fragments']:>4} {zones:<14} "
                     f"{t['gap_max_bytes'] or 0:>10,.0f} {t['reads']:>7,}")
    return "\n".join(lines + skipped_lines(r.get("read", {})))


def ios_histogram(r: dict[str, Any]) -> go.Figure | Note:
    """Operations by the number of device reads they issued (the dependent I/Os of an operation)."""
    if not r["ops"]:
        return Note("no application operation in this phase")
    fig = go.Figure()
    for name, s in r["ops"].items():
        hist = s["ios_hist"]
        fig.add_trace(go.Bar(x=[int(k) for k in hist], y=list(hist.values()),
                             name=f"{name} (mean {s['ios_mean']:.2f})"))
    fig.update_xaxes(title_text="device reads per operation", dtick=1)
    fig.update_yaxes(title_text="operations")
    return layout(fig, f"I/Os per operation ({r['phase']})", barmode="group")


def files_frame(r: dict[str, Any]) -> pl.DataFrame:
    """The per-file table of `files_result` as a frame (zones as text), hottest first."""
    rows = [{**t, "zones": ",".join(map(str, t["zones"] or [])) or "-"} for t in r["table"]]
    if not rows:
        return pl.DataFrame()
    return pl.DataFrame(rows, infer_schema_length=None).sort("reads", descending=True)


def hot_files_zones(r: dict[str, Any], zones: pl.DataFrame, hot_zones: list[int]) -> pl.DataFrame:
    """Each file with reads: its zones, the reads those zones took in the run, and whether any is a hot zone of
    the decision rule. `zones`: the per-zone table (zone, reads)."""
    reads_by_zone = dict(zip(zones["zone"].to_list(), zones["reads"].to_list(), strict=True))
    hot = set(hot_zones)
    rows = []
    for t in r["table"]:
        zs = [int(z) for z in (t["zones"] or [])]
        if not t["reads"]:
            continue
        rows.append({"path": t["path"], "reads": t["reads"], "zones": ",".join(map(str, zs)) or "-",
                     "zone_reads": sum(reads_by_zone.get(z, 0) for z in zs),
                     "in_hot_zone": bool(hot & set(zs))})
    if not rows:
        return pl.DataFrame(schema={"path": pl.String, "reads": pl.Int64, "zones": pl.String,
                                    "zone_reads": pl.Int64, "in_hot_zone": pl.Boolean})
    return pl.DataFrame(rows).sort("reads", descending=True)


def reads_per_file_figure(r: dict[str, Any]) -> go.Figure | Note:
    f = files_frame(r)
    if f.is_empty() or int(f["reads"].sum()) == 0:
        return Note(f"no read of phase {r['phase']} falls in a file")
    f = f.filter(pl.col("reads") > 0)
    fig = go.Figure(go.Bar(x=f["path"].to_list(), y=f["reads"].to_list(), text=f["zones"].to_list(),
                           hovertemplate="%{x}<br>%{y} reads<br>zones %{text}<extra></extra>"))
    fig.update_yaxes(title_text=f"device reads ({r['phase']})")
    return layout(fig, f"Reads per file ({r['reads_outside_files']:,} outside any file)")
