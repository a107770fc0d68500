"""`ztbp loop` for real on QEMU's zoned namespace with a Zipf workload: no hot zone by construction, so the loop
stops after round 1 with "nothing recommended", sending nothing (ZIPF_READS: a negative control needs no more reads
to say nothing; the rule's false-positive rate does not grow with fewer). Its own file, so the chains can be
balanced by files (tests/conftest.py VM_CHAINS): it runs after QEMU's other loop (test_loop_qemu_vm.py) in the same
guest.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from loop_run import assert_rounds_whole, loop

pytestmark = pytest.mark.vm
ZIPF_READS = 10_000


def test_zipf_loop_stops_with_nothing_recommended(tmp_path: Path) -> None:
    proc, doc = loop(tmp_path / "z", "zipf", "--reads", str(ZIPF_READS), "--rounds", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(doc["rounds"]) == 1
    assert doc["stopped"].startswith("nothing recommended") and "nothing sent" in doc["stopped"]
    assert not (tmp_path / "z" / ".loop" / "applied-01.env").exists()
    assert_rounds_whole(doc, ZIPF_READS)
