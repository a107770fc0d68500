"""The real VM path: one small paper80 capture in QEMU (real guest kernel, bpftrace, fio), checked end to end.

One boot for the capture (module fixture) — the whole file costs about a minute and a half under TCG.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ztbp import paths
from ztbp.acquire.vm import run_in_guest
from ztbp.cli import main
from ztbp.contract import NVME_COLUMNS, NVME_VERSION_LINE, read_meta
from ztbp.paths import RunPaths

pytestmark = pytest.mark.vm

READS = 20_000
JOBS = 8
HOT = [1, 7, 11, 15, 19]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunPaths:
    out = tmp_path_factory.mktemp("vm") / "paper80"
    proc = subprocess.run(
        [sys.executable, "-m", "ztbp.cli", "capture", "paper80", "--reads", str(READS), "--jobs", str(JOBS),
         "--out", str(out), "--timeout", "900"],
        capture_output=True, text=True, cwd=paths.ROOT)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stderr
    assert "capture complete" in proc.stdout
    return RunPaths(out)


def rows(run: RunPaths) -> list[list[str]]:
    lines = run.nvme_csv.read_text().splitlines()
    assert lines[0] == NVME_VERSION_LINE
    assert lines[1] == ",".join(NVME_COLUMNS)
    return [line.split(",") for line in lines[2:]]


def test_run_directory_follows_the_contract(run: RunPaths) -> None:
    meta = read_meta(run)
    assert meta["complete"] is True and meta["synthetic"] is False and meta["backend"] == "qemu"
    assert (meta["lba_bytes"], meta["zone_size_lba"], meta["nr_zones"]) == (4096, 8192, 64)
    assert meta["workload"]["name"] == "paper80" and meta["workload"]["reads"] == READS
    for key in ("kernel", "bpftrace", "fio", "qemu"):
        assert meta["versions"][key]
    assert run.fio_json.is_file() and run.console_log.is_file()
    zones = [z for z in run.zones_txt.read_text().splitlines() if z.strip().startswith("start:")]
    assert len(zones) == 64
    assert not (run.root / ".capture").exists()
    assert all(len(r) == len(NVME_COLUMNS) for r in rows(run))


def test_every_read_is_traced_and_nothing_lost(run: RunPaths) -> None:
    meta = read_meta(run)
    fio = json.loads(run.fio_json.read_text())
    fio_reads = sum(j["read"]["total_ios"] for j in fio["jobs"])
    traced = sum(1 for r in rows(run) if r[7] == "read")
    assert fio_reads == READS
    assert abs(traced - fio_reads) <= 0.01 * fio_reads, (traced, fio_reads)
    assert meta["lost_events"] == {"nvme": 0}
    assert meta["probe_stats"]["setups"] == meta["probe_stats"]["completed"]


def test_zone_ids_and_prefill_resets(run: RunPaths) -> None:
    meta = read_meta(run)
    zone_lba = meta["zone_size_lba"]
    data = rows(run)
    assert all(int(r[8]) // zone_lba < meta["nr_zones"] for r in data)
    resets = sorted(int(r[8]) // zone_lba for r in data if r[7] == "zone_mgmt_send" and r[10] == "reset")
    assert resets == list(range(32))  # the prefill reset zones 0..31 one by one
    assert all(int(r[11]) == 0 for r in data)  # every command succeeded
    reads = Counter(int(r[8]) // zone_lba for r in data if r[7] == "read")
    hot_share = sum(reads[z] for z in HOT) / sum(reads.values())
    assert 0.81 < hot_share < 0.85  # expected 0.8 + 0.2 * 160 / 1014 = 0.832
    assert {z for z, _ in reads.most_common(5)} == set(HOT)


def test_analysis_finds_the_hot_zones(run: RunPaths, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", str(run.root), "--json"]) == 0
    cluster = json.loads(capsys.readouterr().out)
    assert sorted(cluster["hot_zones"]) == HOT
    assert main(["cachesim", str(run.root), "--json", "--cache-mib", "16"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["zone_lru"] > sim["lru"], sim


def test_guest_harness_status_files_and_probe_dry_runs(tmp_path: Path) -> None:
    """vmtest.sh: the guest's exit status comes back, OUTDIR is writable, every probe compiles (bpftrace -d)."""
    probes = sorted(p.name for p in paths.PROBES.glob("*.bt"))
    cmd = ("cd /ztbp/src; modprobe -q btrfs; for p in probes/*.bt; do "
           "if timeout 300 bpftrace -d \"$p\" >/dev/null 2>/ztbp/out/$(basename $p).err; then echo \"$p ok\"; "
           "else echo \"$p FAIL\"; fi; done > /ztbp/out/dry-run.txt; uname -r > /ztbp/out/uname; exit 7")
    res = run_in_guest(cmd, tmp_path, timeout=900)
    assert res.status == 7
    assert (tmp_path / "uname").read_text().strip()
    assert (tmp_path / "console.log").is_file()
    results = (tmp_path / "dry-run.txt").read_text().splitlines()
    assert sorted(line.split()[0].removeprefix("probes/") for line in results) == probes
    failed = [line for line in results if not line.endswith(" ok")]
    assert not failed, [(f, (tmp_path / (Path(f.split()[0]).name + ".err")).read_text()[-500:]) for f in failed]


def test_ctrl_c_leaves_a_valid_partial_run(tmp_path: Path) -> None:
    """SIGINT during the workload: fio stops, the trace so far is saved, meta.json says complete: false.

    Stopped after 150k reads or more, so bpftrace needs several seconds to read its map of rows before it prints
    any: the capture must wait for it without signalling it again (a second SIGINT kills bpftrace)."""
    out = tmp_path / "partial"
    proc = subprocess.Popen(
        [sys.executable, "-m", "ztbp.cli", "capture", "paper80", "--reads", "1000000", "--jobs", str(JOBS),
         "--out", str(out), "--timeout", "900"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=paths.ROOT)
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        done = re.search(r"workload: ([0-9,]+)/", line)
        if done and int(done.group(1).replace(",", "")) >= 150_000:
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
    assert 150_000 <= reads < 1_000_000
    assert meta["lost_events"] == {"nvme": 0}
    stats = meta["probe_stats"]
    assert stats["mode"] == "map" and stats["completed"] == stats["rows"] == len(data)
    fio = json.loads(run.fio_json.read_text())
    fio_reads = sum(j["read"]["total_ios"] for j in fio["jobs"])
    assert abs(reads - fio_reads) <= 0.01 * fio_reads + 200  # I/Os in flight when fio was stopped
