"""The map-mode NVMe probe's output path: bpftrace's dump of @rows -> probes/nvme_zone.awk -> nvme.csv.

Runs the guest probe library's own functions (vm/guest/probe-lib.sh, sourced) on a hand-written dump, on the
host: the real probe is exercised in the VM tests (test_capture_vm.py)."""
from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import write_meta
from ztbp import paths
from ztbp.contract import NVME_COLUMNS, NVME_VERSION_LINE
from ztbp.io.nvme import ingest
from ztbp.paths import RunPaths

PROBE_LIB = paths.ROOT / "vm" / "guest" / "probe-lib.sh"
HEADER = [NVME_VERSION_LINE, ",".join(NVME_COLUMNS)]

# What bpftrace 0.17 prints for probes/nvme_zone.bt, in its own (hash) order, with the periodic counters.
DUMP = [
    "Attaching 4 probes...",
    *HEADER,
    "@completed: 2",
    "@completed: 6",
    "",
    "@completed: 7",
    "@rows[3000, 0, 2, 4129]: (3900, 900, 1, 2, 60417, 1, 0, 0)",
    "@rows[1000, 0, 1, 20]: (1400, 400, 1, 121, 8192, 0, 4, 0)",
    "@rows[2000, 0, 2, 64]: (3500, 1500, 1, 1, 8192, 32, 0, 0)",
    "@rows[1100, 0, 1, 21]: (1450, 350, 1, 121, 0, 0, 260, 0)",
    "@rows[1200, 1, 3, 7]: (1800, 600, 2, 125, 16384, 8, 0, 6)",
    "@rows[1300, 0, 1, 22]: (2000, 700, 1, 153, 0, 0, 0, 16385)",
    "@rows[4000, 0, 1, 23]: (4100, 100, 1, 2, 18446744073709551615, 1, 0, 0)",
    "",
    "@unstamped: 0",
]

EXPECTED = [  # completion order (ts + lat), names added, numbers copied exactly
    "1000,400,0,1,20,1,121,zone_mgmt_send,8192,0,reset,0",
    "1100,350,0,1,21,1,121,zone_mgmt_send,0,0,reset_all,0",
    "1200,600,1,3,7,2,125,zone_append,16384,8,,6",
    "1300,700,0,1,22,1,153,other,0,0,,16385",
    "2000,1500,0,2,64,1,1,write,8192,32,,0",
    "3000,900,0,2,4129,1,2,read,60417,1,,0",
    "4000,100,0,1,23,1,2,read,18446744073709551615,1,,0",
]


def run_capture_functions(tmp: Path, script: str) -> subprocess.CompletedProcess[str]:
    """Source probe-lib.sh with TMP = tmp, the nvme probe in map mode, and run `script` in bash."""
    return subprocess.run(["bash", "-c", f'. "{PROBE_LIB}"; TMP="{tmp}"; PROBE_MODE[nvme]=map; {script}'],
                          capture_output=True, text=True, timeout=60, check=False)


def test_map_dump_becomes_the_csv_in_completion_order(tmp_path: Path) -> None:
    (tmp_path / "nvme.out").write_text("\n".join(DUMP) + "\n")
    res = run_capture_functions(tmp_path, 'probe_extract nvme; '
                                          'echo "$(probe_counter nvme completed)/$(probe_counter nvme unstamped)"')
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "7/0"  # the last value printed
    assert (tmp_path / "nvme.csv").read_text().splitlines() == HEADER + EXPECTED


