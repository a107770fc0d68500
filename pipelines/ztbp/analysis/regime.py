"""The regime sweep's summary (`ztbp regime`): which cells of NVMeVirt's --slow factor × outstanding I/O (fio jobs ×
queue depth) show the configuration's effect on read IOPS, and how much of the measured device time the emulator's
own read model accounts for in each (the regime share: modelled / measured mean device time of a read with the
configuration off; near 1 the device bounds the run, near 0 queueing and the emulated CPU do).

Pure: each cell's loop.json content in (its A/B blocks, whose effects analysis/compare.py computes here again — a
verdict stored in the file is never read back —, and its `service_model` from the loop's replay of the emulator's
model), rows and the cells grouped by outcome out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import CompareError
from .compare import ab_effects

#: The outcome of a cell by its read IOPS verdict (analysis/compare.py: improved True, None, False).
APPEARS, VANISHES, OPPOSITE, NOT_MEASURED = "appears", "vanishes", "opposite", "not measured"
_OUTCOME = {True: APPEARS, None: VANISHES, False: OPPOSITE}


def cell_name(slow: int, jobs: int, iodepth: int) -> str:
    """The cell's folder under the sweep's output: slow10-4x1."""
    return f"slow{slow}-{jobs}x{iodepth}"


def cell_settings(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What a finished loop measured, in the terms a sweep asks a cell for (compared to reuse a cell)."""
    wl = doc.get("workload") or {}
    ab = doc.get("ab") or {}
    model = (doc.get("emulator") or {}).get("read_service_model") or {}
    return {"workload": wl.get("name"), "reads": wl.get("reads"), "jobs": wl.get("jobs"),
            "iodepth": wl.get("iodepth"), "pairs": ab.get("pairs"), "reads_per_block": ab.get("reads_per_block"),
            "profile": model.get("profile"), "slow": model.get("slow")}


def cell_effects(doc: Mapping[str, Any] | None) -> dict[str, Any]:
    """The A/B effects of a cell's loop, computed from its blocks (ab_effects); {"error": why} when there are none
    to compare (fewer than 2 complete pairs, a block without figures)."""
    blocks = ((doc or {}).get("ab") or {}).get("blocks")
    if not blocks:
        return {"error": "no A/B blocks in its loop.json"}
    try:
        res = ab_effects(blocks)
    except CompareError as e:
        return {"error": str(e)}
    return res if res["pairs"] >= 2 else {"error": f"{res['pairs']} complete pair(s) of A/B blocks: 2 are needed"}


def cell_finished(doc: Mapping[str, Any]) -> bool:
    """A loop that ended as asked with A/B blocks whose effects can be computed."""
    return bool(doc.get("complete")) and "error" not in cell_effects(doc)


def regime_share(ab: Mapping[str, Any]) -> float | None:
    """The emulator's modelled mean device time of a read over the measured one, configuration off (None: no
    model, e.g. a build whose --slow is unknown, or nothing measured)."""
    off = ((ab.get("service_model") or {}).get("off") or {}).get("all") or {}
    model, measured = off.get("mean_us"), off.get("measured_mean_us")
    return model / measured if model is not None and measured else None


def _effect(effects: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    e = effects.get(key)
    if not isinstance(e, Mapping):
        return None
    return {"off": e["mean_a"], "on": e["mean_b"], "change": e["change"], "unit": e["change_unit"],
            "ci": list(e["ci"]), "verdict": e["verdict"], "improved": e["improved"]}


def cell_row(cell: Mapping[str, Any]) -> dict[str, Any]:
    """One row of the table: `cell` has name, slow, jobs, iodepth and `loop` (loop.json's content, None when the
    cell did not finish) or `error` (why)."""
    row: dict[str, Any] = {k: cell.get(k) for k in ("cell", "slow", "jobs", "iodepth")}
    doc = cell.get("loop")
    res = cell_effects(doc)
    if not doc or "error" in res:
        return {**row, "outcome": NOT_MEASURED, "error": cell.get("error") or res["error"]}
    effects = res["effects"]
    iops = _effect(effects, "read_iops")
    ab = doc["ab"]
    return {**row, "pairs": ab.get("pairs"), "reads_per_block": ab.get("reads_per_block"),
            "read_iops": iops, "device_p50_listed": _effect(effects, "device_p50_listed"),
            "regime_share": regime_share(ab), "verdict": res["verdict"]["verdict"],
            "outcome": _OUTCOME[iops["improved"]] if iops else NOT_MEASURED}


def _span(values: Sequence[float | None]) -> list[float] | None:
    got = [v for v in values if v is not None]
    return [min(got), max(got)] if got else None


def regime_summary(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The table's rows (cell_row) and the cells grouped by outcome, each group with the span of its regime shares;
    `separated`: every cell where the effect appears has a larger share than every cell where it vanishes (the
    share then draws the line between the regimes)."""
    rows = [cell_row(c) for c in cells]
    groups = {o: [r["cell"] for r in rows if r["outcome"] == o] for o in (APPEARS, VANISHES, OPPOSITE, NOT_MEASURED)}
    spans = {o: _span([r.get("regime_share") for r in rows if r["outcome"] == o]) for o in (APPEARS, VANISHES)}
    up, down = spans[APPEARS], spans[VANISHES]
    return {"rows": rows, "groups": groups, "shares": spans,
            "separated": bool(up and down and down[1] < up[0])}
