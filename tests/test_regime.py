"""The regime sweep (`ztbp regime`) without a VM: the summary of synthetic loop documents with known answers, the
grid's parser and its errors, the builds it refuses, and a sweep's cells run, reused and resumed with the loop
replaced at control.regime.run_regime's boundary. The real sweep is measured in docs/metrics.md ("The regime")."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from loop_fixture import ab_blocks

from ztbp.acquire.vm import nvmevirt_build
from ztbp.acquire.workload import WorkloadOptions
from ztbp.analysis.compare import ab_effects
from ztbp.analysis.regime import regime_summary
from ztbp.cli import main as cli
from ztbp.contract import LOOP_FORMAT
from ztbp.control.loop import LoopRequest
from ztbp.control.regime import REGIME_FILE, RegimeError, RegimeRequest, run_regime
from ztbp.errors import ZtbpError
from ztbp.present.regime import closing_sentence, regime_text
from ztbp.units import parse_outstanding

RELEASE = "6.1.0-56-amd64"


def loop_doc(slow: int, jobs: int, iodepth: int, gain: float, share: float | None, *, reads: int = 20_000,
             pairs: int = 4, ab_reads: int = 3_000, complete: bool = True) -> dict[str, Any]:
    """loop.json of a finished A/B loop: read IOPS × (1 + gain) with the configuration on (listed zones' device p50
    ÷ (1 + gain)), and the emulator's modelled device time `share` of the measured one, configuration off."""
    model = None if share is None else {"off": {"all": {"mean_us": 10_000 * share, "measured_mean_us": 10_000.0}}}
    return {"format": LOOP_FORMAT, "complete": complete, "rounds": [{"round": 1, "run": "round-01"}],
            "workload": {"name": "paper80", "reads": reads, "jobs": jobs, "iodepth": iodepth},
            "emulator": {"read_service_model": {"profile": "zn540", "slow": slow}},
            "ab": {"pairs": pairs, "reads_per_block": ab_reads, "blocks": ab_blocks(gain, pairs),
                   "service_model": model}}


def cell(name: str, slow: int, jobs: int, iodepth: int, doc: dict[str, Any] | None,
         error: str | None = None) -> dict[str, Any]:
    return {"cell": name, "slow": slow, "jobs": jobs, "iodepth": iodepth, "loop": doc, "error": error}


# ---- the summary ---------------------------------------------------------------------------------------------
def test_a_device_bound_cell_shows_the_effect_and_a_cpu_bound_one_does_not() -> None:
    s = regime_summary([cell("slow10-4x1", 10, 4, 1, loop_doc(10, 4, 1, 0.5, 0.41)),
                        cell("slow1-36x4", 1, 36, 4, loop_doc(1, 36, 4, 0.0, 0.08))])
    dev, cpu = s["rows"]
    lo, hi = dev["read_iops"]["ci"]
    assert dev["read_iops"]["change"] == pytest.approx(50, abs=2) and 0 < lo < 50 < hi  # 50 % and a little noise
    assert dev["device_p50_listed"]["change"] == pytest.approx(-100 / 3, abs=1)
    assert (dev["outcome"], dev["verdict"], dev["regime_share"]) == ("appears", "faster", pytest.approx(0.41))
    lo, hi = cpu["read_iops"]["ci"]
    assert lo < 0 < hi and cpu["outcome"] == "vanishes" and cpu["verdict"] == "no difference within noise"
    assert s["groups"]["appears"] == ["slow10-4x1"] and s["groups"]["vanishes"] == ["slow1-36x4"]
    assert s["separated"] and s["shares"] == {"appears": [0.41, 0.41], "vanishes": [0.08, 0.08]}
    sentence = closing_sentence(s)
    assert "appears in slow10-4x1 (regime share 41%)" in sentence
    assert "vanishes in slow1-36x4 (regime share 8%)" in sentence and "device bounds the IOPS" in sentence


