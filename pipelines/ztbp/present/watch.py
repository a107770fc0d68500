"""`ztbp watch`'s live view: the status line on the terminal and the session's closing summary."""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from ..analysis.watch import WatchParams, WatchState, clock_text, next_apply_at


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


# ---- the session afterwards: `ztbp report JOURNAL` ---------------------------------------------------------------
# Pure functions of the journal's records (dicts, as watch.jsonl holds them) and of the rows' time per Parquet part;
# report/watch.py reads the files and writes the page. A field that is missing or of the wrong type (a hand-edited
# journal) reads as not measured, never as an error; zones are kept only as integers.
#: the record kinds the report reads; any other kind is ignored
KINDS = ("start", "attached", "window", "decision", "apply", "verify", "rollback", "stop")
#: the kinds of the report's table of events
EVENT_KINDS = ("start", "decision", "apply", "verify", "rollback", "stop")


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v: Any) -> float | None:
    """A finite number of a record, else None (json writes NaN and Infinity)."""
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def _zone_list(v: Any) -> list[int]:
    """A list of zone ids from a record (anything else in it left out)."""
    return [int(z) for z in v if isinstance(z, int) and not isinstance(z, bool)] if isinstance(v, list) else []


def _text(v: Any) -> str:
    return "" if v is None else str(v)


def _zones_text(zones: list[int]) -> str:
    return ", ".join(map(str, zones)) if zones else "none"


def _state_in_force(rec: dict[str, Any]) -> list[int] | None:
    state = rec.get("state")
    return _zone_list(state.get("in_force")) if isinstance(state, dict) and "in_force" in state else None


def session_records(records: list[Any]) -> list[dict[str, Any]]:
    """The records the report reads: JSON objects of a known kind, in the journal's order."""
    return [r for r in records if isinstance(r, dict) and r.get("kind") in KINDS]


def _lat(r: dict[str, Any], side: str) -> float | None:
    """A window record's p50 device read latency (µs) in the set in force or in the other zones."""
    lat = r.get("read_lat")
    part = lat.get(side) if isinstance(lat, dict) else None
    return _num(part.get("p50_us")) if isinstance(part, dict) else None


