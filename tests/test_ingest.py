"""Ingest: the contract's reader, and every kind of bad input (clear error or counted skip, never a traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from conftest import make_run, row, write_meta
from ztbp.cli import main
from ztbp.io.nvme import ingest, load_events
from ztbp.paths import RunPaths


def good_rows(n: int = 5) -> list[str]:
    return [row("read", 8192 * (i % 3) + i, 1, ts=1000 + i) for i in range(n)]


def test_reads_typed_events_sorted_by_submission(run_factory) -> None:
    lines = [row("read", 100, 8, ts=3000), row("write", 8192, 32, ts=1000),
             row("zone_mgmt_send", 16384, 0, ts=2000, action="reset")]
    run = run_factory(lines=lines)
    rep = ingest(RunPaths(run))
    assert (rep.rows, rep.skipped, rep.path) == (3, 0, "fast")
    ev = pl.read_parquet(run / "derived" / "events.parquet")
    assert ev["ts_ns"].to_list() == [1000, 2000, 3000]
    assert ev["zone"].to_list() == [1, 2, 0]
    assert ev["op"].cast(pl.String).to_list() == ["write", "zone_mgmt_send", "read"]
    assert ev["zone_action"].cast(pl.String).to_list() == ["", "reset", ""]
    assert ev.schema["slba"] == pl.UInt64 and ev.schema["opcode"] == pl.UInt8


def test_truncated_last_line_is_skipped_and_reported(run_factory, capsys) -> None:
    run = run_factory(lines=good_rows())
    with (run / "raw" / "nvme.csv").open("a") as f:
        f.write("123456,789,0,1")  # the probe died mid-line: no newline, 4 fields
    assert main(["ingest", str(run)]) == 0
    out = capsys.readouterr().out
    assert "5 rows read" in out and "skipped 1 lines" in out
    assert "line 8: truncated last line: 4 of 12 fields" in out


def test_garbage_rows_are_counted_with_line_numbers(run_factory) -> None:
    lines = good_rows(3) + ["garbage,row", row("read", 5, 1, ts=9).replace(",read,", ",reed,"),
                            row("read", 6, 1, ts=10).replace(",0,1,", ",x,1,", 1), ""] + good_rows(2)
    run = run_factory(lines=lines)
    rep = ingest(RunPaths(run))
    assert rep.rows == 5 and rep.skipped == 3 and rep.blank_lines == 1 and rep.path == "careful"
    assert [e["line"] for e in rep.skipped_examples] == [6, 7, 8]
    reasons = [e["reason"] for e in rep.skipped_examples]
    assert reasons[0] == "wrong field count: 2 of 12"
    assert reasons[1] == "unknown op: reed"
    assert reasons[2].startswith("bad value: ")
    saved = json.loads((run / "derived" / "ingest.json").read_text())
    assert saved["skipped"] == 3


def test_extra_columns_of_a_later_minor_version_are_ignored(run_factory) -> None:
    run = run_factory(lines=[r + ",extra" for r in good_rows(4)])
    text = (run / "raw" / "nvme.csv").read_text().splitlines()
    text[1] += ",comm"
    (run / "raw" / "nvme.csv").write_text("\n".join(text) + "\n")
    assert ingest(RunPaths(run)).rows == 4


@pytest.mark.parametrize(("content", "message", "code"), [
    ("", "is empty", 3),
    ("# ztbp nvme v2\nts_ns\n", "'nvme v2' is not supported", 3),
    ("# ztbp layers v1\nts_ns\n", "'layers' probe file", 3),
    ("ts_ns,lat_ns\n1,2\n", "expected '# ztbp nvme v1'", 3),
    ("# ztbp nvme v1\nts,lat\n", "line 2 must be the header", 3),
])
def test_bad_version_or_header_is_a_clear_error(tmp_path: Path, capsys, content: str, message: str,
                                                code: int) -> None:
    run = tmp_path / "r"
    write_meta(run)
    (run / "raw").mkdir()
    (run / "raw" / "nvme.csv").write_text(content)
    assert main(["ingest", str(run)]) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_meta_and_missing_trace(tmp_path: Path, capsys) -> None:
    run = tmp_path / "r"
    (run / "raw").mkdir(parents=True)
    assert main(["ingest", str(run)]) == 4
    assert "meta.json is missing" in capsys.readouterr().err
    write_meta(run)
    assert main(["ingest", str(run)]) == 4
    assert "has no NVMe trace" in capsys.readouterr().err
    assert main(["zones", str(tmp_path / "nope")]) == 4
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(("meta", "message"), [
    ({"format": "ztbp-run/2"}, "not supported"),
    ({"format": "something"}, "expected 'ztbp-run/1'"),
    ({"zone_size_lba": "8192"}, "'zone_size_lba' must be an integer"),
    ({"nr_zones": 0}, "'nr_zones' is 0, outside [1, 16777216]"),
])
def test_bad_meta_is_a_clear_error(tmp_path: Path, capsys, meta: dict, message: str) -> None:
    run = make_run(tmp_path / "r", lines=good_rows(), **meta)
    assert main(["zones", str(run)]) == 3
    assert message in capsys.readouterr().err


def test_meta_not_json(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path / "r", lines=good_rows())
    (run / "meta.json").write_text("{not json")
    assert main(["ingest", str(run)]) == 3
    assert "not valid JSON" in capsys.readouterr().err


def test_cli_never_shows_a_traceback(tmp_path: Path) -> None:
    run = make_run(tmp_path / "r", lines=[])
    (run / "raw" / "nvme.csv").write_bytes(b"\x00\xff garbage\n")
    p = subprocess.run([sys.executable, "-m", "ztbp.cli", "ingest", str(run)], capture_output=True, text=True)
    assert p.returncode == 3 and "Traceback" not in p.stderr and "expected '# ztbp nvme v1'" in p.stderr


def test_load_events_reingests_when_the_trace_changes(run_factory) -> None:
    run = run_factory(lines=good_rows(3))
    assert load_events(run).height == 3
    with (run / "raw" / "nvme.csv").open("a") as f:
        f.write(row("read", 1, 1, ts=99999) + "\n")
    assert load_events(run).height == 4


def test_out_of_range_zones_are_counted(run_factory) -> None:
    run = run_factory([("read", 64 * 8192, 1), ("read", 0, 1)])
    assert ingest(RunPaths(run)).out_of_range_zones == 1


def test_a_changed_geometry_in_meta_reingests_and_reclusters(run_factory) -> None:
    """Zone ids depend on meta.json's zone size: editing it must not leave stale events or a stale clustering."""
    import json as _json

    from ztbp import stages
    from ztbp.io.run import load

    root = run_factory([("read", 8192 * 3 + i, 1) for i in range(50)])
    assert set(load(root).events["zone"].to_list()) == {3}
    stages.cluster(load(root))
    meta = _json.loads((root / "meta.json").read_text())
    meta.update(zone_size_lba=4096, zone_cap_lba=4096, nr_zones=128)
    (root / "meta.json").write_text(_json.dumps(meta))
    assert set(load(root).events["zone"].to_list()) == {6}
    key = _json.loads((root / "derived" / "cluster.json").read_text())["cache_key"]
    stages.cluster(load(root))
    assert _json.loads((root / "derived" / "cluster.json").read_text())["cache_key"] != key


