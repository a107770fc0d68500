"""I/Os per application operation, per-file layout and cache rates on small synthetic frames with known answers."""

from __future__ import annotations

import polars as pl

from ztbp.acquire.app import parse_db_bench
from ztbp.analysis import appops, file_layout


def _ops() -> pl.DataFrame:
    return pl.DataFrame({"op_id": [1, 2, 3], "tid": [10, 10, 11], "start_ns": [0, 200, 0],
                         "end_ns": [100, 300, 1000], "op": ["get", "get", "get"], "status": [0, 1, 0]})


def _io(rows: list[tuple[int, int, int, str]]) -> pl.DataFrame:
    return pl.DataFrame({"ts_ns": [r[0] for r in rows], "lat_ns": [r[1] for r in rows], "tid": [r[2] for r in rows],
                         "op": [r[3] for r in rows], "nlb": [1] * len(rows), "nsid": [1] * len(rows),
                         "slba": list(range(len(rows)))}, schema_overrides={"nlb": pl.Int64})


def test_commands_go_to_the_operation_of_their_thread_and_time_and_the_rest_is_counted() -> None:
    io = _io([(10, 20, 10, "read"), (35, 10, 10, "read"), (36, 5, 10, "read"),  # op 1: 3 I/Os, 2 rounds
              (150, 5, 10, "read"),                                              # tid 10 between its ops
              (50, 5, 99, "read"),                                               # a compaction thread
              (500, 5, 11, "write")])                                            # op 3 writes, not a read
    att = appops.attribute(_ops(), io)
    per = appops.per_op(_ops(), att, lba_bytes=4096).sort("op_id")
    assert per["ios"].to_list() == [3, 0, 0]
    assert per["chain_depth"].to_list() == [2, 0, 0]
    assert per["bytes"].to_list() == [3 * 4096, 0, 0]
    s = appops.summarize(per, att)
    assert s["commands"] == 5 and s["attributed"] == 3 and s["unattributed"] == 2
    assert s["unattributed_by_tid"] == {10: 1, 99: 1}
    g = s["ops"]["get"]
    assert g["ops"] == 3 and g["ios_mean"] == 1.0 and g["ios_hist"] == {0: 2, 3: 1} and g["ios_max"] == 3
    assert g["status_hist"] == {0: 2, 1: 1}


def test_no_device_io_gives_zero_ios_for_every_operation() -> None:
    att = appops.attribute(_ops(), _io([]).with_columns(pl.col("tid").cast(pl.Int64)))
    s = appops.summarize(appops.per_op(_ops(), att, 4096), att)
    assert s["ops"]["get"]["ios_mean"] == 0.0 and s["commands"] == 0


