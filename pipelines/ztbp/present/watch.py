"""`ztbp watch` as a person sees it: the status line on the terminal and the session's closing summary while it
runs; afterwards (`ztbp report JOURNAL`) the headline and the figures of the report, drawn from the frames of
present/watch_records.py."""

from __future__ import annotations

from typing import Any

import polars as pl

from ..analysis.watch import WatchParams, WatchState, clock_text, next_apply_at
from ..io.journal import APPLY, JOURNAL, ROLLBACK
from .watch_records import zones_text

#: phases named in the headline's value, at most (the table under the figures has them all)
HEADLINE_PHASES = 6


def status_line(commands: int, seconds: float, lost: int, state: WatchState, last: dict[str, Any] | None,
                params: WatchParams, now: float) -> str:
    """commands/s, lost events, the hot set in force, the last decision and when the next apply is allowed."""
    rate = commands / seconds if seconds > 0 else 0.0
    force = ",".join(str(z) for z in state.in_force) or "none"
    at = next_apply_at(state, params, now)
    nxt = "now" if at <= now else ("never (budget 0)" if at == float("inf") else clock_text(at))
    action = last["action"] if last else "none yet"
    return (f"{rate:,.0f} cmd/s | lost {lost} | in force: {force} | last: {action} | next apply allowed: {nxt}")


def summary_text(summary: dict[str, Any]) -> str:
    """The closing lines of a session."""
    last = summary.get("last_decision") or {}
    force = ",".join(str(z) for z in summary["in_force"]) or "none"
    return (f"watch stopped ({summary['why']}): {summary['windows']} windows, {summary['commands']:,} commands, "
            f"{summary['lost']} lost; zones in force: {force}; device {summary['device']}"
            f"{'; module ' + summary['module'] if summary.get('module') else ''}\n"
            f"last decision: {last.get('reason', 'none')}")


def watch_headline(summary: dict[str, Any], rates: pl.DataFrame | None = None, skipped_lines: int = 0,
                   phases: list[dict[str, Any]] | None = None) -> list[dict[str, str]]:
    """The session's answer in a few figures for the report's front (report/pages.headline_html): key, label,
    value, detail — text only, never None."""
    s = summary

    def windows_of(ws: list[int | None]) -> str:
        """ in windows 2, 10, …, 994: the first and the last few when there are many (the table has them all)"""
        known = [str(w) for w in ws if w is not None]
        if len(known) > HEADLINE_WINDOWS:
            known = [*known[:3], "…", *known[-2:]]
        return (" in window " if len(known) == 1 else " in windows ") + ", ".join(known) if known else ""

    runs = s["runs"]
    resumed = f"; resumed {runs - 1} time{'s' if runs > 2 else ''} (one session)" if runs > 1 else ""
    items = [{"key": "windows", "label": "windows and commands",
              "value": f"{s['windows']:,} windows, {s['commands']:,} commands",
              "detail": f"windows closed and decided on; commands traced, the open window at the stop included"
                        f"{resumed}"}]
    lost = s["lost"]
    items.append({"key": "lost", "label": "lost events", "value": f"{lost:,}",
                  "detail": "bpftrace lost no event: every command was traced" if lost == 0 else
                  "bpftrace dropped events: the counts are lower bounds (see the figure per window)"})
    items.append({"key": "applies", "label": "applies",
                  "value": f"{s['applies_made']} made, {s['applies_refused']} refused, {s['deferred']} deferred",
                  "detail": "; ".join(filter(None, [
                      f"made{windows_of(s['applied_in'])}" if s["applies_made"] else "no set sent and taken",
                      f"refused by the device{windows_of(s['refused_in'])}" if s["applies_refused"] else "",
                      f"deferred by the budget or the interval{windows_of(s['deferred_in'])}" if s["deferred"]
                      else ""]))})
    rb = s["rollback_records"]
    if not rb:
        rb_detail = "the sets applied were never rolled back"
    else:
        last = rb[-1]
        failed = sum(not r["ok"] for r in rb)
        rb_detail = ((f"{windows_of([r['window'] for r in rb]).strip()}; the last: " if len(rb) > 1 else
                      f"window {last['window']}: ") + last["reason"]
                     + (f"; STOP failed {failed} time{'s' if failed > 1 else ''}" if failed else ""))
    items.append({"key": "rollbacks", "label": "rollbacks", "value": f"{len(rb)}", "detail": rb_detail})
    change = s["last_change"]
    items.append({"key": "in_force", "label": "set in force at the end", "value": zones_text(s["in_force"]),
                  "detail": "; ".join(filter(None, [
                      f"{change[0]} {'?' if change[1] is None else change[1]}" if change else "nothing ever applied",
                      f"device {s['device']} at the stop" if s["device"] else "as the last records leave it"]))})
    if s["why"] is not None:
        why = {"value": s["why"], "detail": "the stop record of the journal" if s["stopped"] else
               "the last stop record; records follow it (a resumed run that did not stop cleanly)"}
    else:
        why = {"value": "no stop record", "detail": "the session is still running, or was killed before it could "
                                                    "write one"}
    items.append({"key": "stopped", "label": "why it stopped", **why})
    if phases is not None:
        items.append(device_hit_item(phases))
    if rates is not None and rates.height and rates["commands_per_s"].drop_nulls().len():
        r = rates["commands_per_s"].drop_nulls()
        sources = sorted(set(rates.filter(pl.col("commands_per_s").is_not_null())["source"].to_list()))
        items.append({"key": "iops", "label": "commands/s per window",
                      "value": f"median {r.median():,.0f} (min {r.min():,.0f}, max {r.max():,.0f})",
                      "detail": f"from the {' and the '.join(sources)}"})
    if skipped_lines:
        items.append({"key": "skipped", "label": "journal lines skipped", "value": f"{skipped_lines:,}",
                      "detail": f"lines of {JOURNAL} that are not JSON records (cut by a crash, or damaged): "
                                "left out of every figure and count here"})
    return items