def test_a_cut_last_line_is_never_taken_even_with_every_field(run_factory) -> None:
    """A last line without its newline may have its last field cut ("12" of "123"): skipped, said, never taken."""
    run = run_factory(lines=good_rows(3))
    with (run / "raw" / "nvme.csv").open("a") as f:
        f.write(row("read", 7, 1, ts=5000))  # every field there, no newline
    rep = ingest(RunPaths(run))
    assert (rep.rows, rep.skipped, rep.path) == (3, 1, "careful")
    assert rep.skipped_examples == [{"line": 6, "reason": "truncated last line: no newline at the end, its last "
                                                          "field may be cut"}]


@pytest.mark.parametrize(("line", "reason"), [
    ("1000,1,0,1,1,1,2,read,18446744073709551615,1,,0", "bad value: slba 18446744073709551615 is in zone"),
    ("1000,1,0,1,1,1,2,read,18446744073709551616,1,,0", "bad value: slba is not a valid UInt64"),
    ("18446744073709551615,1,0,1,1,1,2,read,5,1,,0", "bad value: ts_ns + lat_ns is beyond 2^63 ns"),
    ("1000,9223372036854775807,0,1,1,1,2,read,5,1,,0", "bad value: ts_ns + lat_ns is beyond 2^63 ns"),
    ("1000,1,0,1,1,1,2,read,9223372036854775000,4096,,0", "bad value: slba"),
    ("1000,1,0,1,1,1,256,read,5,1,,0", "bad value: opcode is not a valid UInt8"),
    ("1000,1,0,1,1,1,2,read,5,1,,0\xff", "bad value: status"),
])
def test_u64_sized_values_are_counted_and_skipped(run_factory, line: str, reason: str) -> None:
    """Values a u64 holds but no device has (a zone beyond 2^24, times beyond 2^63 ns) and values beyond the column's
    type are skipped lines, not a failed cast."""
    run = run_factory(lines=[*good_rows(4), line])
    rep = ingest(RunPaths(run))
    assert (rep.rows, rep.skipped) == (4, 1)
    assert rep.skipped_examples[0]["reason"].startswith(reason)
    assert load_events(run)["zone"].max() < 64


