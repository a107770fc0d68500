"""Plotly figures of the notebooks and reports — one function per picture, so they are unit-testable.

Every function takes what the analysis modules return (polars frames, the dicts of `chains_report`,
`run_cluster`, `simulate`, ...) and returns a `plotly.graph_objects.Figure`, or a `Note` when the run holds
nothing to draw (e.g. no reads): a figure is never drawn empty. `setup()` picks how figures are shown: inline
plotly in JupyterLab, or — when the report driver sets `ZTBP_REPORT_HTML=1` — plain HTML that calls the page's
single local copy of plotly.js (reports open offline, with the library loaded once per page).
"""

from __future__ import annotations

import html
import math
import os
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
from plotly.io._base_renderers import MimetypeRenderer
from plotly.subplots import make_subplots

from ..units import MIB

#: Environment variable the report driver sets in the kernel: figures become HTML without plotly.js.
REPORT_ENV = "ZTBP_REPORT_HTML"
REPORT_RENDERER = "ztbp_report"
#: Colours: reads, writes, appends, resets (and the policies of the cache model).
OP_COLOURS = {"read": "#1f77b4", "write": "#d62728", "zone_append": "#ff7f0e", "reset": "#2ca02c",
              "zone_mgmt_send": "#2ca02c", "zone_mgmt_recv": "#9467bd", "flush": "#8c564b", "other": "#7f7f7f"}
POLICY_COLOURS = {"lru": "#7f7f7f", "zone_lru": "#1f77b4", "static_best": "#2ca02c", "belady": "#d62728"}
POLICY_NAMES = {"lru": "LRU", "zone_lru": "zone-recognition LRU", "static_best": "static best", "belady": "Belady"}
#: libCacheSim's general policies (analysis/cachesim.py GENERAL), drawn dashed beside the project's.
GENERAL_COLOURS = {"arc": "#ff7f0e", "lirs": "#9467bd", "s3fifo": "#8c564b", "twoq": "#e377c2", "wtinylfu": "#bcbd22",
                   "sieve": "#17becf"}
GENERAL_NAMES = {"arc": "ARC", "lirs": "LIRS", "s3fifo": "S3-FIFO", "twoq": "2Q", "wtinylfu": "W-TinyLFU",
                 "sieve": "Sieve"}
HOT_COLOUR = "#d62728"
COLD_COLOUR = "#9ecae1"


