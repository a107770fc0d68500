"""Views of a run for the notebooks: the overview, data-quality warnings, fio's summary, probe counters, the layer
breakdown and small tables of analysis results. Notebooks only call these and the figures; nothing here computes
an analysis of its own (each view calls the analysis room)."""

from __future__ import annotations

import html
from typing import Any

import polars as pl

from .. import stages
from ..analysis.params import ClusterParams
from ..errors import ZtbpError
from ..io.run import Run
from .figures import Note
from .text import scalar

#: Relative tolerance between fio's completed reads and the traced read commands before a warning.
FIO_READ_TOLERANCE = 0.01
#: A column's unit from how its name ends (checked in this order): suffix, unit shown in the header.
UNIT_SUFFIXES = (("_us", "µs"), ("_ns", "ns"), ("_ms", "ms"), ("_s", "s"), ("_mib", "MiB"), ("_kib", "KiB"),
                 ("_bytes", "bytes"), ("_pct", "%"))
#: Columns holding a fraction from 0 to 1, shown as a percentage (a name that ends with one of these).
FRACTION_SUFFIXES = ("share", "_ratio")
#: Rows of a frame shown in one HTML table; the rest are counted under it.
MAX_HTML_ROWS = 500
#: What a table shows for a missing value (never "None").
MISSING = "–"


# --- frames as HTML tables --------------------------------------------------------------------------------------

def column_unit(name: str) -> tuple[str, str]:
    """(label, unit) of a column from its name: `lat_p50_us` -> ("lat p50", "µs"); a fraction -> (name, "%")."""
    low = name.lower()
    for suffix, unit in UNIT_SUFFIXES:
        if low.endswith(suffix) and len(low) > len(suffix):
            return name[: -len(suffix)].replace("_", " "), unit
    if low.endswith(FRACTION_SUFFIXES) or low in ("share", "ratio"):
        return name.replace("_", " "), "%"
    if low == "bytes" or low.endswith("bytes"):
        return name.replace("_", " "), "bytes"
    return name.replace("_", " "), ""


def cell_text(value: Any, unit: str) -> str:
    """One cell as text: thousands separators, fractions as percentages, lists joined, a missing value as MISSING."""
    if value is None or (isinstance(value, float) and value != value):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if unit == "%":
            return f"{100 * value:.2f}"
        if value == 0 or abs(value) >= 10:
            return f"{value:,.1f}"
        return f"{value:.4g}"
    if isinstance(value, list | tuple | pl.Series):
        return ", ".join(cell_text(v, "") for v in value)
    return str(value)


def html_table(frame: pl.DataFrame, max_rows: int = MAX_HTML_ROWS) -> str:
    """The frame as an HTML table: every column (its unit in the header, from its name), numbers formatted and
    right-aligned, every cell escaped; the first `max_rows` rows, the rest counted below it."""
    units = [column_unit(c) for c in frame.columns]
    numeric = [dt.is_numeric() for dt in frame.dtypes]
    head = "".join(f'<th title="{html.escape(c)}" style="text-align:{"right" if num else "left"}">'
                   f"{html.escape(label)}{f' ({html.escape(unit)})' if unit and unit != label else ''}</th>"
                   for c, (label, unit), num in zip(frame.columns, units, numeric, strict=True))
    body = []
    for row in frame.head(max_rows).iter_rows():
        cells = "".join(f'<td style="text-align:{"right" if num else "left"}">{html.escape(cell_text(v, unit))}'
                        "</td>" for v, (_, unit), num in zip(row, units, numeric, strict=True))
        body.append(f"<tr>{cells}</tr>")
    more = frame.height - min(frame.height, max_rows)
    caption = (f"{frame.height:,} rows × {frame.width} columns"
               + (f"; the first {max_rows:,} shown" if more else ""))
    return (f'<div class="ztbp-table" style="overflow-x:auto"><table><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table><p style="color:#555;font-size:12px">{caption}</p></div>')


def show(obj: Any) -> Any:
    """What a notebook cell displays: a polars frame as an HTML table (html_table), anything else (a note, a
    figure) as it is."""
    if isinstance(obj, pl.DataFrame):
        from IPython.display import HTML

        return HTML(html_table(obj))
    return obj


