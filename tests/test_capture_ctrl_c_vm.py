"""Ctrl-C during a real capture in QEMU: fio stops, the trace so far is saved and meta.json says it is partial. Its
own file, so it runs in the pooled guest of whichever chain has room (tests/conftest.py VM_CHAINS: vm-b's, with a
conventional namespace beside the zoned one); the capture it interrupts is test_capture_vm.py's.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from loop_run import CONV_NS
from test_capture_vm import JOBS, rows

from ztbp import paths
from ztbp.contract import read_meta
from ztbp.paths import RunPaths

pytestmark = pytest.mark.vm

#: the Ctrl-C capture: asked for ASKED reads, stopped once STOP_AT are done (its map sized for ASKED * 1.5 keys)
#: stopped after 30,000 reads (bpftrace then reads its map for several seconds before it prints any row), of 300,000
#: asked: the stop reaches the guest seconds later under load, and fio must still be running then (with 90,000
#: asked, a loaded run's fio finished first: status complete)
ASKED, STOP_AT = 300_000, 30_000


def test_ctrl_c_leaves_a_valid_partial_run(tmp_path: Path) -> None:
    """SIGINT during the workload: fio stops, the trace so far is saved, meta.json says complete: false.

    Stopped after STOP_AT reads or more, so bpftrace needs several seconds to read its map of rows before it prints
    any: the capture must wait for it without signalling it again (a second SIGINT kills bpftrace)."""
    out = tmp_path / "partial"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ztbp.cli", "capture", "paper80", "--reads", str(ASKED), "--jobs", str(JOBS),
         "--out", str(out), "--timeout", "900", *CONV_NS],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=paths.ROOT)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        done = re.search(r"workload: ([0-9,]+)/", line)
        if done and int(done.group(1).replace(",", "")) >= STOP_AT:
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.communicate(timeout=600)[0]
    text = "".join(seen) + rest
    assert proc.returncode == 130, text[-2000:]
    assert "INCOMPLETE" in text
    run = RunPaths(out)
    meta = read_meta(run)
    assert meta["complete"] is False and meta["capture"]["interrupted"] is True
    assert meta["capture"]["status"] == "partial"
    data = rows(run)
    reads = sum(1 for r in data if r[7] == "read")
    assert STOP_AT <= reads < ASKED
    assert meta["lost_events"] == {"nvme": 0}
    stats = meta["probe_stats"]
    assert stats["mode"] == "map" and stats["completed"] == stats["rows"] == len(data)
    fio = json.loads(run.fio_json.read_text())
    fio_reads = sum(j["read"]["total_ios"] for j in fio["jobs"])
    assert abs(reads - fio_reads) <= 0.01 * fio_reads + 200  # I/Os in flight when fio was stopped
