"""Tables, text and figures of a closed loop (`ztbp loop`): one row per round from loop.json (io/loop.py).

What a round measured on the device (fio IOPS and latency, the device latency of listed and unlisted zones, the
device's read counter) sits beside what the model says (the hit ratio of the zones in force, and the previous
round's prediction replayed out of sample on this round's trace)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from .. import devices
from ..analysis.params import PAPER_TABLES, RUN_NOISE_CV
from .figures import layout
from .loop_device import cache_worth, device_hit_item, device_hit_text, device_name


def _get(d: dict[str, Any] | None, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _zones(z: list[int] | None) -> str:
    return ", ".join(map(str, sorted(z))) if z else "-"


def rounds_frame(doc: dict[str, Any]) -> pl.DataFrame:
    """One row per round: what was in force, what was traced, what fio and the device measured, the model."""
    rows = []
    for e in doc["rounds"]:
        applied = e.get("applied_before") or {}
        rows.append({
            "round": e["round"],
            "zones_in_force": _zones(e.get("zones_in_force")),
            "device_reports": _zones(applied.get("zones_reported")) if applied else "-",
            "set_exit": applied.get("set_exit_code") if applied else None,
            "read_rows": e["read_rows"], "fio_reads": e["fio_reads"], "lost": e["lost"],
            "status_reads": _get(e, "device", "status_reads"),
            "device_hit_ratio": _get(e, "device", "hit_ratio"),  # STATUS's counters around the round
            "replay_hit_ratio": _get(e, "device", "replay_hit_ratio"),
            "device_minus_replay": _get(e, "device", "device_minus_replay"),
            "kernel_log_hit_ratio": _get(e, "device", "kernel_log_counters", "hit_ratio"),
            "iops": _get(e, "fio", "read_iops"),
            "p50_us": _get(e, "fio", "p50_us"), "p99_us": _get(e, "fio", "p99_us"),
            "listed_reads": _get(e, "latency", "listed", "reads"),
            "listed_p50_us": _get(e, "latency", "listed", "p50_us"),
            "unlisted_p50_us": _get(e, "latency", "unlisted", "p50_us"),
            "lru": _get(e, "model", "lru"),
            "hit_ratio": _get(e, "model", "sent_hit_ratio"),
            "predicted": _get(e, "out_of_sample", "predicted_zone_lru"),
            "replayed": _get(e, "out_of_sample", "replayed_zone_lru"),
            "config": _zones(_get(e, "config", "hot_zones")),
            "recommend": bool(_get(e, "config", "recommend")),
            "decision": _get(e, "decision", "action"),
        })
    return pl.DataFrame(rows, infer_schema_length=None)


def _f(v: Any, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def loop_text(doc: dict[str, Any]) -> str:
    """The loop in a few stable lines: the device, each round's trace check, config and decision, why it stopped."""
    dev = devices.find(doc.get("backend"))
    wl = doc.get("workload") or {}
    lines = [f"device: {dev.loop_title if dev else doc.get('backend')}",
             f"workload: {wl.get('name')}; cache {doc.get('cache_mib')} MiB of {doc.get('page_kib')} KiB pages; "
             f"{len(doc['rounds'])} of {doc.get('rounds_asked')} rounds"]
    for e in doc["rounds"]:
        ok = e["read_rows"] == e["fio_reads"] and e["lost"] == 0
        cfg = e.get("config") or {}
        ab = e.get("ab")
        line = (f"round {e['round']}: zones in force [{_zones(e.get('zones_in_force'))}]; "
                f"{e['read_rows']} read rows for {e['fio_reads']} fio reads, lost {e['lost']}"
                f"{'' if ok else ' (INCOMPLETE TRACE)'}; "
                + (f"A/B block {ab['block']}, configuration {ab['arm']} (pair {ab['pair']})" if ab else
                   f"config [{_zones(cfg.get('hot_zones'))}] "
                   f"{'recommended' if cfg.get('recommend') else 'not recommended'}"))
        applied = e.get("applied_before")
        if applied and applied.get("action") == "clear":
            line += f"; before it: stop exit {applied.get('stop_exit_code')}"
        elif applied:
            line += (f"; before it: set exit {applied.get('set_exit_code')}, device reports "
                     f"[{_zones(applied.get('zones_reported'))}]")
        lines.append(line)
    lines.append(f"stopped: {doc.get('stopped') or 'not stopped by its rule (interrupted or failed)'}")
    if doc.get("emulator"):
        lines.append("emulator: " + doc["emulator"]["listed_zone_latency"])
    return "\n".join(lines)


