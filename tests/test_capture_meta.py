"""How a capture turns the guest's report (guest.env, fio JSON, the probes' CSVs) into meta.json, and its progress
lines; how meta.json names the probe that ran and how it attaches.

The files here are written in the formats vm/guest/probe-lib.sh and fio produce; the real path is in test_capture_vm
and test_layers_vm.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ztbp import paths
from ztbp.acquire.capture import CaptureError, nvme_probe
from ztbp.acquire.layers import LAYER_SCRIPTS, LayersCapture
from ztbp.acquire.meta import attach_types, finish_meta, probe_meta, summary_line
from ztbp.acquire.progress import Progress
from ztbp.acquire.vm import Geometry
from ztbp.acquire.workload import Workload
from ztbp.contract import (
    LAYERS_COLUMNS,
    LAYERS_VERSION_LINE,
    NVME_COLUMNS,
    NVME_VERSION_LINE,
    new_meta,
    read_meta,
    write_meta,
)
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
probe_nvme_mode=map
probe_nvme_script=probes/nvme_zone.bt
probe_nvme_max_rows=50006
probe_nvme_attach_s=21
prefill_s=5
probe_nvme_setups=5
probe_nvme_completed=4
probe_nvme_rows=4
probe_nvme_perf_lost=0
probe_nvme_recursion_misses=1
lost_events_nvme=1
workload_s=1.5
status=complete
"""


def make_run(tmp_path: Path, status: str = "complete") -> RunPaths:
    run = RunPaths(tmp_path / "r")
    wl = Workload(name="paper80", reads=3, jobs=2, iodepth=1)
    meta = new_meta(device="nvme0n1", lba_bytes=4096, zone_size_lba=8192, zone_cap_lba=8192, nr_zones=64,
                    synthetic=False, workload=wl.meta(), backend="qemu",
                    probes={"nvme": probe_meta("nvme", nvme_probe(None))})
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
    assert m["probe_stats"]["mode"] == "map" and m["probe_stats"]["max_rows"] == 50006
    assert m["probe_stats"]["recursion_misses"] == 1 and m["probe_stats"]["attach_s"] == 21
    assert m["probes"]["nvme"] == {"file": "raw/nvme.csv", "version": 1, "attach": "fentry",
                                   "script": "probes/nvme_zone.bt"}
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
    captured = capsys.readouterr()
    assert captured.out == ""  # stdout is kept for the summary (or the --json document)
    out = captured.err
    assert "probe attached after 20 s" in out
    assert "500/1,000 reads done" in out and "s left" in out and "100 commands traced" in out
    assert "kernel line" not in out


def test_attach_types_come_from_the_probe_points() -> None:
    got = {name: attach_types((paths.PROBES / name).read_text())
           for name in ("nvme_zone.bt", "nvme_zone_stream.bt", "layers.bt")}
    assert got == {"nvme_zone.bt": "fentry", "nvme_zone_stream.bt": "fentry+tracepoint",
                   "layers.bt": "fentry+fexit+tracepoint"}
    assert attach_types("BEGIN { printf(\"x\\n\"); }\ninterval:s:5 { exit(); }\n") == "unknown"
    assert attach_types("kprobe:vfs_read { @n = count(); }\nkretprobe:vfs_read { }\n") == "kprobe+kretprobe"


def test_meta_names_the_probe_the_guest_ran(tmp_path: Path) -> None:
    """ZTBP_PROBE chose the streaming probe: meta.json says so, with its own attach type, not nvme_zone.bt's."""
    run = make_run(tmp_path)
    env = run.root / ".capture" / "guest.env"
    env.write_text(env.read_text().replace("probe_nvme_script=probes/nvme_zone.bt",
                                           "probe_nvme_script=probes/nvme_zone_stream.bt")
                   .replace("probe_nvme_mode=map", "probe_nvme_mode=stream"))
    finish_meta(run, json.loads(run.meta.read_text()), 0, False, time.monotonic(), {})
    m = read_meta(run)
    assert m["probes"]["nvme"]["script"] == "probes/nvme_zone_stream.bt"
    assert m["probes"]["nvme"]["attach"] == "fentry+tracepoint"
    assert m["probe_stats"]["mode"] == "stream"
    with pytest.raises(CaptureError, match="choose one of"):
        nvme_probe("nvme_zone.awk")


