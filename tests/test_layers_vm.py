"""The layer probe in the real guest: a short fio psync 4 KiB random-read capture (READS reads, a count rather than a
time, so a busy machine gets the same trace) on ext4 (the Table-I path) with
probes/layers.bt and probes/nvme_zone_stream.bt side by side, taken by `ztbp capture-layers` (the same Python path
as every capture: meta.json written by the contract code), then `ztbp layers` on it.

Checks: the layer means add up to the measured end-to-end syscall latency within 5 %; the device time of the layer
probe agrees with `lat_ns` of the NVMe probe for the same requests within 10 % at the median; both probes' lost
events are recorded in meta.json and are 0 with maps of the normal size, every fio read has its row (the negative
control of test_capture_vm's tiny-map test); the file-system row is there and the rows name ext4.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ztbp import stages
from ztbp.io.fio import read_fio
from ztbp.io.run import load

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.vm
READS = 2000


@pytest.fixture(scope="module", params=("bookworm", "trixie"))
def ext4_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One capture per guest suite (Debian 12: Linux 6.1, bpftrace 0.17; Debian 13: Linux 6.12, bpftrace 0.23)."""
    if not (ROOT / "vm" / "vmtest.sh").exists():
        pytest.skip("vm/vmtest.sh (the VM harness) is not in this checkout")
    if shutil.which("qemu-system-x86_64") is None:
        pytest.fail("qemu-system-x86_64 is missing: run `just deps`")
    out = tmp_path_factory.mktemp(f"layers-vm-{request.param}") / "run"
    proc = subprocess.run([sys.executable, "-m", "ztbp.cli", "capture-layers", "--out", str(out), "--fs", "ext4",
                           "--engine", "psync", "--reads", str(READS), "--size", "64M",
                           "--timeout", "1200",
                           "--suite", request.param],
                          capture_output=True, text=True, timeout=1300, check=False, cwd=ROOT)
    console = (out / "console.log").read_text(errors="replace") if (out / "console.log").exists() else ""
    assert proc.returncode == 0 and "capture complete" in proc.stdout, \
        f"capture exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}\n{console[-3000:]}"
    return out


def test_layers_add_up_to_the_syscall_latency(ext4_run: Path) -> None:
    res = stages.layers(load(ext4_run, events=False))
    assert res["requests"] >= 0.99 * READS, res["requests"]
    assert res["modes"] == {"sync": res["requests"]} and set(res["stacks"]) == {"ext4"}
    names = [r["layer"] for r in res["layers"]]
    assert names == ["kernel crossing", "syscall", "vfs", "file system", "block", "nvme driver", "device",
                     "completion"]
    s = res["sum_check"]
    assert abs(s["residual_frac"]) <= 0.05, s
    assert all(r["mean_ns"] > 0 for r in res["layers"] if r["layer"] in ("file system", "block", "device"))
    assert res["excluded"]["negative_layer"] <= 0.01 * res["requests"], res["excluded"]


def test_device_time_agrees_with_the_nvme_probe(ext4_run: Path) -> None:
    x = stages.layers(load(ext4_run, events=False))["cross_check"]
    assert x is not None and x["matched"] >= 0.95 * x["rows"], x
    assert abs(x["rel_diff"]) <= 0.10, x


def test_lost_events_of_both_probes_are_recorded(ext4_run: Path) -> None:
    meta = json.loads((ext4_run / "meta.json").read_text())
    assert meta["complete"] is True and meta["backend"] == "qemu"
    assert ext4_run.parent.name.startswith(f"layers-vm-{meta['versions']['suite']}"), meta["versions"]
    assert meta["lost_events"] == {"nvme": 0, "layers": 0}
    assert meta["workload"]["fs"] == "ext4" and meta["workload"]["engine"] == "psync"
    # the conventional namespace (nsid 2), whatever name the guest kernel gave it (6.12 scans in parallel)
    assert meta["workload"]["fs_device"] in ("nvme0n1", "nvme0n2") and meta["workload"]["iodepth"] == 1
    assert meta["workload"]["fs_device"] != meta["device"], meta["device"]
    assert meta["probes"]["layers"] == {"file": "raw/layers.csv", "version": 1, "attach": "fentry+fexit+tracepoint",
                                        "script": "probes/layers.bt"}
    assert meta["probes"]["nvme"]["script"] == "probes/nvme_zone_stream.bt"
    assert meta["layer_stats"]["max_rows"] >= 50_000 and meta["layer_stats"]["dropped"] == 0


def test_every_fio_read_has_its_row(ext4_run: Path) -> None:
    """Maps of the normal size: the layer probe has a row for each of fio's reads, the NVMe probe a command."""
    meta = json.loads((ext4_run / "meta.json").read_text())
    fio_reads = sum(j["read"]["total_ios"] for j in read_fio(ext4_run / "raw" / "fio.json")["jobs"])
    layer_rows = len((ext4_run / "raw" / "layers.csv").read_text().splitlines()) - 2
    assert layer_rows == fio_reads == meta["fio"]["read_ios"] == READS
    assert meta["commands"]["read"] >= fio_reads  # ext4 may read metadata too
    assert meta["fio"]["clat_percentiles_from"] == "histogram of all jobs (json+)"
