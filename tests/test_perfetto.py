"""`ztbp perfetto`: a run as a Perfetto TrackEvent trace, read back with the perfetto package's own protos.

Known answers on hand-made runs (lanes, write pointers, queue depth, nested layer slices and their flows), the
committed sample capture exported and checked command by command per zone, the filters, and the errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from conftest import make_run, row
from ztbp.analysis.timeline import (
    assign_lanes,
    layer_slices,
    queue_depth,
    write_pointers,
)
from ztbp.contract import LAYERS_COLUMNS, LAYERS_VERSION_LINE
from ztbp.errors import ZtbpError
from ztbp.io.run import load
from ztbp.paths import ROOT
from ztbp.present import figures
from ztbp.present.perfetto import export, verify
from ztbp.present.perfetto_proto import read_trace

SAMPLE = ROOT / "tests" / "data" / "runs" / "sample-paper80"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ztbp.cli", *args], capture_output=True, text=True, check=False)


# --- pure parts ------------------------------------------------------------------------------------------------


def test_overlapping_intervals_take_the_lowest_free_lane_per_key() -> None:
    key = np.array([0, 0, 0, 0, 1, 1])
    start = np.array([0, 5, 10, 12, 0, 100])
    end = np.array([10, 15, 20, 13, 50, 150])
    # [0,10) lane 0; [5,15) lane 1; [10,20) reuses lane 0 (free at 10); [12,13) finds both busy -> lane 2
    assert assign_lanes(key, start, end).tolist() == [0, 1, 0, 2, 0, 0]
    back_to_back = assign_lanes(np.zeros(4), np.arange(4) * 10, np.arange(4) * 10 + 10)
    assert back_to_back.tolist() == [0, 0, 0, 0]  # negative control: nothing overlaps
    unsorted = assign_lanes(np.array([0, 0]), np.array([5, 0]), np.array([15, 10]))
    assert unsorted.tolist() == [1, 0]


def final_write_pointers(events: pl.DataFrame, nr_zones: int, zone_size_lba: int, zone_cap_lba: int
                         ) -> dict[int, int]:
    """Zone -> its write pointer after the last command of the trace that moved it (zones never moved are absent)."""
    wp = write_pointers(events, nr_zones, zone_size_lba, zone_cap_lba)
    last = wp.group_by("zone").agg(pl.col("wp_lba").last())
    return {int(z): int(w) for z, w in last.iter_rows()}


def _events(run: Path) -> Any:
    return load(run).events


def test_write_pointers_follow_resets_writes_appends_and_finishes(tmp_path: Path) -> None:
    z = 8192  # zone size in LBAs (conftest geometry), capacity 8192
    reqs = [("zone_mgmt_send", 0, 0, 1000, 1, "reset"), ("write", 0, 8), ("write", 8, 8), ("zone_append", 0, 4),
            ("write", z, 16), ("zone_mgmt_send", z, 0, 1000, 1, "finish"),
            ("zone_append", 2 * z, 3), ("zone_append", 2 * z, 5), ("read", 3 * z, 8)]
    root = make_run(tmp_path / "r", reqs)
    ev = _events(root)
    assert final_write_pointers(ev, 64, z, 8192) == {0: 20, 1: 8192, 2: 8}
    wp = write_pointers(ev, 64, z, 8192)
    assert wp.filter(pl.col("zone") == 0)["wp_lba"].to_list() == [0, 8, 16, 20]
    # a select-all reset sets every zone to 0; a failed write moves nothing
    lines = [row("write", 0, 8, 10), row("zone_mgmt_send", 0, 0, 5000, action="reset_all"),
             row("write", z, 4, 9000), row("write", 2 * z, 4, 9500).rsplit(",", 1)[0] + ",6"]
    ev2 = _events(make_run(tmp_path / "all", lines=lines))
    fw = final_write_pointers(ev2, 64, z, 8192)
    assert len(fw) == 64 and fw[0] == 0 and fw[1] == 4 and fw[2] == 0
    assert final_write_pointers(_events(make_run(tmp_path / "reads", [("read", 0, 8)])), 64, z, 8192) == {}


def test_queue_depth_counts_commands_in_flight_per_queue(tmp_path: Path) -> None:
    lines = ["100,50,0,1,1,1,2,read,0,1,,0", "120,100,0,1,2,1,2,read,8,1,,0", "150,10,0,1,3,1,2,read,16,1,,0",
             "130,10,0,2,1,1,2,read,24,1,,0"]
    qd = queue_depth(_events(make_run(tmp_path / "r", lines=lines)))
    q1 = qd.filter(pl.col("qid") == 1)
    # +1 at 100, +1 at 120, at 150 the first completes before the third is submitted, 160, 220
    assert list(zip(q1["t_ns"].to_list(), q1["depth"].to_list(), strict=True)) == [
        (100, 1), (120, 2), (150, 1), (150, 2), (160, 1), (220, 0)]
    assert qd.filter(pl.col("qid") == 2)["depth"].to_list() == [1, 0]


# --- layer runs ----------------------------------------------------------------------------------------------


def layer_line(ts: int, lay: dict[str, int], **kw: Any) -> str:
    """One raw/layers.csv line of probes/FORMAT.md; layer times by column name, e2e their sum by default."""
    vals: dict[str, Any] = {"ts_ns": ts, "tid": 100, "mode": "sync", "op": "read", "bytes": 4096, "dev": "259:1",
                            "sector": 0, "zone": 0, "nrq": 1, "stack": "bdev"}
    vals.update({c: 0 for c in LAYERS_COLUMNS if c.endswith("_ns") and c not in ("ts_ns", "e2e_ns")})
    vals.update(lay)
    vals.update(kw)
    vals.setdefault("e2e_ns", sum(v for k, v in lay.items()))
    return ",".join(str(vals[c]) for c in LAYERS_COLUMNS)


LAY = {"crossing_ns": 100, "syscall_ns": 50, "vfs_ns": 30, "block_ns": 200, "driver_ns": 70, "device_ns": 5000,
       "completion_ns": 400}


def make_layers_run(root: Path, layer_lines: list[str], nvme_lines: list[str]) -> Path:
    make_run(root, lines=nvme_lines)
    (root / "raw" / "layers.csv").write_text("\n".join([LAYERS_VERSION_LINE, ",".join(LAYERS_COLUMNS),
                                                         *layer_lines]) + "\n")
    return root


def test_layer_slices_nest_the_down_path_and_put_the_completion_after_the_device() -> None:
    rows = pl.DataFrame({c: [v] for c, v in {"ts_ns": 1000, "e2e_ns": 5850, "completion_ns": 400, "fs_ns": 0,
                                            **{k: v for k, v in LAY.items() if k != "completion_ns"}}.items()})
    s = {n: (d, a, b) for n, d, a, b in layer_slices(rows).select("name", "depth", "start_ns", "end_ns").iter_rows()}
    assert s["request"] == (0, 1000, 1000 + 5850)
    assert s["kernel crossing"] == (1, 1000, 1000 + 5450)
    assert s["syscall"] == (2, 1100, 6450) and s["vfs"] == (3, 1150, 6450)
    assert "file system" not in s  # no time in it: left out, the block layer nests directly in vfs
    assert s["block"] == (4, 1180, 6450) and s["nvme driver"] == (5, 1380, 6450)
    assert s["device"] == (6, 1450, 6450)
    assert s["completion"] == (1, 6450, 6850)


def test_layer_run_exports_nested_requests_linked_to_their_commands_by_flows(tmp_path: Path) -> None:
    # three 4 KiB reads at LBA 0, 10, 20 (sectors 0, 80, 160); the NVMe probe saw each 450 ns after its start
    layer_lines = [layer_line(1000 * (i + 1) * 10, LAY, sector=80 * i) for i in range(3)]
    layer_lines.append(layer_line(35_000, LAY, sector=8 * 4096, tid=100))  # overlaps the third: a second lane
    nvme = [f"{1000 * (i + 1) * 10 + 450},5000,0,1,{i},1,2,read,{10 * i},1,,0" for i in range(3)]
    nvme.append("99999,7,0,1,9,1,2,read,0,1,,0")  # outside every request's window: no flow
    root = make_layers_run(tmp_path / "lay", layer_lines, nvme)
    out = tmp_path / "lay.pftrace"
    res = export(load(root), out)
    assert res.requests == 4 and res.flows == 3
    assert res.skipped == {"layer_requests_without_command": 1}
    rb = read_trace(out, keep_args=100)
    assert sorted(rb.flows_out) == sorted(rb.flows_in) == [1, 2, 3]
    starts = [a for a in rb.args if a["flow_ids"]]
    ends = [a for a in rb.args if a["terminating_flow_ids"]]
    assert {a["name"] for a in starts} == {"device"} and {a["name"] for a in ends} == {"read"}
    assert sorted(a["args"]["slba"] for a in ends) == [0, 10, 20]
    n = rb.nesting
    assert n[("read request", 0, "")] == 4
    assert n[("kernel crossing", 1, "read request")] == 4 and n[("completion", 1, "read request")] == 4
    assert n[("syscall", 2, "kernel crossing")] == 4 and n[("vfs", 3, "syscall")] == 4
    assert n[("block", 4, "vfs")] == 4 and n[("nvme driver", 5, "block")] == 4 and n[("device", 6, "nvme driver")] == 4
    req = next(a for a in rb.args if a["name"] == "read request")
    assert req["args"]["mode"] == "sync" and req["args"]["tid"] == 100 and req["args"]["e2e_ns"] == 5850
    tid_lanes = [u for u, t in rb.tracks.items() if t["name"] == "tid 100"]
    assert len(tid_lanes) == 2  # the overlapping request sits on a sibling lane with the same merge key
    chk = verify(load(root), out)
    assert chk["flows_with_both_ends"] and chk["commands_per_zone_equal"]
    no_layers = export(load(root), tmp_path / "plain.pftrace", layers=False)
    assert no_layers.requests == 0 and not read_trace(tmp_path / "plain.pftrace").flows_out


def test_a_flow_whose_command_is_filtered_out_is_not_written(tmp_path: Path) -> None:
    # the first command (t = 1000) anchors the window; the request starts inside it, its command just after it
    layer_lines = [layer_line(50_000, LAY, sector=0)]
    nvme = ["1000,100,0,1,1,1,2,read,800,1,,0", "50450,5000,0,1,2,1,2,read,0,1,,0"]
    root = make_layers_run(tmp_path / "lay", layer_lines, nvme)
    res = export(load(root), tmp_path / "w.pftrace", window_ns=(0, 49_300))
    rb = read_trace(tmp_path / "w.pftrace")
    assert res.commands == 1 and res.requests == 1 and res.flows == 0
    assert res.skipped == {"layer_requests_without_command": 1}
    assert rb.flows_out == rb.flows_in == []
    whole = export(load(root), tmp_path / "all.pftrace")
    assert whole.flows == 1 and read_trace(tmp_path / "all.pftrace").flows_in == [1]


# --- the committed capture -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    out = tmp_path_factory.mktemp("pf") / "sample.pftrace"
    return export(load(SAMPLE), out), out


def test_sample_run_reads_back_command_for_command(sample_trace: tuple[Any, Path]) -> None:
    res, out = sample_trace
    run = load(SAMPLE)
    chk = verify(run, out)
    assert res.commands == run.events.height == chk["commands"] == 38226
    assert chk["commands_per_zone_equal"], chk["commands_per_zone_diff"]
    assert chk["wp_final_equal"] and chk["wp_zones"] == 32, chk["wp_final_diff"]
    assert chk["flows"] == 0 and chk["flows_with_both_ends"]
    assert chk["overlapping_command_slices"] == 0
    rb = read_trace(out, keep_args=40)
    resets = [a for a in rb.args if a["name"] == "reset"]
    assert len(resets) == 32 and resets[0]["args"] == {"op": "zone_mgmt_send", "slba": 0, "nlb": 0, "status": 0,
                                                        "lat_ns": resets[0]["args"]["lat_ns"]}
    write = next(a for a in rb.args if a["name"] == "write")
    assert set(write["args"]) == {"op", "slba", "nlb", "status", "lat_ns"} and write["args"]["nlb"] == 32
    depth = rb.counter_finals(" depth")
    assert set(depth) == {"nvme0 q1 depth", "nvme0 q2 depth"} and set(depth.values()) == {0}
    assert res.bytes == out.stat().st_size


def test_interning_keeps_the_trace_small(sample_trace: tuple[Any, Path], tmp_path: Path) -> None:
    res, _ = sample_trace
    plain = export(load(SAMPLE), tmp_path / "plain.pftrace", intern=False)
    assert res.bytes < 0.85 * plain.bytes
    assert verify(load(SAMPLE), tmp_path / "plain.pftrace")["commands_per_zone_equal"]


def test_window_and_zone_filters(tmp_path: Path) -> None:
    run = load(SAMPLE)
    out = tmp_path / "w.pftrace"
    res = export(run, out, window_ns=(34_000_000_000, 34_050_000_000), zones=(1, 7))
    t0 = int(run.events["ts_ns"].min())
    want = run.events.filter(pl.col("zone").is_in([1, 7]) & (pl.col("ts_ns") >= t0 + 34_000_000_000)
                             & (pl.col("ts_ns") < t0 + 34_050_000_000))
    assert 0 < res.commands == want.height < 1000
    chk = verify(run, out, window_ns=(34_000_000_000, 34_050_000_000), zones=(1, 7))
    assert chk["commands_per_zone_equal"] and chk["zones"] == 2 and chk["wp_final_equal"]
    rb = read_trace(out)
    assert set(rb.slices_per_zone()) == {1, 7}
    # the counters start at the window with the value they had there
    for u, t in rb.tracks.items():
        if t["counter"] and rb.counters.get(u):
            assert min(rb.counters[u])[0] == t0 + 34_000_000_000
    assert rb.counter_finals(" wp") == {"zone 1 wp": 8192, "zone 7 wp": 8192}
    with pytest.raises(ZtbpError, match="no command in this window"):
        export(run, tmp_path / "x.pftrace", window_ns=(100_000_000_000, None))
    with pytest.raises(ZtbpError, match="zones 64"):
        export(run, tmp_path / "x.pftrace", zones=(64,))


def test_cli_writes_checks_and_explains_bad_input(tmp_path: Path) -> None:
    out = tmp_path / "s.pftrace"
    p = cli("perfetto", str(SAMPLE), "-o", str(out), "--window", "34s:34.01s", "--check", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["check"]["commands_per_zone_equal"] and res["bytes"] == out.stat().st_size > 0
    for args, msg in ((["--window", "5s"], "START:END"), (["--window", "2s:1s"], "after the start"),
                      (["--zones", "1,x"], "comma-separated"), (["--window", "99s:100s"], "no command")):
        p = cli("perfetto", str(SAMPLE), "-o", str(tmp_path / "bad.pftrace"), *args)
        assert p.returncode == 2 and msg in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "bad.pftrace").exists()
    p = cli("perfetto", str(tmp_path / "nothing-here"))
    assert p.returncode != 0 and "Traceback" not in p.stderr


def test_static_timeline_figure_of_a_window() -> None:
    run = load(SAMPLE)
    fig = figures.command_timeline(run.events, run.nr_zones, 34.0, 0.005, zones=(1, 7, 11))
    assert not isinstance(fig, figures.Note)
    t0 = int(run.events["ts_ns"].min())
    want = run.events.filter(pl.col("zone").is_in([1, 7, 11]) & (pl.col("ts_ns") >= t0 + 34_000_000_000)
                             & (pl.col("ts_ns") < t0 + 34_005_000_000)).height
    assert sum(len(t.x) for t in fig.data) == want > 0
    assert list(fig.layout.yaxis.ticktext) == ["zone 1", "zone 7", "zone 11"]
    assert isinstance(figures.command_timeline(run.events, run.nr_zones, 500.0, 0.01), figures.Note)
    assert isinstance(figures.command_timeline(run.events, run.nr_zones, 0.0, 40.0), figures.Note)  # too many


TP_BIN = os.environ.get("ZTBP_TRACE_PROCESSOR", "")


@pytest.mark.skipif(not Path(TP_BIN).is_file(), reason="no trace_processor_shell (set ZTBP_TRACE_PROCESSOR): the "
                    "perfetto package downloads it on first use, and this machine cannot download it")
def test_trace_processor_reads_the_same_counts(sample_trace: tuple[Any, Path]) -> None:
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    _, out = sample_trace
    run = load(SAMPLE)
    with TraceProcessor(trace=str(out), config=TraceProcessorConfig(bin_path=TP_BIN)) as tp:
        rows = tp.query("select t.name as name, count(*) as n from slice s join track t on s.track_id = t.id "
                        "where t.name like 'zone %' group by t.name")
        got = {int(r.name.split()[1]): int(r.n) for r in rows}
        assert got == {int(z): int(n) for z, n in run.events.group_by("zone").len().iter_rows()}
        last = tp.query("select t.name as name, c.value as v from counter c join track t on c.track_id = t.id "
                        "where t.name like '% wp' order by c.ts")
        finals = {int(r.name.split()[1]): int(r.v) for r in last}
        assert finals == final_write_pointers(run.events, run.nr_zones, run.zone_size_lba, run.meta["zone_cap_lba"])


def test_report_index_links_the_trace_and_says_how_to_open_it(tmp_path: Path) -> None:
    from ztbp.report import render

    run = load(SAMPLE)
    trace = render.timeline_trace(run, tmp_path, log=lambda s: None)
    assert trace["file"] == "sample-paper80.pftrace" and trace["commands"] == 38226
    assert verify(run, tmp_path / trace["file"])["commands_per_zone_equal"]
    page = render.index_html(run.paths, run.meta, [], trace)
    assert 'href="sample-paper80.pftrace"' in page and "ui.perfetto.dev" in page and "trace_processor" in page
    failed = render.index_html(run.paths, run.meta, [], {"file": None, "error": "no command"})
    assert "not written: no command" in failed
    assert "pftrace" not in render.index_html(run.paths, run.meta, [])
