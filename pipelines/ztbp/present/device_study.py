"""Text and figures of the device studies: the interference profile (conflict groups), the collisions of a trace
with a zone-to-group table, and the zone-reset table with the FAR what-if."""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
import polars as pl

from .. import devices
from .figures import Note, layout

SHADES = " .:-=+*#%@"
MAX_TEXT_MATRIX = 40


# ---- interference profile ---------------------------------------------------------------------------------------
def profile_mismatch(profile: dict[str, Any], meta: dict[str, Any]) -> str:
    """Why a profile is not of the run's device ("" when it is): the backend, the zone count or the zone size."""
    dev = profile.get("device") or {}
    run_zone_bytes = meta["zone_size_lba"] * meta["lba_bytes"]
    diffs = [f"{what} {theirs} against the run's {ours}" for what, theirs, ours in (
        ("backend", dev.get("backend"), meta.get("backend")), ("zones", dev.get("nr_zones"), meta.get("nr_zones")),
        ("zone size", f"{(dev.get('zone_bytes') or 0) >> 20} MiB", f"{run_zone_bytes >> 20} MiB")) if theirs != ours]
    return "; ".join(diffs)


def profile_for_run(profile_dir: str, meta: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """(the interference profile of the run's device, "") or (None, why there is none and how to make one): a
    profile of another device (backend, zone count or size) is never shown as this one's."""
    from ..errors import ZtbpError
    from ..io.profile import read_profile

    backend = meta.get("backend") or "unknown"
    make = (devices.find(backend) or devices.DRIVE).profile_hint()
    here = f"{meta.get('device') or 'the device'} ({backend}, {meta.get('nr_zones')} zones)"
    if not profile_dir:
        return None, (f"no interference profile exists for this device, {here}: {make} and give its folder as "
                      "profile_dir")
    try:
        profile = read_profile(profile_dir)
    except ZtbpError as e:
        return None, f"no interference profile for this device, {here}: {e}; {make}"
    from ..analysis.conflict_groups import verdict_of_profile

    profile["verdict"] = verdict_of_profile(profile)  # from its numbers, never the verdict stored
    why = profile_mismatch(profile, meta)
    if why:
        return None, (f"no interference profile exists for this device, {here}: the profile in {profile_dir} is of "
                      f"another device ({why}), so its groups are not shown; {make} and give its folder as "
                      "profile_dir")
    return profile, ""


def groups_frame(groups: dict[str, int] | dict[int, int]) -> pl.DataFrame:
    """One row per conflict group: its zones (UNCLASSIFIED = -1 last)."""
    rows: dict[int, list[int]] = {}
    for z, g in groups.items():
        rows.setdefault(int(g), []).append(int(z))
    return pl.DataFrame([{"group": g, "zones": len(zs), "zone_ids": ", ".join(map(str, sorted(zs)))}
                         for g, zs in sorted(rows.items(), key=lambda kv: (kv[0] < 0, kv[0]))])


def _shade(v: float | None) -> str:
    if v is None or math.isnan(v):
        return "   ?"
    k = min(len(SHADES) - 1, max(0, int((1.2 - min(v, 1.2)) / 1.2 * (len(SHADES) - 1) + 0.5)))
    return "   " + SHADES[k]


def matrix_text(zones: list[int], matrix: list[list[float | None]]) -> str:
    """The pair-ratio matrix as characters: darker = the pair reaches less of its solo bandwidth."""
    if len(zones) > MAX_TEXT_MATRIX:
        return f"(matrix of {len(zones)} zones: see matrix.csv and heatmap.html)"
    head = "      " + "".join(f"{z:4d}" for z in zones)
    lines = [head] + [f"{z:5d} " + "".join(_shade(v) for v in row) for z, row in zip(zones, matrix, strict=True)]
    return "\n".join(lines) + f"\n      shades: '{SHADES}' = pair ratio 1.2 .. 0 (? = not measured)"


def profile_text(doc: dict[str, Any], out: str | None = None) -> str:
    dev, spec, tm, v = doc["device"], doc["spec"], doc["timing"], doc["verdict"]
    ref = ("twice the median solo bandwidth" if doc.get("reference", "median") == "median"
           else "the pair's summed solo bandwidth")
    thr = (f"{doc['threshold_mib']:g} MiB/s for the pair" if doc.get("threshold_mib") is not None
           else f"{doc['threshold']:g} x {ref}")
    lines = [
        f"interference profile of {dev['name']} ({dev['backend']}, {dev['nr_zones']} zones of "
        f"{dev['zone_bytes'] >> 20} MiB): {len(doc['zones'])} zones, {spec['rw']} {spec['block_bytes'] >> 10} KiB "
        f"QD {spec['iodepth']}, {spec['seconds']:g} s per measurement"
        f"{', fresh blocks each time' if spec.get('fresh') else ''}",
        f"threshold: a pair interferes below {thr}",
        f"time: {tm['total_s']:.0f} s in all ({tm['boot_s']:.0f} s start, {tm['fill_s']:.0f} s fill, "
        f"{tm['measure_s']:.0f} s for {tm['measurements']} measurements)"
        + (" — the time budget ran out" if tm.get("budget_exhausted") else "")
        + (f"; fresh blocks ran out {tm['fresh_wraps']} times (those measurements read blocks again)"
           if tm.get("fresh_wraps") else ""),
        "",
        "verdict: " + ("STRUCTURE — " if v.get("structure") else "NO STRUCTURE — ")
        + str(v.get("reason")).removeprefix("no structure: ")
        + (" (as the file says: it keeps no pairs to judge again)" if v.get("recomputed") is False else ""),
    ]
    if doc.get("key"):
        k = doc["key"]
        lines.append(f"answer key {k['name']}: adjusted Rand index {_num(k['ari_channel'])} against the channels, "
                     f"{_num(k['ari_die'])} against the dies")
    solo = doc["solo"]
    if solo:
        vals = list(solo.values())
        lines.append(f"solo bandwidth: {min(vals):.2f} .. {max(vals):.2f} MiB/s (mean {sum(vals) / len(vals):.2f})")
    if "noise" in doc:
        lines.append(noise_text(doc["noise"]))
    else:
        lines.append("repeatability: not recorded (a profile written before the profiler kept its repeats)")
    lines += ["", "conflict groups (zone-to-group table):"]
    for row in groups_frame(doc["groups"]).iter_rows(named=True):
        name = "unclassified" if row["group"] < 0 else f"group {row['group']}"
        lines.append(f"  {name:>12}: {row['zone_ids']}")
    lines += ["", f"pair ratios (together / {ref}):", matrix_text(doc["zones"], doc["matrix"])]
    if out:
        lines += ["", f"wrote {out}/: profile.json, z2c.json, z2c.csv, matrix.csv, heatmap.html"]
    return "\n".join(lines)


def noise_text(noise: dict[str, Any]) -> str:
    """One line: how far a repeated measurement moved, and the drift between the two solo passes."""
    if not noise.get("repeats"):
        return "repeatability: not measured (no configuration was measured twice: --confirm, no --no-recheck)"
    sd = noise.get("sd")
    text = (f"repeatability: one measurement repeats to ±{sd:.1%} (robust SD over {noise['repeats']} repeats)"
            if sd is not None else f"repeatability: {noise['repeats']} repeat(s), too few to measure the noise")
    worst = noise.get("largest")
    if worst:
        text += f"; largest: {worst['what']} {worst['first']:.2f} then {worst['again']:.2f} MiB/s"
    if noise.get("drift") is not None:
        text += f"; solo drift {noise['drift']:+.1%} from the first to the closing solo pass"
    return text


def _num(v: Any) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def profile_heatmap(doc: dict[str, Any]) -> go.Figure | Note:
    """Pair ratios with the zones ordered by conflict group."""
    zones: list[int] = doc["zones"]
    if len(zones) < 2:
        return Note("fewer than two zones were profiled")
    groups = {int(k): v for k, v in doc["groups"].items()}
    order = sorted(range(len(zones)), key=lambda i: (groups.get(zones[i], -1) < 0, groups.get(zones[i], -1), i))
    m = doc["matrix"]
    z = [[m[i][j] for j in order] for i in order]
    labels = [f"{zones[i]} (g{groups.get(zones[i], -1)})" for i in order]
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=labels, colorscale="RdBu", zmin=0.3, zmax=1.2,
                               colorbar={"title": "together / solo"},
                               hovertemplate="%{y} with %{x}: %{z:.2f}<extra></extra>"))
    thr = doc.get("threshold")
    title = f"Pair bandwidth ratio, zones by conflict group (threshold {thr:g})" if thr else "Pair bandwidth ratio"
    fig.update_yaxes(autorange="reversed")
    return layout(fig, title, height=max(420, 18 * len(zones) + 160))