def gains_text(doc: dict[str, Any]) -> str:
    """Before vs after, measured and modelled: round 1 (nothing in force) against the later rounds."""
    rs = doc["rounds"]
    first = rs[0]
    lines = []
    for e in rs[1:]:
        oos = e.get("out_of_sample") or {}
        lines.append(
            f"round {e['round']} vs round 1: IOPS {_f(_get(first, 'fio', 'read_iops'), ',.0f')} -> "
            f"{_f(_get(e, 'fio', 'read_iops'), ',.0f')}; p50 {_f(_get(first, 'fio', 'p50_us'), ',.0f')} -> "
            f"{_f(_get(e, 'fio', 'p50_us'), ',.0f')} us; listed-zone device p50 "
            f"{_f(_get(e, 'latency', 'listed', 'p50_us'), ',.0f')} us vs unlisted "
            f"{_f(_get(e, 'latency', 'unlisted', 'p50_us'), ',.0f')} us; {_device_gain(first, e)}; model hit ratio "
            f"{_f(_get(first, 'model', 'sent_hit_ratio'), '.4f')} -> {_f(_get(e, 'model', 'sent_hit_ratio'), '.4f')}"
            f"; predicted {_f(oos.get('predicted_zone_lru'), '.4f')} vs replayed "
            f"{_f(oos.get('replayed_zone_lru'), '.4f')}")
    return "\n".join(lines) if lines else "one round only: nothing to compare"


def _device_gain(first: dict[str, Any], e: dict[str, Any]) -> str:
    """The device's hit ratio, round 1 against round e: from STATUS's counters with the replay of its cache beside;
    for a loop from before STATUS's hits were carried, from the counters the device printed in its kernel log."""
    keys = ("hit_ratio", "replay_hit_ratio")
    if all(_get(r, "device", k) is None for r in (first, e) for k in keys):
        return (f"device hit ratio {_f(_get(first, 'device', 'kernel_log_counters', 'hit_ratio'), '.4f')} -> "
                f"{_f(_get(e, 'device', 'kernel_log_counters', 'hit_ratio'), '.4f')}")
    return (f"device hit ratio {_f(_get(first, 'device', 'hit_ratio'), '.4f')} -> "
            f"{_f(_get(e, 'device', 'hit_ratio'), '.4f')} (replay of its cache "
            f"{_f(_get(first, 'device', 'replay_hit_ratio'), '.4f')} -> "
            f"{_f(_get(e, 'device', 'replay_hit_ratio'), '.4f')})")


def rounds_figure(frame: pl.DataFrame) -> go.Figure:
    """Per round: the model's hit ratio (with the predicted and replayed figures), fio IOPS, fio p50/p99."""
    fig = make_subplots(rows=1, cols=3, subplot_titles=("cache hit ratio", "read IOPS (fio)",
                                                        "read latency (fio), us"))
    x = frame["round"].to_list()
    fig.add_trace(go.Scatter(x=x, y=frame["hit_ratio"].to_list(), mode="lines+markers",
                             name="zones in force (zone-LRU)"), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=frame["lru"].to_list(), mode="lines+markers", name="LRU",
                             line={"dash": "dot"}), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=frame["device_hit_ratio"].to_list(), mode="lines+markers",
                             name="device's own counters (STATUS)", line={"dash": "dash"}), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=frame["replay_hit_ratio"].to_list(), mode="markers",
                             name="replay of the device's cache", marker={"symbol": "circle-open", "size": 10}),
                  row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=frame["predicted"].to_list(), mode="markers", name="predicted (previous round)",
                             marker={"symbol": "x", "size": 10}), row=1, col=1)
    # the 95 % band of the run-to-run noise (its CV assumed, as one round each cannot measure it): two rounds whose
    # bands overlap differ by no more than that noise (speed_figure has the intervals)
    band = [None if v is None else 1.96 * RUN_NOISE_CV * v for v in frame["iops"].to_list()]
    fig.add_trace(go.Bar(x=x, y=frame["iops"].to_list(), name=f"IOPS (±95 % noise band, CV {RUN_NOISE_CV:.0%})",
                         error_y={"type": "data", "array": band}), row=1, col=2)
    for col, dash in (("p50_us", None), ("p99_us", "dash")):
        fig.add_trace(go.Scatter(x=x, y=frame[col].to_list(), mode="lines+markers", name=col.replace("_us", ""),
                                 line={"dash": dash}), row=1, col=3)
    fig.update_xaxes(title_text="round", dtick=1)
    return layout(fig, "Round by round", height=380)


