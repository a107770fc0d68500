"""What `ztbp compare` and the loop's report show of a comparison (analysis/compare.py): a small table of each
metric's two sides, change, interval and verdict with a closing verdict line, and a figure of the changes with
their intervals around zero — never a bare bar that falls or rises with the noise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from .figures import layout

_HEADERS = ("metric", "A", "B", "change", "CI", "verdict")
#: marker colour by outcome: better, worse, no difference within noise
_COLOURS = {True: "#2a9d4b", False: "#c8372d", None: "#7f7f7f"}
_OUTCOME = {True: "better", False: "worse", None: "no difference within noise"}


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return "n/a"
    if unit == "%":
        return f"{v:.1f} %"
    if unit == "us":
        return f"{v:,.0f} us" if abs(v) >= 1000 else f"{v:,.1f} us"
    return f"{v:,.0f} {unit}".rstrip() if abs(v) >= 100 else f"{v:.3g} {unit}".rstrip()


def _change(e: Mapping[str, Any]) -> tuple[str, str]:
    u = f" {e['change_unit']}" if e["change_unit"] else ""
    lo, hi = e["ci"]
    return f"{e['change']:+.1f}{u}", f"[{lo:+.1f}, {hi:+.1f}]"


def _effects(result: Mapping[str, Any]) -> dict[str, Any]:
    """The effects of a result of ab_effects / run_effect, or the effects mapping itself."""
    got = result.get("effects", result)
    return dict(got) if isinstance(got, Mapping) else {}


def _robust(e: Mapping[str, Any]) -> str:
    """The median of the pair differences, in the change's unit ("" for an effect of two runs)."""
    return "" if "median" not in e else f"{e['median']:+.1f}{' ' + e['change_unit'] if e['change_unit'] else ''}"


def effects_table(result: Mapping[str, Any]) -> list[str]:
    """One aligned row per metric compared: metric, A, B, change, interval, verdict; paired blocks add the median
    of the pair differences and the p-value Holm's family gives the device's measures."""
    effects = _effects(result)
    if not effects:
        return []
    level = next(iter(effects.values()))["ci_level"]
    paired = any("median" in e for e in effects.values())
    head = [*_HEADERS[:4], f"{100 * level:g} % CI", *(("median of pairs", "p (Holm)") if paired else ()),
            _HEADERS[5]]
    rows = [[e["metric"], _value(e["mean_a"], e["unit"]), _value(e["mean_b"], e["unit"]), *_change(e),
             *((_robust(e), f"{e['p_holm']:.2g}" if "p_holm" in e else "-") if paired else ()), e["verdict"]]
            for e in effects.values()]
    return aligned(head, rows, left=(0, len(head) - 1))


def _measures(n: int) -> str:
    return "1 measure is" if n == 1 else f"{n} measures are"


def robust_lines(result: Mapping[str, Any]) -> list[str]:
    """Paired blocks: each measure's pair differences, the median of them and Hodges-Lehmann with its
    distribution-free interval (or why the pairs cannot give one) — estimates one outlier pair cannot swing — and
    the pairs the noise measured asks for."""
    effects = [e for e in _effects(result).values() if "hodges_lehmann" in e]
    if not effects:
        return []
    lines = ["per pair (on against off), their median (one outlier pair cannot swing it) and Hodges-Lehmann with its "
             "distribution-free interval:"]
    for e in effects:
        u = f" {e['change_unit']}" if e["change_unit"] else ""
        hl = e["hodges_lehmann"]
        ci = (f" [{hl['ci'][0]:+.1f}, {hl['ci'][1]:+.1f}] ({100 * hl['level']:.1f} % distribution-free)"
              if hl["ci"] is not None else f"; no interval: {hl['note']}")
        pairs = ", ".join(f"{x:+.1f}" for x in e["pair_changes"])
        lines.append(f"  {e['metric']}: pairs {pairs}{u}; median {e['median']:+.1f}{u}, Hodges-Lehmann "
                     f"{hl['estimate']:+.1f}{u}{ci}")
        if e["median"] * e["change"] <= 0 and e["change"] != 0:
            lines.append(f"    the mean ({e['change']:+.1f}{u}) and the median are on two sides of no change: one "
                         "pair decides the mean")
    fam = result.get("family") or {}
    if fam.get("size"):
        lines.append(f"the device's {_measures(fam['size'])} judged together (Holm): a verdict needs its adjusted "
                     f"p below {fam['alpha']:g}, so a device that changed nothing gets one in about "
                     f"{100 * fam['alpha']:g} % of the loops, not in each measure's {100 * fam['alpha']:g} %")
    plan = fam.get("plan")
    if plan:
        metric = next((e["metric"] for e in effects if e["key"] == plan["key"]), plan["key"])
        lines.append(f"pairs needed ({metric}): {plan['pairs'] if plan['pairs'] is not None else 'too many'} — "
                     f"{plan['how']}")
    if result.get("device_held") is False:
        lines.append("no verdict: the device never held the configuration (every SET refused): both arms ran the "
                     "same device; the figures are a negative control")
    return lines


