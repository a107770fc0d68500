"""The real VM path: one small paper80 capture in QEMU's default device (real guest kernel, bpftrace, fio), checked
end to end. (`ztbp capture-host --json` with the streaming probe on a zoned namespace run as a real drive is
tests/test_host_path_vm.py's, from the wheel; the guest battery is test_battery_vm.py; the Ctrl-C capture is
test_capture_ctrl_c_vm.py.)

One shared guest runs the capture and QEMU's profile (several minutes under TCG in all).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from ztbp import paths
from ztbp.cli import main
from ztbp.contract import NVME_COLUMNS, NVME_VERSION_LINE, read_meta
from ztbp.io.fio import read_fio
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
    assert meta["probes"]["nvme"] == {"file": "raw/nvme.csv", "version": 1, "attach": "fentry",
                                      "script": "probes/nvme_zone.bt"}
    assert meta["probe_stats"]["mode"] == "map"
    assert meta["probe_stats"]["max_rows"] >= 1.5 * READS  # sized from the expected commands (probe-lib.sh)
    # fio ran with --output-format=json+: exact percentiles from the latency histograms of its job entries
    assert meta["fio"]["clat_percentiles_from"] == "histogram of all jobs (json+)"
    assert 0 < meta["fio"]["read_clat_p50_us"] <= meta["fio"]["read_clat_p99_us"]
    assert all(j["read"]["clat_ns"]["bins"] for j in read_fio(run.fio_json)["jobs"])
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
