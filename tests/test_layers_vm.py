"""The layer probe in the real guest: a short fio psync 4 KiB random-read capture on ext4 (the Table-I path) with
probes/layers.bt and probes/nvme_zone_stream.bt side by side, then `ztbp layers` on it.

Checks: the layer means add up to the measured end-to-end syscall latency within 5 %; the device time of the layer
probe agrees with `lat_ns` of the NVMe probe for the same requests within 10 % at the median; both probes' lost
events are recorded in meta.json; the file-system row is there and the rows name ext4.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ztbp import stages
from ztbp.io.run import load

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "vm" / "capture-layers.sh"

pytestmark = pytest.mark.vm


@pytest.fixture(scope="module")
def ext4_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / "vm" / "vmtest.sh").exists():
        pytest.skip("vm/vmtest.sh (the VM harness) is not in this checkout")
    if shutil.which("qemu-system-x86_64") is None:
        pytest.fail("qemu-system-x86_64 is missing: run `just deps`")
    out = tmp_path_factory.mktemp("layers-vm") / "run"
    proc = subprocess.run(["bash", str(CAPTURE), "-o", str(out), "--fs", "ext4", "--engine", "psync", "--runtime", "3",
                           "--zones", "16"], capture_output=True, text=True, timeout=1300, check=False)
    console = (out / "console.log").read_text(errors="replace") if (out / "console.log").exists() else ""
    assert proc.returncode == 0 and (out / "meta.json").exists(), \
        f"capture exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}\n{console[-3000:]}"
    return out


def test_layers_add_up_to_the_syscall_latency(ext4_run: Path) -> None:
    res = stages.layers(load(ext4_run, events=False))
    assert res["requests"] > 500, res["requests"]
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
    assert set(meta["lost_events"]) == {"nvme", "layers"}
    assert all(isinstance(v, int) and v >= 0 for v in meta["lost_events"].values())
    assert meta["workload"]["fs"] == "ext4" and meta["workload"]["engine"] == "psync"
