"""A Perfetto trace of any size: written a chunk at a time and cut into files that each open alone when one would
pass the limit (present/perfetto_files.py); every file read back on its own, --window and --zones still cutting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_perfetto import LAY, layer_line, make_layers_run

from conftest import make_run
from ztbp.io.run import load
from ztbp.paths import ROOT
from ztbp.present.perfetto import export, verify
from ztbp.present.perfetto_files import part_path
from ztbp.present.perfetto_proto import packets, read_trace

SAMPLE = ROOT / "tests" / "data" / "runs" / "sample-paper80"
LIMIT = 96 * 1024


def contents(files: list[str]) -> dict[str, Any]:
    """What the files hold together, by track name: slices, the counters' values (the value each file starts
    with left out when it repeats the one before), nesting and flows."""
    slices: dict[str, int] = {}
    values: dict[str, list[tuple[int, float]]] = {}
    nesting: dict[Any, int] = {}
    flows = 0
    for f in files:
        rb = read_trace(f)
        name = {u: f"{t['name']} < {rb.tracks.get(t['parent'], {}).get('name', '')}" for u, t in rb.tracks.items()}
        for u, n in rb.slices.items():
            slices[name[u]] = slices.get(name[u], 0) + n
        for u, pts in rb.counters.items():
            seq = values.setdefault(name[u], [])
            for t, _, v in sorted(pts):
                if not (seq and seq[-1][1] == v and t >= seq[-1][0]):
                    seq.append((t, v))
        for k, n in rb.nesting.items():
            nesting[k] = nesting.get(k, 0) + n
        flows += len(rb.flows_out)
    return {"slices": slices, "values": values, "nesting": nesting, "flows": flows}


@pytest.mark.parametrize("cut", [{}, {"window_ns": (30_000_000_000, 40_000_000_000)}, {"zones": (1, 7, 11)}],
                         ids=["all", "window", "zones"])
def test_a_trace_past_the_limit_is_cut_into_files_that_each_open_alone(tmp_path: Path, cut: dict[str, Any]) -> None:
    run = load(SAMPLE)
    whole = export(run, tmp_path / "one.pftrace", **cut)
    res = export(run, tmp_path / "parts.pftrace", split_bytes=LIMIT, **cut)
    assert len(whole.files) == 1 and len(res.files) >= 3, res.files
    assert res.files[0] == str(tmp_path / "parts.pftrace") and res.files[1] == str(tmp_path / "parts.part2.pftrace")
    assert res.chunks_over_limit == 0 and max(res.file_bytes) <= LIMIT
    assert [Path(f).stat().st_size for f in res.files] == res.file_bytes and res.bytes == sum(res.file_bytes)
    chk = verify(run, res.files, split_bytes=LIMIT, **cut)
    assert chk["files"] == len(res.files) and chk["files_within_limit"] and chk["undeclared_tracks"] == 0
    assert chk["commands_per_zone_equal"] and chk["wp_final_equal"], (chk["commands_per_zone_diff"],
                                                                      chk["wp_final_diff"])
    assert chk["overlapping_command_slices"] == 0 and chk["commands"] == whole.commands == res.commands
    # together the files hold what the single file holds: every slice, every counter's changes, the same nesting
    assert contents(res.files) == contents(whole.files)
    for f in res.files:  # each file alone: its interning starts afresh, its tracks are declared, slices close
        # (a file of a few zones may hold only the queues' depth: those zones were idle meanwhile)
        rb = read_trace(f)
        first = next(packets(f))
        assert first.sequence_flags & 1 and not rb.undeclared and (rb.slices or rb.counters)


def test_flows_never_cross_files(tmp_path: Path) -> None:
    # 400 requests, each with its NVMe command 450 ns after it starts: cut into files, every flow keeps both ends
    n = 400
    layer_lines = [layer_line(10_000 * (i + 1), LAY, sector=8 * i) for i in range(n)]
    nvme = [f"{10_000 * (i + 1) + 450},5000,0,1,{i},1,2,read,{i},1,,0" for i in range(n)]
    root = make_layers_run(tmp_path / "lay", layer_lines, nvme)
    res = export(load(root), tmp_path / "lay.pftrace", split_bytes=16 * 1024)
    assert len(res.files) >= 3 and res.flows == n
    got = 0
    for f in res.files:
        rb = read_trace(f)
        assert sorted(rb.flows_out) == sorted(rb.flows_in) and not rb.undeclared
        got += len(rb.flows_out)
    assert got == n and verify(load(root), res.files)["flows_with_both_ends"]


def test_the_reader_reads_a_block_at_a_time(tmp_path: Path) -> None:
    out = tmp_path / "s.pftrace"
    export(load(SAMPLE), out)
    whole = [p.SerializeToString() for p in packets(out)]
    assert [p.SerializeToString() for p in packets(out, block=97)] == whole and len(whole) > 1000
    bad = tmp_path / "bad.pftrace"
    bad.write_bytes(out.read_bytes()[:-3])
    with pytest.raises(Exception, match="ends inside a packet"):
        list(packets(bad, block=4096))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ztbp.cli", *args], capture_output=True, text=True, check=False)


def test_cli_splits_checks_and_leaves_no_stale_part(tmp_path: Path) -> None:
    out = tmp_path / "s.pftrace"
    p = cli("perfetto", str(SAMPLE), "-o", str(out), "--split-at", "128K", "--check", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert len(res["files"]) > 2 and res["check"]["files_within_limit"] and res["check"]["commands_per_zone_equal"]
    assert all(Path(f).is_file() for f in res["files"])
    p = cli("perfetto", str(SAMPLE), "-o", str(out))  # one file now: the parts of the last export go
    assert p.returncode == 0, p.stderr
    assert out.is_file() and not part_path(out, 2).exists() and "files" not in p.stdout.split("\n")[0]
    for size in ("1K", "5G", "x"):
        p = cli("perfetto", str(SAMPLE), "-o", str(tmp_path / "bad.pftrace"), "--split-at", size)
        assert p.returncode == 2 and "--split-at" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_failed_export_leaves_no_file(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "r", [("read", 0, 8, 1000), ("read", 8, 8, 2000)])
    run = load(run_dir)
    out = tmp_path / "t.pftrace"

    def fail(done: int, total: int) -> None:
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError):
        export(run, out, split_bytes=4096, progress=fail)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]
