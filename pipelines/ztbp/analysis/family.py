"""The verdicts of a loop's A/B effects (analysis/compare.ab_effects) judged as one family, so that a reader can
trust them: the device's measures — read IOPS, fio's p50 and p99, the device's read p50 of all, listed and other
zones, and its own hit ratio where it counts one — are controlled together by Holm (a device that changed nothing
gets a "faster" somewhere in about 5 % of the loops, not in one of four); a verdict the median of the pairs does
not share is undecided (one pair swings the mean); a device that never held the configuration gets no verdict; and
each measure says how many pairs its measured noise asks for (analysis/robust.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .params import COMPARE_POWER, COMPARE_TARGET_PCT, COMPARE_TARGET_PP
from .robust import MAX_PAIRS, holm, min_pairs, pairs_needed


def effect_line(e: Mapping[str, Any], extra: str = "") -> str:
    """An effect in one sentence: the change, its interval, on what, and the verdict."""
    u = f" {e['change_unit']}" if e["change_unit"] else ""
    return (f"{e['metric']} {e['change']:+.1f}{u} [{e['ci'][0]:+.1f}, {e['ci'][1]:+.1f}] ({100 * e['ci_level']:g} % "
            f"CI, {e['basis']}{extra}): {e['verdict']}")


#: the device's measures when the device never held the configuration (every SET refused, e.g. QEMU's namespace)
NOT_HELD = "the device never held the configuration (every SET refused): both arms ran the same device"
#: a verdict the mean gives and the median of the pairs does not
UNDECIDED = "undecided: the median of the pairs is not on the mean's side (one pair swings it)"


def family_verdicts(effects: dict[str, Any], alpha: float, held: bool, plan: bool = True) -> dict[str, Any]:
    """The device's measures (Metric.family) judged as one family, in place: each effect's p-value adjusted by
    Holm (`p_holm`) and its verdict taken from that; a verdict the median of the pairs does not share (zero, or
    the other side of the mean) is UNDECIDED; none when the device never held the configuration (`held` False).
    With `plan`, each effect also gets the pairs a target change would need with the noise its pairs measured. The
    family: its measures, its size and the plan of the first of read IOPS and the device's p50."""
    keys = [k for k, e in effects.items() if e.get("family")]
    m = len(keys)
    for k, p in zip(keys, holm([effects[k]["p_value"] for k in keys]), strict=True):
        e = effects[k]
        words, up = e["words"], e["change"] > 0
        improved = None if p >= alpha else up == (e["better"] == "higher")
        if improved is not None and (e["median"] == 0 or (e["median"] > 0) != up):
            e["verdict"], improved = UNDECIDED, None
        else:
            e["verdict"] = words[2] if improved is None else words[0] if improved else words[1]
        if not held:
            e["verdict"], improved = f"no verdict: {NOT_HELD}", None
        e["improved"], e["p_holm"] = improved, p
        if plan:
            e["plan"] = _plan(e, alpha, alpha / m)
        e["line"] = effect_line(e, f"; Holm p {p:.2g} over {m} measure{'s' if m > 1 else ''}")
    first = next((k for k in ("read_iops", "device_p50", *keys) if k in keys), None)
    return {"measures": keys, "size": m, "alpha": alpha, "method": "Holm's step-down adjustment of the paired t "
            "tests' p-values", "plan": None if first is None or not plan else {"key": first, **effects[first]["plan"]}}


def _plan(e: Mapping[str, Any], alpha: float, level: float) -> dict[str, Any]:
    """The pairs a target change (10 % of a speed or latency, 1 point of a hit ratio) needs with 80 % power at
    `level`, from the standard deviation of this effect's pair differences, and at least the pairs a
    distribution-free interval at 1 - alpha needs."""
    log = e["scale"] == "log"
    change = math.log1p(COMPARE_TARGET_PCT / 100) if log else COMPARE_TARGET_PP
    n = pairs_needed(e["sd"], change, level, COMPARE_POWER)
    floor = min_pairs(alpha)
    many = f"more than {MAX_PAIRS:,}" if n is None else str(n)
    target = f"{COMPARE_TARGET_PCT:g} %" if log else f"{COMPARE_TARGET_PP:g} points"
    sd = f"{e['sd']:.3f} on the log scale" if log else f"{e['sd']:.2f} points"
    return {"target": target, "power": COMPARE_POWER, "level": level, "sd": e["sd"],
            "pairs": None if n is None else max(n, floor),
            "how": f"a change of {target} found with {100 * COMPARE_POWER:g} % power at {level:.2g} (Holm's first "
                   f"step), the pairs' differences varying by SD {sd}: {many} pairs by the paired t test's "
                   f"noncentral t, at least {floor} for a distribution-free interval"}
