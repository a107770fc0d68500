"""The device study on QEMU's zoned namespace, for real: `ztbp profile` there is the negative control of the
profiler (no parallel structure: it must say so); NVMeVirt's prototype, the positive control, is in
test_device_vm.py. Its own file, so it runs in the pooled guest of bookworm's default device with the captures,
before the host path, whichever chain that is (tests/conftest.py VM_CHAINS), and NVMeVirt's tests come last.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from loop_run import ztbp

from ztbp.cli import main

pytestmark = pytest.mark.vm


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
