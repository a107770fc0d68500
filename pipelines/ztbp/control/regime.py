"""The regime sweep (`ztbp regime`): where does the device, not the emulated CPU, bound the IOPS?

The loop's A/B mode (control/loop.py) over a grid of cells: each NVMeVirt build given (one per --slow factor, read
from the folder name build.sh gives it) × each outstanding I/O (fio jobs × queue depth). Each cell is a loop
directory OUT/slow<N>-<jobs>x<depth>/, run one after the other (one VM at a time). A cell whose loop finished with
the same settings is reused, so an interrupted sweep resumes where it stopped; a cell left half done is moved aside
(OUT/<cell>.partial-<UTC time>) and run again. The summary (analysis/regime.py) goes to OUT/regime.json, written
whole after every cell.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import paths
from ..acquire.vm import nvmevirt_build, nvmevirt_module
from ..acquire.workload import WorkloadOptions
from ..analysis.params import AB_READS
from ..analysis.regime import cell_finished, cell_name, cell_settings, regime_summary
from ..contract import utc_now
from ..errors import ZtbpError
from ..files import make_dir, write_json
from ..io.loop import LOOP_FILE, LoopFileError, read_loop
from ..schema import Invalid, Maybe, Number, Record, Text, parse_json, refusal, shown
from ..units import LIMITS, Bound
from .loop import LoopRequest, run_loop

REGIME_FILE = "regime.json"
REGIME_FORMAT = "ztbp regime v1"


class RegimeError(ZtbpError):
    """The sweep cannot run as asked."""


@dataclass(frozen=True)
class RegimeRequest:
    """What `ztbp regime` was asked for: the builds (one per --slow), the outstanding I/O of each cell and the
    loop's A/B settings, the same in every cell."""

    kos: tuple[Path, ...]
    outstanding: tuple[tuple[int, int], ...]
    out: Path
    workload: WorkloadOptions = WorkloadOptions()
    ab_pairs: int = 3
    ab_reads: int = AB_READS
    timeout: int = 7200
    verbose: bool = False
    run_cells: bool = True  # False: summarise the cells finished in `out`, run none


@dataclass(frozen=True)
class Cell:
    """One cell of the grid: a build (its --slow) and an outstanding I/O; `loop` is its loop's request."""

    name: str
    slow: int
    profile: str
    loop: LoopRequest

    def expected(self) -> dict[str, Any]:
        """What the cell's loop.json must say to be reused (analysis/regime.cell_settings)."""
        wl = self.loop.workload
        return {"workload": wl.name, "reads": wl.reads, "jobs": wl.jobs, "iodepth": wl.iodepth,
                "pairs": self.loop.ab_pairs, "reads_per_block": self.loop.ab_reads, "profile": self.profile,
                "slow": self.slow}


def default_out(workload: str) -> Path:
    """runs/<UTC time>-regime-<workload>."""
    return paths.RUNS / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-regime-{workload}"


def _builds(kos: tuple[Path, ...]) -> list[tuple[Path, str, int]]:
    """(module, profile, --slow) of each build, checked: a file, a build whose folder names its --slow, one per
    --slow factor."""
    if not kos:
        raise RegimeError("give the NVMeVirt builds to sweep, one --nvmevirt-ko KO per --slow factor (build.sh ... "
                          "--slow N prints the module's path; see vm/README.md)")
    builds: list[tuple[Path, str, int]] = []
    for ko in kos:
        nvmevirt_module(ko, RegimeError)
        build = nvmevirt_build(ko)
        if build is None:
            raise RegimeError(f"--nvmevirt-ko {ko}: its build is unknown (the folder {ko.resolve().parent.name!r} is "
                              "not build.sh's <release>-<profile>[-slowN]); the sweep needs each build's --slow: "
                              "give the module in the folder build.sh made")
        twin = next((k for k, _, s in builds if s == build[1]), None)
        if twin is not None:
            raise RegimeError(f"--nvmevirt-ko {ko} and {twin} are both builds of --slow {build[1]}: give one build "
                              "per --slow factor")
        builds.append((ko, *build))
    return builds


