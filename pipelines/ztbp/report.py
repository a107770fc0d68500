"""`ztbp report`: the notebooks of notebooks/ run in batch (papermill) and rendered to an offline HTML report.

`ztbp report RUN` writes `reports/<run-id>/`: one executed notebook and one HTML page per notebook (code hidden,
a button shows it), `index.html` linking them with each notebook's summary, and `plotly.min.js` — the only copy
of plotly's JavaScript, loaded by every page from the same folder, so a report opens offline and never asks a CDN.
Parameters for the notebooks' parameters cells come from `-f params.yaml` (a flat mapping; each notebook receives
the keys its parameters cell declares) and `-p NAME VALUE`.

This module also holds what the notebooks show besides figures: the run's overview, data-quality warnings, the
fio summary, the layer breakdown when the run has one, and small tables. Notebooks only call these functions.
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from . import frag
from .cachesim import cachesim_text
from .chains import chains_text
from .cli import emit
from .cluster import ClusterParams, cell_labels
from .contract import read_meta
from .errors import ZtbpError
from .figures import REPORT_ENV, Note
from .ingest import load_events
from .paths import NOTEBOOKS, REPORTS, ROOT, RUNS, RunPaths

MIB = 1 << 20
#: Default run of every notebook's parameters cell: the small real capture committed as test data.
SAMPLE_RUN = "tests/data/runs/sample-paper80"
#: A notebook's cells tagged with this hold its summary; the report index shows their text output.
SUMMARY_TAG = "summary"
PLOTLY_JS = "plotly.min.js"
#: Relative tolerance between fio's completed reads and the traced read commands before a warning.
FIO_READ_TOLERANCE = 0.01


# --- opening a run ----------------------------------------------------------------------------------------------

def resolve_run(run_dir: str | os.PathLike[str]) -> RunPaths:
    """A run given as a path (absolute, from the current folder, or from the repository root) or a run id."""
    p = Path(run_dir)
    if not p.is_absolute() and not p.exists():
        for base in (ROOT, RUNS):
            if (base / p).exists():
                p = base / p
                break
    return RunPaths(p)


@dataclass
class Run:
    """One run as the notebooks see it: its paths, meta.json and typed events."""

    paths: RunPaths
    meta: dict[str, Any]
    events: pl.DataFrame

    @property
    def run_id(self) -> str:
        return self.paths.run_id

    @property
    def lba_bytes(self) -> int:
        return int(self.meta["lba_bytes"])

    @property
    def nr_zones(self) -> int:
        return int(self.meta["nr_zones"])


def load(run_dir: str | os.PathLike[str]) -> Run:
    """Open a run: check meta.json, ingest raw/nvme.csv when needed, load the events."""
    rp = resolve_run(run_dir)
    meta = read_meta(rp)
    return Run(rp, meta, load_events(rp))


# --- overview ---------------------------------------------------------------------------------------------------

def _scalar(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={_scalar(x)}" for k, x in v.items())
    if isinstance(v, list):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    return str(v)


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


def _wrap(label: str, text: str, width: int = 112) -> str:
    """`label` padded to 13 columns, then text wrapped at commas into lines of at most `width`."""
    return textwrap.fill(text, width, initial_indent=f"{label:<13}", subsequent_indent=" " * 13,
                         break_long_words=False, break_on_hyphens=False)


def overview_text(ov: dict[str, Any]) -> str:
    zone_mib = ov["zone_size_lba"] * ov["lba_bytes"] / MIB
    cap_mib = ov["zone_cap_lba"] * ov["lba_bytes"] / MIB
    kind = "synthetic" if ov["synthetic"] else "traced"
    ops = ", ".join(f"{k} {v:,}" for k, v in ov["by_op"].items()) or "none"
    lost = ", ".join(f"{k}={v}" for k, v in ov["lost_events"].items()) or "not recorded"
    lines = [
        f"run          {ov['run_id']} ({ov['backend']}, {kind}, {'complete' if ov['complete'] else 'INCOMPLETE'})",
        f"created      {ov['created'] or 'not recorded'}",
        f"device       {ov['device']}: {ov['nr_zones']} zones of {zone_mib:g} MiB (capacity {cap_mib:g} MiB), "
        f"{ov['lba_bytes']}-byte LBAs",
        _wrap("workload", _scalar(ov["workload"]) or "not recorded"),
        f"commands     {ov['commands']:,} in {ov['duration_s']:.2f} s ({ov['commands_per_s']:,.0f}/s): {ops}",
        f"read         {ov['read_bytes'] / MIB:,.1f} MiB",
        f"lost events  {lost}",
    ]
    if ov["versions"]:
        lines.append(_wrap("versions", _scalar(ov["versions"])))
    return "\n".join(lines)


def meta_table(run: Run) -> pl.DataFrame:
    """meta.json as key / value rows (nested objects one level deep)."""
    rows: list[tuple[str, str]] = []
    for k, v in run.meta.items():
        if isinstance(v, dict) and v:
            rows += [(f"{k}.{k2}", _scalar(v2)) for k2, v2 in v.items()]
        else:
            rows.append((k, _scalar(v)))
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


def _fio(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(errors="replace"))
    except (OSError, json.JSONDecodeError) as e:
        raise ZtbpError(f"{path.name} is not fio JSON output ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise ZtbpError(f"{path.name} has no 'jobs' list: is it fio --output-format=json output?")
    return data


def fio_rows(path: Path) -> list[dict[str, Any]]:
    """One row per fio job and direction that did I/O: ios, IOPS, bandwidth, completion latency."""
    rows = []
    for job in _fio(path)["jobs"]:
        if not isinstance(job, dict):
            continue
        for d in ("read", "write", "trim"):
            s = job.get(d)
            if not isinstance(s, dict) or not s.get("total_ios"):
                continue
            clat = s.get("clat_ns") if isinstance(s.get("clat_ns"), dict) else {}
            pct = clat.get("percentile") if isinstance(clat.get("percentile"), dict) else {}
            rows.append({
                "job": str(job.get("jobname", "?")), "dir": d, "ios": int(s["total_ios"]),
                "iops": float(s.get("iops", 0.0)), "MiB_per_s": float(s.get("bw_bytes", 0)) / MIB,
                "clat_mean_us": float(clat.get("mean", 0.0)) / 1000,
                "clat_p50_us": float(pct.get("50.000000", 0.0)) / 1000,
                "clat_p99_us": float(pct.get("99.000000", 0.0)) / 1000,
            })
    return rows


def fio_view(run: Run) -> pl.DataFrame | Note:
    """The fio summary of raw/fio.json, or a note when the run has none."""
    path = run.paths.fio_json
    if not path.is_file():
        return Note("fio output: not captured in this run (no raw/fio.json)")
    try:
        rows = fio_rows(path)
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
    return pl.DataFrame([{"counter": str(k), "value": _scalar(v)} for k, v in stats.items()])


def overhead_view(run: Run) -> pl.DataFrame | Note:
    """Probe overhead recorded in meta.json (fio IOPS with and without the probe), else a note."""
    found = {k: v for k, v in run.meta.items() if "overhead" in k}
    if not found:
        return Note("probe overhead: not measured in this run (`just bench` measures fio IOPS with and without "
                    "the probe in one VM boot)")
    rows = []
    for k, v in found.items():
        items = v.items() if isinstance(v, dict) else [("value", v)]
        rows += [{"key": f"{k}.{k2}", "value": _scalar(v2)} for k2, v2 in items]
    return pl.DataFrame(rows)


def ingest_report(run: Run) -> dict[str, Any]:
    try:
        return json.loads(run.paths.ingest_report.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def quality_warnings(run: Run) -> list[str]:
    """What a reader should know before trusting the figures of this run."""
    out: list[str] = []
    m = run.meta
    if not m.get("complete", True):
        out.append("the capture was interrupted (meta.json complete=false): the data is valid but partial")
    if m.get("synthetic"):
        out.append("synthetic run (ztbp synth): the commands were generated, not traced on a device")
    rep = ingest_report(run)
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
            fio_reads = sum(r["ios"] for r in fio_rows(run.paths.fio_json) if r["dir"] == "read")
        except ZtbpError as e:
            out.append(f"raw/fio.json: {e}")
        else:
            traced = int((run.events["op"] == "read").sum())
            if fio_reads and abs(traced - fio_reads) > FIO_READ_TOLERANCE * fio_reads:
                out.append(f"fio completed {fio_reads} reads but the trace holds {traced} read commands "
                           f"(more than {FIO_READ_TOLERANCE:.0%} apart)")
    return out


def quality_text(warnings: list[str]) -> str:
    if not warnings:
        return "data quality: no warning"
    return "\n".join([f"data quality: {len(warnings)} warning{'s' if len(warnings) > 1 else ''}",
                      *[f"  - {w}" for w in warnings]])


# --- layers (issue 4's probe; optional) ---------------------------------------------------------------------------

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


def _layers_cli(run: RunPaths, by: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "ztbp.cli", "layers", str(run.root), "--json", "--by", by]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise ZtbpError((proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1])
    res = json.loads(proc.stdout)
    if not isinstance(res, dict):
        raise ZtbpError("`ztbp layers --json` did not print a JSON object")
    return res


def layers_view(run: Run) -> dict[str, Any]:
    """The layer breakdown of the run, if it was captured: status "absent", "unavailable", "error" or "ok"."""
    csv = run.paths.probe_csv("layers")
    if not csv.is_file():
        return {"status": "absent", "message": "layer breakdown: not captured in this run (no raw/layers.csv)"}
    if importlib.util.find_spec("ztbp.layers") is None:
        return {"status": "unavailable", "message": "raw/layers.csv was captured, but this version of ztbp has no "
                                                    "layer analysis (ztbp layers)"}
    try:
        res = _layers_cli(run.paths, "op,size")
        layers = res.get("layers")
        if not isinstance(layers, list) or not all(isinstance(r, dict) and "layer" in r for r in layers):
            raise ZtbpError("`ztbp layers --json` gave no 'layers' list")
        groups = _layer_groups(res)
        zones = [g for g in groups if g["zone"] is not None]
        if not zones:
            try:
                zones = [g for g in _layer_groups(_layers_cli(run.paths, "zone")) if g["zone"] is not None]
            except (ZtbpError, json.JSONDecodeError, subprocess.TimeoutExpired):
                zones = []
    except (ZtbpError, json.JSONDecodeError, subprocess.TimeoutExpired) as e:
        return {"status": "error", "message": f"layer breakdown: `ztbp layers` failed: {e}"}
    return {"status": "ok", "message": "layer breakdown from raw/layers.csv", "layers": layers,
            "groups": [g for g in groups if g["zone"] is None], "zones": zones, "raw": res}


def layers_text(view: dict[str, Any]) -> str:
    if view["status"] != "ok":
        return view["message"]
    total = sum(r.get("mean_ns", 0) for r in view["layers"])
    parts = ", ".join(f"{r['layer']} {r.get('share', 0):.1%}" for r in view["layers"])
    return f"layer breakdown: {len(view['layers'])} layers, mean end-to-end {total / 1000:.1f} µs: {parts}"


def layers_table(view: dict[str, Any]) -> pl.DataFrame | Note:
    """The Table-I table: mean, p50, p99 (µs) and share of every layer."""
    if view["status"] != "ok":
        return Note(view["message"])
    return pl.DataFrame([{"layer": r["layer"], "mean_us": r.get("mean_ns", 0) / 1000,
                          "p50_us": r.get("p50_ns", 0) / 1000, "p99_us": r.get("p99_ns", 0) / 1000,
                          "share": r.get("share", 0.0)} for r in view["layers"]])


# --- sequentiality ----------------------------------------------------------------------------------------------

def chains_summary(cr: dict[str, Any]) -> str:
    """The headline lines of `ztbp chains` (chains, share ≥ NTS, chain length percentiles)."""
    return "\n".join(chains_text(cr).splitlines()[:3])


def frag_summary(ft: pl.DataFrame) -> str:
    """The headline lines of `ztbp frag` (per direction: zones touched, fragments per zone)."""
    s = frag.frag_summary(ft)
    return "\n".join(frag.frag_text(ft, s).splitlines()[: len(s)])


def frag_view(ft: pl.DataFrame) -> pl.DataFrame:
    """The fragmentation table, zones that were read or written only."""
    return ft.filter((pl.col("read_fragments") > 0) | (pl.col("write_fragments") > 0))


# --- clustering and cache ---------------------------------------------------------------------------------------

def cluster_cells(run: Run, cl: dict[str, Any], params: ClusterParams = ClusterParams()) -> pl.DataFrame:
    """Read cells with the DBSCAN label of the chosen pair (all -1 when no pair was chosen; empty without reads)."""
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


def cache_text(sim: dict[str, Any], source: str = "ztbp cluster") -> str:
    """`ztbp cachesim` text of a simulate() result."""
    return cachesim_text({**sim, "hot_zones_source": source})


def config_text(cfg: dict[str, Any]) -> str:
    """The cache configuration in a few stable lines (no creation time)."""
    p, c = cfg["predicted"], cfg["cluster"]
    lines = [f"configuration for run {cfg['source_run']}: hot zones {cfg['hot_zones']}",
             f"  cluster eps {c['eps']}, min_samples {c['min_samples']}, silhouette "
             f"{'-' if c['silhouette'] is None else format(c['silhouette'], '.4f')}",
             f"  predicted at {cfg['cache_mib']:g} MiB: lru {p['lru']:.4f}, zone_lru {p['zone_lru']:.4f}, "
             f"static_best {p['static_best']:.4f}, belady {p['belady']:.4f}"]
    return "\n".join(lines)


def zone_scores_table(cfg: dict[str, Any]) -> pl.DataFrame | Note:
    if not cfg.get("zone_scores"):
        return Note("no hot zone: the configuration is empty")
    return pl.DataFrame(cfg["zone_scores"])


# --- the report driver ------------------------------------------------------------------------------------------

TEMPLATE = r"""{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}
<script src="plotly.min.js"></script>
{%- endblock html_head_js -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block extra_css %}
<style type="text/css">
body.ztbp-hide-code .jp-Cell-inputWrapper, body.ztbp-hide-code .jp-InputArea { display: none; }
body.ztbp-hide-code .jp-MarkdownCell .jp-Cell-inputWrapper { display: block; }
body.ztbp-hide-code .jp-MarkdownCell .jp-InputArea { display: flex; }
body.ztbp-hide-code .jp-OutputPrompt { display: none; }
.ztbp-nav { position: sticky; top: 0; z-index: 10; background: #f5f5f5; border-bottom: 1px solid #ddd;
            padding: 6px 16px; font-family: sans-serif; font-size: 14px; }