def test_fio_totals_from_json_plus_histograms_after_text(tmp_path: Path) -> None:
    """fio --output-format=json+ (what the guest scripts run): exact merged percentiles of every job, even when fio
    wrote a message before the JSON (stopped by a signal)."""
    run = make_run(tmp_path)
    jobs = [{"jobname": f"j{i}", "error": 0, "read": {"total_ios": 100, "iops": 50.0, "runtime": 2000,
                                                      "clat_ns": {"bins": bins, "percentile": {"50.000000": 1}}},
             "write": {"total_ios": 0, "iops": 0.0}} for i, bins in enumerate([{"1000": 100}, {"3000": 100}])]
    run.fio_json.write_text("fio: terminating on signal 2\n" + json.dumps({"fio version": "fio-3.33", "jobs": jobs}))
    finish_meta(run, json.loads(run.meta.read_text()), 0, False, time.monotonic(), {})
    fio = read_meta(run)["fio"]
    assert fio["read_ios"] == 200 and fio["clat_percentiles_from"] == "histogram of all jobs (json+)"
    assert (fio["read_clat_p50_us"], fio["read_clat_p99_us"]) == (1.0, 3.0)


LAYERS_ENV = """kernel=6.1.0-56-amd64
device=nvme0n1
lba_bytes=4096
zone_sectors=65536
nr_zones=16
zone_cap_sectors=65536
fs_device=nvme0n2
probe_nvme_mode=stream
probe_nvme_script=probes/nvme_zone_stream.bt
probe_layers_max_rows=50001
probe_layers_mode=stream
probe_layers_script=probes/layers.bt
probe_nvme_setups=3
probe_nvme_completed=3
probe_nvme_rows=3
lost_events_nvme=0
probe_layers_completed=2
probe_layers_rows=2
probe_layers_dropped=1
lost_events_layers=1
status=complete
"""


def make_layers_run(tmp_path: Path, probes: tuple[str, ...] = ("nvme", "layers")) -> RunPaths:
    req = LayersCapture(fs="ext4", engine="io_uring", geometry=Geometry(zones=16, conv_ns_bytes=1 << 30))
    run = RunPaths(tmp_path / "layers")
    meta = new_meta(device="nvme0n1", lba_bytes=4096, zone_size_lba=8192, zone_cap_lba=8192, nr_zones=16,
                    synthetic=False, workload=req.workload_meta(), backend="qemu",
                    probes={name: probe_meta(name, LAYER_SCRIPTS[name]) for name in probes})
    write_meta(run, meta)
    (run.root / ".capture").mkdir()
    (run.root / ".capture" / "guest.env").write_text(LAYERS_ENV)
    run.raw.mkdir()
    run.probe_csv("layers").write_text("\n".join([LAYERS_VERSION_LINE, ",".join(LAYERS_COLUMNS), "1,2", "3,4"]) + "\n")
    return run


def test_layer_capture_meta_from_the_guest(tmp_path: Path) -> None:
    run = make_layers_run(tmp_path)
    run.nvme_csv.write_text("\n".join([NVME_VERSION_LINE, ",".join(NVME_COLUMNS), "20,5,0,1,4,1,2,read,8,1,,0"]) + "\n")
    summ = finish_meta(run, json.loads(run.meta.read_text()), 0, False, time.monotonic(), {})
    m = read_meta(run)
    assert m["complete"] is True
    assert m["lost_events"] == {"nvme": 0, "layers": 1}
    assert m["layer_stats"]["dropped"] == 1 and m["layer_stats"]["max_rows"] == 50001
    assert m["probes"]["layers"]["attach"] == "fentry+fexit+tracepoint"
    assert m["probes"]["nvme"]["script"] == "probes/nvme_zone_stream.bt"
    assert m["workload"] == {"name": "layers-ext4-io_uring", "kind": "layers", "fio": "randread bs=4k direct=1",
                             "engine": "io_uring", "iodepth": 4, "jobs": 1, "runtime_s": 5, "size": "256M",
                             "fs": "ext4", "fs_device": "nvme0n2"}
    assert summ["probes"] == {"nvme": {"rows": 3, "lost": 0}, "layers": {"rows": 2, "lost": 1}}
    assert "layers 2 rows" in summary_line(summ) and "layers 1" in summary_line(summ)


