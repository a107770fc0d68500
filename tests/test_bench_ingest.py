"""`just bench-ingest` runs end to end on a small run: both commands timed, the ratio and the ingest's steps
printed (the figures themselves are a benchmark, never judged here)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "pipelines" / "benchmarks"))

import bench_ingest  # noqa: E402


def test_bench_ingest_prints_the_pairs_ratio_and_steps(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_ingest.main(["--reads", "2000", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "2,000 reads" in out and "2 pairs" in out
    ratio = re.search(r"ingest / bare\s+median\s+([\d.]+)×", out)
    assert ratio and float(ratio.group(1)) > 0
    steps = re.findall(r"^\s+([\d.]+) s  (.+)$", out, re.M)
    assert [s for _, s in steps] == ["read, parse, check, digest", "zone and sort", "events.parquet written"]


def test_bench_ingest_refuses_out_of_range_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        bench_ingest.main(["--rounds", "0"])
    assert e.value.code == 2 and "--rounds in [1, 50]" in capsys.readouterr().err