.ztbp-nav a { margin-right: 16px; }
.ztbp-nav button { float: right; }
.ztbp-note { background: #fff8e1; border-left: 4px solid #ffb300; padding: 6px 10px; }
</style>
{% endblock extra_css %}
{%- block body_header -%}
<body class="jp-Notebook ztbp-hide-code" data-jp-theme-light="true" data-jp-theme-name="JupyterLab Light">
<div class="ztbp-nav"><a href="index.html">&larr; report index</a><span>{{ resources.ztbp_title }}</span>
<button type="button" id="ztbp-toggle-code"
 onclick="document.body.classList.toggle('ztbp-hide-code');
          this.textContent = document.body.classList.contains('ztbp-hide-code') ? 'show code' : 'hide code';"
>show code</button></div>
<main>
{%- endblock body_header -%}
"""


@dataclass
class Page:
    stem: str
    title: str
    description: str
    ok: bool = False
    error: str = ""
    seconds: float = 0.0
    summary: list[str] = field(default_factory=list)


def notebooks(only: list[str] | None = None) -> list[Path]:
    """The report's notebooks, in order; `only` selects by number or stem (e.g. "1", "6-cache")."""
    found = sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
    if not found:
        raise ZtbpError(f"no notebook found in {NOTEBOOKS}")
    if not only:
        return found
    out = []
    for sel in only:
        hit = [p for p in found if p.stem == sel or p.stem.split("-", 1)[0] == sel]
        if not hit:
            raise ZtbpError(f"no notebook {sel!r}; choose from {', '.join(p.stem for p in found)}")
        out += [p for p in hit if p not in out]
    return out


def _title(nb: Any, stem: str) -> tuple[str, str]:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            lines = [ln.strip() for ln in cell.source.splitlines()]
            title = lines[0].lstrip("# ").strip() if lines and lines[0] else stem
            para = []
            for ln in lines[1:]:
                if not ln or ln.startswith("#"):
                    if para:
                        break
                    continue
                para.append(ln)
            return title, " ".join(para)
    return stem, ""


def _summary_text(nb: Any) -> list[str]:
    out = []
    for cell in nb.cells:
        if cell.cell_type == "code" and SUMMARY_TAG in cell.get("metadata", {}).get("tags", []):
            for o in cell.get("outputs", []):
                if o.get("output_type") == "stream" and o.get("name") == "stdout":
                    out.append(o.get("text", "").rstrip())
    return out


def _error_of(nb: Any) -> str:
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                return f"{o.get('ename')}: {o.get('evalue')}"
    return ""


def declared_parameters(path: Path) -> dict[str, Any]:
    import papermill

    return dict(papermill.inspect_notebook(str(path)))


def load_parameters(path: str | None, pairs: list[list[str]] | None) -> dict[str, Any]:
    """Parameters from a YAML mapping (-f) overridden by -p NAME VALUE pairs (values parsed as YAML)."""
    import yaml

    params: dict[str, Any] = {}
    if path:
        try:
            data = yaml.safe_load(Path(path).read_text())
        except FileNotFoundError:
            raise ZtbpError(f"parameters file {path} does not exist") from None
        except yaml.YAMLError as e:
            raise ZtbpError(f"parameters file {path} is not valid YAML: {e}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
            raise ZtbpError(f"parameters file {path} must hold a mapping of parameter names to values")
        params.update(data)
    for name, value in pairs or []:
        try:
            params[name] = yaml.safe_load(value)
        except yaml.YAMLError:
            params[name] = value
    return params


@contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _exporter() -> Any:
    import jinja2
    from nbconvert import HTMLExporter

    exp = HTMLExporter(template_name="lab", extra_loaders=[jinja2.DictLoader({"ztbp-report.html.j2": TEMPLATE})])
    exp.template_file = "ztbp-report.html.j2"
    return exp


def write_plotlyjs(out: Path) -> Path:
    """plotly.js once per report folder (rewritten only when the installed plotly changes)."""
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    path = out / PLOTLY_JS
    if not path.is_file() or path.stat().st_size != len(js.encode()):
        path.write_text(js)
    return path


def render(run_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None,
           parameters: dict[str, Any] | None = None, only: list[str] | None = None, timeout: int = 900,
           log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every notebook on a run with papermill and write the HTML report. Returns what was written."""
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    rp = resolve_run(run_dir)
    meta = read_meta(rp)  # clear message on a bad run before any kernel starts
    load_events(rp)  # ingest once, here, so a bad trace is reported as such
    nbs = notebooks(only)
    parameters = dict(parameters or {})
    declared = {p: declared_parameters(p) for p in nbs}
    known = set().union(*declared.values())
    unknown = sorted(set(parameters) - known)
    if unknown:
        raise ZtbpError(f"unknown notebook parameter(s) {', '.join(unknown)}; the notebooks take "
                        f"{', '.join(sorted(known))}")
    out = Path(out_dir) if out_dir else REPORTS / rp.run_id
    out.mkdir(parents=True, exist_ok=True)
    write_plotlyjs(out)
    exporter = _exporter()
    pages: list[Page] = []
    with _env(REPORT_ENV, "1"):
        for path in nbs:
            nb_params = {k: v for k, v in parameters.items() if k in declared[path]}
            nb_params["run_dir"] = str(rp.root.resolve())
            executed = out / path.name
            t0 = time.monotonic()
            log(f"report: {rp.run_id}: running {path.name} ...")
            err = ""
            try:
                papermill.execute_notebook(str(path), str(executed), parameters=nb_params, kernel_name="python3",
                                           cwd=str(ROOT), progress_bar=False, log_output=False,
                                           execution_timeout=timeout)
            except PapermillExecutionError as e:
                err = f"{e.ename}: {e.evalue}"
            except Exception as e:  # noqa: BLE001 - kernel died, timeout, ...: report it on the page
                err = f"{type(e).__name__}: {e}"
            nb = nbformat.read(str(executed), as_version=4) if executed.is_file() else nbformat.read(
                str(path), as_version=4)
            title, desc = _title(nb, path.stem)
            page = Page(path.stem, title, desc, ok=not err, error=err or _error_of(nb),
                        seconds=time.monotonic() - t0, summary=_summary_text(nb))
            page.ok = not page.error
            body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": f"{title} — {rp.run_id}"},
                                                                 "ztbp_title": f"{title} — run {rp.run_id}"})
            (out / f"{path.stem}.html").write_text(body)
            log(f"report: {rp.run_id}: {path.stem}.html {'ok' if page.ok else 'FAILED: ' + page.error} "
                f"({page.seconds:.1f} s)")
            pages.append(page)
    index = out / "index.html"
    index.write_text(index_html(rp, meta, pages))
    return {"run": rp.run_id, "out": str(out), "index": str(index), "ok": all(p.ok for p in pages),
            "pages": [{"notebook": p.stem, "html": f"{p.stem}.html", "title": p.title, "ok": p.ok,
                       "error": p.error, "seconds": round(p.seconds, 2)} for p in pages]}


def index_html(rp: RunPaths, meta: dict[str, Any], pages: list[Page]) -> str:
    wl = meta.get("workload", {})
    kind = "synthetic" if meta.get("synthetic") else f"traced ({meta.get('backend', '?')})"
    zone_mib = meta["zone_size_lba"] * meta["lba_bytes"] / MIB
    cards = []
    for p in pages:
        status = ('<span class="ok">ok</span>' if p.ok
                  else f'<span class="fail">failed: {html.escape(p.error)}</span>')
        summary = "".join(f"<pre>{html.escape(s)}</pre>" for s in p.summary)
        desc = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(p.description))
        cards.append(f'<li class="card"><h2><a href="{html.escape(p.stem)}.html">{html.escape(p.title)}</a> '
                     f'{status}</h2><p>{desc}</p>{summary}</li>')
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ZTBP report — {html.escape(rp.run_id)}</title>
<style>
body {{ font-family: sans-serif; margin: 24px auto; max-width: 1100px; color: #222; }}
h1 {{ margin-bottom: 4px; }} .meta {{ color: #555; margin-top: 0; }}
ul.pages {{ list-style: none; padding: 0; }}
.card {{ border: 1px solid #ddd; border-radius: 6px; padding: 8px 16px; margin: 12px 0; }}
.card h2 {{ font-size: 18px; margin: 6px 0; }}
.card pre {{ background: #f7f7f7; padding: 6px 10px; font-size: 12px; overflow-x: auto; }}
.ok {{ color: #2e7d32; font-size: 13px; }} .fail {{ color: #c62828; font-size: 13px; }}
</style></head>
<body>
<h1>ZTBP report — {html.escape(rp.run_id)}</h1>
<p class="meta">{html.escape(kind)} run · workload {html.escape(str(wl.get('name', '?')))} ·
{meta['nr_zones']} zones of {zone_mib:g} MiB · {meta['lba_bytes']}-byte LBAs ·
device {html.escape(str(meta.get('device', '?')))}</p>
<ul class="pages">
{chr(10).join(cards)}
</ul>
<p class="meta">Made by <code>ztbp report</code> (papermill + nbconvert); plotly.js is loaded from
<code>{PLOTLY_JS}</code> in this folder, so the report opens offline.</p>
</body></html>
"""


CHECK_MARK = "# NBVAL_CHECK_OUTPUT"


def update_notebook_outputs(only: list[str] | None = None, log: Callable[[str], None] = print) -> list[Path]:
    """Run each notebook on its default parameters (the sample run) and store the outputs of its checked cells.

    nbval (`pytest --nbval-lax notebooks/`) compares the cells marked `# NBVAL_CHECK_OUTPUT` with the outputs
    stored in the notebook; every other cell is stored without output. Run this after changing a notebook's
    summary cells or the sample run: `ztbp report --update-notebooks`.
    """
    import tempfile

    import nbformat
    import papermill

    written = []
    for path in notebooks(only):
        log(f"report: executing {path.name} on its defaults ...")
        with tempfile.TemporaryDirectory() as td:
            executed = papermill.execute_notebook(str(path), str(Path(td) / path.name), kernel_name="python3",
                                                  cwd=str(NOTEBOOKS), progress_bar=False, log_output=False)
        by_id = {c.get("id"): c for c in executed.cells}
        nb = nbformat.read(str(path), as_version=4)
        code_cells = [c for c in nb.cells if c.cell_type == "code"]
        for n, cell in enumerate(code_cells, start=1):
            ran = by_id.get(cell.get("id"))
            keep = CHECK_MARK in cell.source and ran is not None
            cell.outputs = [nbformat.from_dict(dict(o)) for o in ran.outputs] if keep else []
            cell.execution_count = n if keep else None  # nbval refuses stored outputs of an "unrun" cell
            for o in cell.outputs:
                if "execution_count" in o:
                    o["execution_count"] = n
            cell.metadata.pop("papermill", None)
            cell.metadata.pop("execution", None)
        nb.metadata.pop("papermill", None)
        nbformat.write(nb, str(path))
        written.append(path)
    return written


def report_runs(all_runs: bool, runs: list[str]) -> list[str]:
    if all_runs:
        found = sorted(str(p.parent) for p in RUNS.glob("*/meta.json"))
        if not found:
            raise ZtbpError(f"no run in {RUNS}: capture one with `just capture` or make one with `just synth`")
        return found
    if not runs:
        raise ZtbpError("give a run directory, or --all for every run in runs/")
    return runs


def _cmd(args: argparse.Namespace) -> int:
    if args.update_notebooks:
        if args.run or args.all:
            raise ZtbpError("--update-notebooks runs the notebooks on their default run; give no run")
        done = update_notebook_outputs(args.only.split(",") if args.only else None)
        print(f"report: stored the checked outputs of {len(done)} notebooks")
        return 0
    runs = report_runs(args.all, args.run)
    if args.output and len(runs) > 1:
        raise ZtbpError("-o names one report folder; it cannot be used with several runs")
    params = load_parameters(args.params_file, args.param)
    results = []
    bad_runs = []
    for run in runs:
        log = (lambda s: print(s, file=sys.stderr)) if args.json else print
        try:
            res = render(run, args.output, params, args.only.split(",") if args.only else None, args.timeout, log)
        except ZtbpError as e:
            if len(runs) == 1:
                raise
            bad_runs.append(run)  # --all: one broken run does not stop the others
            print(f"ztbp report: error: {run}: {e}", file=sys.stderr)
            continue
        results.append(res)
        if not args.json:
            print(f"report: {res['run']}: {res['index']} ({sum(p['ok'] for p in res['pages'])}/"
                  f"{len(res['pages'])} pages ok)")
    if args.json and results:
        emit(results if len(runs) > 1 else results[0], True)
    failed = [(r["run"], p) for r in results for p in r["pages"] if not p["ok"]]
    for run_id, p in failed:
        print(f"ztbp report: error: {run_id}: notebook {p['notebook']} failed: {p['error']}", file=sys.stderr)
    if bad_runs:
        print(f"ztbp report: {len(bad_runs)} of {len(runs)} runs could not be reported: {', '.join(bad_runs)}",
              file=sys.stderr)
    return 1 if failed or bad_runs else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="run the notebooks on a run and write an offline HTML report")
    p.add_argument("run", nargs="*", help="run directory (or run id under runs/)")
    p.add_argument("--all", action="store_true", help="every run in runs/")
    p.add_argument("-o", "--output", help="report folder (default reports/<run-id>)")
    p.add_argument("-f", "--params-file", help="YAML mapping of notebook parameters")
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="one notebook parameter (value read as YAML); repeatable")
    p.add_argument("--only", help="comma-separated notebooks to run, by number or name (default: all)")
    p.add_argument("--timeout", type=int, default=900, help="seconds per notebook cell (default 900)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.add_argument("--update-notebooks", action="store_true",
                   help="maintainers: rerun notebooks/ on the sample run and store the outputs nbval checks")
    p.set_defaults(func=_cmd)