def listed_figure(frame: pl.DataFrame) -> go.Figure:
    """Device latency (p50) of reads to the zones in force against the other zones, per round."""
    fig = go.Figure()
    x = frame["round"].to_list()
    fig.add_trace(go.Bar(x=x, y=frame["listed_p50_us"].to_list(), name="zones in force"))
    fig.add_trace(go.Bar(x=x, y=frame["unlisted_p50_us"].to_list(), name="other zones"))
    fig.update_xaxes(title_text="round", dtick=1)
    fig.update_yaxes(title_text="device read latency p50, us")
    return layout(fig, "Listed vs unlisted zones", height=360, barmode="group")


def _us(v: float | None) -> str:
    """A latency in microseconds, or "not measured" (never "None")."""
    return "not measured" if v is None else f"{v:,.1f} us"


def _listed_text(lat: dict[str, Any]) -> str:
    """Device read latency of the zones in force against the others; no listed reads said in words."""
    listed, unlisted = lat["listed"], lat["unlisted"]
    head = (f"listed {listed['reads']:,} reads p50 {_us(listed['p50_us'])}" if listed["reads"]
            else "no zones listed on the device")
    return f"{head}, unlisted p50 {_us(unlisted['p50_us'])}"


def round_line(entry: dict[str, Any]) -> str:
    lat = entry["latency"]
    dev = entry["device"]
    parts = [f"round {entry['round']}: {entry['read_rows']:,} read rows (fio {entry['fio_reads']:,}), lost "
             f"{entry['lost']}", f"{entry['fio']['read_iops'] or 0:,.0f} IOPS",
             f"p50/p99 {_us(entry['fio']['p50_us'])}/{_us(entry['fio']['p99_us'])}",
             _listed_text(lat)]
    device = device_hit_text(dev)
    if device is not None:
        parts.append(device)
    model = entry["model"]
    parts.append(f"model hit ratio {model.get('warm_hit_ratio', model['sent_hit_ratio']):.4f} with zones "
                 f"{model['sent_zones']} "
                 f"(device holds {entry['zones_in_force']})")
    if "out_of_sample" in entry:
        o = entry["out_of_sample"]
        parts.append(f"predicted {o['predicted_zone_lru']:.4f} vs replayed {o['replayed_zone_lru']:.4f}")
    cfg = entry.get("config")
    if cfg:  # an A/B block makes no config of its own
        parts.append(f"config {cfg['hot_zones']} {'recommended' if cfg['recommend'] else 'NOT recommended'}")
    return "; ".join(parts)


def applied_text(app: dict[str, Any]) -> str:
    """What the guest did before a round: ztbp-ctl set (and what the device holds) or stop (the A/B off arm)."""
    if app.get("action") == "clear":
        return f"ztbp-ctl stop exit {app['stop_exit_code']}"
    return f"ztbp-ctl set exit {app['set_exit_code']}, device holds {app['zones_reported']}"


def summary_text(doc: dict[str, Any]) -> str:
    lines = [f"loop {doc['backend']}: {len(doc['rounds'])} round(s) -> {doc.get('dir', '')}"]
    for e in doc["rounds"]:
        lines.append("  " + round_line(e))
        app = e.get("applied_before")
        if app:
            lines.append(f"    before it: {applied_text(app)}")
    if doc.get("emulator"):
        lines.append("  NVMeVirt: " + doc["emulator"]["listed_zone_latency"])
    lines.append(f"  stopped: {doc['stopped'] or 'not (interrupted or failed)'}")
    return "\n".join(lines)