def plan(req: RegimeRequest) -> list[Cell]:
    """The cells, builds in the order given, each build's outstanding I/O in the order given; every cell's loop
    request checked before anything boots."""
    if req.ab_pairs < 2:
        raise RegimeError(f"--ab {req.ab_pairs}: the sweep compares the configuration on and off in each cell; give "
                          "at least 2 pairs of blocks")
    if not req.outstanding:
        raise RegimeError("--outstanding: give at least one cell, e.g. 4x1,36x4")
    cells = []
    for ko, profile, slow in _builds(req.kos):
        for jobs, depth in req.outstanding:
            name = cell_name(slow, jobs, depth)
            loop = LoopRequest(workload=replace(req.workload, jobs=jobs, iodepth=depth), backend="nvmevirt",
                               nvmevirt_ko=ko, out=str(req.out / name), timeout=req.timeout, verbose=req.verbose,
                               ab_pairs=req.ab_pairs, ab_reads=req.ab_reads)
            loop.validate()
            cells.append(Cell(name, slow, profile, loop))
    return cells


def reusable(cell: Cell, root: Path, unread: list[str] | None = None) -> dict[str, Any] | None:
    """The cell's finished loop (loop.json's content) when `root` holds one of the same settings; None when there is
    nothing, a loop left half done or a loop.json that cannot be read or does not check (its one line appended to
    `unread`: the cell is run again, or, summary only, not shown); a RegimeError when it holds a finished loop of
    other settings (a sweep of other settings in the same folder)."""
    if not (root / LOOP_FILE).is_file():
        return None
    try:
        doc = read_loop(root)
    except LoopFileError as e:
        if unread is not None:
            unread.append(f"cell {cell.name}: {e}")
        return None
    if not cell_finished(doc):
        return None
    got, want = cell_settings(doc), cell.expected()
    if got != want:
        diff = ", ".join(f"{k} {got[k]} (asked {want[k]})" for k in want if got[k] != want[k])
        raise RegimeError(f"{root} holds a finished loop of other settings: {diff}; give another -o for a new sweep")
    return doc


