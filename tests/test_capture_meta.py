"""How a capture turns the guest's report (guest.env, fio JSON, nvme.csv) into meta.json, and its progress lines.

The files here are written in the formats vm/guest/capture.sh and fio produce; the real path is in test_vm_capture.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ztbp.acquire.capture import Progress, finish_meta, summary_line
from ztbp.acquire.workload import Workload
from ztbp.contract import NVME_COLUMNS, NVME_VERSION_LINE, new_meta, read_meta, write_meta
from ztbp.paths import RunPaths

GUEST_ENV = """kernel=6.1.0-56-amd64
bpftrace=bpftrace v0.17.0
fio=fio-3.33
device=nvme0n1
lba_bytes=512
zone_sectors=65536
nr_zones=32
zone_cap_sectors=49152
max_open_zones=14
max_active_zones=14
probe_attach_s=21
prefill_s=5
probe_setups=5
probe_completed=4
probe_rows=4
probe_perf_lost=0
lost_events_nvme=1
workload_s=1.5
status=complete
"""


def make_run(tmp_path: Path, status: str = "complete") -> RunPaths:
    run = RunPaths(tmp_path / "r")
    wl = Workload(name="paper80", reads=3, jobs=2, iodepth=1)
    meta = new_meta(device="nvme0n1", lba_bytes=4096, zone_size_lba=8192, zone_cap_lba=8192, nr_zones=64,
                    synthetic=False, workload=wl.meta(), backend="qemu")
    meta["complete"] = False
    write_meta(run, meta)
    (run.root / ".capture").mkdir()
    (run.root / ".capture" / "guest.env").write_text(GUEST_ENV.replace("status=complete", f"status={status}"))
    run.raw.mkdir()
    rows = ["10,5,0,1,3,1,121,zone_mgmt_send,0,0,reset,0", "20,5,0,1,4,1,2,read,8,1,,0",
            "30,5,0,2,4,1,2,read,65536,1,,0", "40,5,0,2,5,1,2,read,16,1,,0"]
    run.nvme_csv.write_text("\n".join([NVME_VERSION_LINE, ",".join(NVME_COLUMNS), *rows]) + "\n")
    fio = {"fio version": "fio-3.33", "jobs": [{"read": {"total_ios": 3, "iops": 2000.0, "runtime": 2,
                                                         "clat_ns": {"percentile": {"50.000000": 1000}}},
                                                "write": {"total_ios": 0, "iops": 0.0}, "error": 0}]}
    run.fio_json.write_text(json.dumps(fio))
    return run


def test_finish_meta_takes_the_guest_geometry_and_counts(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    meta = json.loads(run.meta.read_text())
    summ = finish_meta(run, meta, 0, False, time.monotonic(), {"qemu": "QEMU 7.2"})
    m = read_meta(run)
    assert (m["lba_bytes"], m["zone_size_lba"], m["zone_cap_lba"], m["nr_zones"]) == (512, 65536, 49152, 32)
    assert m["zone_limits"] == {"max_open": 14, "max_active": 14}
    assert m["lost_events"] == {"nvme": 1}
    assert m["probe_stats"]["setups"] == 5 and m["probe_stats"]["rows"] == 4
    assert m["versions"]["bpftrace"] == "bpftrace v0.17.0" and m["versions"]["qemu"] == "QEMU 7.2"
    assert m["commands"] == {"zone_mgmt_send": 1, "read": 3}
    assert m["fio"]["read_ios"] == 3 and m["fio"]["read_clat_p50_us"] == 1.0
    assert m["complete"] is True
    assert not (run.root / ".capture").exists()
    assert summ["reads"] == 3 and summ["fio_reads"] == 3 and summ["lost"] == 1
    assert "capture complete" in summary_line(summ)


@pytest.mark.parametrize("status,guest_rc,interrupted", [("partial", 0, True), ("complete", 1, False),
                                                         ("failed", 0, False)])
def test_incomplete_runs_stay_valid(tmp_path: Path, status: str, guest_rc: int, interrupted: bool) -> None:
    run = make_run(tmp_path, status)
    summ = finish_meta(run, json.loads(run.meta.read_text()), guest_rc, interrupted, time.monotonic(), {})
    m = read_meta(run)
    assert m["complete"] is False and m["capture"]["status"] == status
    assert "INCOMPLETE" in summary_line(summ)


def test_progress_lines(capsys: pytest.CaptureFixture[str]) -> None:
    p = Progress(expected_reads=1000, echo_console=False)
    p("ZTBP: stage probe attached after 20 s")
    p("ZTBP: stage workload paper80")
    p.workload_start = time.monotonic() - 10
    p("ZTBP: progress traced=100 fio=500")
    p("[   12.1] some kernel line")
    out = capsys.readouterr().out
    assert "probe attached after 20 s" in out
    assert "500/1,000 reads done" in out and "s left" in out and "100 commands traced" in out
    assert "kernel line" not in out
