"""The device studies on the real VM path: `ztbp profile` on QEMU's zoned namespace (a negative control: no
parallel structure, the profiler must say so), on NVMeVirt's prototype (the positive control: zones on one die
land in one conflict group, zones on other dies in their own, and the verdict calls it structure; the answer key is
the module's own layout). The zone-cycling capture read back by `ztbp resets` is in test_resets_vm.py.

QEMU's tests share a pooled guest; NVMeVirt's profile shares its guest with NVMeVirt's loop (test_loop_vm.py: the
same memory reserve). NVMeVirt is built from ../shared/nvmevirt; without it that test is skipped.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from loop_run import NVMEVIRT_RESERVE, ztbp

from ztbp import paths
from ztbp.acquire.vm import ensure_image
from ztbp.cli import main

pytestmark = pytest.mark.vm

NVMEVIRT = paths.ROOT.parent / "shared" / "nvmevirt"
#: NVMeVirt's prototype at --slow 20: a 256 KiB write takes ~84 ms of die time, slower than the emulator's own
#: per-command cost under TCG, so the modelled dies shape the bandwidth (README of ../shared/nvmevirt).
SLOW = "20"
#: 144 zones of 32 MiB: 128 dies, so zones z and z + 128 share a die.
NVMEVIRT_STORAGE = "4608M"


@pytest.fixture(scope="module")
def qemu_profile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("profile") / "qemu"
    proc = ztbp("profile", "--zones", "0-3", "--full-matrix", "--seconds", "2",
                "--out", str(out), "--timeout", "900")
    assert proc.returncode == 0, proc.stderr
    return out, json.loads((out / "profile.json").read_text())


def test_qemu_profile_writes_the_zone_to_group_table_matrix_and_heatmap(qemu_profile: tuple[Path, dict]) -> None:
    out, doc = qemu_profile
    for name in ("profile.json", "z2c.json", "z2c.csv", "matrix.csv", "heatmap.html", "console.log"):
        assert (out / name).is_file(), name
    assert doc["device"]["backend"] == "qemu" and doc["device"]["nr_zones"] == 64
    assert sorted(int(z) for z in doc["solo"]) == [0, 1, 2, 3] and all(v > 0 for v in doc["solo"].values())
    assert len(doc["pairs"]) == 6 and {p["measured"] for p in doc["pairs"]} == {2}  # the matrix twice (--confirm 1)
    assert sorted(doc["solo_after"]) == ["0", "1", "2", "3"]  # the closing solo pass
    assert doc["timing"]["measurements"] == 4 + 2 * 6 + 4 == len(doc["log"])
    assert doc["noise"]["repeats"] == 6 + 4 and doc["noise"]["sd"] is not None
    assert doc["verdict"]["repeats"] == 10 and "contradicting_pairs" in doc["verdict"]
    assert [len(r) for r in doc["matrix"]] == [4] * 4 and None not in sum(doc["matrix"], [])
    assert doc["timing"]["fill_s"] > 0  # the zones were written before they were read
    assert (out / "z2c.csv").read_text().splitlines()[0] == "zone,group"


def test_qemu_has_no_structure(qemu_profile: tuple[Path, dict]) -> None:
    _, doc = qemu_profile
    assert doc["verdict"]["structure"] is False, (doc["verdict"], doc["log"])
    assert doc["verdict"]["reason"].startswith("no structure")


def test_conflicts_with_a_profiled_table(qemu_profile: tuple[Path, dict], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = qemu_profile
    assert main(["conflicts", "tests/data/runs/sample-paper80", "--groups", str(out / "z2c.json"), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["summary"]["commands"] > 0 and res["summary"]["unmapped"] > 0  # zones 4.. are not in the table


@pytest.fixture(scope="module")
def nvmevirt_ko(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (NVMEVIRT / "build.sh").is_file():
        pytest.skip(f"NVMeVirt is not here ({NVMEVIRT}/build.sh missing): the prototype's die layout is the "
                    "answer key of this test; build it as ../shared/nvmevirt/README.md says to run it")
    if shutil.which("make") is None:
        pytest.skip("make is missing: NVMeVirt cannot be built here")
    release = (ensure_image(echo=lambda s: None) / "kernel-release").read_text().strip()
    out = tmp_path_factory.mktemp("nvmev")
    proc = subprocess.run(["bash", str(NVMEVIRT / "build.sh"), release, str(out), "--profile", "prototype",
                           "--slow", SLOW], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def test_nvmevirt_zones_on_one_die_form_one_group(nvmevirt_ko: Path, tmp_path: Path) -> None:
    """The positive control of the verdict beside QEMU's negative one: real conflicts, called structure."""
    out = tmp_path / "nvmevirt"
    proc = ztbp("profile", "--backend", "nvmevirt", "--nvmevirt-ko", str(nvmevirt_ko), "--nvmevirt-storage",
                NVMEVIRT_STORAGE, *NVMEVIRT_RESERVE, "--rw", "write", "--bs", "256k", "--iodepth", "1",
                "--seconds", "2", "--zones", "0,1,128,129", "--key", "nvmevirt-prototype", "--out", str(out),
                "--timeout", "1200")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "profile.json").read_text())
    assert doc["device"]["nr_zones"] == 144 and doc["device"]["lba_bytes"] == 512
    groups = {int(z): g for z, g in doc["groups"].items()}
    # 0 and 128 share die 0, 1 and 129 die 1
    assert groups[0] == groups[128] != groups[1] == groups[129], doc["pairs"]
    assert doc["key"]["ari_die"] == pytest.approx(1.0)
    assert "adjusted Rand index" in proc.stdout
    v = doc["verdict"]
    assert v["structure"] is True, (v, doc["log"])
    assert v["noise_sd"] is not None and v["noise_separation"] >= 4 and abs(v["drift"]) < 0.25