# ---- does it make reads faster? ------------------------------------------------------------------------------
def speed(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The loop's speed comparison: its A/B blocks' effects (configuration off = A, on = B) when it ran them, else
    its last round against round 1 on fio's totals with the assumed run-to-run noise; None with one round only."""
    from ..analysis.compare import ab_effects, fio_effect
    from ..errors import ZtbpError

    ab = doc.get("ab")
    rs = doc["rounds"]
    try:
        if ab and ab.get("blocks"):
            return ab_effects(ab["blocks"])
        return fio_effect(rs[0].get("fio"), rs[-1].get("fio")) if len(rs) > 1 else None
    except ZtbpError as e:
        return {"error": str(e)}


def speed_text(doc: dict[str, Any]) -> str:
    """Whether the configuration made reads faster, in words with each effect's interval (present/compare.py)."""
    from .compare import compare_text

    res = speed(doc)
    if res is None:
        return ("one round only: no speed comparison; `ztbp loop --ab 5` measures the configuration on and off in "
                "alternating blocks, with intervals")
    if "error" in res:
        return f"no speed comparison: {res['error']}"
    ab = doc.get("ab")
    if ab:
        a, b = "blocks with the configuration off (STOP)", f"blocks with zones {_zones(ab.get('listed'))} on (SET)"
        note = ("" if ab.get("device_acted") else "\nthe device never held the configuration (it refused SET): both "
                "arms ran the same device, so no verdict is given")
    else:
        last = doc["rounds"][-1]
        a, b = "round 1", f"round {last['round']} (zones in force: {_zones(last.get('zones_in_force'))})"
        note = ("\ntwo separate rounds: the interval is the noise assumed between runs; `ztbp loop --ab 5` measures "
                "it on the device, in alternating blocks")
    worth = cache_worth(doc, res)
    return compare_text(res, a, b) + note + service_text(ab) + paper_text(doc, res) + (f"\n{worth}" if worth else "")


def paper_text(doc: dict[str, Any], res: dict[str, Any]) -> str:
    """The paper's measured effect on its drive (Tables II/III) beside this loop's, for the workload that
    reproduces it; what share of the measured device time the emulator's own model accounts for says whether the
    device or the emulation bounded this run."""
    paper = PAPER_TABLES.get(str((doc.get("workload") or {}).get("name")))
    if paper is None:
        return ""

    def change(pair: tuple[float, float]) -> str:
        return f"{pair[0]:,.0f} -> {pair[1]:,.0f} ({100 * (pair[1] / pair[0] - 1):+.1f} %)"

    eff = res.get("effects") or {}
    here = "; ".join(f"{e['metric']} {e['change']:+.1f} {e['change_unit']} {e['verdict']}"
                     for k, e in eff.items() if k in ("read_iops", "fio_p50", "hit_ratio"))
    lines = ["", f"the paper, {paper['table']}, on its drive: read IOPS {change(paper['read_iops'])}, p50 "
                 f"{change(paper['p50_us'])} us, cache hit ratio {paper['hit_ratio'][0]:.0%} -> "
                 f"{paper['hit_ratio'][1]:.0%}", f"this loop: {here or 'nothing compared'}"]
    m = (doc.get("ab") or {}).get("service_model")
    if m:
        off = m["off"]["all"]
        if off.get("measured_mean_us"):
            share = off["mean_us"] / off["measured_mean_us"]
            lines.append(f"regime: the emulator's modelled device time is {share:.0%} of the device time measured "
                         "with the configuration off (the rest is queueing and emulation); the smaller that share, "
                         "the less of any device effect can show in the measurement")
    return "\n".join(lines)


def service_text(ab: dict[str, Any] | None) -> str:
    """What NVMeVirt's own read model predicts for the A/B arms beside what was measured, and how much of the
    predicted change is cache hits, how much the emulator's shortcut for listed zones (analysis/device_replay.py)."""
    m = (ab or {}).get("service_model")
    if not m:
        return ""
    lines = ["", f"the emulator's read model ({m['profile']}, --slow {m['slow']}; device time from dispatch, no "
                 "queueing) against the device latency measured by the probe, mean per read:"]
    for arm in ("off", "on"):
        for cls in ("listed", "other"):
            s = m[arm][cls]
            lines.append(f"  configuration {arm:3s} {cls:6s} zones: {s['reads']:,} reads, model hit ratio "
                         f"{_f(s['hit_ratio'], '.4f')}, predicted {_f(s['mean_us'], ',.0f')} us, measured "
                         f"{_f(s.get('measured_mean_us'), ',.0f')} us")
    lines.append("  " + m["decomposition"]["statement"])
    return "\n".join(lines)


def speed_figure(doc: dict[str, Any]) -> go.Figure:
    """The effects of speed_text as points with their intervals around zero (never a bare falling bar)."""
    from .compare import effects_figure

    res = speed(doc)
    return effects_figure(res if res and "error" not in res else {})


# ---- the front page: the answer first ------------------------------------------------------------------------
def _pct_text(v: Any) -> str:
    return "not measured" if not isinstance(v, int | float) else f"{100 * v:.1f} %"


def _change(a: Any, b: Any) -> str:
    return f"{_pct_text(a)} → {_pct_text(b)}"


def _last_apply(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(the round whose configuration was sent, the round run after it) of the last `ztbp-ctl set`, or None."""
    rs = doc["rounds"]
    for before, e in zip(reversed(rs[:-1]), reversed(rs[1:]), strict=True):
        app = e.get("applied_before") or {}
        if app.get("action", "apply") == "apply" and "set_exit_code" in app:
            return before, e
    return None


def headline(doc: dict[str, Any]) -> list[dict[str, str]]:
    """The loop's answer in a few figures, first round against last: the hit ratio (model, and the device's own
    counters where it counts), the speed effect with its interval and verdict, the zones sent and read back, the
    rows traced and lost, and what the device does not model. Each item: key, label, value, detail — text only,
    never None."""
    rs = doc["rounds"]
    first, last = rs[0], rs[-1]
    backend = str(doc.get("backend") or "")
    span = "one round only" if len(rs) == 1 else f"round 1 → round {last['round']}"
    items = [{"key": "hit_model", "label": "hit ratio, model",
              "value": _change(_get(first, "model", "sent_hit_ratio"), _get(last, "model", "sent_hit_ratio")),
              "detail": f"{span}: the cache model replayed on each round's trace with the zones in force"}]
    items.append(device_hit_item(doc, span))
    res = speed(doc)
    if res is None or "error" in res:
        value = "not measured"
        detail = res["error"] if res else "one round only: `ztbp loop --rounds 2` or `--ab 5` compares"
    else:
        v = res["verdict"]
        value = v["verdict"] or "not measured"
        detail = v["line"]
        if not doc.get("ab"):
            detail += f"; {span}, run-to-run noise assumed (CV {RUN_NOISE_CV:.0%})"
    if not any(e.get("zones_in_force") for e in rs[1:]) and len(rs) > 1:  # every SET refused (QEMU's namespace)
        value = "no verdict"
        detail += "; the device never held a configuration (every SET refused): both sides ran the same device"
    items.append({"key": "speed", "label": "read speed", "value": value, "detail": detail})
    worth = cache_worth(doc, res) if res is not None and "error" not in res else None
    if worth:
        items.append({"key": "cache_worth", "label": "what the cache alone is worth", "value": device_name(doc),
                      "detail": worth})
    sent = _last_apply(doc)
    if sent is None:
        zones = {"value": "nothing sent", "detail": "no round applied a configuration"}
    else:
        before, after = sent
        app = after["applied_before"]
        cfg = _zones(_get(before, "config", "hot_zones"))
        if app.get("set_exit_code") == 0:
            value = f"sent {cfg} → device holds {_zones(app.get('zones_reported'))}"
        else:
            value = f"sent {cfg} → refused (ztbp-ctl set exit {app.get('set_exit_code')})"
        zones = {"value": value, "detail": f"before round {after['round']}; read back from the "
                                           f"{app.get('zones_reported_from') or 'device'}"}
    items.append({"key": "zones", "label": "zones sent and read back", **zones})
    rows, reads, lost = (_total([e.get(k) for e in rs]) for k in ("read_rows", "fio_reads", "lost"))
    bad = [str(e.get("round")) for e in rs if e.get("read_rows") != e.get("fio_reads") or e.get("lost")]
    items.append({"key": "rows", "label": "rows traced",
                  "value": f"{rows} read rows for {reads} fio reads, {lost} lost events",
                  "detail": (f"incomplete trace in round {', '.join(bad)}" if bad
                             else f"every read of all {len(rs)} rounds traced")})
    dev = devices.find(backend)  # what the device does not model, in one line
    items.append({"key": "not_modelled", "label": "device, and what it does not model",
                  "value": dev.title if dev else backend or "unknown device",
                  "detail": dev.not_modelled if dev else "unknown device: nothing is known of what it models"})
    return items


def _total(values: list[Any]) -> str:
    """The sum of the rounds' counts with thousands separators; "not measured" when one is not a count."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "not measured"
    return f"{sum(values):,}"