# ---- collisions of a trace --------------------------------------------------------------------------------------
def conflicts_text(res: dict[str, Any]) -> str:
    s, w = res["summary"], res["whatif"]
    if not s.get("commands"):
        return f"{res['run']}: no I/O command falls in a zone of the table ({s.get('unmapped', 0)} unmapped)"
    lines = [
        f"{res['run']}: {s['commands']:,} I/O commands in {s['groups']} conflict groups "
        f"({s['unmapped']:,} in zones the table does not list, left out)",
        f"issued while another command was in flight: {s['busy']:,}; of those, with another command of the same "
        f"group in flight: {s['collide']:,} = {_pct(s['share'])} (random placement would give {_pct(s['expected'])});"
        f" of the same zone: {s['same_zone']:,}",
    ]
    if w.get("fifo"):
        f, a = w["fifo"], w["group_aware"]
        m = w["model"]
        lines += [
            "",
            f"what-if (each group serves one command at a time for its traced latency; at most {m['queue_depth']} "
            f"in flight; group-aware looks {m['window']} commands ahead), {w['commands']:,} commands"
            + (f" ({w['left_out']:,} left out)" if w.get("left_out") else "") + ":",
            f"  FIFO:        {_dur(f['makespan_s'] * 1e6)}, mean latency {_dur(f['mean_latency_us'])}, p99.9 "
            f"{_dur(f['p999_latency_us'])}, dispatched to a busy group {_pct(f['dispatched_to_busy_group'])}",
            f"  group-aware: {_dur(a['makespan_s'] * 1e6)}, mean latency {_dur(a['mean_latency_us'])}, p99.9 "
            f"{_dur(a['p999_latency_us'])}, dispatched to a busy group {_pct(a['dispatched_to_busy_group'])}",
            f"  gain: {_num(w['makespan_gain'])}x makespan, {_num(w['p999_gain'])}x p99.9 latency",
        ]
    return "\n".join(lines)


