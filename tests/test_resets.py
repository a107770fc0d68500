"""Zone resets of a trace (write pointer, fullness, free space, latency, time since full) and the FAR what-if
against eager runtime reset, on hand-built zone life cycles with known answers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import make_run
from ztbp.analysis.device_params import FarParams
from ztbp.analysis.resets import far_replay, life_cycles, parse_zone_report, reset_cost_note, reset_table
from ztbp.cli import main

META = {"nr_zones": 4, "zone_size_lba": 100, "zone_cap_lba": 100, "lba_bytes": 1, "backend": "qemu"}


class Trace:
    """Builds an events frame command by command, 1 µs apart, in submission order."""

    def __init__(self, zone_lba: int = 100) -> None:
        self.rows: list[dict[str, Any]] = []
        self.zone_lba = zone_lba

    def add(self, op: str, zone: int, off: int = 0, nlb: int = 0, action: str = "", lat: int = 10,
            status: int = 0, gap: int = 1000) -> Trace:
        ts = (self.rows[-1]["ts_ns"] if self.rows else 0) + gap
        slba = zone * self.zone_lba + off
        self.rows.append({"ts_ns": ts, "lat_ns": lat, "op": op, "slba": slba, "nlb": nlb, "zone_action": action,
                          "status": status, "zone": zone})
        return self

    def write(self, zone: int, off: int, nlb: int, **kw: Any) -> Trace:
        return self.add("write", zone, off, nlb, **kw)

    def reset(self, zone: int, **kw: Any) -> Trace:
        return self.add("zone_mgmt_send", zone, action="reset", **kw)

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.rows)


def cycles(n: int, fill: int, zone: int = 0) -> Trace:
    """n life cycles of one zone: write `fill` LBAs in two halves, then reset."""
    t = Trace()
    for _ in range(n):
        t.write(zone, 0, fill // 2).write(zone, fill // 2, fill - fill // 2).reset(zone)
    return t


def test_far_threshold_is_the_zone_end_above_t_and_linear_below() -> None:
    p = FarParams()
    assert p.threshold(0.9) == 1.0 and p.threshold(0.71) == 1.0
    assert p.threshold(0.7) == pytest.approx(1.0)  # continuous at T
    assert p.threshold(0.35) == pytest.approx(0.5)
    assert p.threshold(0.0) == 0.0
    q = FarParams(t=0.5, slope=1.0, intercept=0.2)
    assert q.threshold(0.6) == 1.0 and q.threshold(0.3) == pytest.approx(0.5)


def test_reset_table_reads_write_pointers_fullness_and_free_space() -> None:
    t = (Trace().write(0, 0, 40).write(1, 0, 100).add("zone_append", 2, 0, 30, lat=500)
         .reset(0, lat=7000).reset(1).reset(2).reset(3))
    table, s = reset_table(t.frame(), META)
    assert table["zone"].to_list() == [0, 1, 2, 3]
    assert table["wp_lba"].to_list() == [40, 100, None, None]  # zone 2: first command an append; zone 3 untouched
    assert table["fullness"].to_list()[:2] == [0.4, 1.0]
    # free share before each reset: 170 of 400 LBAs written, then 130, then 30 (zone 2's append counts)
    assert table["free_share"].to_list() == pytest.approx([230 / 400, 270 / 400, 370 / 400, 1.0])
    assert table["lat_us"][0] == 7.0
    assert table["since_full_s"][1] == pytest.approx((5000 - 2010) / 1e9)  # zone 1 filled at 2000 + 10 ns
    assert table["wp_from"].to_list() == ["trace", "trace", "unknown", "unknown"]
    assert s["resets"] == 4 and s["partial_resets"] == 1 and s["full_resets"] == 1 and s["unknown_wp_resets"] == 2
    assert s["resets_per_s"] == pytest.approx(4 / 6e-6)
    assert "hole" in s["latency_means"]


def test_the_zone_report_gives_zones_the_trace_does_not_write_and_first_writes_their_offset() -> None:
    report = parse_zone_report(
        "  start: 0x000000000, len 0x000064, cap 0x000064, wptr 0x000064 reset:0 non-seq:0, zcond:14(fu)\n"
        "  start: 0x000000064, len 0x000064, cap 0x000064, wptr 0x000032 reset:0 non-seq:0, zcond: 2(oi)\n"
        "  start: 0x0000000c8, len 0x000064, cap 0x000064, wptr 0x000000 reset:0 non-seq:0, zcond: 1(em)\n",
        zone_size_lba=100, lba_bytes=512)
    assert report == {0: 100, 1: 50, 2: 0}
    t = Trace().write(2, 20, 10).reset(2).reset(1).reset(0).write(0, 0, 5).reset(0)
    table, _ = reset_table(t.frame(), META, report)
    # zone 2 from its first write at offset 20; zone 1 is reset before it is written, and the report (taken when
    # the workload started) may come before or after that reset: unknown; zone 0 likewise, then known again
    assert table["wp_lba"].to_list() == [30, None, None, 5]
    assert table["wp_from"].to_list() == ["trace", "unknown", "unknown", "trace"]
    # zones 0 and 1 count as empty in the free space (unknown), zone 3 from the report
    assert table["free_share"][0] == pytest.approx(1 - 30 / 400)
    untouched, _ = reset_table(Trace().write(2, 0, 10).reset(2).frame(), META, report)
    assert untouched["free_share"][0] == pytest.approx(1 - (100 + 50 + 10) / 400)


def test_zone_report_in_4k_blocks() -> None:
    rep = parse_zone_report("start: 0x000010000, len 0x010000, cap 0x010000, wptr 0x000800 reset:0",
                            zone_size_lba=8192, lba_bytes=4096)
    assert rep == {1: 256}  # blkzone counts 512-byte sectors


def test_reset_all_and_failed_commands() -> None:
    t = Trace().write(0, 0, 10).write(1, 0, 20).add("zone_mgmt_send", 0, action="reset_all")
    t.reset(3, status=0x1B9)
    table, s = reset_table(t.frame(), META)
    assert table["zone"].to_list() == [0, 1, 2, 3] and table["all"].all()
    assert table["wp_lba"].to_list()[:2] == [10, 20]
    assert s["skipped"]["failed"] == 1


def test_partial_life_cycles_far_halves_the_erases() -> None:
    # 4 cycles writing half a zone each: eager erases 4 times; FAR (free 0.875 > T) keeps the half-written zone,
    # the next cycle fills it, and it is erased full: 2 erases, twice the data per erase.
    res = far_replay(cycles(4, 50).frame(), META)
    assert res["traced_resets"] == 4 and res["life_cycles"] == 4
    assert res["eager"]["resets"] == 4 and res["far"]["resets"] == 2
    assert res["erases_saved"] == 2 and res["lifetime_gain"] == pytest.approx(2.0)
    assert res["far"]["deferred"] == 2 and res["far"]["zones_deferred"] == 1
    assert res["eager"]["written_bytes"] == res["far"]["written_bytes"] == 200
    assert res["eager"]["out_of_space_mib"] == res["far"]["out_of_space_mib"] == 0


def test_full_life_cycles_leave_far_nothing_to_save() -> None:
    res = far_replay(cycles(3, 100).frame(), META)
    assert res["eager"]["resets"] == res["far"]["resets"] == 3
    assert res["erases_saved"] == 0 and res["far"]["deferred"] == 0


def test_low_free_space_makes_far_reset_partly_written_zones() -> None:
    # two zones hold 100 LBAs each that are never invalidated; a cycle of 60 LBAs brings the free share to
    # 1 - 260 / 400 = 0.35 < T, so T_wp = 0.35 / 0.7 = 50 % of the zone: the 60 % written zone is reset at once.
    t = Trace().write(3, 0, 100).write(2, 0, 100)
    for _ in range(3):
        t.write(0, 0, 60).reset(0)
    res = far_replay(t.frame(), META)
    assert res["eager"]["resets"] == res["far"]["resets"] == 3
    assert res["far"]["deferred"] == 0
    # a higher T only changes the threshold's start, a steeper line keeps deferring
    lazy = far_replay(t.frame(), META, FarParams(t=0.2, slope=0.0, intercept=1.0))
    assert lazy["far"]["resets"] < 3


def test_free_space_series_of_both_policies() -> None:
    res = far_replay(cycles(4, 50).frame(), META)
    eager = res["eager"]["free_series"]
    far = res["far"]["free_series"]
    assert eager and far and eager[-1][0] == far[-1][0]
    assert min(f for _, f in far) <= min(f for _, f in eager)  # FAR keeps written-but-invalid space longer
    assert all(0 <= f <= 1 for _, f in eager + far)


def test_life_cycles_split_at_each_reset() -> None:
    w, i, initial = life_cycles(cycles(2, 40, zone=1).frame(), META)
    assert w["cycle"].unique().sort().to_list() == [1_000_000, 1_000_001]
    assert w["bytes"].sum() == 80 and i.height == 2 and initial == {}


def test_every_backend_says_what_its_reset_latency_is() -> None:
    assert "memory" in reset_cost_note("nvmevirt") and "hole" in reset_cost_note("qemu")
    assert "unknown" in reset_cost_note("floppy")


def test_resets_command_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zone = 8192
    reqs = [("write", 0, 1024), ("write", 1024, 1024), ("zone_mgmt_send", 0, 0, 1000, 1, "reset"),
            ("write", zone, zone), ("zone_mgmt_send", zone, 0, 5000, 1, "reset")]
    run = make_run(tmp_path / "r", reqs, backend="nvmevirt", nr_zones=4)
    assert main(["resets", str(run)]) == 0
    text = capsys.readouterr().out
    assert "2 zone resets" in text and "memory" in text and "erases saved by FAR" in text
    assert "cannot see which data is invalid" in text
    assert main(["resets", str(run), "--json", "--far-t", "0.5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["fullness"] for r in out["resets"]] == [0.25, 1.0]
    assert out["far"]["params"]["t"] == 0.5 and out["far"]["params"]["slope"] == pytest.approx(2.0)
    assert not math.isnan(out["summary"]["resets_per_s"])
    assert main(["resets", str(run), "--far-t", "1.5"]) == 2
    assert "--far-t" in capsys.readouterr().err


def test_reset_figures() -> None:
    from ztbp.present.device_study import far_free_space, reset_timeline
    from ztbp.present.figures import Note

    t = cycles(3, 50)
    table, _ = reset_table(t.frame(), META)
    fig = reset_timeline(table)
    assert list(fig.data[0].y) == [0, 0, 0] and list(fig.data[0].marker.color) == [0.5, 0.5, 0.5]
    far = far_replay(t.frame(), META)
    fig = far_free_space(far)
    assert [d.name for d in fig.data] == ["eager runtime reset", "FAR (T = 0.7)"]
    assert isinstance(reset_timeline(table.head(0)), Note)
    assert isinstance(far_free_space(far_replay(Trace().reset(0).frame(), META)), Note)


def test_zone_cycling_workload_job() -> None:
    from ztbp.acquire.workload import Workload

    wl = Workload(name="zonecycle", region_bytes=128 << 20, nr_zones=16)
    job = wl.fio_job()
    for opt in ("rw=randwrite", "zonemode=zbd", "bs=64k", "max_open_zones=4", "zone_reset_threshold=0.4",
                "zone_reset_frequency=0.05", f"size={128 << 20}", f"io_size={3 * (128 << 20)}"):
        assert opt in job.splitlines(), opt
    assert wl.writes == 6144 and wl.total_reads == 0
    assert wl.prefill_job() is None and wl.reset_zones == range(0, 4)
    assert wl.meta()["kind"] == "zonecycle"
