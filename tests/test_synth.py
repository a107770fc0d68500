"""`ztbp synth`: the generator's parameters — hot set, hot share, zone size, LBA size, zone count, Zipf exponent,
region — do what they say, over varied values; the paper's workloads are unchanged."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ztbp.acquire.synth import SynthGeometry, SynthOptions, synthesize
from ztbp.cli import main
from ztbp.errors import ZtbpError

MIB = 1 << 20


def _digest(cmds: pl.DataFrame) -> str:
    text = cmds["slba"].to_numpy().tobytes() + cmds["nlb"].to_numpy().tobytes()
    return hashlib.sha256(text + cmds["op"].cast(str).str.join("").to_list()[0].encode()).hexdigest()[:16]


@pytest.mark.parametrize(("pattern", "digest"), [
    ("paper80", "32becb17572712ac"), ("paper60", "5420545bef2de4bc"), ("uniform", "600d2e5e331fa571")])
def test_the_papers_workloads_are_unchanged(pattern: str, digest: str) -> None:
    """The same commands, read for read, as the generator had before it took parameters (digests taken from it)."""
    assert _digest(synthesize(pattern, 5000, 1)) == digest


def _reads(pattern: str, n: int, seed: int, geo: SynthGeometry, opts: SynthOptions) -> pl.DataFrame:
    return synthesize(pattern, n, seed, geo, opts).filter(pl.col("op") == "read")


@st.composite
def hot_workloads(draw: st.DrawFn) -> tuple[SynthGeometry, SynthOptions]:
    lba = draw(st.sampled_from([512, 4096]))
    zone_mib = draw(st.sampled_from([16, 32, 64, 128, 256]))
    zones = draw(st.integers(2, 4096))
    hot = draw(st.sets(st.integers(0, zones - 1), min_size=1, max_size=min(20, zones)))
    share = draw(st.floats(0.0, 1.0))
    region = draw(st.sampled_from([None, (10 * MIB, 1 << 30)]))
    geo = SynthGeometry(lba_bytes=lba, zone_size_lba=zone_mib * MIB // lba, nr_zones=zones)
    return geo, SynthOptions(hot_zones=tuple(sorted(hot)), hot_share=share, region=region, prefill=False)


@settings(max_examples=40, deadline=None)
@given(hot_workloads(), st.integers(0, 10_000))
def test_hot_set_share_and_geometry(case, seed) -> None:
    geo, opts = case
    n = 4000
    r = _reads("hotzones", n, seed, geo, opts)
    slba = r["slba"].to_numpy().astype(np.int64)
    assert r.height == n and (r["nlb"] == 4096 // geo.lba_bytes).all()
    assert (slba % (4096 // geo.lba_bytes) == 0).all() and slba.max() < geo.zone_size_lba * geo.nr_zones
    in_hot = np.isin(slba // geo.zone_size_lba, opts.hot_zones)
    start, end = (0, geo.zone_bytes * geo.nr_zones) if opts.region is None else (
        opts.region[0], min(opts.region[1], geo.zone_bytes * geo.nr_zones))
    cold_on_hot = sum(max(0, min(end, (z + 1) * geo.zone_bytes) - max(start, z * geo.zone_bytes))
                      for z in opts.hot_zones) / (end - start)
    expect = opts.hot_share + (1 - opts.hot_share) * cold_on_hot
    assert abs(in_hot.mean() - expect) <= 5 * np.sqrt(max(expect * (1 - expect), 1e-4) / n) + 1e-9
    cold = slba[~in_hot] * geo.lba_bytes
    assert ((cold >= start) & (cold < end)).all()


@pytest.mark.parametrize("s", [0.8, 1.0, 1.2])
def test_zipf_exponent_sets_how_skewed_the_pages_are(s: float) -> None:
    r = _reads("zipf", 50_000, 3, SynthGeometry(), SynthOptions(zipf=s, prefill=False))
    pages = r["slba"].to_numpy()
    assert pages.min() * 4096 >= 10 * MIB and pages.max() * 4096 < 1 << 30
    counts = np.sort(np.bincount(pages))[::-1]
    span = (1 << 30) // 4096 - 10 * MIB // 4096
    expected_top = 1 / np.sum(np.arange(1, span + 1, dtype=float) ** -s)  # P(rank 1)
    assert counts[0] / pages.size == pytest.approx(expected_top, rel=0.1)


def test_zipf_skew_grows_with_the_exponent() -> None:
    top = [np.sort(np.bincount(_reads("zipf", 30_000, 1, SynthGeometry(), SynthOptions(zipf=s))["slba"].to_numpy())
                   )[-100:].sum() for s in (0.8, 1.0, 1.2)]
    assert top[0] < top[1] < top[2]


def test_hot_page_and_hot_cells() -> None:
    page = _reads("hotpage", 20_000, 1, SynthGeometry(), SynthOptions(hot_share=0.4))
    slba = page["slba"].to_numpy()
    values, counts = np.unique(slba, return_counts=True)
    assert values[counts.argmax()] == 7 * 8192 + 4096 and counts.max() / slba.size == pytest.approx(0.4, abs=0.02)
    cells = _reads("hotcells", 40_000, 1, SynthGeometry(), SynthOptions(hot_share=0.8, hot_zones=(2, 9, 30)))
    mib = cells["slba"].to_numpy() // 256  # 1 MiB of 4 KiB LBAs
    busiest = np.bincount(mib).argsort()[-3:]
    assert sorted(busiest // 32) == [2, 9, 30]  # one hot cell in each of the three zones
    assert np.isin(mib, busiest).mean() == pytest.approx(0.8, abs=0.02)


def test_synth_cli_takes_the_parameters(tmp_path: Path, capsys) -> None:
    run = tmp_path / "r"
    assert main(["synth", str(run), "--pattern", "hotzones", "--hot-zones", "3,9", "--hot-share", "0.5",
                 "--zones", "128", "--zone-size", "16M", "--lba-size", "512", "--region", "all", "--reads",
                 "2000", "--no-prefill"]) == 0
    meta = json.loads((run / "meta.json").read_text())
    assert (meta["lba_bytes"], meta["zone_size_lba"], meta["nr_zones"]) == (512, 32768, 128)
    assert meta["workload"]["hot_zones"] == [3, 9] and meta["workload"]["hot_share"] == 0.5
    assert meta["workload"]["region"] == [0, 128 * 16 * MIB]
    capsys.readouterr()
    assert main(["zones", str(run), "--json"]) == 0
    zones = json.loads(capsys.readouterr().out)
    zones = zones["zones"] if isinstance(zones, dict) else zones
    assert sum(z["reads"] for z in zones) == 2000 and sum(z["writes"] for z in zones) == 0  # no prefill
    assert main(["synth", str(tmp_path / "z"), "--pattern", "zipf", "--zipf", "0.8", "--reads", "100"]) == 0
    assert json.loads((tmp_path / "z" / "meta.json").read_text())["workload"]["zipf"] == 0.8


@pytest.mark.parametrize(("args", "fragment"), [
    (["--zone-size", "100K"], "multiple of 128 KiB"),
    (["--hot-zones", "70"], "beyond the device's 64 zones"),
    (["--hot-zones", "3,3"], "twice"),
    (["--hot-share", "1.5"], "--hot-share"),
    (["--zipf", "0", "--pattern", "zipf"], "argument --zipf: '0' is out of range: give a number in (0, 10]"),
    (["--region", "1G"], "START:END"),
    (["--region", "2G:1G"], "--region"),
    (["--reads", "0"], "argument --reads: '0' is out of range: give an integer in [1, 100000000]"),
])
def test_synth_cli_rejects_bad_parameters(tmp_path: Path, capsys, args: list[str], fragment: str) -> None:
    assert main(["synth", str(tmp_path / "r"), *args]) == 2
    assert fragment in capsys.readouterr().err
    assert not (tmp_path / "r" / "raw").exists()


def test_bad_options_are_errors_not_tracebacks(tmp_path: Path, capsys) -> None:
    assert main(["synth", str(tmp_path / "r"), "--lba-size", "1024"]) == 2  # argparse's own usage error
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(ZtbpError, match="choose 512 or 4096"):
        synthesize("uniform", 10, 1, SynthGeometry(lba_bytes=1024))
    with pytest.raises(ZtbpError, match="unknown pattern"):
        synthesize("nope", 10, 1)


def test_synth_refuses_to_replace_a_run_without_force(tmp_path: Path, capsys) -> None:
    """A captured run's raw/nvme.csv and meta.json are never replaced silently (as `ztbp import` refuses)."""
    run = tmp_path / "r"
    assert main(["synth", str(run), "--reads", "100"]) == 0
    before = {p: p.read_bytes() for p in (run / "meta.json", run / "raw" / "nvme.csv")}
    capsys.readouterr()
    assert main(["synth", str(run), "--reads", "200", "--seed", "2"]) == 2
    err = capsys.readouterr().err
    assert err == f"ztbp synth: error: {run} already holds a run; choose a new directory or pass --force to replace " \
                  "it.\n"
    assert {p: p.read_bytes() for p in before} == before
    assert main(["synth", str(run), "--reads", "200", "--seed", "2", "--force"]) == 0
    assert (run / "raw" / "nvme.csv").read_bytes() != before[run / "raw" / "nvme.csv"]


@pytest.mark.parametrize("command", ["synth", "import"])
def test_a_run_path_that_is_a_file_is_one_line(tmp_path: Path, capsys, command: str) -> None:
    target = tmp_path / "file"
    target.write_text("not a run\n")
    src = tmp_path / "trace.csv"
    src.write_text("2,R,0,4096,1\n")
    argv = {"synth": ["synth", str(target), "--reads", "10"],
            "import": ["import", str(src), str(target), "--format", "alibaba", "--zone-size", "1M"]}[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"ztbp {command}: error: {target} exists and is not a directory: give a new directory for the run.\n"
    assert target.read_text() == "not a run\n"
