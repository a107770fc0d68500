"""What `ztbp regime` prints (analysis/regime.py): one row per cell of the sweep — its --slow and outstanding I/O,
the configuration's effect on read IOPS and on the device p50 of the listed zones with their 95 % intervals, the
regime share — and a closing sentence saying where the effect appears and where it vanishes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..analysis.regime import APPEARS, NOT_MEASURED, OPPOSITE, VANISHES
from .compare import aligned

_HEAD = ["cell", "slow", "jobs x QD", "read IOPS off -> on, change [95 % CI]", "device p50 listed, change [95 % CI]",
         "regime share", "verdict"]


def _change(e: Mapping[str, Any] | None) -> str:
    if not e:
        return "not measured"
    lo, hi = e["ci"]
    return f"{e['change']:+.1f} % [{lo:+.1f}, {hi:+.1f}]"


def _iops(e: Mapping[str, Any] | None) -> str:
    return f"{e['off']:,.0f} -> {e['on']:,.0f}, {_change(e)}" if e else "not measured"


def _share(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def _row(r: Mapping[str, Any]) -> list[str]:
    head = [r["cell"], str(r["slow"]), f"{r['jobs']} x {r['iodepth']}"]
    if r["outcome"] == NOT_MEASURED:
        return [*head, "not measured", "", "", r.get("error") or ""]
    return [*head, _iops(r["read_iops"]), _change(r["device_p50_listed"]), _share(r["regime_share"]),
            r.get("verdict") or ""]


def _cells(names: Sequence[str], span: Sequence[float] | None) -> str:
    shares = "" if not span else (f" (regime share {span[0]:.0%})" if span[0] == span[1]
                                  else f" (regime share {span[0]:.0%}-{span[1]:.0%})")
    return ", ".join(names) + shares


def closing_sentence(summary: Mapping[str, Any]) -> str:
    """Where the configuration's effect on read IOPS appears and where it vanishes, with the regime shares."""
    g, shares = summary["groups"], summary["shares"]
    up, down = g[APPEARS], g[VANISHES]
    if up and down:
        text = (f"The configuration's effect on read IOPS appears in {_cells(up, shares[APPEARS])} and vanishes in "
                f"{_cells(down, shares[VANISHES])}")
        text += (": it shows only where the emulator's modelled device time is a large share of the measured one, "
                 "where the device bounds the IOPS; where queueing and the emulated CPU take the rest, they hide it."
                 if summary["separated"] else
                 "; the regime shares of the two groups overlap, so the share alone does not draw the line.")
    elif up:
        text = f"The configuration's effect on read IOPS appears in every cell measured: {_cells(up, shares[APPEARS])}."
    elif down:
        text = (f"The configuration's effect on read IOPS vanishes in every cell measured: "
                f"{_cells(down, shares[VANISHES])}.")
    else:
        text = "No cell measured an effect on read IOPS either way."
    if g[OPPOSITE]:
        text += f" Read IOPS fell with the configuration on in {', '.join(g[OPPOSITE])}."
    if g[NOT_MEASURED]:
        text += f" Not measured: {', '.join(g[NOT_MEASURED])}."
    return text


def regime_text(doc: Mapping[str, Any]) -> str:
    """The sweep's table and its closing sentence."""
    lines = [f"regime sweep: {doc['workload']}, {doc['reads']:,} reads in round 1, then {doc['ab_pairs']} pairs of A/B "
             f"blocks of {doc['ab_reads']:,} reads per cell; regime share = the emulator's modelled mean device time "
             "of a read / the measured one, configuration off", ""]
    lines += aligned(_HEAD, [_row(r) for r in doc["rows"]], left=(0, 2, 6))
    missing = [c["cell"] for c in doc.get("cells", []) if c["how"] == "not run"]
    if missing:
        lines += ["", f"not run yet: {', '.join(missing)}"]
    return "\n".join([*lines, "", closing_sentence(doc)])