def test_the_table_has_a_row_per_cell_and_names_what_was_not_measured() -> None:
    s = regime_summary([cell("slow10-4x1", 10, 4, 1, loop_doc(10, 4, 1, 0.5, 0.41)),
                        cell("slow4-4x1", 4, 4, 1, None, "the guest reported status 1")])
    assert s["rows"][1]["outcome"] == "not measured"
    doc = {**s, "workload": "paper80", "reads": 20_000, "ab_pairs": 4, "ab_reads": 3_000,
           "cells": [{"cell": "slow10-4x1", "how": "reused"}, {"cell": "slow4-4x1", "how": "run in 3 s"},
                     {"cell": "slow1-4x1", "how": "not run"}]}
    text = regime_text(doc)
    assert "read IOPS off -> on, change [95 % CI]" in text and "regime share" in text
    row = next(line for line in text.splitlines() if line.startswith("slow10-4x1"))
    assert "1,005 -> 1,496, +48.9 % [+45.9, +51.9]" in row and "41%" in row and row.rstrip().endswith("faster")
    assert "the guest reported status 1" in text and "not run yet: slow1-4x1" in text
    assert "appears in every cell measured" in text and "Not measured: slow4-4x1." in text


def test_overlapping_shares_do_not_draw_the_line() -> None:
    s = regime_summary([cell("a", 10, 4, 1, loop_doc(10, 4, 1, 0.5, 0.1)),
                        cell("b", 1, 36, 4, loop_doc(1, 36, 4, 0.0, 0.3)),
                        cell("c", 1, 4, 1, loop_doc(1, 4, 1, 0.0, None))])
    assert not s["separated"] and s["rows"][2]["regime_share"] is None
    assert "overlap" in closing_sentence(s) and s["shares"]["vanishes"] == [0.3, 0.3]


# ---- the grid ------------------------------------------------------------------------------------------------
def test_outstanding_is_jobs_x_depth() -> None:
    assert parse_outstanding("4x1, 16X4,36x4") == ((4, 1), (16, 4), (36, 4))


@pytest.mark.parametrize(("text", "says"), [
    ("4", "give jobs x queue depth"), ("4x", "give jobs x queue depth"), ("x4", "give jobs x queue depth"),
    ("4*1", "give jobs x queue depth"), ("4x1,", "give jobs x queue depth"), ("1.5x2", "give jobs x queue depth"),
    ("0x1", "jobs 0 is out of range"), ("4x0", "queue depth 0 is out of range"),
    ("2000x1", "jobs 2000 is out of range"), ("4x1,4x1", "given twice"),
])
def test_a_malformed_grid_is_one_clear_error(text: str, says: str) -> None:
    with pytest.raises(ZtbpError, match=says):
        parse_outstanding(text)


def _ko(tmp: Path, folder: str) -> Path:
    ko = tmp / folder / "nvmev.ko"
    ko.parent.mkdir(parents=True, exist_ok=True)
    ko.write_bytes(b"\x7fELF")
    return ko