def _walk(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """The window rows of windows_frame and the set in force after the last record. The set in force follows the
    journal: the start record's state (a resumed session's), each decision's state, an apply the device refused
    (the set before it stays), a rollback (none) and the stop record."""
    rows: list[dict[str, Any]] = []
    by_window: dict[int, dict[str, Any]] = {}
    in_force: list[int] = []
    before: list[int] = []
    segment = 0
    for r in session_records(records):
        kind = r["kind"]
        if kind == "start":
            segment += 1
            in_force = _state_in_force(r) or []
        elif kind == "window":
            index = _int(r.get("window"))
            index = index if index is not None else (rows[-1]["window"] + 1 if rows else 0)
            row = {"window": index, "segment": segment, "wall": _num(r.get("wall")), "t_end": _num(r.get("t_end")),
                   "commands": _int(r.get("commands")), "reads": _int(r.get("reads")), "lost": _int(r.get("lost")),
                   "hot": _zone_list(r.get("hot")), "in_force": list(in_force),
                   "held_out_gain": _num(r.get("held_out_gain")), "in_force_gain": _num(r.get("in_force_gain")),
                   "lat_in_force_p50_us": _lat(r, "in_force"), "lat_other_p50_us": _lat(r, "other"),
                   "action": None}
            rows.append(row)
            by_window[index] = row
        elif kind == "decision":
            before = list(in_force)
            action = _text(r.get("action"))
            decided = _int(r.get("window"))
            row = by_window.get(decided) if decided is not None else None
            if row is not None:
                row["action"] = action
            state = _state_in_force(r)
            if state is not None:
                in_force = state
            elif action == "apply":
                in_force = _zone_list(r.get("zones"))
            elif action == "rollback":
                in_force = []
        elif kind == "apply" and r.get("ok") is not True:
            in_force = before  # refused: the set before the decision stays in force
        elif kind == "rollback":
            in_force = []
        elif kind == "stop" and "in_force" in r:
            in_force = _zone_list(r.get("in_force"))
    return rows, in_force


def windows_frame(records: list[dict[str, Any]]) -> pl.DataFrame:
    """One row per window record: its counts, hot set, gains, the set in force while it ran (_walk) and the decision
    taken after it."""
    rows, _ = _walk(records)
    schema = {"window": pl.Int64, "segment": pl.Int64, "wall": pl.Float64, "t_end": pl.Float64,
              "commands": pl.Int64, "reads": pl.Int64, "lost": pl.Int64, "hot": pl.List(pl.Int64),
              "in_force": pl.List(pl.Int64), "held_out_gain": pl.Float64, "in_force_gain": pl.Float64,
              "lat_in_force_p50_us": pl.Float64, "lat_other_p50_us": pl.Float64, "action": pl.String}
    return pl.DataFrame(rows, schema=schema)


def part_owners(records: list[dict[str, Any]]) -> list[tuple[int | None, int | None]]:
    """Who wrote each Parquet part of rows/, in the order the parts are numbered: (window index, commands) per
    window record and (None, commands) for the open window a stop record kept. Part n is the n-th of these as long as
    rows/ was never emptied behind the session's back: a part is taken for a window only when its row count equals
    the window's commands."""
    out: list[tuple[int | None, int | None]] = []
    for r in session_records(records):
        if r["kind"] == "window":
            out.append((_int(r.get("window")), _int(r.get("commands"))))
        elif r["kind"] == "stop" and (_int(r.get("open_window_commands")) or 0) > 0:
            out.append((None, _int(r.get("open_window_commands"))))
    return out


def rates_frame(records: list[dict[str, Any]], parts: dict[int, tuple[int, int | None, int | None]]) -> pl.DataFrame:
    """Commands a second per window: from the rows' own time (ts_ns of the window's Parquet part: (rows − 1) over
    the span of their time stamps) where its part is kept and matches the window, else from the journal's clock
    (the window's commands over the wall time since the previous window record, or the session's start). `parts`:
    part number -> (rows, first ts_ns, last ts_ns)."""
    windows = {}
    for n, (index, commands) in enumerate(part_owners(records)):
        part = parts.get(n)
        if index is None or part is None or commands is None or part[0] != commands:
            continue
        rows, lo, hi = part
        if rows > 1 and lo is not None and hi is not None and hi > lo:
            windows[index] = (rows - 1) / ((hi - lo) / 1e9)
    out = []
    last_wall: float | None = None
    for r in session_records(records):
        if r["kind"] == "start":
            last_wall = _num(r.get("wall"))
        elif r["kind"] == "window":
            index, wall, commands = _int(r.get("window")), _num(r.get("wall")), _int(r.get("commands"))
            if index is None:
                continue
            if index in windows:
                out.append({"window": index, "commands_per_s": windows[index], "source": "rows' time"})
            elif wall is not None and last_wall is not None and commands is not None and wall > last_wall:
                out.append({"window": index, "commands_per_s": commands / (wall - last_wall),
                            "source": "journal clock"})
            else:
                out.append({"window": index, "commands_per_s": None, "source": "not measured"})
            last_wall = wall
    return pl.DataFrame(out, schema={"window": pl.Int64, "commands_per_s": pl.Float64, "source": pl.String})


def _verify_detail(r: dict[str, Any]) -> str:
    gain = _num(r.get("measured_gain"))
    text = f"measured gain {'none' if gain is None else format(gain, '+.4f')}"
    delta, traced = _int(r.get("status_reads_delta")), _int(r.get("reads_traced"))
    if delta is None:
        text += "; the device gave no STATUS read count"
        if traced is not None:
            text += f" ({traced:,} reads traced)"
    else:
        verdict = "equal" if delta == traced else "DIFFERENT"
        text += (f"; STATUS read count moved {delta:,} against {'?' if traced is None else format(traced, ',')} "
                 f"reads traced: {verdict}")
    return text


def events_frame(records: list[dict[str, Any]]) -> pl.DataFrame:
    """One row per start, decision, apply, verify, rollback and stop record: window, time, kind, what was done, the
    zones and the reason or answer (text as the journal holds it: the page escapes it)."""
    out = []
    for r in session_records(records):
        kind = r["kind"]
        if kind not in EVENT_KINDS:
            continue
        wall = _num(r.get("wall"))
        zones = _zone_list(r.get("zones"))
        what, detail = "", ""
        if kind == "start":
            what = "resumed" if r.get("resumed") is True else "started"
            zones = _state_in_force(r) or []
            wc = _int(r.get("window_commands"))
            detail = (f"from window {_int(r.get('window')) or 0}"
                      + (f", windows of {wc:,} commands" if wc is not None else "")
                      + (f" or {_num(r.get('window_s')):g} s" if _num(r.get("window_s")) is not None else ""))
        elif kind == "decision":
            what, detail = _text(r.get("action")), _text(r.get("reason"))
        elif kind == "apply":
            code = r.get("exit_code")
            what = "made" if r.get("ok") is True else f"refused (exit {_text(code) or '?'})"
            sent = _zone_list(r.get("sent"))
            detail = f"sent {_zones_text(sent)}" + (f"; {_text(r.get('message'))}" if r.get("message") else "")
        elif kind == "verify":
            what, detail = "verified", _verify_detail(r)
        elif kind == "rollback":
            what = "STOP ok" if r.get("ok") is True else "STOP failed"
            detail = _text(r.get("reason")) + (f"; {_text(r.get('message'))}" if r.get("message") else "")
        elif kind == "stop":
            what, zones = "stopped", _zone_list(r.get("in_force"))
            detail = f"{_text(r.get('why'))}; device {_text(r.get('device'))}"
        out.append({"window": _int(r.get("window")) if kind != "stop" else None,
                    "time": clock_text(wall) if wall is not None else "", "kind": kind, "what": what,
                    "zones": _zones_text(zones) if zones else "", "detail": detail})
    return pl.DataFrame(out, schema={"window": pl.Int64, "time": pl.String, "kind": pl.String, "what": pl.String,
                                     "zones": pl.String, "detail": pl.String})


def session_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The session at a glance, numbers as the journal says them: windows closed, commands (the windows' and the
    open windows' kept at each stop), lost events, applies made / refused, decisions to defer, rollbacks, the set in
    force at the end, why it stopped. A resumed journal (several start records) is one session: each run's stop
    record counts its own commands and lost events, a run without one (killed) its windows'."""
    recs = session_records(records)
    windows = commands = lost = 0
    seg_commands = seg_lost = 0
    runs = 0
    stopped = False
    last_stop: dict[str, Any] | None = None
    applies: dict[str, list[int | None]] = {"made": [], "refused": []}
    deferred: list[int | None] = []
    rollbacks: list[dict[str, Any]] = []
    params: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    attached = None
    last_change: tuple[str, int | None] | None = None

    def close_run() -> None:
        nonlocal commands, lost
        if not stopped:
            commands += seg_commands
            lost += seg_lost

    for r in recs:
        kind = r["kind"]
        if kind == "start":
            if runs:
                close_run()
            runs += 1
            seg_commands = seg_lost = 0
            stopped = False
            params = r["params"] if isinstance(r.get("params"), dict) else params
            meta = r["meta"] if isinstance(r.get("meta"), dict) else meta
        elif kind == "attached" and attached is None:
            attached = _num(r.get("wall"))
        elif kind == "window":
            windows += 1
            seg_commands += _int(r.get("commands")) or 0
            seg_lost += _int(r.get("lost")) or 0
        elif kind == "decision" and r.get("action") == "defer":
            deferred.append(_int(r.get("window")))
        elif kind == "apply":
            applies["made" if r.get("ok") is True else "refused"].append(_int(r.get("window")))
            if r.get("ok") is True:
                last_change = ("applied after window", _int(r.get("window")))
        elif kind == "rollback":
            last_change = ("rolled back after window", _int(r.get("window")))
            rollbacks.append({"window": _int(r.get("window")), "reason": _text(r.get("reason")),
                              "ok": r.get("ok") is True})
        elif kind == "stop":
            c, lo = _int(r.get("commands")), _int(r.get("lost"))
            open_commands = _int(r.get("open_window_commands")) or 0
            commands += c if c is not None else seg_commands + open_commands
            lost += lo if lo is not None else seg_lost
            stopped, last_stop = True, r
    if runs:
        close_run()
    _, in_force = _walk(recs)
    threshold = _num(params.get("threshold"))
    return {"runs": runs, "windows": windows, "commands": commands, "lost": lost,
            "applies_made": len(applies["made"]), "applies_refused": len(applies["refused"]),
            "applied_in": applies["made"], "refused_in": applies["refused"],
            "deferred": len(deferred), "deferred_in": deferred, "rollbacks": len(rollbacks),
            "rollback_records": rollbacks, "in_force": in_force,
            "stopped": last_stop is not None and recs[-1] is last_stop,
            "why": _text(last_stop.get("why")) if last_stop else None,
            "device": _text(last_stop.get("device")) if last_stop else None,
            "threshold": threshold, "k": _int(params.get("k")), "meta": meta, "attached": attached,
            "last_change": last_change}


def watch_headline(summary: dict[str, Any], rates: pl.DataFrame | None = None,
                   skipped_lines: int = 0) -> list[dict[str, str]]:
    """The session's answer in a few figures for the report's front (report/render.headline_html): key, label,
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
    items.append({"key": "in_force", "label": "set in force at the end", "value": _zones_text(s["in_force"]),
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
    if rates is not None and rates.height and rates["commands_per_s"].drop_nulls().len():
        r = rates["commands_per_s"].drop_nulls()
        sources = sorted(set(rates.filter(pl.col("commands_per_s").is_not_null())["source"].to_list()))
        items.append({"key": "iops", "label": "commands/s per window",
                      "value": f"median {r.median():,.0f} (min {r.min():,.0f}, max {r.max():,.0f})",
                      "detail": f"from the {' and the '.join(sources)}"})
    if skipped_lines:
        items.append({"key": "skipped", "label": "journal lines skipped", "value": f"{skipped_lines:,}",
                      "detail": "lines of watch.jsonl that are not JSON records (cut by a crash, or damaged): "
                                "left out of every figure and count here"})
    return items


# ---- figures of the report ---------------------------------------------------------------------------------------
def _figure(title: str, xtitle: str, ytitle: str, height: int = 420) -> Any:
    import plotly.graph_objects as go

    from .figures import layout as _layout

    fig = go.Figure()
    _layout(fig, title, height, xaxis_title=xtitle, yaxis_title=ytitle, showlegend=True,
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
    for row in events.filter(pl.col("kind").is_in(["apply", "rollback"])).iter_rows(named=True):
        if row["window"] is not None:
            marks.append((row["window"] + 0.5,
                          "rollback" if row["kind"] == "rollback" else "apply" if row["what"] == "made" else "refused"))
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