def aligned(head: list[str], rows: list[list[str]], left: tuple[int, ...]) -> list[str]:
    """A text table: the header, a rule, the rows; columns `left` flush left, the others flush right."""
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]

    def fmt(r: list[str]) -> str:
        cells = [c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        return "  ".join(cells).rstrip()

    return [fmt(head), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows]


def _distributions(result: Mapping[str, Any]) -> list[str]:
    dist = result.get("distributions")
    if not dist:
        return []
    lines = ["per-request device read latency, us (reads: p50 / p90 / p99):"]
    for cls in ("all", "listed", "unlisted"):
        a, b = dist["a"].get(cls) or {}, dist["b"].get(cls) or {}

        def side(d: Mapping[str, Any]) -> str:
            qs = " / ".join(_value(d.get(k), "us").removesuffix(" us") for k in ("p50_us", "p90_us", "p99_us"))
            return f"{d.get('reads', 0):,} reads: {qs}"

        lines.append(f"  {cls:<8}  A {side(a)}   B {side(b)}")
    return lines


def _closing(result: Mapping[str, Any]) -> list[str]:
    effects = _effects(result)
    found = [f"{e['metric']} {e['verdict']}" for e in effects.values() if e["improved"] is not None]
    lines = [f"verdict: {result['verdict']['line']}"] if result.get("verdict") else []
    if effects:
        lines.append("differences beyond the noise: " + ("; ".join(found) if found else "none"))
    return lines


def compare_text(result: Mapping[str, Any], a: str = "A", b: str = "B") -> str:
    """A comparison in a few lines: what A and B are, how it was computed, the table, what was not compared, the
    per-request latency of each side (two runs) and a closing verdict line."""
    lines = [f"A: {a}", f"B: {b}", f"method: {result.get('method', '')}"]
    if str(result.get("design", "")).startswith("two runs"):
        if "listed" in result:  # not for fio's totals alone
            zones = ", ".join(map(str, result.get("listed") or [])) or "none"
            lines.append(f"listed zones: {zones}" + (f" ({result['listed_from']})" if result.get("listed_from")
                                                     else ""))
    else:
        lines.append(f"{result.get('pairs', 0)} complete pair(s) of blocks")
    lines += [f"  {d}" for d in result.get("dropped") or []]
    lines += ["", *effects_table(result)]
    robust = robust_lines(result)
    if robust:
        lines += ["", *robust]
    absent = result.get("absent") or {}
    if absent:
        lines += ["", "not compared:"] + [f"  {x['reason']}" for x in absent.values()]
    dist = _distributions(result)
    if dist:
        lines += ["", *dist]
    return "\n".join([*lines, "", *_closing(result)])


def effects_figure(effects: Mapping[str, Any]) -> go.Figure:
    """Each metric's change (B against A) as a point with its interval as an error bar, around a zero line; the
    colour and the label say the verdict. `effects`: a result of ab_effects / run_effect or its effects."""
    eff = list(_effects(effects).values())
    fig = go.Figure()
    fig.add_vline(x=0, line_color="black", line_width=1)
    for outcome, name in _OUTCOME.items():
        rows = [e for e in eff if e["improved"] is outcome]
        if not rows:
            continue
        fig.add_trace(go.Scatter(
            x=[e["change"] for e in rows], y=[_label(e) for e in rows], mode="markers+text", name=name,
            marker={"color": _COLOURS[outcome], "size": 10}, text=[e["verdict"] for e in rows],
            textposition="top center", hovertext=[e["line"] for e in rows], hoverinfo="text",
            error_x={"type": "data", "symmetric": False, "array": [e["ci"][1] - e["change"] for e in rows],
                     "arrayminus": [e["change"] - e["ci"][0] for e in rows]}))
    if not eff:
        fig.add_annotation(text="nothing could be compared", showarrow=False, x=0.5, y=0.5, xref="paper",
                           yref="paper")
    order = [_label(e) for e in eff][::-1]
    fig.update_yaxes(categoryorder="array", categoryarray=order)
    pp = any(e["change_unit"] == "pp" for e in eff)
    level = f"{100 * eff[0]['ci_level']:g} %" if eff else "95 %"
    fig.update_xaxes(title_text="change B vs A, %" + (" (hit ratio: percentage points)" if pp else "") +
                                f", with its {level} interval")
    return layout(fig, "Effects with their intervals", height=max(300, 70 * len(eff) + 140))


def _label(e: Mapping[str, Any]) -> str:
    return f"{e['metric']} (pp)" if e["change_unit"] == "pp" else e["metric"]


def repeats_text(result: Mapping[str, Any]) -> str:
    """How often each verdict came out over the repeats of ab_repeats, metric by metric."""
    lines = [f"{result['groups']} repeats of {result['pairs_per_group']} pairs of blocks each"
             + (f" ({result['left_out_pairs']} pairs left over)" if result["left_out_pairs"] else ""),
             result["expected"], ""]
    for tally in result["verdicts"].values():
        counts = {k: v for k, v in tally.items() if k != "metric"}
        lines.append(f"  {tally['metric']}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items(),
                                                                                        key=lambda kv: -kv[1])))
    return "\n".join(lines)