def _set_aside(root: Path) -> Path | None:
    """A cell's folder left half done, renamed out of the way (kept: its console.log says what happened)."""
    if not root.exists() or not any(root.iterdir()):
        return None
    aside = root.with_name(f"{root.name}.partial-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    root.rename(aside)
    return aside


def _doc(req: RegimeRequest, cells: list[Cell], done: list[dict[str, Any]], runs: dict[str, str],
         seconds: dict[str, int]) -> dict[str, Any]:
    summary = regime_summary(done)
    return {"format": REGIME_FORMAT, "updated": utc_now(), "workload": req.workload.name,
            "reads": req.workload.reads, "ab_pairs": req.ab_pairs, "ab_reads": req.ab_reads,
            "cells": [{"cell": c.name, "slow": c.slow, "profile": c.profile, "jobs": c.loop.workload.jobs,
                       "iodepth": c.loop.workload.iodepth, "dir": c.loop.out, "how": runs.get(c.name, "not run"),
                       "seconds": seconds.get(c.name)}
                      for c in cells],
            "complete": len(done) == len(cells), **summary}


#: A cell's run time read back from regime.json: whole seconds, at most one loop's longest --timeout.
CELL_SECONDS = Bound(0, LIMITS["timeout"].hi, integer=True)


#: One cell of an earlier regime.json as _doc writes it: its name and the seconds its loop took (None: not run).
CELL_RECORD = Record({"cell": Text()}, {"seconds": Maybe(Number(CELL_SECONDS))})


def _earlier_runs(path: Path) -> tuple[dict[str, int], list[str]]:
    """How many seconds each cell's loop took when an earlier sweep in the same folder ran it, from its
    regime.json's `seconds`, and a line for each cell record that could not be read (its cell counts as not timed:
    a time that is not a whole number of seconds in CELL_SECONDS, a record that is not one). A regime.json that is
    missing gives nothing; one that cannot be read at all, one line."""
    if not path.exists():
        return {}, []
    try:
        doc, text = parse_json(path)
    except ZtbpError as e:
        return {}, [str(e)]
    cells = doc.get("cells") if isinstance(doc, dict) else None
    if not isinstance(cells, list):
        return {}, [f"{path}: 'cells' must be a list, found {shown(cells)}"]
    out: dict[str, int] = {}
    bad: list[str] = []
    for i, c in enumerate(cells):
        try:
            rec = CELL_RECORD.check(c, ("cells", i))
        except Invalid as e:
            bad.append(refusal(path, e, text))
            continue
        if rec.get("seconds") is not None:
            out[rec["cell"]] = rec["seconds"]
    return out, bad


def run_regime(req: RegimeRequest, run: Callable[[LoopRequest], dict[str, Any]] = run_loop,
               say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or reuse) every cell in turn, then the summary; regime.json is rewritten after each cell. `run` is the
    loop (control.loop.run_loop; a test passes its own)."""
    cells = plan(req)
    make_dir(req.out)
    bad_cells: list[str] = []
    found = {c.name: reusable(c, req.out / c.name, bad_cells) for c in cells}  # other settings: stop before a boot
    for line in bad_cells:
        say(f"{line} (not reused)")
    before, unread = _earlier_runs(req.out / REGIME_FILE)
    if unread:
        say(f"{len(unread)} cell record(s) of the earlier {REGIME_FILE} not read, their cells untimed: {unread[0]}")
    done: list[dict[str, Any]] = []
    how: dict[str, str] = {}
    seconds: dict[str, int] = {}
    for i, c in enumerate(cells, start=1):
        root = req.out / c.name
        base = {"cell": c.name, "slow": c.slow, "jobs": c.loop.workload.jobs, "iodepth": c.loop.workload.iodepth}
        doc = found[c.name]
        if doc is not None:
            say(f"cell {i}/{len(cells)} {c.name}: reused (its loop finished with the same settings)")
            if c.name in before:
                seconds[c.name] = before[c.name]
            how[c.name] = f"reused (run in {before[c.name]} s)" if c.name in before else "reused"
            done.append({**base, "loop": doc})
        elif not req.run_cells:
            say(f"cell {i}/{len(cells)} {c.name}: not finished, not run (summary only)")
        else:
            aside = _set_aside(root)
            if aside is not None:
                say(f"cell {i}/{len(cells)} {c.name}: a loop left half done moved to {aside.name}")
            say(f"cell {i}/{len(cells)} {c.name}: --slow {c.slow}, {c.loop.workload.jobs} jobs x QD "
                f"{c.loop.workload.iodepth} -> {root}")
            t0 = time.monotonic()
            try:
                doc = run(c.loop)
            except ZtbpError as e:
                doc, error = None, str(e)
            else:
                error = None if cell_finished(doc) else f"no A/B effects (the loop stopped: {doc.get('stopped')})"
            seconds[c.name] = round(time.monotonic() - t0)
            how[c.name] = f"run in {seconds[c.name]} s"
            done.append({**base, "loop": doc if error is None else None, "error": error})
            if doc is not None and doc.get("interrupted"):
                write_json(req.out / REGIME_FILE, _doc(req, cells, done, how, seconds))
                raise RegimeError(f"interrupted in cell {c.name}; run the same command again to resume", code=130)
        write_json(req.out / REGIME_FILE, _doc(req, cells, done, how, seconds))
    out = _doc(req, cells, done, how, seconds)
    out["dir"] = str(req.out)
    return out