def _ratio(v: float | None) -> str:
    return "not counted" if v is None else f"{100 * v:.1f} %"


def phase_rows(phases: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The device's hit ratio per phase (watch_records.device_phases) as the page's table: text cells."""
    return [{"phase": str(p["phase"]), "windows": f"{p['first']}–{p['last']}" if p["last"] != p["first"]
             else str(p["first"]), "in_force": zones_text(p["in_force"]),
             "counted": f"{p['counted']} of {p['windows']}", "reads": f"{p['reads']:,}", "hits": f"{p['hits']:,}",
             "hit_ratio": _ratio(p["hit_ratio"])} for p in phases]


def device_hit_item(phases: list[dict[str, Any]]) -> dict[str, str]:
    """The headline's "hit ratio, device": the device's own hit ratio per phase of one set in force, from STATUS's
    read and hit counters at each window's close."""
    counted = [p for p in phases if p["hit_ratio"] is not None]
    if not counted:
        return {"key": "hit_device", "label": "hit ratio, device", "value": "not counted by this device",
                "detail": "no window has STATUS's hit count: the device answers no STATUS (QEMU), ztbp-ctl "
                          "answered no hits (the 32-bit ioctl), or a journal from before they were recorded"}
    shown = [f"{zones_text(p['in_force'])}: {_ratio(p['hit_ratio'])}" for p in counted]
    if len(shown) > HEADLINE_PHASES:
        shown = [*shown[:3], "…", *shown[-2:]]
    reads = sum(p["reads"] for p in counted)
    return {"key": "hit_device", "label": "hit ratio, device", "value": " → ".join(shown),
            "detail": f"per phase of one set in force ({len(counted)} of {len(phases)} with the device's counts, "
                      f"{reads:,} reads): its hits over its reads, from STATUS's counters as each window closed"}


# ---- figures of the report ---------------------------------------------------------------------------------------
def _figure(title: str, xtitle: str, ytitle: str, height: int = 420) -> Any:
    import plotly.graph_objects as go

    from .figures import layout

    fig = go.Figure()
    layout(fig, title, height, xaxis_title=xtitle, yaxis_title=ytitle, showlegend=True,
            legend={"orientation": "h", "yanchor": "top", "y": -0.15, "x": 0})
    fig.update_layout(margin={"l": 60, "r": 20, "t": 60, "b": 90})
    return fig


def _window_axis(fig: Any, windows: pl.Series) -> None:
    """Every window on the x axis, the first to the last (a window where nothing is drawn included)."""
    if windows.len():
        fig.update_xaxes(range=[int(windows.min()) - 0.5, int(windows.max()) + 0.5])


#: windows a headline box names at most (the first three and the last two past it)
HEADLINE_WINDOWS = 8
#: how many marks (applies, rollbacks) a figure labels with text; more are drawn without labels, named in the legend
LABELLED_MARKS = 30
MARK_STYLES = {"apply": ("#2ca02c", "dash"), "refused": ("#ff7f0e", "dot"), "rollback": ("#d62728", "dash")}


def _marks(fig: Any, events: pl.DataFrame) -> None:
    """Applies (made or refused) and rollbacks as vertical lines after the window they were decided on, set in one
    layout update (plotly's add_vline costs time quadratic in the lines: minutes for a long session), each kind
    named once in the legend, labelled when there are few."""
    import plotly.graph_objects as go

    marks = []
    for row in events.filter(pl.col("kind").is_in([APPLY, ROLLBACK])).iter_rows(named=True):
        if row["window"] is not None:
            marks.append((row["window"] + 0.5,
                          "rollback" if row["kind"] == ROLLBACK else "apply" if row["what"] == "made" else "refused"))
    shapes = [{"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
               "line": {"color": MARK_STYLES[m][0], "dash": MARK_STYLES[m][1], "width": 1.5}} for x, m in marks]
    notes = [] if len(marks) > LABELLED_MARKS else [
        {"x": x, "y": 1, "xref": "x", "yref": "paper", "text": m, "showarrow": False, "yanchor": "bottom",
         "font": {"color": MARK_STYLES[m][0], "size": 11}} for x, m in marks]
    fig.update_layout(shapes=[*fig.layout.shapes, *shapes], annotations=[*fig.layout.annotations, *notes])
    names = {"apply": "apply made", "refused": "apply refused", "rollback": "rollback"}
    for m in dict.fromkeys(m for _, m in marks):  # a legend entry per kind, in order of appearance
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=names[m], hoverinfo="skip",
                                 line={"color": MARK_STYLES[m][0], "dash": MARK_STYLES[m][1]}))