def test_fragments_zones_and_reads_per_file() -> None:
    zone = 1 << 20
    f = pl.DataFrame({
        "path": ["a.sst", "a.sst", "b.sst", "b.sst", "c.log"], "file_bytes": [8192, 8192, 8192, 8192, 4096],
        "extent": [0, 1, 0, 1, 0], "logical_bytes": [0, 4096, 0, 4096, 0], "fs_bytes": [0, 4096, 0, 0, 0],
        "length_bytes": [4096] * 5, "nsid": [1, 1, 1, 1, 1],
        "dev_bytes": [0, 4096, zone - 4096, 3 * zone, -1], "flags": ["", "last", "", "last", "last"]})
    frags = file_layout.fragments(f, zone)
    table = file_layout.per_file(f, frags)
    row = {r["path"]: r for r in table.to_dicts()}
    assert row["a.sst"]["fragments"] == 1 and row["a.sst"]["nr_zones"] == 1
    assert row["b.sst"]["fragments"] == 2 and row["b.sst"]["zones"] == [0, 3]
    assert row["b.sst"]["gap_max_bytes"] == 2 * zone
    assert row["c.log"]["unmapped_extents"] == 1
    reads = pl.DataFrame({"nsid": [1, 1, 1, 1], "slba": [0, 1, (3 * zone) // 4096, 100_000], "nlb": [1, 1, 1, 1]})
    per, outside = file_layout.reads_per_file(frags, reads, 4096)
    assert dict(per.select("path", "reads").iter_rows()) == {"a.sst": 2, "b.sst": 1}
    assert outside == 1
    s = file_layout.layout_summary(table, per, outside)
    assert s["sst_files"] == 2 and s["hot_files"][0]["path"] == "a.sst"


def test_cache_rates_follow_bcc() -> None:
    cs = pl.DataFrame({"ts_ns": [0, 10**9, 2 * 10**9], "pc_access": [0, 100, 300], "pc_add": [0, 10, 10],
                       "pc_dirty": [0, 0, 0], "buf_dirty": [0, 0, 0], "dc_ref": [0, 50, 100], "dc_slow": [0, 5, 5],
                       "dc_miss": [0, 5, 5]})
    s = appops.cache_summary(appops.cache_rates(cs))
    assert s["pc_accesses"] == 300 and s["pc_misses"] == 10 and abs(s["pc_hit_ratio"] - (1 - 10 / 300)) < 1e-9
    assert s["dc_hit_ratio"] == 0.95 and s["seconds"] == 2.0 and s["intervals"] == 2
    # only the intervals wholly inside a window: (1 s, 2 s] lies in [1 s, 2 s], (0, 1 s] does not
    w = appops.cache_summary(appops.intervals_within(appops.cache_rates(cs), 10**9, 2 * 10**9))
    assert w["intervals"] == 1 and w["pc_accesses"] == 200 and w["pc_misses"] == 0 and w["pc_hit_ratio"] == 1.0
    assert appops.cache_summary(appops.intervals_within(appops.cache_rates(cs), 10**9, 10**9))["pc_hit_ratio"] is None


def test_db_bench_figures() -> None:
    text = ("readrandom   :     512.345 micros/op 1951 ops/sec 1.025 seconds 2000 operations;    0.8 MB/s "
            "(1990 of 2000 found)\n\nMicroseconds per read:\nCount: 2000 Average: 512.3456  StdDev: 10.00\n"
            "Percentiles: P50: 480.00 P75: 600.00 P99: 1500.00 P99.9: 2000.00 P99.99: 3000.00\n")
    r = parse_db_bench(text)["readrandom"]
    assert r["operations"] == 2000 and r["found"] == 1990 and r["latency"]["p99_us"] == 1500.0


def test_capture_app_takes_any_function_and_refuses_bad_ones() -> None:
    """--function OP=FUNCTION and --library reach the guest as they are; malformed ones are refused before a boot."""
    import pytest

    from ztbp.acquire.app import AppCapture
    from ztbp.acquire.capture import CaptureError

    req = AppCapture(functions=("get=rocksdb::DBImpl::GetImpl", "compact=rocksdb::CompactionJob::Run"),
                     library="/usr/lib/librocksdb.so")
    req.validate()
    env = req.guest_env()
    assert env["ZTBP_FUNCTIONS"] == "get=rocksdb::DBImpl::GetImpl compact=rocksdb::CompactionJob::Run"
    assert env["ZTBP_LIBRARY"] == "/usr/lib/librocksdb.so"
    assert "ZTBP_FUNCTIONS" not in AppCapture().guest_env() and "ZTBP_LIBRARY" not in AppCapture().guest_env()
    for bad, says in ((("Get=x",), "OP=FUNCTION"), (("get",), "OP=FUNCTION"), (("get=a b",), "OP=FUNCTION"),
                      (("get=a", "get=b"), "each OP name once"),
                      (tuple(f"f{i}=x{i}" for i in range(16)), "at most 15")):
        with pytest.raises(CaptureError, match=says):
            AppCapture(functions=bad).validate()
    with pytest.raises(CaptureError, match="absolute path"):
        AppCapture(library="librocksdb.so").validate()


def _app_run(tmp_path):
    import shutil

    from ztbp.paths import TEST_DATA

    root = tmp_path / "app"
    shutil.copytree(TEST_DATA / "runs" / "sample-rocksdb-btrfs", root)
    return root


def test_bad_rows_of_application_files_are_counted_and_skipped(tmp_path, capsys) -> None:
    """appops.csv, cachestat.csv, files.csv follow nvme.csv's rule: a garbage row, a row that is not UTF-8 and a cut
    last line are skipped and counted (with line numbers), the rest of the file is used."""
    from ztbp import stages
    from ztbp.cli import main
    from ztbp.io.run import load

    root = _app_run(tmp_path)
    clean = stages.appops(load(root, events=False))
    assert clean["read"]["raw/appops.csv"]["skipped"] == 0
    with (root / "raw" / "appops.csv").open("ab") as f:
        f.write(b"garbage,row\n" + b"1,2,3,4,g\xffet,0\n" + b"4407173316609,1026,696300762406,6963")
    with (root / "raw" / "cachestat.csv").open("ab") as f:
        f.write(b"1,2,3\n")
    res = stages.appops(load(root, events=False))
    read = res["read"]["raw/appops.csv"]
    assert read["skipped"] == 3 and read["rows"] == clean["read"]["raw/appops.csv"]["rows"]
    assert [x["line"] for x in read["first_skipped_lines"]] == [5503, 5504, 5505]
    assert read["reasons"] == {"wrong field count": 1, "not UTF-8": 1, "truncated last line": 1}
    assert res["read"]["raw/cachestat.csv"]["skipped"] == 1
    assert res["ops"] == clean["ops"]
    assert main(["appops", str(root)]) == 0
    out = capsys.readouterr().out
    assert "raw/appops.csv: skipped 3 lines that do not parse" in out
    (root / "raw" / "files.csv").write_bytes((root / "raw" / "files.csv").read_bytes()[:-20])  # cut mid-row
    files_res = stages.files(load(root, events=False))
    assert files_res["read"]["raw/files.csv"]["skipped"] == 1 and files_res["files"] >= 1


def test_a_wrong_application_header_is_one_line(tmp_path, capsys) -> None:
    from ztbp.cli import main

    root = _app_run(tmp_path)
    (root / "raw" / "cachestat.csv").write_text("# ztbp cachestat v2\nts_ns\n")
    assert main(["appops", str(root)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'cachestat v2' is not supported" in err
    (root / "raw" / "files.csv").write_text("# ztbp files v1\npath,bytes\n")
    assert main(["files", str(root)]) == 3
    assert "line 2 must be the header" in capsys.readouterr().err