@pytest.mark.parametrize(("extra", "says"), [
    (["--outstanding", "4x1;36x4"], "cannot read --outstanding '4x1;36x4'"),
    (["--ab", "1"], "--ab 1: the sweep compares"),
    ([], "its build is unknown"),
])
def test_bad_input_is_one_line_and_a_non_zero_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   extra: list[str], says: str) -> None:
    ko = _ko(tmp_path, "my-build")  # not build.sh's folder: its --slow is unknown
    if extra:
        ko = _ko(tmp_path, f"{RELEASE}-zn540-slow10")
    rc = cli(["regime", "--nvmevirt-ko", str(ko), "-o", str(tmp_path / "sweep"), *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and says in err and "Traceback" not in err
    assert not (tmp_path / "sweep").exists()


def test_builds_are_one_per_slow_and_must_exist(tmp_path: Path) -> None:
    a, b = _ko(tmp_path / "a", f"{RELEASE}-zn540-slow4"), _ko(tmp_path / "b", f"{RELEASE}-zn540-slow4")
    with pytest.raises(RegimeError, match="both builds of --slow 4"):
        run_regime(RegimeRequest(kos=(a, b), outstanding=((4, 1),), out=tmp_path / "o"), run=_no_loop)
    with pytest.raises(RegimeError, match="no such file"):
        run_regime(RegimeRequest(kos=(tmp_path / "none.ko",), outstanding=((4, 1),), out=tmp_path / "o"),
                   run=_no_loop)
    with pytest.raises(RegimeError, match="give the NVMeVirt builds"):
        run_regime(RegimeRequest(kos=(), outstanding=((4, 1),), out=tmp_path / "o"), run=_no_loop)


# ---- running, reusing, resuming ------------------------------------------------------------------------------
def _no_loop(req: LoopRequest) -> dict[str, Any]:
    raise AssertionError(f"no loop should run, asked for {req.out}")


class FakeLoop:
    """control.loop.run_loop's stand-in: writes the finished loop.json a real loop would (--slow from the build's
    folder, the effect `gains[slow]`), and records each request."""

    def __init__(self, gains: dict[int, float]) -> None:
        self.gains = gains
        self.asked: list[LoopRequest] = []

    def __call__(self, req: LoopRequest) -> dict[str, Any]:
        self.asked.append(req)
        assert req.nvmevirt_ko is not None and req.out is not None
        build = nvmevirt_build(req.nvmevirt_ko)
        assert build is not None
        slow = build[1]
        wl = req.workload
        doc = loop_doc(slow, wl.jobs, wl.iodepth, self.gains[slow], 0.4 if self.gains[slow] else 0.08,
                       reads=wl.reads, pairs=req.ab_pairs, ab_reads=req.ab_reads)
        Path(req.out).mkdir(parents=True)
        (Path(req.out) / "loop.json").write_text(json.dumps(doc))
        return doc


def _request(tmp: Path) -> RegimeRequest:
    kos = (_ko(tmp, f"{RELEASE}-zn540-slow10"), _ko(tmp, f"{RELEASE}-zn540"))
    return RegimeRequest(kos=kos, outstanding=((4, 1), (36, 4)), out=tmp / "sweep", ab_pairs=4, ab_reads=3_000,
                         workload=WorkloadOptions(reads=20_000))


def test_a_sweep_runs_each_cell_once_and_resumes(tmp_path: Path) -> None:
    req = _request(tmp_path)
    done = loop_doc(10, 4, 1, 0.5, 0.41)  # slow10-4x1 finished before, with the same settings: reused
    (req.out / "slow10-4x1").mkdir(parents=True)
    (req.out / "slow10-4x1" / "loop.json").write_text(json.dumps(done))
    (req.out / "slow1-4x1").mkdir()
    (req.out / "slow1-4x1" / "loop.json").write_text(json.dumps(loop_doc(1, 4, 1, 0.0, 0.1, complete=False)))
    fake = FakeLoop({10: 0.5, 1: 0.0})
    said: list[str] = []
    doc = run_regime(req, run=fake, say=said.append)
    assert [Path(r.out).name for r in fake.asked] == ["slow10-36x4", "slow1-4x1", "slow1-36x4"]
    assert [(r.workload.jobs, r.workload.iodepth, r.ab_pairs, r.ab_reads) for r in fake.asked] == [
        (36, 4, 4, 3_000), (4, 1, 4, 3_000), (36, 4, 4, 3_000)]
    assert any("reused" in s for s in said) and any("half done moved" in s for s in said)
    assert len(list(req.out.glob("slow1-4x1.partial-*"))) == 1  # the half-done loop is kept aside
    saved = json.loads((req.out / REGIME_FILE).read_text())
    assert saved["complete"] and [c["how"] for c in saved["cells"]][0] == "reused"
    assert saved["groups"]["appears"] == ["slow10-4x1", "slow10-36x4"] == doc["groups"]["appears"]
    assert saved["groups"]["vanishes"] == ["slow1-4x1", "slow1-36x4"] and saved["separated"]
    again = run_regime(req, run=_no_loop, say=said.append)  # every cell is finished now: nothing runs
    assert [c["how"] for c in again["cells"]] == ["reused", "reused (run in 0 s)", "reused (run in 0 s)",
                                                 "reused (run in 0 s)"] and again["rows"] == doc["rows"]
    assert [c["seconds"] for c in again["cells"]] == [None, 0, 0, 0]
    more = replace(req, kos=(*req.kos, _ko(tmp_path, f"{RELEASE}-zn540-slow4")), run_cells=False)
    summary = run_regime(more, run=_no_loop, say=said.append)  # --summary: a new build's cells are not run
    assert [c["how"] for c in summary["cells"]][4:] == ["not run", "not run"] and not summary["complete"]
    assert "not run yet: slow4-4x1, slow4-36x4" in regime_text(summary)


def test_a_regime_json_without_seconds_reuses_its_cells_untimed(tmp_path: Path) -> None:
    req = _request(tmp_path)
    run_regime(req, run=FakeLoop({10: 0.5, 1: 0.0}), say=lambda s: None)
    saved = json.loads((req.out / REGIME_FILE).read_text())
    for c in saved["cells"]:
        del c["seconds"]  # as a sweep written before the cells kept their time as a number
    (req.out / REGIME_FILE).write_text(json.dumps(saved))
    again = run_regime(req, run=_no_loop, say=lambda s: None)
    assert [c["how"] for c in again["cells"]] == ["reused"] * 4 and [c["seconds"] for c in again["cells"]] == [None] * 4


@pytest.mark.parametrize("bad", [True, -5, 1.5, 1e300, float("nan"), "12", None, [3]])
def test_a_tampered_cell_time_is_read_as_untimed(tmp_path: Path, bad: object) -> None:
    req = _request(tmp_path)
    run_regime(req, run=FakeLoop({10: 0.5, 1: 0.0}), say=lambda s: None)
    saved = json.loads((req.out / REGIME_FILE).read_text())
    for c in saved["cells"]:
        c["seconds"] = bad
    (req.out / REGIME_FILE).write_text(json.dumps(saved, indent=1))
    said: list[str] = []
    again = run_regime(req, run=_no_loop, say=said.append)
    assert [c["how"] for c in again["cells"]] == ["reused"] * 4 and [c["seconds"] for c in again["cells"]] == [None] * 4
    if bad is not None:  # None is a cell not run: untimed, nothing to say
        line = next(s for s in said if "not read" in s)
        assert line.startswith(f"4 cell record(s) of the earlier {REGIME_FILE} not read")
        assert "'cells[0].seconds'" in line


def test_a_finished_cell_of_other_settings_stops_the_sweep_before_any_boot(tmp_path: Path) -> None:
    req = _request(tmp_path)
    (req.out / "slow1-36x4").mkdir(parents=True)
    (req.out / "slow1-36x4" / "loop.json").write_text(json.dumps(loop_doc(1, 36, 4, 0.0, 0.1, ab_reads=20_000)))
    with pytest.raises(RegimeError, match=r"slow1-36x4 holds a finished loop of other settings: reads_per_block "
                                          r"20000 \(asked 3000\)"):
        run_regime(req, run=_no_loop)


def test_a_failed_cell_is_not_measured_and_the_sweep_goes_on(tmp_path: Path) -> None:
    req = _request(tmp_path)
    fake = FakeLoop({10: 0.5, 1: 0.0})

    def flaky(r: LoopRequest) -> dict[str, Any]:
        if Path(r.out or "").name == "slow10-36x4":
            raise ZtbpError("the guest reported status 1")
        return fake(r)

    doc = run_regime(req, run=flaky, say=lambda s: None)
    assert doc["groups"]["not measured"] == ["slow10-36x4"] and len(fake.asked) == 3
    assert "Not measured: slow10-36x4." in regime_text(doc)


def test_a_loop_that_recommended_nothing_is_not_measured_with_its_reason(tmp_path: Path) -> None:
    req = _request(tmp_path)
    fake = FakeLoop({10: 0.5, 1: 0.0})
    stopped = "nothing recommended: zone-LRU gains +0.0009 hit ratio over LRU"

    def plain(r: LoopRequest) -> dict[str, Any]:
        doc = fake(r)
        return {**doc, "ab": None, "stopped": stopped} if Path(r.out or "").name == "slow1-4x1" else doc

    doc = run_regime(req, run=plain, say=lambda s: None)
    row = next(r for r in doc["rows"] if r["cell"] == "slow1-4x1")
    assert row["outcome"] == "not measured" and row["error"] == f"no A/B effects (the loop stopped: {stopped})"


# ---- a cell's loop.json tampered: its verdict is computed, never read back -----------------------------------------
NAN_EFFECT = {"mean_a": float("nan"), "mean_b": float("nan"), "change": float("nan"), "change_unit": "%",
              "ci": [float("nan"), float("nan")], "verdict": "faster", "improved": True}
CONTRADICTED = {**NAN_EFFECT, "mean_a": 1000.0, "mean_b": 500.0, "change": -50.0, "ci": [-90.0, -10.0]}


@pytest.mark.parametrize(("stored", "gain", "outcome"), [
    ({"effects": {"read_iops": NAN_EFFECT}, "verdict": {"verdict": "faster"}}, 0.0, "vanishes"),
    ({"effects": {"read_iops": CONTRADICTED}, "verdict": {"verdict": "faster"}}, 0.0, "vanishes"),
    ({"effects": {"read_iops": CONTRADICTED}, "verdict": {"verdict": "slower"}}, 0.5, "appears"),
    ({"effects": {"read_iops": "faster"}, "verdict": "appears"}, 0.0, "vanishes"),
    ("faster", 0.5, "appears"),
], ids=["nan-effects-said-faster", "minus-50-said-faster", "a-gain-said-slower", "effects-strings",
        "effects-a-string"])
def test_a_reused_cell_s_stored_verdict_is_never_printed(tmp_path: Path, stored: Any, gain: float,
                                                         outcome: str) -> None:
    req = replace(_request(tmp_path), run_cells=False)
    doc = loop_doc(10, 4, 1, gain, 0.4)
    doc["ab"]["effects"] = stored
    (req.out / "slow10-4x1").mkdir(parents=True)
    (req.out / "slow10-4x1" / "loop.json").write_text(json.dumps(doc))
    summary = run_regime(req, run=_no_loop, say=lambda s: None)
    row = summary["rows"][0]
    truth = ab_effects(doc["ab"]["blocks"])
    assert row["outcome"] == outcome and row["verdict"] == truth["verdict"]["verdict"]
    assert row["read_iops"]["change"] == truth["effects"]["read_iops"]["change"]
    text = regime_text(summary)
    assert "-50.0 %" not in text and "nan" not in text


def test_a_cell_whose_blocks_are_tampered_is_said_and_not_reused(tmp_path: Path) -> None:
    req = replace(_request(tmp_path), run_cells=False)
    doc = loop_doc(10, 4, 1, 0.5, 0.4)
    doc["ab"]["blocks"][2]["fio"]["read_iops"] = float("nan")
    (req.out / "slow10-4x1").mkdir(parents=True)
    (req.out / "slow10-4x1" / "loop.json").write_text(json.dumps(doc, indent=1))
    said: list[str] = []
    summary = run_regime(req, run=_no_loop, say=said.append)
    line = next(s for s in said if s.startswith("cell slow10-4x1: "))
    assert "loop.json:" in line and "'ab.blocks[2].fio.read_iops' is nan, not a finite number" in line
    assert summary["rows"] == [] and [c["how"] for c in summary["cells"]][0] == "not run"