def test_non_utf8_lines_are_counted_and_skipped(run_factory) -> None:
    run = run_factory(lines=good_rows(3))
    with (run / "raw" / "nvme.csv").open("ab") as f:
        f.write(b"1000,1,0,1,1,1,2,r\xffead,5,1,,0\n")
    rep = ingest(RunPaths(run))
    assert (rep.rows, rep.skipped) == (3, 1)
    assert rep.skipped_examples[0] == {"line": 6, "reason": "not UTF-8: the line holds bytes that are no text"}


def _same_size_edit(path: Path, old: bytes, new: bytes) -> None:
    """Replace bytes in a file keeping its size and its mtime (an edit freshness by size and mtime cannot see)."""
    import os

    st = path.stat()
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    path.write_bytes(data.replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_a_trace_edited_keeping_its_size_and_mtime_is_ingested_again(run_factory, caplog) -> None:
    run = run_factory(lines=[row("read", 5, 1, ts=1000), row("read", 8192 * 2, 1, ts=2000)])
    assert load_events(run)["zone"].to_list() == [0, 2]
    _same_size_edit(run / "raw" / "nvme.csv", b",16384,", b",24576,")
    assert load_events(run)["zone"].to_list() == [0, 3]
    saved = json.loads((run / "derived" / "ingest.json").read_text())
    assert saved["reingest"] == "raw/nvme.csv changed although its size did not"
    assert "raw/nvme.csv changed although its size did not" in caplog.text


def test_a_junk_events_parquet_is_rebuilt_and_said(run_factory, caplog) -> None:
    run = run_factory(lines=good_rows(5))
    assert load_events(run).height == 5
    (run / "derived" / "events.parquet").write_bytes(b"PAR1 junk, not what the ingest wrote PAR1")
    assert load_events(run).height == 5
    assert "derived/events.parquet is not the file the last ingest wrote" in caplog.text
    saved = json.loads((run / "derived" / "ingest.json").read_text())
    assert saved["reingest"] == "derived/events.parquet is not the file the last ingest wrote"
    assert saved["events_stamp"]["size"] == (run / "derived" / "events.parquet").stat().st_size


def test_a_copied_run_is_reused_without_a_new_ingest(run_factory, tmp_path: Path) -> None:
    """A copy moves every stamp's inode and ctime but not the bytes: the digests say the events still match."""
    import shutil

    run = run_factory(lines=good_rows(5))
    load_events(run)
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    before = (copy / "derived" / "events.parquet").stat().st_mtime_ns
    assert load_events(copy).height == 5
    assert (copy / "derived" / "events.parquet").stat().st_mtime_ns == before
    saved = json.loads((copy / "derived" / "ingest.json").read_text())
    assert saved["source_stamp"]["ino"] == (copy / "raw" / "nvme.csv").stat().st_ino  # stamped again


def test_a_streamed_dataset_is_made_again_when_the_geometry_changes(run_factory) -> None:
    from ztbp.io.parts import ingest_stream, is_fresh

    run = run_factory([("read", 8192 * 3 + i, 1) for i in range(20)])
    rp = RunPaths(run)
    ingest_stream(rp)
    assert is_fresh(rp)
    meta = json.loads((run / "meta.json").read_text())
    meta.update(zone_size_lba=4096, zone_cap_lba=4096, nr_zones=128)
    (run / "meta.json").write_text(json.dumps(meta))
    assert not is_fresh(rp)
    from ztbp.io.run import load

    assert load(run, events=False).parts.scan().select("zone").collect()["zone"].unique().to_list() == [6]
    part = next((run / "derived" / "events-parts").glob("*/*/*.parquet"))
    part.write_bytes(b"junk")
    assert not is_fresh(rp)