def _dur(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f} s"
    if us >= 1e4:
        return f"{us / 1e3:.1f} ms"
    return f"{us:.0f} us"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f} %"


def collisions_over_time(per_bin: pl.DataFrame) -> go.Figure | Note:
    if per_bin.is_empty() or int(per_bin["busy"].sum()) == 0:
        return Note("no command was issued while another was in flight")
    fig = go.Figure()
    fig.add_scatter(x=per_bin["t_s"], y=per_bin["share"], mode="lines+markers", name="same group in flight")
    fig.add_scatter(x=per_bin["t_s"], y=per_bin["expected"], mode="lines", name="random placement",
                    line={"dash": "dash"})
    fig.update_yaxes(title="share of commands issued while busy", range=[0, 1.02])
    fig.update_xaxes(title="time (s)")
    return layout(fig, "Commands colliding within a conflict group")


# ---- zone resets and FAR ----------------------------------------------------------------------------------------
def resets_text(res: dict[str, Any], rows: int = 12) -> str:
    s, far = res["summary"], res["far"]
    lines = [f"{res['run']}: {s['resets']:,} zone resets in {s['duration_s']:.1f} s "
             f"({_num(s['resets_per_s'])} per second) over {s['zones_reset']} zones"]
    lines.append(f"latencies come from {s['backend']}: {s['latency_means']}")
    if s["resets"]:
        lines.append(f"reset latency p50 {s['lat_p50_us']:.0f} us, p99 {s['lat_p99_us']:.0f} us, max "
                     f"{s['lat_max_us']:.0f} us; zones empty at reset {s['empty_resets']}, partly written "
                     f"{s['partial_resets']}, full {s['full_resets']}, unknown {s['unknown_wp_resets']} (mean "
                     f"fullness {_num(s['mean_fullness'])}); mean free share at reset {s['mean_free_share']:.2f}")
        per_zone = ", ".join(f"{r['zone']}: {r['resets']}" for r in s["per_zone"][:24])
        more = f" (and {len(s['per_zone']) - 24} more zones)" if len(s["per_zone"]) > 24 else ""
        lines.append(f"resets per zone: {per_zone}{more}")
        t: pl.DataFrame = res["table"]
        lines += ["", f"first {min(rows, t.height)} resets:",
                  "      t_s  zone   wp MiB  full  free   lat us  since full s  wp from"]
        for r in t.head(rows).iter_rows(named=True):
            since = "" if r["since_full_s"] is None else ("before" if math.isnan(r["since_full_s"])
                                                          else f"{r['since_full_s']:.3f}")
            wp = "       ?" if r["wp_mib"] is None else f"{r['wp_mib']:8.2f}"
            full = "    ?" if r["fullness"] is None else f"{r['fullness']:5.2f}"
            lines.append(f"  {r['t_s']:7.3f} {r['zone']:5d} {wp} {full} "
                         f"{r['free_share']:5.2f} {r['lat_us']:8.1f} {since:>13}  {r['wp_from']}")
        if s.get("skipped") and any(s["skipped"].values()):
            lines.append(f"left out: {s['skipped']}")
    if not res.get("zone_report"):
        lines.append("no raw/zones.txt: zones the trace neither writes nor resets are taken as empty")
    p = far["params"]
    lines += ["", f"FAR what-if (T = {p['t']:g}; below it T_wp = {p['slope']:.3g} x free share + "
                  f"{p['intercept']:g} of the zone), {far['life_cycles']} zone life cycles, "
                  f"{far['traced_resets']} traced resets:"]
    for name in ("eager", "far"):
        r = far[name]
        lines.append(f"  {name:5}: {r['resets']} resets ({r['forced_resets']} forced), {r['deferred']} deferred "
                     f"over {r['zones_deferred']} zones, {r['written_mib']:.1f} MiB written, "
                     f"{_num(r['mib_per_erase'])} MiB per erase, out of space {r['out_of_space_mib']:.1f} MiB")
    lines.append(f"  erases saved by FAR: {far['erases_saved']} ({_pct(far['erases_saved_share'])}); lifetime "
                 f"x{_num(far['lifetime_gain'])}")
    lines.append(f"  a block trace cannot see which data is invalid; assumed: {far['assumes']}")
    return "\n".join(lines)


