"""`ztbp layers` on small hand-made raw/layers.csv files with known answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import make_run
from ztbp import stages
from ztbp.analysis import layers
from ztbp.contract import LAYERS_COLUMNS, LAYERS_VERSION_LINE
from ztbp.errors import FormatError, MissingRunError
from ztbp.io.run import load
from ztbp.present import tables, text

HEADER = ",".join(LAYERS_COLUMNS)
#: layer columns in file order
LCOLS = [c for c, _ in layers.LAYERS]


def lrow(ts: int, lay: list[int], *, mode: str = "sync", op: str = "read", nbytes: int = 4096,
         sector: int = 0, zone: int = -1, nrq: int = 1, stack: str = "ext4", e2e: int | None = None) -> str:
    """One layers.csv line; `lay` holds the eight layer times in Table-I order; e2e defaults to their sum."""
    assert len(lay) == 8
    e2e = sum(lay) if e2e is None else e2e
    return ",".join(str(v) for v in [ts, 100, mode, op, nbytes, "259:1", sector, zone, nrq, e2e, *lay, stack])


def make_layers_run(root: Path, lines: list[str], nvme: list[tuple[Any, ...]] = (), nvme_lines: list[str] | None = None,
                    version: str = LAYERS_VERSION_LINE) -> Path:
    make_run(root, nvme, lines=nvme_lines)
    (root / "raw" / "layers.csv").write_text("\n".join([version, HEADER, *lines]) + "\n")
    return root


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ztbp.cli", *args], capture_output=True, text=True, check=False)


# Table I of the ZTBP paper (ns): crossing 351, syscall 199, ext4 2006, BIO 379, driver 113, device 3224.
TABLE_I = [351, 199, 0, 2006, 379, 113, 3224, 0]


def test_table_i_rows_in_order_with_known_means_and_shares(tmp_path: Path) -> None:
    lines = [lrow(1000 * i, [v * (1 + i % 3) for v in TABLE_I]) for i in range(30)]  # ×1, ×2, ×3 ten times each
    root = make_layers_run(tmp_path / "r", lines)
    res = stages.layers(load(root, events=False))
    names = [r["layer"] for r in res["layers"]]
    assert names == ["kernel crossing", "syscall", "vfs", "file system", "block", "nvme driver", "device",
                     "completion"]
    by = {r["layer"]: r for r in res["layers"]}
    assert by["device"]["mean_ns"] == 3224 * 2
    assert by["device"]["p50_ns"] == 3224 * 2
    assert by["device"]["p99_ns"] == 3224 * 3
    assert by["file system"]["mean_ns"] == 2006 * 2
    total = sum(TABLE_I)
    assert by["file system"]["share"] == pytest.approx(2006 / total, abs=1e-6)
    assert sum(r["share"] for r in res["layers"]) == pytest.approx(1.0, abs=1e-5)
    s = res["sum_check"]
    assert s["residual_ns"] == 0 and s["within_tolerance"]
    assert s["e2e_mean_ns"] == total * 2
    assert res["requests"] == 30 and res["modes"] == {"sync": 30}


def test_residual_is_reported_when_end_to_end_exceeds_the_layers(tmp_path: Path) -> None:
    lay = [100, 100, 100, 100, 100, 100, 3400, 0]  # sums to 4000
    root = make_layers_run(tmp_path / "r", [lrow(i, lay, e2e=4400) for i in range(5)])
    s = stages.layers(load(root, events=False))["sum_check"]
    assert s["residual_ns"] == 400
    assert s["residual_frac"] == pytest.approx(400 / 4400, abs=1e-6)
    assert s["within_tolerance"] is False
    ok = make_layers_run(tmp_path / "ok", [lrow(i, lay, e2e=4150) for i in range(5)])
    assert stages.layers(load(ok, events=False))["sum_check"]["within_tolerance"] is True


def test_raw_device_has_no_file_system_row_and_async_has_no_vfs_row(tmp_path: Path) -> None:
    raw = make_layers_run(tmp_path / "raw", [lrow(i, [10, 10, 10, 0, 50, 5, 900, 20], stack="bdev")
                                             for i in range(4)])
    names = [r["layer"] for r in stages.layers(load(raw, events=False))["layers"]]
    assert "file system" not in names and "vfs" in names
    uring = make_layers_run(tmp_path / "uring", [lrow(i, [10, 10, 0, 30, 50, 5, 900, 20], mode="io_uring")
                                                 for i in range(4)])
    res = stages.layers(load(uring, events=False))
    assert "vfs" not in [r["layer"] for r in res["layers"]]
    assert res["sum_check"]["residual_ns"] == 0


def test_negative_rows_are_left_out_and_counted_bad_lines_skipped(tmp_path: Path) -> None:
    good = [lrow(i, [1, 1, 1, 1, 1, 1, 100, 1]) for i in range(3)]
    neg = lrow(9, [1, 1, 1, -5, 1, 1, 100, 1])
    no_dev = lrow(11, [1, 1, 1, 1, 1, 101, 0, 1])
    bad = ["1,2,sync,read", "x" + good[0], lrow(10, [1] * 8).replace(",sync,", ",weird,")]
    root = make_layers_run(tmp_path / "r", [*good, neg, no_dev, "", *bad])
    res = stages.layers(load(root, events=False))
    assert res["requests"] == 3
    assert res["excluded"]["negative_layer"] == 1 and res["excluded"]["no_device_time"] == 1
    assert res["read"]["skipped"] == 3
    assert res["read"]["reasons"] == {"wrong field count": 1, "bad value": 1, "unknown mode": 1}
    assert [(d["line"], d["reason"]) for d in res["read"]["first_skipped_lines"]] == [
        (9, "wrong field count: 4 of 19"), (10, "bad value: ts_ns is not a valid Int64"), (11, "unknown mode: weird")]


def test_groups_by_op_and_size_and_zones(tmp_path: Path) -> None:
    lines = [lrow(i, [1, 1, 1, 1, 1, 1, 100, 1], zone=i % 2, stack="btrfs") for i in range(6)]
    lines += [lrow(100 + i, [1, 1, 1, 1, 1, 1, 500, 1], op="write", nbytes=65536, zone=3, stack="btrfs")
              for i in range(2)]
    root = make_layers_run(tmp_path / "r", lines)
    res = stages.layers(load(root, events=False), by=["op", "size"])
    groups = {(g["op"], g["size"]): g for g in res["groups"]}
    assert set(groups) == {("read", 4096), ("write", 65536)}
    assert groups[("write", 65536)]["stats"]["requests"] == 2
    assert next(r for r in groups[("write", 65536)]["layers"] if r["layer"] == "device")["mean_ns"] == 500
    assert [(z["zone"], z["stats"]["requests"]) for z in res["zones"]] == [(0, 3), (1, 3), (3, 2)]
    only_reads = stages.layers(load(root, events=False), op="read")
    assert only_reads["requests"] == 6


def test_cross_check_device_time_against_nvme_lat(tmp_path: Path) -> None:
    # three reads at sectors 0, 80, 160 (LBA 0, 10, 20 with 4 KiB LBAs); the NVMe probe saw them 5 ns later
    lines = [lrow(1000 * (i + 1), [1, 1, 1, 1, 1, 1, dev, 1], sector=80 * i) for i, dev in enumerate([900, 1000, 1100])]
    nvme = [f"{1000 * (i + 1) + 5},{lat},0,1,{i},1,2,read,{10 * i},1,,0" for i, lat in enumerate([950, 1050, 1200])]
    nvme.append("99999,7,0,1,9,1,2,read,0,1,,0")  # same LBA, outside every request's window: not matched
    root = make_layers_run(tmp_path / "r", lines, nvme_lines=nvme)
    x = stages.layers(load(root, events=False))["cross_check"]
    assert x["matched"] == 3
    assert x["layers_device_p50_ns"] == 1000 and x["nvme_lat_p50_ns"] == 1050
    assert x["rel_diff"] == pytest.approx(-50 / 1050, abs=1e-6)
    assert x["within_10pct"] is True


def test_missing_layers_csv_is_a_clear_error_without_traceback(tmp_path: Path) -> None:
    root = make_run(tmp_path / "r", [("read", 0, 1)])
    with pytest.raises(MissingRunError, match="not captured in this run"):
        stages.layers(load(root, events=False))
    p = cli("layers", str(root), "--json")
    assert p.returncode == MissingRunError.code
    assert "not captured in this run" in p.stderr and "Traceback" not in p.stderr
    assert p.stdout == ""


def test_wrong_version_and_header_are_refused(tmp_path: Path) -> None:
    root = make_layers_run(tmp_path / "r", [lrow(1, [1] * 8)], version="# ztbp layers v2")
    with pytest.raises(FormatError, match="layers v2"):
        stages.layers(load(root, events=False))
    p = cli("layers", str(root))
    assert p.returncode == FormatError.code and "Traceback" not in p.stderr
    (root / "raw" / "layers.csv").write_text("# ztbp layers v1\nts_ns,op\n")
    with pytest.raises(FormatError, match="header"):
        stages.layers(load(root, events=False))
    assert cli("layers", str(root), "--by", "colour").returncode == 2


def test_cli_json_feeds_the_report_view(tmp_path: Path) -> None:
    lines = [lrow(i, TABLE_I, zone=i % 4, stack="btrfs") for i in range(8)]
    root = make_layers_run(tmp_path / "r", lines, [("read", 0, 1)])
    p = cli("layers", str(root), "--json", "--by", "op,size")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert [g["op"] for g in res["groups"]] == ["read"]
    view = tables.layers_view(load(root))
    assert view["status"] == "ok"
    assert [r["layer"] for r in view["layers"]] == [r["layer"] for r in res["layers"]]
    assert len(view["zones"]) == 4
    assert f"mean end-to-end {sum(TABLE_I) / 1000:.1f} µs" in text.layers_view_text(view)


def test_text_output_names_the_residual(tmp_path: Path) -> None:
    root = make_layers_run(tmp_path / "r", [lrow(i, TABLE_I) for i in range(3)])
    p = cli("layers", str(root))
    assert p.returncode == 0
    assert "residual 0.00 µs (0.00%, within 5%)" in p.stdout
    assert p.stdout.splitlines()[2].startswith("kernel crossing")



def test_bench_and_fio_comparison(tmp_path: Path) -> None:
    root = make_layers_run(tmp_path / "r", [lrow(i, TABLE_I) for i in range(4)])
    (root / "raw" / "bench.json").write_text(json.dumps({
        "engine": "psync", "iodepth": 1, "fs": "ext4", "runtime_s": 5, "iops_without": [1000.0, 1200.0],
        "iops_with": [550.0, 550.0], "lost_events_with": [0, 3]}))
    fio = {"jobs": [{"jobname": "randread", "read": {"total_ios": 100, "iops": 50.0, "bw_bytes": 1,
                                                       "clat_ns": {"mean": 2 * sum(TABLE_I)}}}]}
    (root / "raw" / "fio.json").write_text(json.dumps(fio))
    res = stages.layers(load(root, events=False))
    b = res["bench"]
    assert b["iops_without"] == 1100.0 and b["iops_with"] == 550.0 and b["ratio"] == 0.5
    assert b["lost_events_with"] == [0, 3] and b["rounds"] == 2
    # per-round ratios 0.55 and 0.4583: sample sd 0.0648; runs without: sd 141.42 over mean 1100 = 0.1286
    assert b["ratio_sd"] == pytest.approx(0.0648, abs=1e-4) and b["without_cv"] == pytest.approx(0.1286, abs=1e-4)
    assert res["fio"]["clat_mean_ns"] == 2 * sum(TABLE_I) and res["fio"]["kernel_e2e_over_fio_clat"] == 0.5
    shown = text.layers_text(res)
    assert "ratio 0.500 (per-round ratios ± 0.065; runs without it vary by 12.9%)" in shown
    assert "covers 50.0%" in shown
    (root / "raw" / "bench.json").write_text("{}")
    with pytest.raises(FormatError, match="bench-layers"):
        stages.layers(load(root, events=False))