def overview(run: Run) -> dict[str, Any]:
    """The run in figures: geometry, workload, commands by op, duration, rate, lost events."""
    m, ev = run.meta, run.events
    by_op = {str(k): int(v) for k, v in ev.group_by(pl.col("op").cast(pl.String)).len().sort("op").iter_rows()}
    span_ns = int(ev["ts_ns"].max() - ev["ts_ns"].min()) if ev.height > 1 else 0
    return {
        "run_id": run.run_id,
        "device": m.get("device", "?"),
        "backend": m.get("backend", "?"),
        "synthetic": bool(m.get("synthetic")),
        "complete": bool(m.get("complete", True)),
        "created": m.get("created"),
        "lba_bytes": m["lba_bytes"],
        "zone_size_lba": m["zone_size_lba"],
        "zone_cap_lba": m["zone_cap_lba"],
        "nr_zones": m["nr_zones"],
        "workload": m.get("workload", {}),
        "commands": ev.height,
        "by_op": by_op,
        "duration_s": span_ns / 1e9,
        "commands_per_s": ev.height / (span_ns / 1e9) if span_ns else 0.0,
        "read_bytes": int(ev.filter(pl.col("op") == "read")["nlb"].cast(pl.UInt64).sum()) * m["lba_bytes"],
        "lost_events": m.get("lost_events", {}),
        "versions": m.get("versions", {}),
    }


def meta_table(run: Run) -> pl.DataFrame:
    """meta.json as key / value rows (nested objects one level deep)."""
    rows: list[tuple[str, str]] = []
    for k, v in run.meta.items():
        if isinstance(v, dict) and v:
            rows += [(f"{k}.{k2}", scalar(v2)) for k2, v2 in v.items()]
        else:
            rows.append((k, scalar(v)))
    return pl.DataFrame(rows, schema=["key", "value"], orient="row")


def op_table(run: Run) -> pl.DataFrame:
    """Commands, bytes, latency percentiles and error statuses per op."""
    return (run.events.group_by(pl.col("op").cast(pl.String))
            .agg(pl.len().alias("commands"),
                 (pl.col("nlb").cast(pl.UInt64).sum() * run.lba_bytes).alias("bytes"),
                 (pl.col("lat_ns").quantile(0.5, "nearest") / 1000).alias("lat_p50_us"),
                 (pl.col("lat_ns").quantile(0.99, "nearest") / 1000).alias("lat_p99_us"),
                 (pl.col("status") != 0).sum().alias("errors"))
            .sort("commands", descending=True))


def fio_view(run: Run) -> pl.DataFrame | Note:
    """The fio summary of raw/fio.json, or a note when the run has none."""
    path = run.paths.fio_json
    if not path.is_file():
        return Note("fio output: not captured in this run (no raw/fio.json)")
    try:
        rows = run.fio_rows() or []
    except ZtbpError as e:
        return Note(f"fio output could not be read: {e}")
    if not rows:
        return Note("fio output holds no job that did I/O")
    return pl.DataFrame(rows)


def probes_table(run: Run) -> pl.DataFrame:
    """Every probe of the run: its file, whether the file is there, and its lost-event count."""
    probes = dict(run.meta.get("probes") or {})
    for f in sorted(run.paths.raw.glob("*.csv")):
        probes.setdefault(f.stem, {"file": f"raw/{f.name}"})
    lost = run.meta.get("lost_events", {})
    rows = []
    for name, info in sorted(probes.items()):
        file = info.get("file", f"raw/{name}.csv") if isinstance(info, dict) else f"raw/{name}.csv"
        rows.append({"probe": name, "file": file, "present": (run.paths.root / file).is_file(),
                     "attach": str(info.get("attach", "")) if isinstance(info, dict) else "",
                     "lost_events": str(lost[name]) if name in lost else "not recorded"})
    return pl.DataFrame(rows, schema={"probe": pl.String, "file": pl.String, "present": pl.Boolean,
                                      "attach": pl.String, "lost_events": pl.String})


def probe_stats_view(run: Run) -> pl.DataFrame | Note:
    """The capture's own probe counters from meta.json (`probe_stats`: commands set up, completed, rows written,
    perf-buffer losses, attach and drain times), else a note."""
    stats = run.meta.get("probe_stats")
    if not isinstance(stats, dict) or not stats:
        return Note("probe statistics: not recorded in this run")
    return pl.DataFrame([{"counter": str(k), "value": scalar(v)} for k, v in stats.items()])


def overhead_view(run: Run) -> pl.DataFrame | Note:
    """Probe overhead recorded in meta.json (fio IOPS with and without the probe), else a note."""
    found = {k: v for k, v in run.meta.items() if "overhead" in k}
    if not found:
        return Note("probe overhead: not measured in this run (`just bench` measures fio IOPS with and without "
                    "the probe in one VM boot)")
    rows = []
    for k, v in found.items():
        items = v.items() if isinstance(v, dict) else [("value", v)]
        rows += [{"key": f"{k}.{k2}", "value": scalar(v2)} for k2, v2 in items]
    return pl.DataFrame(rows)


