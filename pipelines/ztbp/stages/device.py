"""The device studies of a run: zone resets and FAR, and conflict-group collisions with the dispatch what-if, one
call each on a loaded `Run`, shared by the CLI (`ztbp resets`, `ztbp conflicts`) and notebook 7. Nothing here
parses arguments or prints."""

from __future__ import annotations

from typing import Any

from ..io.run import Run
from ..units import check_limit


def zone_report(run: Run) -> dict[int, int] | None:
    """Each zone's write pointer (LBAs) from raw/zones.txt, the zone report taken as the workload started."""
    from ..analysis.resets import parse_zone_report

    text = run.zone_report_text()
    return None if text is None else parse_zone_report(text, run.zone_size_lba, run.lba_bytes)


def resets(run: Run, far: Any = None) -> dict[str, Any]:
    """Every zone reset of the run (analysis/resets.py) and the FAR what-if over its zone life cycles."""
    from ..analysis.device_params import FarParams
    from ..analysis.resets import far_replay, reset_table

    far = far or FarParams()
    far.check()
    report = zone_report(run)
    table, summary = reset_table(run.events, run.meta, report)
    what_if = far_replay(run.events, run.meta, far, report)
    return {"run": run.run_id, "summary": summary, "table": table, "far": what_if,
            "zone_report": report is not None}


def conflicts(run: Run, groups: dict[int, int], bin_s: float = 1.0, model: Any = None) -> dict[str, Any]:
    """Collisions of in-flight commands within a conflict group over time, and the group-aware dispatch what-if
    (analysis/dispatch.py) for a zone-to-group table."""
    from ..analysis.dispatch import DispatchModel, collision_table, dispatch_whatif

    model = model or DispatchModel()
    check_limit("bin-s", bin_s)
    model.check()
    per_bin, summary = collision_table(run.events, groups, bin_s)
    return {"run": run.run_id, "summary": summary, "per_bin": per_bin,
            "whatif": dispatch_whatif(run.events, groups, model)}