def test_converted_rows_pass_ingest(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_meta(run)
    (run / "raw").mkdir()
    (tmp_path / "nvme.out").write_text("\n".join(line for line in DUMP if "18446744073709551615" not in line) + "\n")
    res = run_capture_functions(tmp_path, "probe_extract nvme")
    assert res.returncode == 0, res.stderr
    (run / "raw" / "nvme.csv").write_text((tmp_path / "nvme.csv").read_text())
    rep = ingest(RunPaths(run))
    assert (rep.rows, rep.skipped, rep.out_of_range_zones) == (6, 0, 0)


def test_a_malformed_map_line_is_reported_not_kept(tmp_path: Path) -> None:
    dump = [*DUMP[:7], "@rows[5000, 0, 1]: (5100, 100, 1, 2, 8, 1, 0, 0)", *DUMP[7:]]
    (tmp_path / "nvme.out").write_text("\n".join(dump) + "\n")
    res = run_capture_functions(tmp_path, "probe_extract nvme")
    assert "expected 12 numbers, got 11" in res.stderr
    assert "could not convert every row" in res.stdout and "count as lost" in res.stdout
    assert (tmp_path / "nvme.csv").read_text().splitlines() == HEADER + EXPECTED


def test_a_dump_cut_short_fails_the_capture(tmp_path: Path) -> None:
    """bpftrace killed before its exit printing (no @unstamped line): the run is marked failed, not complete."""
    (tmp_path / "nvme.out").write_text("\n".join(DUMP[:6]) + "\n")  # header and progress counters only
    res = run_capture_functions(tmp_path, 'probe_extract nvme; '
                                          'echo "status=$STATUS counter=$(probe_counter nvme completed)"')
    assert "did not print its map of rows" in res.stdout
    assert "status=failed counter=6" in res.stdout
    assert (tmp_path / "nvme.csv").read_text().splitlines() == HEADER


# ---- the loop's rounds: the rows handed over raw (mapdump.py --raw), converted on the host ----------------------
def raw_rows(lines: list[str], batches: int = 2) -> bytes:
    """What vm/guest/mapdump.py --raw writes for these dump lines: its header, then `batches` batches of rows."""
    import re
    import struct

    rows = [[int(x) for x in re.findall(r"\d+", line)] for line in lines if line.startswith("@rows[")]
    out = struct.pack("<8sII", b"ZTBPROWS", 4, 8)
    step = -(-len(rows) // batches)
    for i in range(0, len(rows), step):
        part = rows[i:i + step]
        out += struct.pack("<Q", len(part)) + b"".join(struct.pack("<4Q", *r[:4]) for r in part)
        out += b"".join(struct.pack("<8Q", *r[4:]) for r in part)
    return out


def staged_round(tmp: Path, data: bytes, env: str) -> RunPaths:
    run = RunPaths(tmp / "round-01")
    (run.root / ".capture").mkdir(parents=True)
    (run.root / ".capture" / "nvme.rows").write_bytes(data)
    (run.root / ".capture" / "guest.env").write_text(env)
    return run


def test_raw_rows_become_the_same_csv_on_the_host(tmp_path: Path) -> None:
    from ztbp.acquire.mapcsv import map_rows_csv
    from ztbp.files import read_env

    run = staged_round(tmp_path, raw_rows(DUMP), "probe_nvme_mode=map\nprobe_nvme_taken=7\nblock_reads=2\n"
                                                 "status=complete\n")
    stats, error = map_rows_csv(run)
    assert error is None
    assert run.nvme_csv.read_text().splitlines() == HEADER + EXPECTED  # what the guest's probe_extract makes
    assert (stats["probe_nvme_rows"], stats["probe_nvme_read_rows"], stats["lost_events_nvme"]) == (7, 2, 0)
    env = read_env(run.root / ".capture" / "guest.env")
    assert env["lost_events_nvme"] == "0" and env["status"] == "complete"
    assert not (run.root / ".capture" / "nvme.rows").exists()


def test_a_round_short_of_rows_counts_them_lost(tmp_path: Path) -> None:
    """Reads the block layer completed without a row, and rows the guest took but the host could not convert
    (here a file cut short), are lost; the round is marked failed when its rows could not all be converted."""
    from ztbp.acquire.mapcsv import map_rows_csv
    from ztbp.files import read_env

    run = staged_round(tmp_path, raw_rows(DUMP, batches=1), "probe_nvme_taken=7\nblock_reads=5\nstatus=complete\n")
    stats, error = map_rows_csv(run)
    assert error is None and stats["lost_events_nvme"] == 3  # 5 reads, 2 rows
    run = staged_round(tmp_path / "short", raw_rows(DUMP, batches=1)[:-10], "probe_nvme_taken=7\nblock_reads=2\n"
                                                                             "status=complete\n")
    stats, error = map_rows_csv(run)
    assert error is not None and "cut short" in error
    assert stats["lost_events_nvme"] == 2 + 7  # both reads missing, and all 7 rows taken but not converted
    assert read_env(run.root / ".capture" / "guest.env")["status"] == "failed"
