"""The real VM path: one small paper80 capture in QEMU (real guest kernel, bpftrace, fio), checked end to end; and
in one more boot (the guest battery), what needs the guest but no capture of its own: the harness's status files,
the layer probe with a deliberately tiny map counts every request it leaves without a row, and numpy sorts right on
the CPU the guest emulates. (`ztbp capture-host --json` with the streaming probe on a zoned namespace run as a real
drive is tests/test_host_path_vm.py's, from the wheel.)

One shared guest runs the two, the capture and the battery, with QEMU's profile (several minutes under TCG in all);
the Ctrl-C capture is test_capture_ctrl_c_vm.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ztbp import paths
from ztbp.acquire.layers import LAYER_SCRIPTS
from ztbp.acquire.meta import finish_meta, guest_env_file, probe_meta
from ztbp.acquire.vm import GuestResult, run_in_guest
from ztbp.cli import main
from ztbp.contract import NVME_COLUMNS, NVME_VERSION_LINE, new_meta, read_meta, write_meta
from ztbp.files import read_env
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


# ---- the guest battery: one boot ----------------------------------------------------------------------------
#: int arrays of every size from 2 to 1,499 argsorted by numpy: how many came back out of order
ARGSORT = ("import os, numpy as np; rng = np.random.default_rng(1); "
           "bad = sum(not (np.diff(a[a.argsort(kind='quicksort')]) >= 0).all() "
           "for a in (rng.integers(-1, 6, n) for n in range(2, 1500))); "
           "print(os.environ.get('NPY_DISABLE_CPU_FEATURES'), bad)")
TINY_MAP = 4  # keys of every layer-probe map: far fewer than the requests in flight
TINY_JOBS = 5  # psync readers; with fio's own process and bpftrace, never more than TINY_MAP waiting for room
BATTERY = f"""
set -u
O=/ztbp/out
cd /ztbp/src
modprobe -q ext4; modprobe -q btrfs
# 1. the harness (every probe is compiled and attached on both suites by tests/test_one_liners_vm.py)
uname -r > "$O/uname"
# 2. the layer probe with a tiny map: what it cannot hold must be counted, not vanish
ZTBP_OUT="$O/tiny" ZTBP_FS=raw ZTBP_ENGINE=psync ZTBP_JOBS={TINY_JOBS} ZTBP_READS=1500 ZTBP_SIZE=64M \
	ZTBP_PROBES=layers ZTBP_MAX_ROWS={TINY_MAP} bash vm/guest/layers-capture.sh > "$O/tiny.log" 2>&1
echo $? > "$O/tiny.rc"
# 3. numpy on the CPU QEMU emulates, from the host's venv (same Python minor version), with the package imported
# first (its guard: QEMU's AVX2 emulation runs numpy's argsort wrongly, should a --cpu offer AVX2)
SITE=/ztbp/src/.venv/lib/python$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')/site-packages
if [ -d "$SITE" ]; then
	PYTHONPATH="/ztbp/src/pipelines:$SITE" PYTHONDONTWRITEBYTECODE=1 python3 -c "import ztbp
{ARGSORT}" >> "$O/numpy.txt" 2>&1 || echo "exit $?" >> "$O/numpy.txt"
else
	echo "no $SITE: the host's .venv is for another Python than the guest's $(python3 -V)" > "$O/numpy.skip"
fi
exit 7
"""


@pytest.fixture(scope="module")
def battery(tmp_path_factory: pytest.TempPathFactory) -> tuple[GuestResult, Path]:
    out = tmp_path_factory.mktemp("battery")
    (out / "battery.sh").write_text(BATTERY)
    res = run_in_guest("bash /ztbp/out/battery.sh", out, timeout=1500)
    return res, out


def test_guest_harness_status_files(battery: tuple[GuestResult, Path]) -> None:
    """vmtest.sh: the guest's exit status comes back, OUTDIR is writable, the console is kept."""
    res, out = battery
    assert res.status == 7
    assert (out / "uname").read_text().strip()
    assert (out / "console.log").is_file()


def test_a_tiny_layer_map_loses_nothing_uncounted(battery: tuple[GuestResult, Path]) -> None:
    """probes/layers.bt with every map sized for TINY_MAP keys while more requests are in flight: each request
    without a row is counted, none vanishes. The probe counts for sure (@lost) the requests it saw reach the namespace
    untracked, and apart (@unsure) the calls it could not even mark, which may be any read or write on the machine:
    fio's requests lie between rows + lost - unsure and rows + lost."""
    _, out = battery
    log = (out / "tiny.log").read_text(errors="replace")
    assert (out / "tiny.rc").read_text().strip() == "0", log[-3000:]
    run = RunPaths(out / "tiny")
    genv = read_env(guest_env_file(run))
    assert genv["probe_layers_max_rows"] == str(TINY_MAP)
    fio_ios = sum(j["read"]["total_ios"] for j in read_fio(run.fio_json)["jobs"])
    rows = len(run.probe_csv("layers").read_text().splitlines()) - 2
    dropped, lost = int(genv["probe_layers_dropped"]), int(genv["lost_events_layers"])
    unsure = int(genv["probe_layers_unsure"])
    assert rows > 0 and dropped > 0, (rows, dropped, fio_ios)  # the map did fill
    # at least the requests counted for sure; at most everything counted (with the perf buffer's losses and the
    # program runs the kernel skipped, each possibly a request)
    assert rows + dropped - unsure <= fio_ios <= rows + lost, (rows, lost, dropped, unsure, fio_ios)
    # the same numbers reach meta.json through the capture's own code
    meta = new_meta(device="nvme0n1", lba_bytes=4096, zone_size_lba=8192, zone_cap_lba=8192, nr_zones=64,
                    synthetic=False, workload={"name": "tiny"}, backend="qemu",
                    probes={"layers": probe_meta("layers", LAYER_SCRIPTS["layers"])})
    write_meta(run, meta)
    finish_meta(run, meta, 0, False, 0.0, {})
    m = read_meta(run)
    assert m["lost_events"] == {"layers": lost} and m["layer_stats"]["rows"] == rows
    assert m["layer_stats"]["dropped"] == dropped and m["layer_stats"]["unsure"] == unsure
    print(f"tiny map: {fio_ios} requests, {rows} rows, {lost} lost ({dropped} counted by the probe, {unsure} of "
          "them maybe not requests)")


def test_numpy_sorts_right_on_the_emulated_cpu(battery: tuple[GuestResult, Path]) -> None:
    """The cause of the host path's SIGSEGV in the guest: QEMU's TCG runs numpy's AVX2 argsort wrongly (arrays out
    of order; np.unique died in `ztbp cluster`). Imported first, the package keeps numpy to its SSE kernels there:
    every array in order. (The guests' CPU has no AVX (vm/vmtest.sh), so numpy without the guard sorts right
    there too; the guard stays for a --cpu with AVX2; its unit tests are tests/test_emulated_cpu.py.)"""
    _, out = battery
    if (out / "numpy.skip").is_file():
        pytest.skip((out / "numpy.skip").read_text().strip())
    lines = (out / "numpy.txt").read_text().splitlines()
    assert lines == ["X86_V3 X86_V4 0"], lines  # the guard's setting, no array out of order