def hot_set_figure(windows: pl.DataFrame, events: pl.DataFrame, nr_zones: int | None = None) -> Any:
    """Window × zone: the hot zones detected in each window (squares), the set in force while it ran (rings over
    them), applies and rollbacks (vertical lines after the window decided on)."""
    import plotly.graph_objects as go

    from .figures import Note

    if windows.height == 0:
        return Note("no window closed in this session: nothing to draw")
    hot = windows.select("window", "hot").explode("hot").drop_nulls()
    force = windows.select("window", "in_force").explode("in_force").drop_nulls()
    fig = _figure("Hot set over time: detected per window, and the set in force", "window", "zone", 480)
    size = max(3.0, min(8.0, 400 / windows.height))  # markers that do not run into each other over many windows
    fig.add_trace(go.Scatter(x=hot["window"].to_list(), y=hot["hot"].to_list(), mode="markers",
                             name="hot zones detected", marker={"symbol": "square", "size": size, "color": "#1f77b4"},
                             hovertemplate="window %{x}<br>zone %{y}: hot<extra></extra>"))
    fig.add_trace(go.Scatter(x=force["window"].to_list(), y=force["in_force"].to_list(), mode="markers",
                             name="set in force", marker={"symbol": "circle-open", "size": size * 1.75,
                                                          "color": "#d62728", "line": {"width": 2}},
                             hovertemplate="window %{x}<br>zone %{y}: in force<extra></extra>"))
    _marks(fig, events)
    _window_axis(fig, windows["window"])
    if nr_zones:
        fig.update_yaxes(range=[-0.5, nr_zones - 0.5])
    return fig


def gain_figure(windows: pl.DataFrame, events: pl.DataFrame, threshold: float | None) -> Any:
    """Per window: the held-out gain of the previous window's hot set on it and the measured gain of the set in
    force (zone-LRU − LRU hit ratio of the cache model), with the threshold an apply needs."""
    import plotly.graph_objects as go

    from .figures import Note

    if windows.height == 0 or (windows["held_out_gain"].null_count() == windows.height
                               and windows["in_force_gain"].null_count() == windows.height):
        return Note("no window measured a gain (no hot set, or no window after one)")
    fig = _figure("Gain of the cache model per window (zone-LRU − LRU hit ratio)", "window",
                  "hit-ratio gain")
    x = windows["window"].to_list()
    fig.add_trace(go.Scatter(x=x, y=windows["held_out_gain"].to_list(), mode="lines+markers",
                             name="held-out gain of the previous window's hot set", connectgaps=False,
                             line={"color": "#1f77b4"}))
    fig.add_trace(go.Scatter(x=x, y=windows["in_force_gain"].to_list(), mode="lines+markers",
                             name="measured gain of the set in force", connectgaps=False,
                             line={"color": "#d62728"}))
    if threshold is not None:
        fig.add_hline(y=threshold, line_dash="dot", line_color="black",
                      annotation_text=f"threshold {threshold:+.2f}", annotation_position="bottom right")
    _marks(fig, events)
    _window_axis(fig, windows["window"])
    return fig