def quality_warnings(run: Run) -> list[str]:
    """What a reader should know before trusting the figures of this run."""
    out: list[str] = []
    m = run.meta
    if not m.get("complete", True):
        out.append("the capture was interrupted (meta.json complete=false): the data is valid but partial")
    if m.get("synthetic"):
        out.append("synthetic run (ztbp synth): the commands were generated, not traced on a device")
    rep = run.ingest_record()
    if rep.get("skipped"):
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(rep.get("skip_reasons", {}).items()))
        first = "; ".join(f"line {x['line']}: {x['reason']}" for x in rep.get("skipped_examples", [])[:3])
        out.append(f"ingest skipped {rep['skipped']} lines of raw/nvme.csv ({reasons}); {first}")
    if rep.get("out_of_range_zones"):
        out.append(f"{rep['out_of_range_zones']} commands address a zone ≥ nr_zones ({m['nr_zones']}) of meta.json")
    lost = m.get("lost_events", {})
    if "nvme" not in lost:
        out.append("the nvme probe's lost-event count is not recorded: commands may be missing unnoticed")
    out += [f"probe {k} lost {v} events: counts are lower bounds" for k, v in lost.items()
            if isinstance(v, int) and v > 0]
    if run.events.height == 0:
        out.append("the trace holds no command")
    errors = int((run.events["status"] != 0).sum()) if run.events.height else 0
    if errors:
        out.append(f"{errors} commands completed with a non-zero NVMe status")
    if run.paths.fio_json.is_file():
        try:
            fio_reads = sum(r["ios"] for r in run.fio_rows() or [] if r["dir"] == "read")
        except ZtbpError as e:
            out.append(f"raw/fio.json: {e}")
        else:
            traced = int((run.events["op"] == "read").sum())
            if fio_reads and abs(traced - fio_reads) > FIO_READ_TOLERANCE * fio_reads:
                out.append(f"fio completed {fio_reads} reads but the trace holds {traced} read commands "
                           f"(more than {FIO_READ_TOLERANCE:.0%} apart)")
    return out


