"""The host path for real: the wheel installed with pip on a Debian machine with a zoned drive — the guest, its zoned
namespace shaped like a real drive's (zones of 64 MiB that hold 48 MiB, 14 open and 14 active, 1,024 zones) — and
run there from a folder outside any checkout, as a user runs it (vm/guest/host-path.sh): `ztbp doctor`,
`ztbp capture-host`, `ztbp cluster` on that capture and a 2-round `ztbp loop --host`. QEMU's device refuses SET:
the loop says so and goes on.

Checks: the doctor sees the drive's geometry; the capture has a row for every fio read, loses nothing, keeps within
every zone's capacity (no read or write past it in the trace) and its hot zones are the workload's; both loop rounds
are whole.

Run by `just test-host-path` (ZTBP_TEST_HOST_PATH=1), not by the README's test line: the install (about 900 MB of
wheels) and the analysis under emulation take minutes of its budget.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from wheelhouse import installed, pack, wheel_name, wheelhouse

from ztbp.acquire.vm import Geometry, run_in_guest
from ztbp.contract import read_meta
from ztbp.paths import CACHE, RunPaths
from ztbp.units import MIB
from ztbp.writeback.ctl import ensure_ctl

pytestmark = [pytest.mark.vm,
              pytest.mark.skipif(os.environ.get("ZTBP_TEST_HOST_PATH") != "1",
                                 reason="installs the wheel in the guest and analyses there: `just test-host-path`")]

CHECKOUT = Path(__file__).resolve().parents[1]
#: a device shaped like a real drive (a ZN540's zones are 2 GiB holding 1,077 MiB, 14 open and active)
REAL_DRIVE = Geometry(zone_bytes=64 * MIB, zones=1024, zone_cap_bytes=48 * MIB, max_open=14, max_active=14)
READS = 20_000
REGION = "2G"  # 32 zones of 64 MiB: the paper's hot zones 1, 7, 11, 15, 19 lie in it
HOT = [1, 7, 11, 15, 19]


def stage(out: Path) -> None:
    """The wheel, its dependencies' wheels with pip's own, and ztbp-ctl (for a guest without make) in `out`."""
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(CHECKOUT)],
                           capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next(out.glob("ztbp-*.whl"))
    house = wheelhouse(wheel, CACHE / "test-wheelhouse")
    pip = installed()["pip"]
    if not (house / wheel_name(pip)).is_file():
        pack(pip, house)
    (out / "wheelhouse").mkdir()
    for f in house.iterdir():  # a link when both folders are on one file system, else a copy
        try:
            os.link(f, out / "wheelhouse" / f.name)
        except OSError:
            shutil.copy2(f, out / "wheelhouse" / f.name)
    shutil.copy2(ensure_ctl(), out / "ztbp-ctl")


@pytest.fixture(scope="module")
def host_path(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    out = tmp_path_factory.mktemp("host-path")
    stage(out)
    res = run_in_guest("bash /ztbp/src/vm/guest/host-path.sh", out, geometry=REAL_DRIVE, timeout=5400,
                       # the venv (about 1 GB) and the runs on the shared folder: the guest's root file system has
                       # 1.3 GB free (the doctor wants 1 GiB for runs)
                       env={"ZTBP_HOST_READS": str(READS), "ZTBP_HOST_REGION": REGION,
                            "ZTBP_HOST_VENV": "/ztbp/out/venv", "ZTBP_RUNS": "/ztbp/out/runs"})
    steps = dict(line.split("=", 1) for line in (out / "steps.env").read_text().splitlines() if "=" in line)
    assert res.status == 0, (steps, (out / "console.log").read_text(errors="replace")[-3000:])
    return out, steps


def step_ok(out: Path, steps: dict[str, str], name: str) -> str:
    """The step's stdout, once its exit status says it worked (its stderr, with a crash's stack, otherwise)."""
    err = (out / f"{name}.err").read_text(errors="replace")
    assert steps.get(f"{name}_rc") == "0", f"{name}: exit {steps.get(f'{name}_rc')}\n{err[-4000:]}"
    return (out / f"{name}.out").read_text()


def test_the_wheel_installs_and_the_doctor_sees_the_drive(host_path: tuple[Path, dict[str, str]]) -> None:
    out, steps = host_path
    step_ok(out, steps, "install")
    step_ok(out, steps, "ctl")
    doc = json.loads(step_ok(out, steps, "doctor"))
    assert doc["ready"] is True, doc
    ns = next(n for n in doc["facts"]["namespaces"] if n["zoned"] != "none")
    assert (ns["zone_bytes"], ns["zone_cap_bytes"], ns["nr_zones"]) == (64 * MIB, 48 * MIB, 1024), ns
    assert (ns["max_open_zones"], ns["max_active_zones"]) == (14, 14), ns
    print("host path, seconds: " + ", ".join(f"{k[:-2]} {v}" for k, v in steps.items() if k.endswith("_s")))


def rows(run: RunPaths) -> list[list[str]]:
    return [line.split(",") for line in run.nvme_csv.read_text().splitlines()[2:]]


def test_capture_host_traces_every_read_within_the_zone_capacity(host_path: tuple[Path, dict[str, str]]) -> None:
    out, steps = host_path
    summary = json.loads(step_ok(out, steps, "capture"))
    assert summary["complete"] is True and summary["reads"] == summary["fio_reads"] == READS
    assert summary["lost"] == 0
    run = RunPaths(out / "capture")
    meta = read_meta(run)
    assert meta["backend"] == "host" and meta["lost_events"] == {"nvme": 0}
    zone_lba, cap_lba = meta["zone_size_lba"], meta["zone_cap_lba"]
    assert (zone_lba * meta["lba_bytes"], cap_lba * meta["lba_bytes"]) == (64 * MIB, 48 * MIB)
    moved = [r for r in rows(run) if r[7] in ("read", "write")]
    assert sum(r[7] == "read" for r in moved) == READS
    past = [r for r in moved if int(r[8]) % zone_lba + int(r[9]) > cap_lba]
    assert past == [], past[:5]  # no read or write past a zone's capacity
    assert all(int(r[11]) == 0 for r in rows(run))  # every command succeeded


def test_the_hot_zones_are_found_exactly(host_path: tuple[Path, dict[str, str]]) -> None:
    out, steps = host_path
    assert sorted(json.loads(step_ok(out, steps, "cluster"))["hot_zones"]) == HOT


def test_the_host_loop_runs_two_whole_rounds(host_path: tuple[Path, dict[str, str]]) -> None:
    out, steps = host_path
    doc: dict[str, Any] = json.loads(step_ok(out, steps, "loop"))
    assert doc["backend"] == "host" and doc["complete"] is True
    assert len(doc["rounds"]) == 2, doc.get("stopped")
    for e in doc["rounds"]:
        assert e["complete"] and e["read_rows"] == e["fio_reads"] == READS and e["lost"] == 0, e
    r1, r2 = doc["rounds"]
    assert sorted(r1["config"]["hot_zones"]) == HOT
    assert r2["applied_before"]["set_exit_code"] == 30 and r2["zones_in_force"] == []  # QEMU refuses SET
    assert "refused SET" in (out / "loop.err").read_text(errors="replace")
