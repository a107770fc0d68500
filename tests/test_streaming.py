"""The streaming path (io/parts.py + analysis/chunked.py) gives exactly the in-memory results.

Runs: the committed real capture (tests/data/runs/sample-paper80), and a varied synthetic trace written in
completion order (not sorted by submission), with two namespaces, zone appends, resets, write_zeroes, a zone beyond
the device, sequential streams and a garbage line, cut into many chunks, time windows and zone ranges, with the
stack-distance tree small enough to be compacted many times.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst
from polars.testing import assert_frame_equal

from conftest import make_run, row
from ztbp import stages
from ztbp.analysis import chunked as st
from ztbp.analysis.cachesim import simulate
from ztbp.analysis.chains import chains_report
from ztbp.analysis.frag import frag_table
from ztbp.analysis.opcodes import opcode_table
from ztbp.analysis.params import SWEEP_MIB
from ztbp.analysis.zones import zone_table
from ztbp.cli import main
from ztbp.files import byte_chunks
from ztbp.io.parts import Parts, ingest_stream, is_fresh
from ztbp.io.run import load
from ztbp.paths import TEST_DATA, RunPaths
from ztbp.stages import streamed

HOT = [1, 7, 11, 15, 19]


def varied_run(root: Path, n: int = 30_000, seed: int = 5) -> Path:
    """A trace in completion order that exercises every column the analyses read."""
    rng = np.random.default_rng(seed)
    lines = []
    seq = {op: int(z) * 8192 for op, z in (("read", 3), ("write", 40), ("write_zeroes", 41))}
    for i in range(n):
        ts = 1_000_000 + 37 * i
        kind = rng.random()
        if kind < 0.45:  # hot / cold random reads
            zone = int(rng.choice(HOT)) if rng.random() < 0.7 else int(rng.integers(0, 64))
            lines.append(row("read", zone * 8192 + int(rng.integers(0, 8192)), int(rng.choice([1, 1, 2, 8])), ts,
                             int(rng.integers(10_000, 900_000)), nsid=int(rng.integers(1, 3))))
        elif kind < 0.75:  # sequential streams, interleaved
            op = str(rng.choice(["read", "write", "write_zeroes"]))
            nlb = 32
            opcode = {"read": 2, "write": 1, "write_zeroes": 8}[op]
            lines.append(f"{ts},{int(rng.integers(5_000, 90_000))},0,1,7,1,{opcode},{op},{seq[op]},{nlb},,0")
            seq[op] += nlb if rng.random() < 0.9 else 3 * nlb
        elif kind < 0.85:
            lines.append(row("zone_append", int(rng.integers(0, 64)) * 8192, 8, ts, 50_000))
        elif kind < 0.88:
            lines.append(row("zone_mgmt_send", int(rng.integers(0, 64)) * 8192, 0, ts, 2_000_000, action="reset"))
        elif kind < 0.89:
            lines.append(row("read", 70 * 8192 + 5, 1, ts, 30_000))  # zone 70: beyond the device's 64
        else:
            lines.append(row("write", int(rng.integers(0, 64 * 8192)), int(rng.integers(1, 64)), ts, 40_000))
    # completion order: each line moves up to a few hundred places, so ts_ns is not sorted in the file
    order = np.argsort(np.arange(n) + rng.integers(0, 300, n), kind="stable")
    shuffled = [lines[i] for i in order]
    shuffled.insert(n // 2, "this,is,not,a,row")
    return make_run(root, lines=shuffled)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("stream")
    sample = base / "sample"
    shutil.copytree(TEST_DATA / "runs" / "sample-paper80", sample)
    shutil.rmtree(sample / "derived", ignore_errors=True)
    return {"sample": sample, "varied": varied_run(base / "varied")}


#: partition windows: the sample run spans seconds, the varied one about a millisecond
WINDOW_S = {"sample": 0.05, "varied": 0.0001}


def both(run_dir: Path, window_s: float) -> tuple[pl.DataFrame, dict, Parts]:
    run = load(run_dir)
    rp = RunPaths(run_dir)
    ingest_stream(rp, window_s=window_s, zone_parts=5, chunk_bytes=64 << 10)
    return run.events, run.meta, Parts(rp.events_parts)


@pytest.mark.parametrize("name", ["sample", "varied"])
def test_streaming_equals_in_memory(runs: dict[str, Path], name: str) -> None:
    ev, meta, parts = both(runs[name], WINDOW_S[name])
    nz, lb = meta["nr_zones"], meta["lba_bytes"]
    assert parts.rows == ev.height and len(parts.windows()) > 1 and len(parts.zone_ranges()) > 1
    lf = parts.scan()
    assert_frame_equal(zone_table(ev, nz, lb), st.zone_table_lazy(lf, nz, lb))
    assert_frame_equal(opcode_table(ev, lb), st.opcode_table_lazy(lf, lb))
    srun = load(runs[name], events=False)
    for op in ("read", "write", "write_zeroes"):
        assert chains_report(ev, op, 4 << 20, lb) == streamed.chains(srun, op)
    assert_frame_equal(frag_table(ev, nz, lb, meta["zone_size_lba"]), streamed.frag(srun))
    for cache_mib in (1, 4):
        exact = simulate(ev, meta, cache_mib, 4, HOT, with_sweep=True)
        where = (pl.col("op").cast(pl.String) == "read") & (pl.col("nlb") > 0)
        got = st.cachesim_stream(parts.ordered(streamed.PASS_COLUMNS, where), meta, cache_mib, 4, HOT, SWEEP_MIB,
                                 tree_slots=512)
        for k in ("requests", "read_commands", "cache_pages", "lru", "zone_lru", "static_best"):
            assert got[k] == exact[k], k
        assert [r["lru"] for r in got["lru_sweep"]] == [r["lru"] for r in exact["sweep"]]
    cells = st.cell_counts_lazy(lf, meta, 32)
    slba = ev.filter(pl.col("op") == "read")["slba"].to_numpy()
    counts = np.bincount(np.minimum(slba // (meta["zone_size_lba"] // 32), nz * 32 - 1), minlength=nz * 32)
    assert cells["cell"].to_list() == np.flatnonzero(counts).tolist()
    assert cells["reads"].to_list() == counts[counts > 0].tolist()


def test_varied_run_took_the_careful_path_and_kept_order(runs: dict[str, Path]) -> None:
    rp = RunPaths(runs["varied"])
    m = ingest_stream(rp, window_s=WINDOW_S["varied"], zone_parts=5, chunk_bytes=64 << 10)
    assert m["ingest"]["skipped"] == 1 and m["ingest"]["skip_reasons"] == {"wrong field count": 1}
    assert m["ingest"]["path"] == "stream-careful"
    clean = ingest_stream(RunPaths(runs["sample"]), chunk_bytes=256 << 10)
    assert clean["ingest"]["path"] == "stream-fast" and clean["ingest"]["skipped"] == 0
    assert m["out_of_range_zones"] > 0 and is_fresh(rp)
    ts = pl.concat(Parts(rp.events_parts).ordered(["ts_ns"]))["ts_ns"]
    assert ts.is_sorted() and ts.len() == m["rows"]


def test_exact_quantiles_match_polars() -> None:
    rng = np.random.default_rng(1)
    df = pl.DataFrame({"k": rng.integers(0, 7, 5000), "v": np.concatenate([rng.integers(0, 2**40, 2500),
                                                                            rng.integers(0, 300, 2500)])})
    qs = {"a": 0.5, "b": 0.9, "c": 0.999, "d": 0.0, "e": 1.0}
    got = st.exact_quantiles(df.lazy(), ["k"], "v", qs).sort("k")
    want = df.group_by("k").agg(pl.col("v").quantile(q, "nearest").cast(pl.UInt64).alias(n)
                                for n, q in qs.items()).sort("k")
    assert_frame_equal(got, want, check_column_order=False)
    empty = st.exact_quantiles(df.lazy().filter(pl.col("k") < 0), ["k"], "v", qs)
    assert empty.height == 0


def test_reads_only_in_no_window_leave_chains_empty() -> None:
    """Negative control: a trace of writes has no read chain and no cache request."""
    ev = pl.DataFrame({"op": ["write"] * 4, "nsid": [1] * 4, "slba": [0, 8, 16, 24], "nlb": [8] * 4,
                       "zone": [0] * 4})
    rep = st.chains_report_stream([ev], "read", 4 << 20, 4096)
    assert rep["chains"] == 0 and rep["bytes"] == 0 and rep["chain_cdf"] == []
    meta = {"lba_bytes": 4096, "zone_size_lba": 8192, "nr_zones": 64}
    res = st.cachesim_stream([ev], meta, 64, 4, [])
    assert res["requests"] == 0 and res["lru"] == 0.0


def test_byte_chunks_cut_at_lines(tmp_path: Path) -> None:
    f = tmp_path / "x.csv"
    f.write_bytes(b"h1\nh2\n" + b"".join(f"{i},abc\n".encode() for i in range(1000)) + b"tail-no-newline")
    chunks = list(byte_chunks(f, 100, skip_lines=2))
    assert b"".join(c for c, _ in chunks) == f.read_bytes().split(b"\n", 2)[2]
    assert all(c.endswith(b"\n") for c, _ in chunks[:-1]) and chunks[-1][0].endswith(b"tail-no-newline")
    starts = [s for _, s in chunks]
    assert starts[0] == 3 and all(b > a for a, b in zip(starts, starts[1:], strict=False))


@pytest.mark.parametrize("max_lines", [1, 7, 1000])
def test_byte_chunks_hold_at_most_max_lines_and_drop_lines_too_long(tmp_path: Path, max_lines: int) -> None:
    f = tmp_path / "x.csv"
    lines = [b"h1", b"h2", *(b"%d,abc" % i for i in range(500)), b"L" * 300, b"" * 3, b"tail"]
    lines[40:40] = [b"", b"", b"M" * 250]
    f.write_bytes(b"\n".join(lines))
    dropped: list[int] = []
    chunks = list(byte_chunks(f, 64, skip_lines=2, on_long=dropped.append, max_line=200, max_lines=max_lines))
    assert all(c.count(b"\n") <= max_lines for c, _ in chunks)
    got = [(first + i, ln) for c, first in chunks for i, ln in enumerate(c.split(b"\n")[: c.count(b"\n") or 1])]
    body = list(enumerate(lines, start=1))[2:]
    # every line is given with its number or dropped; a line too long is dropped unless it came whole within one read
    # (at most max_line + chunk_bytes: the reader skips it by its length)
    assert sorted(got + [(n, lines[n - 1]) for n in dropped]) == body
    assert all(len(lines[n - 1]) > 200 for n in dropped) and all(len(ln) <= 200 + 64 for _, ln in got)
    assert 506 in dropped  # the line of 300 bytes never fits one read


@given(st_lines=hst.lists(hst.binary(max_size=12).filter(lambda b: b"\n" not in b), max_size=60),
       max_lines=hst.integers(1, 9), tail=hst.booleans())
@settings(max_examples=200, deadline=None)
def test_byte_chunks_cut_a_large_chunk_into_pieces_of_max_lines(tmp_path_factory: pytest.TempPathFactory,
                                                                st_lines: list[bytes], max_lines: int,
                                                                tail: bool) -> None:
    """One read holds the whole file: its lines come in pieces of at most max_lines lines, in order, each with
    the number of its first line, nothing lost (a last line without a newline included)."""
    f = tmp_path_factory.mktemp("pieces") / "x.csv"
    data = b"".join(ln + b"\n" for ln in st_lines) + (b"end" if tail else b"")
    f.write_bytes(data)
    chunks = list(byte_chunks(f, 1 << 20, max_lines=max_lines))
    assert b"".join(c for c, _ in chunks) == data
    assert all(c.count(b"\n") <= max_lines for c, _ in chunks[:-1] if c.endswith(b"\n"))
    first = 1
    for c, at in chunks:
        assert at == first
        first += c.count(b"\n")


def test_cli_stream(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stream", str(runs["sample"]), "--analyses", "zones,chains,cachesim", "--reingest",
                 "--window-s", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ev = load(runs["sample"]).events
    assert out["rows"] == ev.height == out["ingest"]["rows"]
    assert out["chains"]["chains"] == chains_report(ev, "read", 4 << 20, 4096)["chains"]
    assert set(out["seconds"]) == {"zones", "chains", "cachesim"}
    from ztbp.cli.scale import STREAM_ANALYSES

    assert STREAM_ANALYSES == stages.STREAMED
    assert main(["stream", str(runs["sample"]), "--analyses", "zones,bogus"]) == 2
    assert "unknown 'bogus'" in capsys.readouterr().err


def _without_kfold(res: dict) -> dict:
    """A clustering result without what the KFold folds decide: the grid's kfold scores, its mean number of
    clusters (over the fits of both validations), `scores["kfold"]`."""
    out = {k: v for k, v in res.items() if k not in ("grid", "scores", "folds")}
    kfold = ("silhouette", "folds_scored", "clusters_mean")
    out["grid"] = [{k: v for k, v in g.items() if k not in kfold} for g in res["grid"]]
    out["scores"] = {k: v for k, v in res.get("scores", {}).items() if k != "kfold"}
    return out


@pytest.mark.parametrize("name", ["sample", "varied", "uniform"])
def test_streamed_clustering_equals_in_memory(runs: dict[str, Path], name: str, tmp_path: Path) -> None:
    """One pass over the reads in time order gives the in-memory cells: with the same (hashed) folds the whole
    result is equal; against the default (scikit-learn's KFold permutation) everything the time validation decides
    — the pair, the hot zones, the zone tests — is. Negative control: uniform reads, no hot zone either way."""
    from ztbp.acquire.synth import write_run
    from ztbp.analysis.cluster import cluster_from_cells, read_cells, run_cluster
    from ztbp.analysis.params import ClusterParams

    if name == "uniform":
        write_run(tmp_path / "u", "uniform", 20_000, seed=3)
        run_dir = tmp_path / "u"
        ev, meta, parts = both(run_dir, 0.01)
    else:
        run_dir = runs[name]
        ev, meta, parts = both(run_dir, WINDOW_S[name])
    assert len(parts.windows()) > 1
    got = streamed.cluster(load(run_dir, events=False))
    assert got.pop("folds") == "hash"
    assert got == cluster_from_cells(read_cells(ev, meta, ClusterParams(), folds="hash"), meta)
    default = run_cluster(ev, meta)
    assert _without_kfold(got) == _without_kfold(default)
    want = {"sample": [1, 7, 11, 15, 19], "varied": None, "uniform": []}[name]
    if want is not None:
        assert sorted(got["hot_zones"]) == want


def test_frag_merges_extents_frame_by_frame(runs: dict[str, Path]) -> None:
    """The bounded frag pass: one zone range fed as hundreds of frames in file order, extents merged again every
    few hundred, gives frag_table's figures exactly (zone 70 beyond the device, overlaps, gaps, appends)."""
    ev, meta, _ = both(runs["varied"], WINDOW_S["varied"])
    nz = max(meta["nr_zones"], int(ev["zone"].max()) + 1)
    frames = [ev.slice(i, 97) for i in range(0, ev.height, 97)]
    for merge_at in (50, 1 << 30):
        got = st.frag_table_stream([iter(frames)], nz, meta["lba_bytes"], meta["zone_size_lba"], merge_at=merge_at)
        assert_frame_equal(frag_table(ev, nz, meta["lba_bytes"], meta["zone_size_lba"]), got)
