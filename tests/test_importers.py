"""Importers (io/importers.py): each format's hand-made sample under tests/data/import/ with known answers, then the
imported run through the real ingest and analyses; a real fio iolog when fio is installed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from ztbp.analysis.cachesim import simulate
from ztbp.analysis.zones import zone_table
from ztbp.cli import main
from ztbp.errors import FormatError, ZtbpError
from ztbp.io.importers import import_trace
from ztbp.io.run import load
from ztbp.paths import TEST_DATA, RunPaths

DATA = TEST_DATA / "import"
MIB = 1 << 20


def imported(tmp_path: Path, name: str, fmt: str, **kw: object) -> tuple[pl.DataFrame, dict, dict]:
    """Import a sample at 4 KiB LBAs and 1 MiB zones; return the ingested events, the report and meta.json."""
    run = RunPaths(tmp_path / name.replace(".", "-"))
    rep = import_trace(DATA / name, run, fmt, zone_size_bytes=MIB, lba_bytes=4096, **kw)  # type: ignore[arg-type]
    r = load(run.root)
    return r.events, rep.as_dict(), r.meta


def test_blkparse_pairs_issue_and_completion(tmp_path: Path) -> None:
    ev, rep, meta = imported(tmp_path, "blkparse.txt", "blkparse")
    assert ev["op"].cast(pl.String).to_list() == ["read", "write", "read", "flush", "dsm", "read"]
    assert ev["ts_ns"].to_list() == [3000, 5000, 130000, 200000, 310000, 410000]
    # latency: D to the matching C, first in first out per (device, sector, size, direction)
    assert ev["lat_ns"].to_list() == [87000, 115000, 170000, 10000, 90000, 0]
    assert ev["slba"].to_list() == [256, 8192, 256, 0, 16384, 512]  # sectors of 512 B -> 4 KiB LBAs
    assert ev["nlb"].to_list() == [1, 2, 1, 0, 32, 1]
    assert ev["status"].to_list() == [0, 0, 0, 0, 1, 0]  # the discard completed with -5
    assert rep["extra"] == {"completions_without_issue": 1, "issued_without_completion": 1}
    assert rep["skipped"] == 1 and rep["skipped_examples"][0]["line"] == 18
    assert rep["ignored"]["action Q"] == 2 and rep["ignored"]["action U"] == 1
    assert rep["ignored"]["summary and other non-event lines"] == 8
    assert meta["nr_zones"] == 65 and meta["zone_size_lba"] == 256 and meta["backend"] == "import"
    assert meta["import"]["devices"] == {"259,0": 1}


def test_fio_iolog_v2_times_from_waits(tmp_path: Path) -> None:
    ev, rep, meta = imported(tmp_path, "fio-v2.log", "fio-iolog")
    assert ev["op"].cast(pl.String).to_list() == ["read", "write", "read", "dsm", "flush", "read"]
    assert ev["ts_ns"].to_list() == [0, 500_000, 1_500_000, 1_500_000, 1_500_000, 1_500_000]
    assert ev["nsid"].to_list() == [1, 1, 1, 1, 1, 2]
    assert ev["slba"].to_list() == [0, 256, 1, 512, 0, 2] and ev["nlb"].to_list() == [1, 32, 1, 256, 0, 1]
    assert rep["unaligned"] == 1  # 512 bytes at 8192 on 4 KiB LBAs
    assert rep["skip_reasons"] == {"not an iolog line": 1, "unknown iolog action": 1}
    assert rep["ignored"] == {"version line": 1, "file actions (add/open/close)": 6, "wait actions": 2}
    assert meta["latency"] == "none" and ev["lat_ns"].sum() == 0


def test_fio_iolog_v3_timestamps(tmp_path: Path) -> None:
    ev, rep, _ = imported(tmp_path, "fio-v3.log", "fio-iolog")
    assert ev["ts_ns"].to_list() == [199_000, 100_654_000, 200_948_000]
    assert ev["slba"].to_list() == [15, 189, 215] and ev["nlb"].to_list() == [1, 2, 1]
    assert rep["skip_reasons"] == {"wait is not allowed in iolog v3": 1}


def test_alibaba_one_device_in_time_order(tmp_path: Path) -> None:
    ev, rep, meta = imported(tmp_path, "alibaba.csv", "alibaba", device="2")
    assert rep["other_device"] == 1 and rep["rows"] == 4
    assert rep["skip_reasons"] == {"not a record of this format": 1, "opcode is not R or W": 1}
    # ingest sorts by submission time (microseconds -> ns)
    assert ev["ts_ns"].to_list() == [1577808000000100000, 1577808000000150000, 1577808000000200000,
                                     1577808000000600000]
    assert ev["slba"].to_list() == [256, 257, 0, 256] and ev["nlb"].to_list() == [1, 2, 32, 1]
    zt = zone_table(ev, meta["nr_zones"], meta["lba_bytes"])
    assert zt.filter(pl.col("zone") == 1)["reads"].item() == 3
    assert zt.filter(pl.col("zone") == 0)["write_bytes"].item() == 131072


def test_tencent_sectors_and_volumes(tmp_path: Path) -> None:
    ev, rep, _ = imported(tmp_path, "tencent.csv", "tencent")
    assert rep["ignored"] == {"header line": 1}
    assert rep["skip_reasons"] == {"IOType is not 0 (read) or 1 (write)": 1}
    assert ev["op"].cast(pl.String).to_list() == ["read", "write", "read", "write"]
    assert ev["ts_ns"].to_list()[2] == 1538323201 * 10**9
    assert ev["slba"].to_list() == [256, 0, 257, 512] and ev["nsid"].to_list() == [1, 1, 1, 2]
    assert rep["devices"] == {"1063": 1, "27": 2}


def test_msr_filetime_and_response_time(tmp_path: Path) -> None:
    ev, rep, meta = imported(tmp_path, "msr.csv", "msr")
    assert ev["ts_ns"][0] == (128166372003061629 - 116444736000000000) * 100
    assert ev["lat_ns"].to_list() == [4_128_600, 121_400, 500_000]
    assert ev["op"].cast(pl.String).to_list() == ["read", "write", "read"]
    assert rep["skip_reasons"] == {"not a record of this format": 1, "Type is not Read or Write": 1}
    assert meta["latency"] == "ResponseTime"


def test_imported_run_goes_through_the_cache_model(tmp_path: Path) -> None:
    ev, _, meta = imported(tmp_path, "alibaba.csv", "alibaba", device="2")
    r = simulate(ev, meta, cache_mib=1, page_kib=4, hot_zones=[1])
    # pages 256, 257, 258, 256: the last read of page 256 hits in every policy
    assert r["requests"] == 4 and r["lru"] == 0.25 and r["belady"] == 0.25


def test_wrong_format_says_so(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="no alibaba command found"):
        import_trace(DATA / "msr.csv", RunPaths(tmp_path / "x"), "alibaba", zone_size_bytes=MIB)
    with pytest.raises(FormatError, match="fio version 2 iolog"):
        import_trace(DATA / "alibaba.csv", RunPaths(tmp_path / "y"), "fio-iolog", zone_size_bytes=MIB)
    with pytest.raises(ZtbpError, match="multiple of the LBA size"):
        import_trace(DATA / "alibaba.csv", RunPaths(tmp_path / "z"), "alibaba", zone_size_bytes=1000)


def test_chunked_import_matches_one_chunk(tmp_path: Path) -> None:
    """A chunk boundary inside the blkparse D/C pairs and the fio waits changes nothing."""
    for name, fmt in (("blkparse.txt", "blkparse"), ("fio-v2.log", "fio-iolog"), ("msr.csv", "msr")):
        one, tiny = RunPaths(tmp_path / f"one-{fmt}"), RunPaths(tmp_path / f"tiny-{fmt}")
        import_trace(DATA / name, one, fmt, zone_size_bytes=MIB)
        import_trace(DATA / name, tiny, fmt, zone_size_bytes=MIB, chunk_bytes=64)
        assert load(one.root).events.equals(load(tiny.root).events)
        a, b = json.loads(one.meta.read_text())["import"], json.loads(tiny.meta.read_text())["import"]
        assert a == b


def test_cli_import_then_stream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "cli-run"
    assert main(["import", str(DATA / "tencent.csv"), str(run), "--format", "tencent", "--zone-size", "1M",
                 "--lba-bytes", "4096", "--stream", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["import"]["rows"] == 4 and out["stream"]["rows"] == 4
    assert (run / "derived" / "events-parts" / "dataset.json").is_file()
    assert main(["import", str(DATA / "tencent.csv"), str(run), "--format", "tencent", "--zone-size", "1M"]) == 2
    assert "already holds a run" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (apt-get install fio)")
def test_real_fio_iolog(tmp_path: Path) -> None:
    """fio writes an iolog of a small random-read job on a file; the import holds exactly its reads."""
    target, log = tmp_path / "target", tmp_path / "job.iolog"
    subprocess.run(["fio", "--name=t", f"--filename={target}", "--size=1M", "--rw=randread", "--bs=4k",
                    "--io_size=64k", "--ioengine=psync", f"--write_iolog={log}", "--randseed=7"],
                   check=True, capture_output=True)
    run = RunPaths(tmp_path / "fio-run")
    rep = import_trace(log, run, "fio-iolog", zone_size_bytes=256 * 1024, lba_bytes=4096)
    ev = load(run.root).events
    assert rep.rows == 16 and rep.skipped == 0 and rep.unaligned == 0
    assert ev["op"].cast(pl.String).unique().to_list() == ["read"] and (ev["nlb"] == 1).all()
    assert ev["ts_ns"].is_sorted() and int(ev["slba"].max()) < 256
    assert load(run.root).meta["nr_zones"] <= 4


H = 2**64 - 1  # fits u64, overflows once scaled to ns or bytes
B = 10**20  # beyond 64 bits


@pytest.mark.parametrize(("fmt", "good", "bad"), [
    ("alibaba", "2,R,4096,4096,1577808000000100",
     [f"2,R,{H},4096,1", f"2,R,4096,{H},1", f"2,R,4096,4096,{H}", f"2,R,{B},4096,1"]),
    ("tencent", "1538323200,2048,8,0,1063",
     [f"{H},2048,8,0,1063", f"1538323200,{H},8,0,1063", f"1538323200,2048,{H},0,1063"]),
    ("msr", "128166372003061629,hm,0,Read,1048576,4096,41286",
     [f"{H},hm,0,Read,1048576,4096,41286", f"128166372003061629,hm,0,Read,{H},4096,4",
      f"128166372003061629,hm,0,Read,1,4096,{H}"]),
    ("fio-iolog", "200 /dev/nvme0n1 read 0 4096",
     [f"{H} /dev/nvme0n1 read 0 4096", f"300 /dev/nvme0n1 read {B} 4096", f"301 /dev/nvme0n1 read {H} {H}"]),
    ("blkparse", "259,0    1        4     0.000003000  4162  D   R 2048 + 8 [fio]",
     [f"259,0    1        6     {B}.000003000  4162  D   R 4096 + 8 [fio]",
      f"259,0    1        7     0.000003000  4162  D   R {B} + 8 [fio]",
      f"259,0    1        9     {H}.000003000  4162  D   R 4096 + 8 [fio]",
      f"259,0    1        9     0.000003000  4162  D   R {H} + 8 [fio]"]),
])
def test_overflowing_fields_are_counted_and_skipped(tmp_path: Path, fmt: str, good: str, bad: list[str]) -> None:
    """A field beyond 64 bits, or one that passes 2^63 once scaled to ns or bytes, is a skipped line, not a value
    that wraps around into a plausible command."""
    head = ["fio version 3 iolog"] if fmt == "fio-iolog" else []
    src = tmp_path / "trace.txt"
    src.write_text("\n".join([*head, good, *bad]) + "\n")
    rep = import_trace(src, RunPaths(tmp_path / "r"), fmt, zone_size_bytes=MIB).as_dict()
    assert (rep["rows"], rep["skipped"]) == (1, len(bad))
    ev = load(tmp_path / "r").events
    assert ev.height == 1 and ev["ts_ns"].max() < 2**63 and ev["slba"].max() < 2**40


def test_fio_v2_waits_that_pass_2_63_ns_are_skipped(tmp_path: Path) -> None:
    src = tmp_path / "v2.log"
    src.write_text(f"fio version 2 iolog\n/dev/nvme0n1 read 0 4096\n/dev/nvme0n1 wait {H} 0\n"
                   "/dev/nvme0n1 read 4096 4096\n")
    rep = import_trace(src, RunPaths(tmp_path / "r"), "fio-iolog", zone_size_bytes=MIB).as_dict()
    assert rep["rows"] == 1 and rep["skip_reasons"] == {"time (the sum of the waits before it) beyond 2^63 ns": 1}


# ---- bounded memory on any input --------------------------------------------------------------------------------
FORMATS = ("msr", "blkparse", "fio-iolog", "alibaba", "tencent")
#: a one-line source of zero bytes (sparse: no disk space) far longer than files.MAX_LINE_BYTES
SPARSE_BYTES = 200 << 20
#: the import's own peak: VmHWM of its memory after exec (getrusage's ru_maxrss keeps the high-water mark of the
#: process before exec, the test worker's: 540 MiB late in a full run)
RSS_PROBE = ("import sys\nfrom ztbp.cli import main\nrc = main(sys.argv[1:])\n"
             "hwm = next(ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:'))\n"
             "print(int(hwm.split()[1]) * 1024, rc)")


def _peak_import(src: Path, out: Path, fmt: str) -> tuple[int, int, str]:
    """`ztbp import` in a process of its own: its peak resident bytes, exit code and stderr."""
    import os
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "pipelines")}
    p = subprocess.run([sys.executable, "-c", RSS_PROBE, "import", str(src), str(out), "--format", fmt,
                        "--zone-size", "64M"], capture_output=True, text=True, env=env, timeout=600)
    peak, rc = p.stdout.split()[-2:]
    return int(peak), int(rc), p.stderr


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_200_mb_line_of_zero_bytes_imports_within_the_memory_bound(tmp_path: Path, fmt: str) -> None:
    from ztbp.files import LONG_LINE
    from ztbp.io.importers import IMPORT_RSS_BOUND

    src = tmp_path / "one-line.bin"
    with src.open("wb") as f:
        f.truncate(SPARSE_BYTES)
    peak, rc, err = _peak_import(src, tmp_path / "run", fmt)
    assert peak < IMPORT_RSS_BOUND, f"{fmt}: peak RSS {peak >> 20} MiB"
    assert rc == 3 and "Traceback" not in err and f"skipped 1: {{'{LONG_LINE}': 1}}" in err, err
    assert not (tmp_path / "run" / "raw" / "nvme.csv").exists() and list((tmp_path / "run").rglob("*.tmp")) == []


def test_twenty_million_empty_lines_import_within_the_memory_bound(tmp_path: Path) -> None:
    """Short lines: the memory a chunk needs grows with its lines, so a chunk holds at most MAX_CHUNK_LINES."""
    from ztbp.io.importers import IMPORT_RSS_BOUND

    src = tmp_path / "newlines.bin"
    src.write_bytes(b"\n" * (20 << 20))
    peak, rc, err = _peak_import(src, tmp_path / "run", "blkparse")
    assert peak < IMPORT_RSS_BOUND and rc == 3 and "Traceback" not in err, (peak >> 20, err)


@pytest.mark.parametrize("chunk", [1 << 20, 64 << 20], ids=["dropped-while-read", "skipped-inside-a-chunk"])
def test_a_line_too_long_among_good_ones_is_skipped_and_counted(tmp_path: Path, chunk: int) -> None:
    from ztbp.files import LONG_LINE, MAX_LINE_BYTES

    good = "128166372003061629,hm,1,Read,3221225472,4096,1000\n"
    src = tmp_path / "msr.csv"
    src.write_bytes((good * 3 + "x" * (3 * MAX_LINE_BYTES) + "\n" + good + "y" * (MAX_LINE_BYTES + 5) + "\n" + good
                     + "z" * (2 * MAX_LINE_BYTES)).encode())
    rep = import_trace(src, RunPaths(tmp_path / "run"), "msr", zone_size_bytes=64 << 20, chunk_bytes=chunk)
    assert rep.rows == 5 and rep.lines == 8 and rep.skip_reasons == {LONG_LINE: 3}
    assert [e["line"] for e in rep.skipped_examples] == [4, 6, 8]


@pytest.mark.parametrize("chunk", [1 << 20, 64 << 20], ids=["dropped-while-read", "skipped-inside-a-chunk"])
def test_a_probe_files_line_too_long_is_counted_as_such(tmp_path: Path, chunk: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """raw/nvme.csv with a line over MAX_LINE_BYTES among its rows: skipped under the one reason "line longer than
    1 MiB", whether the reader drops it as it reads (a chunk smaller than the line) or finds it inside a chunk."""
    import shutil

    from ztbp.files import LONG_LINE, MAX_LINE_BYTES
    from ztbp.io import nvme

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "runs" / "sample-paper80", run)
    lines = (run / "raw" / "nvme.csv").read_bytes().splitlines(keepends=True)
    good = lines[5]
    long = b"123," + b"9" * (MAX_LINE_BYTES + 10) + b",0,1,1,1,2,read,0,1,none,0\n"
    (run / "raw" / "nvme.csv").write_bytes(b"".join([*lines[:2], good, long, good]))
    monkeypatch.setattr(nvme, "CHUNK_BYTES", chunk)
    rep = nvme.ingest(RunPaths(run))
    assert rep.skip_reasons == {LONG_LINE: 1} and rep.skipped == 1
    # the digest made while the chunks were parsed is the file's, every byte (the line dropped too)
    from ztbp.io.stamp import digest_file

    assert rep.source_stamp["digest"] == digest_file(run / "raw" / "nvme.csv")
    assert [e["line"] for e in rep.skipped_examples] == [4]


def test_the_digest_made_beside_the_parse_is_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nvme.csv ingested in hundreds of chunks, each digested on a worker thread while the next is parsed: the
    stamp's digest is the whole file's, in order, and the rows are those of one chunk."""
    import shutil

    from ztbp.io import nvme
    from ztbp.io.stamp import digest_file

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "runs" / "sample-paper80", run)
    whole = nvme.ingest(RunPaths(run))
    monkeypatch.setattr(nvme, "CHUNK_BYTES", 4096)
    again = nvme.ingest(RunPaths(run), why="a test")
    assert (run / "raw" / "nvme.csv").stat().st_size > 200 * 4096
    assert again.source_stamp["digest"] == whole.source_stamp["digest"] == digest_file(run / "raw" / "nvme.csv")
    assert again.rows == whole.rows and again.skipped == whole.skipped
    # the streamed ingest (derived/events-parts/) digests the same way
    from ztbp.io.parts import ingest_stream

    streamed = ingest_stream(RunPaths(run), chunk_bytes=4096)
    assert streamed["ingest"]["source_stamp"]["digest"] == whole.source_stamp["digest"]