def resets_json(res: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in res.items() if k != "table"}
    out["resets"] = res["table"].to_dicts()
    return out


def reset_timeline(table: pl.DataFrame) -> go.Figure | Note:
    if table.is_empty():
        return Note("the trace has no zone reset")
    fig = go.Figure(go.Scatter(
        x=table["t_s"], y=table["zone"], mode="markers",
        marker={"color": table["fullness"], "colorscale": "Viridis", "cmin": 0, "cmax": 1, "size": 7,
                "colorbar": {"title": "fullness"}},
        customdata=table.select("wp_mib", "free_share", "lat_us").to_numpy(),
        hovertemplate="t %{x:.3f} s, zone %{y}<br>wp %{customdata[0]:.1f} MiB, free %{customdata[1]:.2f}, "
                      "%{customdata[2]:.0f} us<extra></extra>"))
    fig.update_xaxes(title="time (s)")
    fig.update_yaxes(title="zone")
    return layout(fig, "Zone resets (colour: how full the zone was)")


def far_free_space(far: dict[str, Any]) -> go.Figure | Note:
    if not far["eager"]["written_bytes"]:
        return Note("the trace writes nothing: no free-space curve")
    fig = go.Figure()
    for name, label in (("eager", "eager runtime reset"), ("far", f"FAR (T = {far['params']['t']:g})")):
        pts = far[name]["free_series"]
        fig.add_scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines", name=label)
    fig.add_hline(y=far["params"]["t"], line_dash="dot", annotation_text="T")
    fig.update_yaxes(title="free share of the device", range=[0, 1.02])
    fig.update_xaxes(title="time (s)")
    return layout(fig, "Free space under eager reset and FAR")
