"""`ztbp loop` as the VM tests run it (test_loop_vm.py on NVMeVirt, test_loop_qemu_vm.py and test_loop_zipf_vm.py on
QEMU): the real CLI in a subprocess, its loop.json read back, and the check every round of a loop must pass; `ztbp`
for the other VM tests that run the CLI in a subprocess (its output printed for the test's log)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ztbp import paths

#: reads of a round (TCG is slow; fewer give the cluster too little to find the hot zones)
READS = 20000
#: the NVMeVirt loop's A/B blocks: 2 pairs of this many reads after round 1
AB_READS = 5000
#: guest memory kept for NVMeVirt by its loop (1 GiB of storage) and its profile (4.5 GiB): one reserve, one guest
NVMEVIRT_RESERVE = ["--nvmevirt-reserve", "4608M"]
#: the device of vm-b's QEMU tests (tests/conftest.py VM_CHAINS: the fio-file and Ctrl-C captures, ztbp-ctl): the
#: default zoned namespace (/dev/nvme0n1) with a conventional one beside it (/dev/nvme0n2, nothing reads or writes
#: it), as the application, zone-cycling and layer captures of that chain ask, so they all run in one booted guest
#: instead of two (a boot of 35-50 s here)
CONV_NS = ["--conv-ns", "1G"]
#: the model's cache for 20,000 reads: at the default 64 MiB nothing is evicted and zone-LRU equals LRU
CACHE = ["--cache-mib", "16"]


def ztbp(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess from the checkout; the tail of its stdout and stderr printed."""
    proc = subprocess.run([sys.executable, "-m", "ztbp.cli", *args], capture_output=True, text=True, cwd=paths.ROOT)
    print(proc.stdout[-4000:], proc.stderr[-3000:])
    return proc


def loop(out: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = subprocess.run([str(paths.ROOT / ".venv" / "bin" / "ztbp"), "loop", *args, *CACHE, "-o", str(out), "--json"],
                          capture_output=True, text=True, check=False, timeout=3600)
    doc = json.loads((out / "loop.json").read_text()) if (out / "loop.json").is_file() else {}
    return proc, doc


def assert_rounds_whole(doc: dict[str, Any], reads: int = READS) -> None:
    """Every round complete, every fio read traced (`reads` a round, AB_READS an A/B block), nothing lost."""
    for e in doc["rounds"]:
        assert e["complete"], e
        assert e["read_rows"] == e["fio_reads"] == (AB_READS if "ab" in e else reads), e
        assert e["lost"] == 0, e
