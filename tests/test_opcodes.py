"""`ztbp opcodes` on small hand-made NVMe traces with known answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ztbp.analysis import opcodes
from ztbp.io.nvme import load_events
from ztbp.paths import resolve_run


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ztbp.cli", *args], capture_output=True, text=True, check=False)


def test_counts_percentiles_and_order_per_op_and_zone_action(run_factory) -> None:
    # 101 reads of 1..101 µs: the percentile at q is the value at index round(q × 100) (nearest rank)
    reqs = [("read", 8 * i, 1, lat) for i, lat in enumerate(range(1000, 102_000, 1000))]
    reqs += [("zone_append", 8192, 8, 20_000), ("zone_append", 8192, 8, 40_000)]
    reqs += [("zone_mgmt_send", 0, 0, 3_000_000, 1, "reset"), ("zone_mgmt_send", 8192, 0, 5_000_000, 1, "reset"),
             ("zone_mgmt_send", 0, 0, 700_000, 1, "finish"), ("zone_mgmt_send", 0, 0, 9_000_000, 1, "reset_all")]
    reqs += [("zone_mgmt_recv", 0, 0, 50_000), ("write", 0, 2, 30_000)]
    root = run_factory(list(reversed(reqs)))
    table = opcodes.opcode_table(load_events(resolve_run(root)), 4096)
    keys = [(r["op"], r["zone_action"]) for r in table.iter_rows(named=True)]
    assert keys == [("read", ""), ("write", ""), ("zone_append", ""), ("zone_mgmt_send", "finish"),
                    ("zone_mgmt_send", "reset"), ("zone_mgmt_send", "reset_all"), ("zone_mgmt_recv", "")]
    by = {(r["op"], r["zone_action"]): r for r in table.iter_rows(named=True)}
    rd = by[("read", "")]
    assert rd["count"] == 101 and rd["bytes"] == 101 * 4096 and rd["errors"] == 0
    assert rd["mean_ns"] == 51_000 and rd["max_ns"] == 101_000
    assert rd["p50_ns"] == 51_000 and rd["p90_ns"] == 91_000 and rd["p99_ns"] == 100_000
    assert rd["p999_ns"] == 101_000
    assert by[("zone_append", "")]["bytes"] == 2 * 8 * 4096 and by[("zone_append", "")]["mean_ns"] == 30_000
    assert by[("zone_mgmt_send", "reset")]["count"] == 2
    assert by[("zone_mgmt_send", "reset")]["max_ns"] == 5_000_000
    assert by[("zone_mgmt_send", "reset_all")]["count"] == 1


def test_errors_are_counted_from_the_status(run_factory) -> None:
    lines = ["1000,500,0,1,1,1,125,zone_append,0,1,,0", "2000,700,0,1,2,1,125,zone_append,0,1,,441",
             "3000,900,0,1,3,1,125,zone_append,0,1,,0"]
    root = run_factory(lines=lines)
    p = cli("opcodes", str(root), "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["commands"] == 3
    [entry] = res["opcodes"]
    assert entry["op"] == "zone_append" and entry["errors"] == 1 and entry["p50_ns"] == 700
    assert set(entry) == set(opcodes.KEYS)


def test_empty_trace_and_op_filter(run_factory) -> None:
    empty = run_factory([])
    p = cli("opcodes", str(empty))
    assert p.returncode == 0 and "no NVMe I/O command" in p.stdout
    root = run_factory([("read", 0, 1, 10), ("write", 0, 1, 20)])
    res = json.loads(cli("opcodes", str(root), "--json", "--op", "write").stdout)
    assert [e["op"] for e in res["opcodes"]] == ["write"]


def test_missing_run_is_a_clear_error(tmp_path: Path) -> None:
    p = cli("opcodes", str(tmp_path / "nope"))
    assert p.returncode == 4 and "does not exist" in p.stderr and "Traceback" not in p.stderr
