"""`ztbp capture --fio-file`: a user's small job file traced in the VM (one boot, a minute or two under TCG): every
read fio did has its row, nothing is lost, the reads stay where the job put them, and meta.json says the file drove
the run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from loop_run import CONV_NS

from ztbp import paths
from ztbp.contract import NVME_COLUMNS, NVME_VERSION_LINE, read_meta
from ztbp.paths import RunPaths

pytestmark = pytest.mark.vm

JOBS, PER_JOB = 2, 1500
READS = JOBS * PER_JOB
REGION = 256 << 20  # the job reads the first 256 MiB (zones 0..7), which the preset's prefill wrote
JOB = f"""; a user's job: {READS} psync 4 KiB random reads
[global]
filename=/dev/sdz
ioengine=psync
direct=1
thread=1
bs=4k
randrepeat=0
norandommap=1

[mine]
rw=randread
offset=0
size={REGION}
numjobs={JOBS}
number_ios={PER_JOB}
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunPaths:
    tmp = tmp_path_factory.mktemp("fiofile")
    job = tmp / "mine.fio"
    job.write_text(JOB)
    out = tmp / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "ztbp.cli", "capture", "--fio-file", str(job), "--reads", str(READS), "--out",
         str(out), "--timeout", "900", *CONV_NS], capture_output=True, text=True, cwd=paths.ROOT)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stderr
    assert "capture complete" in proc.stdout
    return RunPaths(out)


def test_rows_traced_equal_fio_reads_and_nothing_is_lost(run: RunPaths) -> None:
    meta = read_meta(run)
    fio = json.loads(run.fio_json.read_text())
    fio_reads = sum(j["read"]["total_ios"] for j in fio["jobs"])
    lines = run.nvme_csv.read_text().splitlines()
    assert lines[:2] == [NVME_VERSION_LINE, ",".join(NVME_COLUMNS)]
    reads = [r.split(",") for r in lines[2:] if r.split(",")[7] == "read"]
    assert fio_reads == READS == meta["fio"]["read_ios"]
    assert len(reads) == fio_reads, (len(reads), fio_reads)
    assert meta["lost_events"] == {"nvme": 0} and meta["complete"] is True
    lba = meta["lba_bytes"]
    assert all(int(r[8]) * lba < REGION and int(r[9]) * lba == 4096 for r in reads)  # where the job read


def test_meta_says_the_job_file_drove_the_run(run: RunPaths) -> None:
    wl = read_meta(run)["workload"]
    assert wl["name"] == wl["kind"] == "fio-file" and wl["preset"] == "paper80" and "hot_zones" not in wl
    assert Path(wl["file"]).name == "mine.fio" and wl["prefill_zones"] == [0, 32]