def _layer_groups(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Grouped layer rows of `ztbp layers --json`: every list of objects that carry their own "layers" list."""
    out = []
    for key, val in obj.items():
        if key == "layers" or not isinstance(val, list):
            continue
        for g in val:
            if isinstance(g, dict) and isinstance(g.get("layers"), list):
                label = ", ".join(f"{k}={v}" for k, v in g.items()
                                  if k != "layers" and isinstance(v, str | int | float) and not isinstance(v, bool))
                out.append({"label": label or key, "layers": g["layers"], "zone": g.get("zone")})
    return out


def layers_view(run: Run) -> dict[str, Any]:
    """The layer breakdown of the run, if it was captured: status "absent", "error" or "ok"."""
    if not run.has_layers:
        return {"status": "absent", "message": "layer breakdown: not captured in this run (no raw/layers.csv)"}
    try:
        res = stages.layers(run, ["op", "size"])
    except ZtbpError as e:
        return {"status": "error", "message": f"layer breakdown: {e}"}
    groups = _layer_groups(res)
    return {"status": "ok", "message": "layer breakdown from raw/layers.csv", "layers": res["layers"],
            "groups": [g for g in groups if g["zone"] is None], "zones": [g for g in groups if g["zone"] is not None],
            "raw": res}


def layers_table(view: dict[str, Any]) -> pl.DataFrame | Note:
    """The Table-I table: mean, p50, p99 (µs) and share of every layer."""
    if view["status"] != "ok":
        return Note(view["message"])
    return pl.DataFrame([{"layer": r["layer"], "mean_us": r.get("mean_ns", 0) / 1000,
                          "p50_us": r.get("p50_ns", 0) / 1000, "p99_us": r.get("p99_ns", 0) / 1000,
                          "share": r.get("share", 0.0)} for r in view["layers"]])


# --- sequentiality ----------------------------------------------------------------------------------------------

def frag_view(ft: pl.DataFrame) -> pl.DataFrame:
    """The fragmentation table, zones that were read or written only."""
    return ft.filter((pl.col("read_fragments") > 0) | (pl.col("write_fragments") > 0))


# --- clustering and cache ---------------------------------------------------------------------------------------

def cluster_cells(run: Run, cl: dict[str, Any], params: ClusterParams = ClusterParams()) -> pl.DataFrame:
    """Read cells with the DBSCAN label of the chosen pair (all -1 when no pair was chosen; empty without reads)."""
    from ..analysis.cluster import cell_labels  # scipy and scikit-learn: only the clustering notebook pays for them

    if not cl.get("reads"):
        return pl.DataFrame(schema={"cell": pl.Int64, "zone": pl.Int64, "lba": pl.Int64, "reads": pl.Int64,
                                    "x": pl.Float64, "y": pl.Float64, "label": pl.Int64})
    if cl.get("eps") is None:
        cells = cell_labels(run.events, run.meta, 1.0, 1, params)  # positions and reads; labels overwritten
        return cells.with_columns(pl.lit(-1, dtype=cells["label"].dtype).alias("label"))
    return cell_labels(run.events, run.meta, cl["eps"], cl["min_samples"], params)


def clusters_table(cl: dict[str, Any]) -> pl.DataFrame | Note:
    if not cl.get("clusters"):
        return Note(cl.get("note") or "DBSCAN found no cluster")
    return pl.DataFrame([{"cluster": c["label"], "cells": c["cells"], "reads": c["reads"],
                          "density_x_mean": c["density_factor"], "hot": c["hot"],
                          "zones": ", ".join(map(str, c["zones"]))} for c in cl["clusters"]])


def zone_tests_table(cl: dict[str, Any]) -> pl.DataFrame | Note:
    """The zones the hot rule looked at (significant or dense), with the test's p-values and the cluster shares."""
    if not cl.get("zone_tests"):
        return Note(cl.get("note") or "no zone is significantly above the rest or dense: no hot zone")
    return pl.DataFrame(cl["zone_tests"]).select("zone", "reads", "cells_read", "p_value", "p_holm", "significant",
                                                 "hot_read_share", "hot_cell_share", "dense", "hot")


def zone_scores_table(cfg: dict[str, Any]) -> pl.DataFrame | Note:
    if not cfg.get("zone_scores"):
        return Note("no hot zone: the configuration is empty")
    return pl.DataFrame(cfg["zone_scores"])




# --- the front page of a run's report ---------------------------------------------------------------------------

def run_headline(run: Run) -> list[dict[str, str]]:
    """A run's answer in a few figures: reads traced (against fio's), lost events, hot zones found, the device. Each
    item: key, label, value, detail — text only, never None."""
    m = run.meta
    traced = int((run.events["op"] == "read").sum()) if run.events.height else 0
    try:
        fio_reads = sum(r["ios"] for r in run.fio_rows() or [] if r["dir"] == "read") if run.paths.fio_json.is_file() \
            else None
    except ZtbpError:
        fio_reads = None
    lost = m.get("lost_events") or {}
    nvme_lost = lost.get("nvme")
    try:
        cl = stages.cluster(run)
        hot = cl.get("hot_zones") or []
        hot_value = ", ".join(map(str, hot)) if hot else "none"
        hot_detail = (f"significant and dense under DBSCAN (eps {cl['eps']}, min_samples {cl['min_samples']})"
                      if cl.get("eps") is not None else str(cl.get("note") or "no cluster found"))
    except ZtbpError as e:
        hot_value, hot_detail = "not measured", str(e)
    zone_mib = m["zone_size_lba"] * m["lba_bytes"] / (1 << 20)
    backend = str(m.get("backend") or "unknown")
    return [
        {"key": "reads", "label": "reads traced", "value": f"{traced:,}",
         "detail": (f"fio completed {fio_reads:,} reads" if fio_reads is not None
                    else "no fio output in this run to check them against")},
        {"key": "lost", "label": "lost events",
         "value": f"{nvme_lost:,}" if isinstance(nvme_lost, int) else "not recorded",
         "detail": ("the nvme probe lost no event" if nvme_lost == 0 else
                    "counts are lower bounds" if isinstance(nvme_lost, int) else
                    "commands may be missing unnoticed")},
        {"key": "hot_zones", "label": "hot zones found", "value": hot_value, "detail": hot_detail},
        {"key": "device", "label": "device", "value": f"{m.get('device', 'unknown')} ({backend})",
         "detail": (f"{m['nr_zones']:,} zones of {zone_mib:g} MiB, {m['lba_bytes']:,}-byte LBAs"
                    + ("; synthetic run: generated, not traced" if m.get("synthetic") else ""))},
    ]