class Note:
    """A short message shown in place of a figure or table (e.g. "not captured in this run")."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:
        return f"**Note:** {self.text}"

    def _repr_html_(self) -> str:
        return f'<p class="ztbp-note"><b>Note:</b> {html.escape(self.text)}</p>'


class ReportRenderer(MimetypeRenderer):
    """text/html of a figure without plotly.js: the report page loads its local plotly.min.js once."""

    def to_mimebundle(self, fig_dict: dict[str, Any]) -> dict[str, str]:
        return {"text/html": pio.to_html(fig_dict, include_plotlyjs=False, full_html=False,
                                         config={"displaylogo": False, "responsive": True})}


def setup() -> str:
    """Choose how figures show in this kernel and how many table rows polars prints; returns the renderer."""
    pl.Config.set_tbl_rows(100)
    pl.Config.set_tbl_cols(16)
    pl.Config.set_fmt_str_lengths(80)
    if os.environ.get(REPORT_ENV) == "1":
        pio.renderers[REPORT_RENDERER] = ReportRenderer()
        pio.renderers.default = REPORT_RENDERER
    elif not pio.renderers.default:
        pio.renderers.default = "plotly_mimetype+notebook"
    return str(pio.renderers.default)


def layout(fig: go.Figure, title: str, height: int = 420, **kw: Any) -> go.Figure:
    """Every figure's title, height, template and margins (plotly's `update_layout` keywords in `kw`)."""
    fig.update_layout(title=title, height=height, template="plotly_white", margin={"l": 60, "r": 20, "t": 60,
                                                                                    "b": 50}, **kw)
    return fig


def _log_vline(fig: go.Figure, x: float, text: str, dash: str) -> None:
    """A vertical line at x on a log x axis, labelled. Shapes take data coordinates there, annotations log10."""
    fig.add_vline(x=x, line_dash=dash, line_color="black")
    fig.add_annotation(x=math.log10(x), y=1.0, yref="paper", text=text, showarrow=False, xanchor="right",
                       yanchor="bottom")


def _bytes_label(b: float) -> str:
    if b >= MIB:
        return f"{b / MIB:g} MiB"
    if b >= 1024:
        return f"{b / 1024:g} KiB"
    return f"{b:g} B"


# --- overview ---------------------------------------------------------------------------------------------------

def ops_over_time(events: pl.DataFrame, bins: int = 60) -> go.Figure | Note:
    """Commands per second over the run, stacked by op."""
    if events.height == 0:
        return Note("the trace holds no command")
    t0 = int(events["ts_ns"].min())
    span = max(1, int(events["ts_ns"].max()) - t0)
    width = max(1, -(-span // max(1, bins)))
    b = events.select(((pl.col("ts_ns") - t0) // width).alias("bin"), pl.col("op").cast(pl.String))
    counts = b.group_by("bin", "op").agg(pl.len().alias("n")).sort("bin")
    fig = go.Figure()
    x_all = np.arange(int(counts["bin"].max()) + 1)
    for op in sorted(counts["op"].unique().to_list(), key=lambda o: list(OP_COLOURS).index(o)
                     if o in OP_COLOURS else 99):
        c = counts.filter(pl.col("op") == op)
        y = np.zeros(x_all.size)
        y[c["bin"].to_numpy()] = c["n"].to_numpy() / (width / 1e9)
        fig.add_trace(go.Bar(x=(x_all * width + width / 2) / 1e9, y=y, name=op,
                             marker_color=OP_COLOURS.get(op, "#7f7f7f")))
    fig.update_layout(barmode="stack", bargap=0)
    fig.update_xaxes(title="time since the first command (s)")
    fig.update_yaxes(title="commands / s")
    return layout(fig, "Commands over time, by op", 360)


#: Most commands the static timeline draws; a wider window is for the Perfetto trace (`ztbp perfetto`).
TIMELINE_MAX_COMMANDS = 5000


def command_timeline(events: pl.DataFrame, nr_zones: int, start_s: float, length_s: float,
                     zones: tuple[int, ...] | None = None) -> go.Figure | Note:
    """The commands submitted in [start_s, start_s + length_s) from the first command, one band per zone, each
    command a bar from submission to completion; commands of a zone that overlap sit on lanes of its band."""
    from ..analysis.timeline import command_lanes, select_commands, slice_name
    from ..errors import ZtbpError

    if events.height == 0:
        return Note("the trace holds no command")
    start = round(start_s * 1e9)
    try:
        cmds, _ = select_commands(events, (start, start + round(length_s * 1e9)), zones, nr_zones)
    except ZtbpError as e:
        return Note(str(e))
    if cmds.height > TIMELINE_MAX_COMMANDS:
        return Note(f"{cmds.height} commands in this window: narrow it to at most {TIMELINE_MAX_COMMANDS}, or open "
                    "the whole run in Perfetto (`ztbp perfetto RUN`)")
    t0 = int(events["ts_ns"].min())
    shown = sorted(cmds["zone"].unique().to_list())
    df = cmds.with_columns(pl.Series("lane", command_lanes(cmds)), pl.col("op").cast(pl.Utf8),
                           pl.col("zone_action").cast(pl.Utf8))
    df = df.with_columns((pl.col("lane").max().over("zone") + 1).alias("lanes"),
                         pl.col("zone").replace_strict(shown, list(range(len(shown))), return_dtype=pl.Int64)
                         .alias("band"))
    df = df.with_columns((pl.col("band") + 0.1 + 0.8 * (pl.col("lane") + 0.5) / pl.col("lanes")).alias("y"),
                         (0.8 / pl.col("lanes")).alias("h"), slice_name())
    fig = go.Figure()
    for name in sorted(df["name"].unique().to_list()):
        d = df.filter(pl.col("name") == name)
        hover = [f"{name} zone {z} slba {s} nlb {n} status {st} lat {lat / 1000:.1f} µs"
                 for z, s, n, st, lat in d.select("zone", "slba", "nlb", "status", "lat_ns").iter_rows()]
        fig.add_trace(go.Bar(orientation="h", base=((d["ts_ns"].cast(pl.Int64) - t0) / 1e6).to_list(),
                             x=(d["lat_ns"].cast(pl.Float64) / 1e6).to_list(), y=d["y"].to_list(),
                             width=d["h"].to_list(), name=name, hovertext=hover, hoverinfo="text",
                             marker_color=OP_COLOURS.get(name.removesuffix("_all"), "#7f7f7f")))
    fig.update_yaxes(tickvals=[i + 0.5 for i in range(len(shown))], ticktext=[f"zone {z}" for z in shown],
                     range=[0, len(shown)], title="")
    fig.update_xaxes(title="time since the first command (ms)")
    fig.update_layout(barmode="overlay", bargap=0)
    return layout(fig, f"Commands from {start_s:g} s for {length_s * 1000:g} ms ({cmds.height} commands, "
                  f"{len(shown)} zones)", max(300, 60 + 40 * len(shown)))

# --- zones ------------------------------------------------------------------------------------------------------

def zone_heat(zt: pl.DataFrame) -> go.Figure | Note:
    """Per-zone reads, writes, appends and resets (one panel each) from `zones.zone_table`."""
    if zt.height == 0:
        return Note("the run has no zone")
    panels = (("reads", "read"), ("writes", "write"), ("appends", "zone_append"), ("resets", "reset"))
    fig = make_subplots(rows=4, cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=[p for p, _ in panels])
    zone = zt["zone"].to_list()
    for i, (col, op) in enumerate(panels, start=1):
        fig.add_trace(go.Bar(x=zone, y=zt[col].to_list(), name=col, marker_color=OP_COLOURS[op],
                             hovertemplate="zone %{x}: %{y} " + col + "<extra></extra>"), row=i, col=1)
    fig.update_xaxes(title="zone", row=4, col=1)
    fig.update_layout(showlegend=False, bargap=0.1)
    return layout(fig, "Per-zone heat: commands per zone", 640)


def lba_time_heatmap(events: pl.DataFrame, meta: dict[str, Any], time_bins: int = 100, lba_bins: int = 128,
                     op: str | None = None) -> go.Figure | Note:
    """Commands over time (x) and LBA (y, zone units), as a heat map; `op` restricts to one op."""
    ev = events.filter(pl.col("nlb") > 0) if op is None else events.filter(pl.col("op") == op)
    if ev.height == 0:
        return Note(f"no {'data-moving command' if op is None else op + ' command'} in this run")
    if time_bins <= 0 or lba_bins <= 0:
        raise ValueError("time_bins and lba_bins must be positive")
    nr_zones, zone_lba = meta["nr_zones"], meta["zone_size_lba"]
    rows = min(lba_bins, nr_zones) if nr_zones >= lba_bins else nr_zones  # ≤ one row per zone
    lba_per_row = -(-nr_zones * zone_lba // rows)
    t0 = int(ev["ts_ns"].min())
    span = max(1, int(ev["ts_ns"].max()) - t0 + 1)
    tw = -(-span // time_bins)
    b = ev.select(((pl.col("ts_ns") - t0) // tw).cast(pl.Int64).alias("t"),
                  (pl.col("slba") // lba_per_row).cast(pl.Int64).clip(0, rows - 1).alias("y"))
    agg = b.group_by("t", "y").agg(pl.len().alias("n"))
    z = np.zeros((rows, time_bins))
    z[agg["y"].to_numpy(), agg["t"].to_numpy()] = agg["n"].to_numpy()
    y = (np.arange(rows) + 0.5) * lba_per_row / zone_lba
    x = (np.arange(time_bins) + 0.5) * tw / 1e9
    fig = go.Figure(go.Heatmap(x=x, y=y, z=np.log10(1 + z), customdata=z, colorscale="Viridis",
                               colorbar={"title": "log10(1+n)"},
                               hovertemplate="t %{x:.2f} s, zone %{y:.1f}: %{customdata} commands<extra></extra>"))
    fig.update_xaxes(title="time since the first command (s)")
    fig.update_yaxes(title="LBA (in zones)", range=[0, nr_zones])
    what = "all data-moving commands" if op is None else f"{op} commands"
    return layout(fig, f"LBA over time ({what})", 480)


def zone_latency(zt: pl.DataFrame) -> go.Figure | Note:
    """Median and 99th-percentile read latency of every zone that was read."""
    read = zt.filter(pl.col("reads") > 0)
    if read.height == 0:
        return Note("no read in this run: no read latency per zone")
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=read["zone"].to_list(), y=read["read_lat_p50_us"].to_list(), mode="markers",
                             name="p50", marker={"color": "#1f77b4"}))
    fig.add_trace(go.Scatter(x=read["zone"].to_list(), y=read["read_lat_p99_us"].to_list(), mode="markers",
                             name="p99", marker={"color": "#d62728", "symbol": "triangle-up"}))
    fig.update_xaxes(title="zone")
    fig.update_yaxes(title="read latency (µs)", rangemode="tozero")
    return layout(fig, "Read latency per zone", 380)


# --- layers -----------------------------------------------------------------------------------------------------

def layer_bars(view: dict[str, Any]) -> go.Figure | Note:
    """Stacked mean time per layer: the Table-I bar, and one bar per group (op, size) when the analysis gives them.

    `view` is `report.layers_view(run)`; the layer figures follow `ztbp layers --json`:
    `{"layers": [{"layer", "mean_ns", "p50_ns", "p99_ns", "share"}], ...}`.
    """
    if view.get("status") != "ok":
        return Note(view.get("message", "layer breakdown not available"))
    bars: list[tuple[str, list[dict[str, Any]]]] = [("all requests", view["layers"])]
    bars += [(g["label"], g["layers"]) for g in view.get("groups", [])]
    return _stacked_layers(bars, "Time per layer (mean, µs)", "request group")


def zone_layer_bars(view: dict[str, Any]) -> go.Figure | Note:
    """Per-zone layer split (stacked mean µs per layer), when the layer analysis gives one."""
    if view.get("status") != "ok":
        return Note(view.get("message", "layer breakdown not available"))
    zones = view.get("zones", [])
    if not zones:
        return Note("the layer analysis of this run gives no per-zone split")
    return _stacked_layers([(str(z["label"]), z["layers"]) for z in zones], "Time per layer by zone (mean, µs)",
                           "zone")


def _stacked_layers(bars: list[tuple[str, list[dict[str, Any]]]], title: str, xtitle: str) -> go.Figure:
    order: list[str] = []
    for _, layers in bars:
        for r in layers:
            if r["layer"] not in order:
                order.append(r["layer"])
    fig = go.Figure()
    labels = [b for b, _ in bars]
    for layer in order:
        y = [next((r["mean_ns"] / 1000 for r in layers if r["layer"] == layer), 0.0) for _, layers in bars]
        fig.add_trace(go.Bar(x=labels, y=y, name=layer))
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title=xtitle, type="category")
    fig.update_yaxes(title="mean time (µs)")
    return layout(fig, title, 420)


# --- sequentiality ----------------------------------------------------------------------------------------------

def size_cdf(report: dict[str, Any]) -> go.Figure | Note:
    """I/O size CDF of one op, from `chains.chains_report`."""
    rows = report.get("size_cdf", [])
    if not rows:
        return Note(f"no {report.get('op', '')} request moving data in this run: no I/O size CDF")
    x = [r["bytes"] for r in rows]
    fig = go.Figure(go.Scatter(x=x, y=[r["cum_frac"] for r in rows], mode="lines+markers", line_shape="hv",
                               marker={"size": 8},
                               name="requests", customdata=[_bytes_label(b) for b in x],
                               hovertemplate="≤ %{customdata}: %{y:.1%} of requests<extra></extra>"))
    fig.update_xaxes(title="request size (bytes)", type="log")
    fig.update_yaxes(title="cumulative fraction of requests", range=[0, 1.02], tickformat=".0%")
    return layout(fig, f"I/O size CDF ({report.get('op', '')})", 360)


def chain_cdf(report: dict[str, Any]) -> go.Figure | Note:
    """Chain-length CDF per chain and per byte with the NTS line, from `chains.chains_report`."""
    rows = report.get("chain_cdf", [])
    if not rows:
        return Note(f"no {report.get('op', '')} chain in this run: no chain-length CDF")
    x = [r["bytes_le"] for r in rows]
    labels = [_bytes_label(b) for b in x]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=[r["cum_frac_chains"] for r in rows], mode="lines+markers", line_shape="hv",
                             name="chains", customdata=labels,
                             hovertemplate="≤ %{customdata}: %{y:.1%} of chains<extra></extra>"))
    fig.add_trace(go.Scatter(x=x, y=[r["cum_frac_bytes"] for r in rows], mode="lines+markers", line_shape="hv",
                             name="bytes", customdata=labels,
                             hovertemplate="≤ %{customdata}: %{y:.1%} of bytes<extra></extra>"))
    nts = report["nts_bytes"]
    _log_vline(fig, nts, f"NTS {_bytes_label(nts)}: {report['frac_chains_ge_nts']:.1%} of chains, "
                         f"{report['frac_bytes_ge_nts']:.1%} of bytes ≥ NTS", "dash")
    fig.update_xaxes(title="chain length (bytes, power-of-two buckets)", type="log")
    fig.update_yaxes(title="cumulative fraction", range=[0, 1.05], tickformat=".0%")
    return layout(fig, f"Chain-length CDF ({report.get('op', '')}) and the Natural Transfer Size", 400)


def nts_shares(report: dict[str, Any]) -> go.Figure | Note:
    """Share of chains and of bytes in chains at least NTS long."""
    if not report.get("chains"):
        return Note(f"no {report.get('op', '')} chain in this run")
    vals = [report["frac_chains_ge_nts"], report["frac_bytes_ge_nts"]]
    fig = go.Figure(go.Bar(x=["chains ≥ NTS", "bytes in chains ≥ NTS"], y=vals, text=[f"{v:.1%}" for v in vals],
                           textposition="outside", marker_color=["#1f77b4", "#ff7f0e"]))
    fig.update_yaxes(range=[0, 1.1], tickformat=".0%", title="share")
    return layout(fig, f"Share at or above NTS ({_bytes_label(report['nts_bytes'])})", 320)


def frag_per_zone(ft: pl.DataFrame, lba_bytes: int = 4096) -> go.Figure | Note:
    """Contiguous fragments read and written per zone, and the mean gap between read fragments."""
    touched = ft.filter((pl.col("read_fragments") > 0) | (pl.col("write_fragments") > 0))
    if touched.height == 0:
        return Note("no read or write in this run: no fragmentation")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=["contiguous fragments per zone", "mean gap between read fragments (KiB)"])
    zone = touched["zone"].to_list()
    fig.add_trace(go.Bar(x=zone, y=touched["read_fragments"].to_list(), name="read fragments",
                         marker_color=OP_COLOURS["read"]), row=1, col=1)
    fig.add_trace(go.Bar(x=zone, y=touched["write_fragments"].to_list(), name="write fragments",
                         marker_color=OP_COLOURS["write"]), row=1, col=1)
    gap = (touched["read_gap_bytes_mean"].fill_null(0) / 1024).to_list()
    fig.add_trace(go.Bar(x=zone, y=gap, name="mean read gap", marker_color="#9467bd"), row=2, col=1)
    fig.update_xaxes(title="zone", row=2, col=1)
    fig.update_yaxes(type="log", row=1, col=1)
    return layout(fig, "Fragmentation per zone", 560, barmode="group")


# --- clustering -------------------------------------------------------------------------------------------------

def cluster_grid(cl: dict[str, Any]) -> go.Figure | Note:
    """Held-out silhouette of every (eps, min_samples) of the grid under both validations (KFold over the
    accesses, time-blocked), the chosen pair marked."""
    grid = cl.get("grid", [])
    if not grid:
        return Note(cl.get("note") or "no parameter grid was evaluated")
    eps = sorted({g["eps"] for g in grid})
    ms = sorted({g["min_samples"] for g in grid})
    panels = (("silhouette", "kfold"), ("silhouette_time", "time"))
    fig = make_subplots(rows=1, cols=2, subplot_titles=["KFold over the accesses", "time-blocked (later reads)"],
                        horizontal_spacing=0.12)
    for col, (key, validation) in enumerate(panels, start=1):
        z = np.full((len(ms), len(eps)), np.nan)
        text = [["-"] * len(eps) for _ in ms]
        for g in grid:
            i, j = ms.index(g["min_samples"]), eps.index(g["eps"])
            if g.get(key) is not None:
                z[i, j] = g[key]
                text[i][j] = f"{g[key]:.3f}"
            if (g["eps"], g["min_samples"]) == (cl.get("eps"), cl.get("min_samples")) and \
                    cl.get("validation", "kfold") == validation:
                text[i][j] += " ★"
        fig.add_trace(go.Heatmap(x=[str(e) for e in eps], y=[str(m) for m in ms], z=z, text=text,
                                 texttemplate="%{text}", colorscale="RdBu", zmid=0, zmin=-1, zmax=1,
                                 showscale=col == 2, colorbar={"title": "silhouette"},
                                 hovertemplate=f"{validation}: eps %{{x}}, min_samples %{{y}}: %{{text}}"
                                               "<extra></extra>"),
                      row=1, col=col)
        fig.update_xaxes(title="eps", type="category", row=1, col=col)
        fig.update_yaxes(title="min_samples", type="category", row=1, col=col)
    widened = " (grid widened)" if cl.get("widened") else ""
    return layout(fig, f"Held-out silhouette per (eps, min_samples){widened} — ★ chosen", 380)


def cluster_map(cells: pl.DataFrame, hot_zones: list[int], cells_per_zone: int, cell_bytes: int) -> go.Figure | Note:
    """The read cells in LBA space (x: position in zones, y: reads), coloured by DBSCAN cluster, from
    `cluster.cell_labels`; hot zones are shaded."""
    if cells.height == 0:
        return Note("no read in this run: nothing to cluster")
    fig = go.Figure()
    cells = cells.with_columns(((pl.col("cell") + 0.5) / cells_per_zone).alias("pos"))
    for label in sorted(cells["label"].unique().to_list()):
        c = cells.filter(pl.col("label") == label)
        name = "noise" if label < 0 else f"cluster {label}"
        fig.add_trace(go.Scatter(x=c["pos"].to_list(), y=c["reads"].to_list(), mode="markers", name=name,
                                   marker={"size": 5, "color": "#bbbbbb" if label < 0 else None},
                                   customdata=c["zone"].to_list(),
                                   hovertemplate=f"{name}: zone %{{customdata}}, %{{y}} reads<extra></extra>"))
    for z in hot_zones:
        fig.add_vrect(x0=z, x1=z + 1, fillcolor=HOT_COLOUR, opacity=0.12, line_width=0)
    fig.update_xaxes(title=f"LBA (in zones; one point per {cell_bytes // 1024} KiB cell)")
    fig.update_yaxes(title="reads per cell", type="log")
    return layout(fig, "Clusters in LBA space (hot zones shaded)", 440)


def hot_zone_bars(zt: pl.DataFrame, hot_zones: list[int]) -> go.Figure | Note:
    """Reads per zone, hot zones in red."""
    if zt.height == 0 or int(zt["reads"].sum()) == 0:
        return Note("no read in this run: no hot zone")
    hot = set(hot_zones)
    zone = zt["zone"].to_list()
    fig = go.Figure(go.Bar(x=zone, y=zt["reads"].to_list(),
                           marker_color=[HOT_COLOUR if z in hot else COLD_COLOUR for z in zone],
                           hovertemplate="zone %{x}: %{y} reads<extra></extra>"))
    fig.update_xaxes(title="zone")
    fig.update_yaxes(title="reads")
    shown = ", ".join(map(str, hot_zones)) if hot_zones else "none"
    return layout(fig, f"Reads per zone — hot zones (red): {shown}", 360)


# --- cache ------------------------------------------------------------------------------------------------------

def _policies(r: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(key, name, colour, general) of every policy in a simulate() result or sweep row."""
    own = [(p, n, POLICY_COLOURS[p], False) for p, n in POLICY_NAMES.items()]
    return own + [(p, n, GENERAL_COLOURS[p], True) for p, n in GENERAL_NAMES.items() if p in r]


