"""A `ztbp watch` session afterwards (`ztbp report JOURNAL`): its journal's records as frames and a summary.

Pure functions of the journal's records (dicts, as watch.jsonl holds them: io/journal.py) and of the rows' time per
Parquet part; report/watch.py reads the files, present/watch.py draws the figures and the headline. A field that is
missing or of the wrong type (a hand-edited journal) reads as not measured, never as an error; zones are kept only
as integers.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from ..analysis.watch import clock_text
from ..io.journal import APPLY, ATTACHED, DECISION, ROLLBACK, START, STOP, VERIFY, WINDOW

#: the record kinds the report reads; any other kind is ignored
KINDS = (START, ATTACHED, WINDOW, DECISION, APPLY, VERIFY, ROLLBACK, STOP)
#: the kinds of the report's table of events
EVENT_KINDS = (START, DECISION, APPLY, VERIFY, ROLLBACK, STOP)


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


def zones_text(zones: list[int]) -> str:
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


def _device(r: dict[str, Any]) -> dict[str, Any]:
    """A window record's device figures: the reads and hits STATUS counted since the previous window closed (all
    under the set in force while this window ran) and their ratio; None each where not measured."""
    dev = r.get("device")
    dev = dev if isinstance(dev, dict) else {}
    reads, hits = _int(dev.get("reads")), _int(dev.get("hits"))
    if reads is None or hits is None or not 0 <= hits <= reads or reads == 0:
        return {"device_reads": reads, "device_hits": None, "device_hit_ratio": None}
    return {"device_reads": reads, "device_hits": hits, "device_hit_ratio": hits / reads}


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
        if kind == START:
            segment += 1
            in_force = _state_in_force(r) or []
        elif kind == WINDOW:
            index = _int(r.get("window"))
            index = index if index is not None else (rows[-1]["window"] + 1 if rows else 0)
            row = {"window": index, "segment": segment, "wall": _num(r.get("wall")), "t_end": _num(r.get("t_end")),
                   "commands": _int(r.get("commands")), "reads": _int(r.get("reads")), "lost": _int(r.get("lost")),
                   "hot": _zone_list(r.get("hot")), "in_force": list(in_force),
                   "held_out_gain": _num(r.get("held_out_gain")), "in_force_gain": _num(r.get("in_force_gain")),
                   "lat_in_force_p50_us": _lat(r, "in_force"), "lat_other_p50_us": _lat(r, "other"),
                   **_device(r), "action": None}
            rows.append(row)
            by_window[index] = row
        elif kind == DECISION:
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
        elif kind == APPLY and r.get("ok") is not True:
            in_force = before  # refused: the set before the decision stays in force
        elif kind == ROLLBACK:
            in_force = []
        elif kind == STOP and "in_force" in r:
            in_force = _zone_list(r.get("in_force"))
    return rows, in_force


def windows_frame(records: list[dict[str, Any]]) -> pl.DataFrame:
    """One row per window record: its counts, hot set, gains, the set in force while it ran (_walk) and the decision
    taken after it."""
    rows, _ = _walk(records)
    schema = {"window": pl.Int64, "segment": pl.Int64, "wall": pl.Float64, "t_end": pl.Float64,
              "commands": pl.Int64, "reads": pl.Int64, "lost": pl.Int64, "hot": pl.List(pl.Int64),
              "in_force": pl.List(pl.Int64), "held_out_gain": pl.Float64, "in_force_gain": pl.Float64,
              "lat_in_force_p50_us": pl.Float64, "lat_other_p50_us": pl.Float64, "device_reads": pl.Int64,
              "device_hits": pl.Int64, "device_hit_ratio": pl.Float64, "action": pl.String}
    return pl.DataFrame(rows, schema=schema)


def device_phases(windows: pl.DataFrame) -> list[dict[str, Any]]:
    """The device's own hit ratio per phase: a phase is a run of consecutive windows of one session run with one
    set in force (windows_frame's in_force). Each window's device figures are STATUS's counts between the closes of
    the window before it and of itself, all under that set (SET and STOP follow a close's STATUS), so a phase's
    ratio is its hits over its reads, summed. Per phase: index, first and last window, the set in force, windows,
    windows with the device's counts, reads, hits, hit_ratio (None without counts)."""
    phases: list[dict[str, Any]] = []
    for w in windows.iter_rows(named=True):
        last = phases[-1] if phases else None
        if last is None or last["in_force"] != w["in_force"] or last["segment"] != w["segment"]:
            last = {"phase": len(phases) + 1, "segment": w["segment"], "first": w["window"], "in_force": w["in_force"],
                    "windows": 0, "counted": 0, "reads": 0, "hits": 0}
            phases.append(last)
        last["last"], last["windows"] = w["window"], last["windows"] + 1
        if w["device_hit_ratio"] is not None:
            last["counted"] += 1
            last["reads"] += w["device_reads"]
            last["hits"] += w["device_hits"]
    for ph in phases:
        ph["hit_ratio"] = ph["hits"] / ph["reads"] if ph["reads"] else None
    return phases


def part_owners(records: list[dict[str, Any]]) -> list[tuple[int | None, int | None]]:
    """Who wrote each Parquet part of rows/, in the order the parts are numbered: (window index, commands) per
    window record and (None, commands) for the open window a stop record kept. Part n is the n-th of these as long as
    rows/ was never emptied behind the session's back: a part is taken for a window only when its row count equals
    the window's commands."""
    out: list[tuple[int | None, int | None]] = []
    for r in session_records(records):
        if r["kind"] == WINDOW:
            out.append((_int(r.get("window")), _int(r.get("commands"))))
        elif r["kind"] == STOP and (_int(r.get("open_window_commands")) or 0) > 0:
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
        if r["kind"] == START:
            last_wall = _num(r.get("wall"))
        elif r["kind"] == WINDOW:
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
        hits, ratio = _int(r.get("status_hits_delta")), _num(r.get("device_hit_ratio"))
        if hits is not None and ratio is not None:
            text += f"; the device's hits {hits:,}, hit ratio {ratio:.4f}"
        else:
            text += f"; no hit ratio from the device ({_text(r.get('device_note')) or 'not recorded'})"
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
        if kind == START:
            what = "resumed" if r.get("resumed") is True else "started"
            zones = _state_in_force(r) or []
            wc = _int(r.get("window_commands"))
            detail = (f"from window {_int(r.get('window')) or 0}"
                      + (f", windows of {wc:,} commands" if wc is not None else "")
                      + (f" or {_num(r.get('window_s')):g} s" if _num(r.get("window_s")) is not None else ""))
        elif kind == DECISION:
            what, detail = _text(r.get("action")), _text(r.get("reason"))
        elif kind == APPLY:
            code = r.get("exit_code")
            what = "made" if r.get("ok") is True else f"refused (exit {_text(code) or '?'})"
            sent = _zone_list(r.get("sent"))
            detail = f"sent {zones_text(sent)}" + (f"; {_text(r.get('message'))}" if r.get("message") else "")
        elif kind == VERIFY:
            what, detail = "verified", _verify_detail(r)
        elif kind == ROLLBACK:
            what = "STOP ok" if r.get("ok") is True else "STOP failed"
            detail = _text(r.get("reason")) + (f"; {_text(r.get('message'))}" if r.get("message") else "")
        elif kind == STOP:
            what, zones = "stopped", _zone_list(r.get("in_force"))
            detail = f"{_text(r.get('why'))}; device {_text(r.get('device'))}"
        out.append({"window": _int(r.get("window")) if kind != STOP else None,
                    "time": clock_text(wall) if wall is not None else "", "kind": kind, "what": what,
                    "zones": zones_text(zones) if zones else "", "detail": detail})
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
        if kind == START:
            if runs:
                close_run()
            runs += 1
            seg_commands = seg_lost = 0
            stopped = False
            params = r["params"] if isinstance(r.get("params"), dict) else params
            meta = r["meta"] if isinstance(r.get("meta"), dict) else meta
        elif kind == ATTACHED and attached is None:
            attached = _num(r.get("wall"))
        elif kind == WINDOW:
            windows += 1
            seg_commands += _int(r.get("commands")) or 0
            seg_lost += _int(r.get("lost")) or 0
        elif kind == DECISION and r.get("action") == "defer":
            deferred.append(_int(r.get("window")))
        elif kind == APPLY:
            applies["made" if r.get("ok") is True else "refused"].append(_int(r.get("window")))
            if r.get("ok") is True:
                last_change = ("applied after window", _int(r.get("window")))
        elif kind == ROLLBACK:
            last_change = ("rolled back after window", _int(r.get("window")))
            rollbacks.append({"window": _int(r.get("window")), "reason": _text(r.get("reason")),
                              "ok": r.get("ok") is True})
        elif kind == STOP:
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
