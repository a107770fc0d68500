"""A fio zoned cycling workload (zone resets as fio comes back to full and partly written zones) captured in the
VM with `ztbp capture`, read back by `ztbp resets` (resets per second, latency by zone state, the far replay)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from loop_run import ztbp

from ztbp.cli import main

pytestmark = pytest.mark.vm


@pytest.fixture(scope="module")
def cycle_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cycle") / "zonecycle"
    # beside the zoned namespace, a conventional one as on most machines (and as the guest of the chain this file
    # runs in has: tests/conftest.py VM_CHAINS)
    proc = ztbp("capture", "zonecycle", "--region", "64M", "--conv-ns", "1G", "--out", str(out), "--timeout", "900")
    assert proc.returncode == 0, proc.stderr
    return out


def test_zone_cycling_workload_resets_and_far_replays_it(cycle_run: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    meta = json.loads((cycle_run / "meta.json").read_text())
    assert meta["workload"]["name"] == "zonecycle" and meta["complete"]
    assert main(["resets", str(cycle_run), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    s = res["summary"]
    # the capture resets the 2 zones of the region first; fio then resets zones as it cycles over them
    assert s["resets"] > 2 and s["resets_per_s"] > 0
    assert s["backend"] == "qemu" and "hole" in s["latency_means"]
    assert s["partial_resets"] + s["full_resets"] > 0
    far = res["far"]
    assert far["traced_resets"] == s["resets"]
    assert far["eager"]["written_mib"] == far["far"]["written_mib"] > 0
    assert far["far"]["resets"] <= far["eager"]["resets"]