def test_a_layer_capture_without_one_of_its_files_is_incomplete(tmp_path: Path) -> None:
    run = make_layers_run(tmp_path)  # nvme asked for, raw/nvme.csv missing
    finish_meta(run, json.loads(run.meta.read_text()), 0, False, time.monotonic(), {})
    m = read_meta(run)
    assert m["complete"] is False and m["lost_events"] == {"layers": 1}


@pytest.mark.parametrize("kwargs,msg", [
    ({"fs": "xfs"}, "--fs xfs"), ({"engine": "mmap"}, "--engine mmap"), ({"probes": ("bio",)}, "--probes"),
    ({"runtime_s": 0}, "--runtime"), ({"fs": "ext4", "geometry": Geometry(zones=32)}, "--conv-ns"),
    ({"size": "2G", "geometry": Geometry(zones=8, conv_ns_bytes=1 << 30)}, "larger than the zoned namespace"),
    ({"reads": 16385, "size": "64M"}, "do not fit in --size 64M"),
])
def test_layer_capture_requests_are_checked_before_the_boot(kwargs: dict, msg: str) -> None:
    with pytest.raises(CaptureError, match=msg):
        LayersCapture(**kwargs).validate()


def test_layer_capture_guest_environment() -> None:
    env = LayersCapture(engine="libaio", jobs=3).guest_env()
    assert env["ZTBP_IODEPTH"] == "4" and env["ZTBP_JOBS"] == "3" and env["ZTBP_EXPECTED"] == "12"
    assert env["ZTBP_PROBES"] == "nvme,layers" and env["ZTBP_BENCH"] == "0"
    assert LayersCapture().guest_env()["ZTBP_IODEPTH"] == "1"
    # a count of reads instead of a time: the guest's fio gets it, meta.json's workload says it
    counted = LayersCapture(reads=2000, jobs=3)
    assert counted.guest_env()["ZTBP_READS"] == "2000" and LayersCapture().guest_env()["ZTBP_READS"] == "0"
    assert counted.workload_meta()["reads"] == 2000 and "runtime_s" not in counted.workload_meta()
    LayersCapture(reads=16384, size="64M").validate()  # every block of the region once: fits


@pytest.mark.parametrize("crash_lines,calls,code", [
    (["[  126.08] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000009"], 2, 0),
    (["[  125.91] BUG: kernel NULL pointer dereference, address: 0000000000000000"], 2, 0),
    (["ZTBP: error fio failed"], 1, 1),  # an ordinary failure is not captured again
])
def test_a_guest_kernel_crash_is_captured_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                crash_lines: list[str], calls: int, code: int) -> None:
    """An oops while bpftrace attached a probe under TCG crashed a CI capture once: the capture boots again (once),
    keeping the crashed boot's console; meta.json counts the boots."""
    from ztbp.acquire import capture
    from ztbp.acquire.vm import GuestResult

    run = RunPaths(tmp_path / "run")
    run.raw.mkdir(parents=True)
    boots: list[int] = []

    def fake(command: str, out: Path, **kw: object) -> GuestResult:
        boots.append(1)
        (out / "console.log").write_text(f"boot {len(boots)}\n")
        first = len(boots) == 1
        return GuestResult(status=1 if first else 0, out=out, console=out / "console.log",
                           lines=["ztbp-guest: up", *(crash_lines if first else [])])

    monkeypatch.setattr(capture, "run_in_guest", fake)
    monkeypatch.setattr(capture, "qemu_version", lambda: "QEMU test")
    meta = {"workload": {"name": "t"}, "probes": {}}
    out = capture.run_vm_capture(run, meta, capture.GuestCommand("capture.sh", {}), Progress(0, False))
    assert len(boots) == calls and out.exit_code == code
    assert json.loads(run.meta.read_text())["guest_attempts"] == calls
    if calls == 2:
        assert (run.root / "console-crash-1.log").read_text() == "boot 1\n"
        assert run.console_log.read_text() == "boot 2\n"