def cache_sweep(sim: dict[str, Any]) -> go.Figure | Note:
    """Hit ratio of each policy over the cache-size sweep of `cachesim.simulate(..., with_sweep=True)`;
    libCacheSim's general policies dashed."""
    sweep = sim.get("sweep", [])
    if not sweep:
        return Note("no cache-size sweep in this result")
    x = [r["cache_mib"] for r in sweep]
    fig = go.Figure()
    for p, name, colour, general in _policies(sweep[0]):
        fig.add_trace(go.Scatter(x=x, y=[r[p] for r in sweep], mode="lines+markers", name=name,
                                 line={"color": colour, "dash": "dash" if general else "solid"},
                                 hovertemplate=name + " at %{x} MiB: %{y:.2%}<extra></extra>"))
    if "cache_mib" in sim:
        _log_vline(fig, sim["cache_mib"], f"{sim['cache_mib']:g} MiB", "dot")
    fig.update_xaxes(title="cache size (MiB)", type="log", tickvals=x, ticktext=[f"{v:g}" for v in x])
    fig.update_yaxes(title="hit ratio", tickformat=".0%", rangemode="tozero")
    return layout(fig, f"Hit ratio over cache size (hot zones {sim.get('hot_zones', [])})", 420)


def hit_ratio_bars(sim: dict[str, Any]) -> go.Figure:
    """Hit ratio of each policy at the chosen cache size (the project's, then libCacheSim's general ones)."""
    pols = _policies(sim)
    vals = [sim[p] for p, *_ in pols]
    fig = go.Figure(go.Bar(x=[n for _, n, _, _ in pols], y=vals, text=[f"{v:.2%}" for v in vals],
                           textposition="outside", marker_color=[c for _, _, c, _ in pols]))
    fig.update_yaxes(title="hit ratio", tickformat=".0%", range=[0, max([*vals, 0.01]) * 1.2])
    return layout(fig, f"Hit ratio at {sim['cache_mib']:g} MiB ({sim['cache_pages']} pages of "
                       f"{sim['page_kib']} KiB)", 340)