def rate_figure(rates: pl.DataFrame) -> Any:
    """Commands a second per window, coloured by where the time came from (the rows' or the journal's)."""
    import plotly.graph_objects as go

    from .figures import Note

    got = rates.filter(pl.col("commands_per_s").is_not_null())
    if got.height == 0:
        return Note("no window's rate could be measured (no rows kept, and no clock in the journal)")
    fig = _figure("Commands per second (IOPS) per window", "window", "commands/s")
    colours = {"rows' time": "#1f77b4", "journal clock": "#9467bd"}
    for source, part in got.group_by("source", maintain_order=True):
        name = str(source[0])
        fig.add_trace(go.Bar(x=part["window"].to_list(), y=part["commands_per_s"].to_list(),
                             name=f"from the {name}", marker_color=colours.get(name, "#7f7f7f")))
    _window_axis(fig, rates["window"])
    return fig


def latency_figure(windows: pl.DataFrame, events: pl.DataFrame) -> Any:
    """The device's median read latency per window (the probe's lat_ns) in the zones of the set in force and in the
    others: how the device answers the configuration (NVMeVirt serves its listed zones in microseconds)."""
    import plotly.graph_objects as go

    from .figures import Note

    cols = ("lat_in_force_p50_us", "lat_other_p50_us")
    if windows.height == 0 or all(windows[c].null_count() == windows.height for c in cols):
        return Note("no window has the device's read latency (a journal written before it was recorded)")
    fig = _figure("Device read latency per window (p50): the set in force and the other zones", "window", "µs")
    x = windows["window"].to_list()
    for col, name, colour in ((cols[0], "zones of the set in force", "#d62728"),
                              (cols[1], "other zones", "#1f77b4")):
        fig.add_trace(go.Scatter(x=x, y=windows[col].to_list(), mode="lines+markers", name=name,
                                 connectgaps=False, line={"color": colour}))
    fig.update_yaxes(type="log")
    _marks(fig, events)
    _window_axis(fig, windows["window"])
    return fig


def device_hit_figure(windows: pl.DataFrame, events: pl.DataFrame, phases: list[dict[str, Any]]) -> Any:
    """The device's own hit ratio per window (STATUS's hits over its reads since the window before closed) and per
    phase of one set in force (a level over its windows), with the applies and rollbacks."""
    import plotly.graph_objects as go

    from .figures import Note

    if windows.height == 0 or windows["device_hit_ratio"].null_count() == windows.height:
        return Note("no window has the device's own hit ratio (STATUS's hits): the device answers no STATUS, "
                    "ztbp-ctl answered no hits, or a journal from before they were recorded")
    fig = _figure("The device's own hit ratio per window and per phase (STATUS's counters)", "window",
                  "hit ratio")
    fig.add_trace(go.Scatter(x=windows["window"].to_list(), y=windows["device_hit_ratio"].to_list(),
                             mode="markers", name="per window", marker={"color": "#1f77b4"}))
    for n, p in enumerate(ph for ph in phases if ph["hit_ratio"] is not None):
        fig.add_trace(go.Scatter(x=[p["first"] - 0.5, p["last"] + 0.5], y=[p["hit_ratio"]] * 2, mode="lines",
                                 name="per phase (set in force)", legendgroup="phase", showlegend=n == 0,
                                 line={"color": "#d62728", "width": 3},
                                 hovertext=f"{zones_text(p['in_force'])}: {_ratio(p['hit_ratio'])}",
                                 hoverinfo="text"))
    fig.update_yaxes(rangemode="tozero")
    _marks(fig, events)
    _window_axis(fig, windows["window"])
    return fig


def lost_figure(windows: pl.DataFrame) -> Any:
    """bpftrace's lost events per window."""
    import plotly.graph_objects as go

    from .figures import Note

    if windows.height == 0:
        return Note("no window closed in this session: nothing to draw")
    total = int(windows["lost"].fill_null(0).sum())
    fig = _figure(f"Lost events per window ({total:,} in the windows closed)", "window", "events lost")
    fig.add_trace(go.Bar(x=windows["window"].to_list(), y=windows["lost"].fill_null(0).to_list(),
                         name="lost events", marker_color="#d62728"))
    fig.update_yaxes(rangemode="tozero")
    _window_axis(fig, windows["window"])
    return fig
