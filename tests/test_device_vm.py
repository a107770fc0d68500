"""The device study on NVMeVirt, for real: `ztbp profile` on its prototype is the positive control of the profiler
(zones on one die land in one conflict group, zones on other dies in their own, and the verdict calls it structure;
the answer key is the module's own layout). QEMU's negative control is test_device_qemu_vm.py; the zone-cycling
capture read back by `ztbp resets` is in test_resets_vm.py.

NVMeVirt's profile shares its guest with NVMeVirt's loop (test_loop_vm.py: the same memory reserve). NVMeVirt is
built from ../shared/nvmevirt; without it the test is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import nvmevirt_build
import pytest
from loop_run import NVMEVIRT_RESERVE, ztbp

from ztbp.acquire.vm import ensure_image

pytestmark = pytest.mark.vm

#: 144 zones of 32 MiB: 128 dies, so zones z and z + 128 share a die.
NVMEVIRT_STORAGE = "4608M"


@pytest.fixture(scope="module")
def nvmevirt_ko() -> Path:
    if (why := nvmevirt_build.available()) is not None:
        pytest.skip(f"{why}: the prototype's die layout is the answer key of this test; build it as "
                    "../shared/nvmevirt/README.md says to run it")
    release = nvmevirt_build.guest_release(ensure_image(echo=lambda s: None))
    return nvmevirt_build.module(release, "prototype", nvmevirt_build.PROTOTYPE_SLOW)


@pytest.mark.timing
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
