"""SHARDS spatial sampling (analysis/shards.py): the sampler's known properties, every policy against the exact
simulation, the streamed sampler against the in-memory one, and the command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from ztbp.acquire.synth import write_run
from ztbp.analysis import shards
from ztbp.analysis.cachesim import POLICIES, simulate
from ztbp.cli import main
from ztbp.io.libcachesim import sampled
from ztbp.io.parts import Parts, ingest_stream
from ztbp.io.run import load
from ztbp.paths import TEST_DATA, RunPaths

SAMPLE = TEST_DATA / "runs" / "sample-paper80"
HOT = [1, 7, 11, 15, 19]


@pytest.fixture(scope="module")
def paper80(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("shards") / "p80"
    write_run(run, "paper80", 600_000, seed=11)
    return run


def test_sampler_keeps_whole_pages_at_the_rate() -> None:
    pages = np.arange(200_000, dtype=np.int64)
    keep = shards.sampled(pages, 0.01, seed=3)
    assert abs(int(keep.sum()) - 2000) < 4 * np.sqrt(2000)  # binomial, 4 sigma
    twice = np.concatenate([pages, pages[::-1]])
    k2 = shards.sampled(twice, 0.01, seed=3)
    assert np.array_equal(k2[:200_000], keep) and np.array_equal(k2[200_000:], keep[::-1])  # by page, not request
    other = shards.sampled(pages, 0.01, seed=4)
    assert int((keep & other).sum()) < 100  # another seed draws an independent sample
    assert shards.sampled(pages, 1.0).all()
    with pytest.raises(Exception, match="in \\(0, 1\\]"):
        shards.sampled(pages, 0.0)


def test_rate_one_is_the_exact_simulation() -> None:
    ev = load(SAMPLE).events
    meta = load(SAMPLE).meta
    exact = simulate(ev, meta, 8, 4, HOT)
    est = shards.estimate([ev], meta, 8, 4, HOT, rate=1.0)
    assert est["sampled_requests"] == exact["requests"] and est["cache_pages"] == exact["cache_pages"]
    for p in POLICIES:
        assert est["hit_ratio"][p] == pytest.approx(exact[p], abs=0)


def test_one_percent_is_close_on_a_large_run(paper80: Path) -> None:
    r = load(paper80)
    res = shards.compare(r.events, r.meta, 64, 4, HOT, rates=(0.01, 0.001), seed=0, peer=sampled)
    one = res["rates"][0]
    assert one["sampled_requests"] == pytest.approx(res["requests"] * 0.01, rel=0.15)
    for p in POLICIES:  # 1 % of 600 k page requests: every policy within 0.02 of the exact hit ratio
        assert abs(one["error"][p]) < 0.02, (p, one["error"])
    assert one["speedup"] > 1 and res["rates"][1]["sampled_requests"] < one["sampled_requests"]
    peer = one["libcachesim"]  # libCacheSim's own spatial sampler, same rate and scaled cache: a peer estimate
    assert peer["policy"] == "lru" and abs(peer["error"]) < 0.02 and peer["hit_ratio"] != one["hit_ratio"]["lru"]


def test_no_reuse_gives_no_hit() -> None:
    """Negative control: every page read once -> exact and sampled hit ratios are 0."""
    n = 50_000
    ev = pl.DataFrame({"op": ["read"] * n, "slba": np.arange(n, dtype=np.uint64), "nlb": np.ones(n, np.uint32)})
    meta = {"lba_bytes": 4096, "zone_size_lba": 8192, "nr_zones": 64}
    res = shards.compare(ev, meta, 4, 4, [], rates=(0.01,))
    assert all(v == 0 for v in res["exact"].values())
    assert all(v == 0 for v in res["rates"][0]["hit_ratio"].values())


def test_streamed_sampler_equals_in_memory(paper80: Path) -> None:
    r = load(paper80)
    rp = RunPaths(paper80)
    ingest_stream(rp, window_s=10, zone_parts=4)
    parts = Parts(rp.events_parts)
    streamed = shards.estimate(parts.ordered(["op", "slba", "nlb"]), r.meta, 64, 4, HOT, rate=0.01)
    memory = shards.estimate([r.events], r.meta, 64, 4, HOT, rate=0.01)
    assert streamed == memory
    from ztbp.stages import streamed as st

    as_they_lie = st.shards(load(paper80, events=False), 0.01, 64, 4, HOT)  # files unordered, only the sample sorted
    assert len(parts.files()) > 4 and as_they_lie["sampled_requests"] == memory["sampled_requests"]
    no_belady = {p: v for p, v in memory["hit_ratio"].items() if p != "belady"}
    assert as_they_lie["hit_ratio"] == no_belady


def test_shards_adj_known_answers() -> None:
    """SHARDS_adj counts the expected-minus-drawn requests as hits: misses over N × R."""
    near = (lambda x: {"lru": pytest.approx(x, rel=1e-4)})  # noqa: E731 - the threshold's rate is 0.0099999905
    assert shards.adjusted({"lru": 0.5}, 100, 10_000, 0.01) == near(0.5)  # drew what was expected
    assert shards.adjusted({"lru": 0.5}, 110, 10_000, 0.01) == near(1 - 55 / 100)  # 10 too many: 55 misses of 100
    assert shards.adjusted({"lru": 0.5}, 90, 10_000, 0.01) == near(1 - 45 / 100)  # 10 too few
    assert shards.adjusted({"lru": 0.0}, 300, 10_000, 0.01) == {"lru": 0.0}  # clipped at 0
    assert shards.effective_rate(0.001) == round(0.001 * 2**24) / 2**24


def test_mean_error_over_seeds(paper80: Path) -> None:
    r = load(paper80)
    res = shards.compare(r.events, r.meta, 64, 4, HOT, rates=(0.01,), seed=0, seeds=4)
    one = res["rates"][0]
    assert one["seeds"] == 4 and set(one["mean_abs_error"]) == set(POLICIES) == set(one["mean_abs_error_adj"])
    assert all(0 <= v < 0.02 for v in one["mean_abs_error"].values())
    assert one["mean_abs_error"] != {p: abs(e) for p, e in one["error"].items()}  # other samples counted


def test_cli_shards(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["shards", str(SAMPLE), "--rates", "0.01", "--cache-mib", "8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)  # nothing else on stdout: libCacheSim's C prints are silenced
    assert out["requests"] == 30_000 and out["hot_zones"] == HOT
    assert set(out["rates"][0]["error"]) == set(POLICIES) == set(out["rates"][0]["error_adj"])
    assert main(["shards", str(SAMPLE), "--rates", "0.01", "--seeds", "3"]) == 0
    text = capsys.readouterr().out
    assert "over 3 seeds" in text and text.count("\n") == 2 + len(POLICIES) + 1  # and the libCacheSim line
    assert main(["shards", str(SAMPLE), "--seeds", "0"]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert main(["shards", str(SAMPLE), "--rates", "2"]) == 2
    assert "(0, 1]" in capsys.readouterr().err


def test_an_empty_sample_gives_no_estimate() -> None:
    """Forty pages at 0.1 %: most samples hold no request. Such a sample is no estimate (not a hit ratio of 0): it
    is left out of the means and counted."""
    pages = np.repeat(np.arange(40, dtype=np.uint64), 5)
    ev = pl.DataFrame({"op": ["read"] * pages.size, "slba": pages, "nlb": np.ones(pages.size, np.uint32)})
    meta = {"lba_bytes": 4096, "zone_size_lba": 8192, "nr_zones": 64}
    res = shards.compare(ev, meta, 4, 4, [], rates=(0.001,), seeds=20)
    r = res["rates"][0]
    kept = [int(shards.sampled(pages.astype(np.int64), 0.001, k).sum()) for k in range(20)]
    assert (r["hit_ratio"] is None) == (kept[0] == 0) and r["sampled_requests"] == kept[0]
    assert r["empty_samples"] == sum(1 for k in kept if k == 0) > 0
    if r["empty_samples"] == 20:
        assert r["mean_abs_error"]["lru"] is None
    res["run"] = "forty-pages"
    from ztbp.present.scale import shards_text

    assert "samples held no request" in shards_text(res)


def test_the_streamed_estimate_of_an_empty_sample_is_none_and_a_mixed_feed_is_refused() -> None:
    """`estimate` (the streamed path) agrees with `compare`: a sample without a request is no estimate. The sampler
    sorts what it keeps by ts_ns and row only when every frame carries them; a mix cannot be put in order: refused."""
    pages = np.repeat(np.arange(40, dtype=np.uint64), 5)
    ev = pl.DataFrame({"op": ["read"] * pages.size, "slba": pages, "nlb": np.ones(pages.size, np.uint32)})
    meta = {"lba_bytes": 4096, "zone_size_lba": 8192, "nr_zones": 64}
    seed = next(k for k in range(100) if not shards.sampled(pages.astype(np.int64), 0.001, k).any())
    est = shards.estimate([ev], meta, 4, 4, [], rate=0.001, seed=seed)
    assert est["requests"] == 200 and est["sampled_requests"] == 0
    assert est["hit_ratio"] is None and est["hit_ratio_adj"] is None
    keyed = ev.with_columns(ts_ns=pl.int_range(pl.len(), dtype=pl.Int64), row=pl.int_range(pl.len(), dtype=pl.Int64))
    with pytest.raises(ValueError, match="ts_ns and row"):
        shards.estimate([keyed.head(100), ev.tail(100)], meta, 4, 4, [], rate=1.0)
    # every frame keyed, fed in reverse: the sample comes back in submission order
    sampler = shards.Sampler(meta, 4, 1.0)
    for i in reversed(range(0, 200, 50)):
        sampler.feed(keyed.slice(i, 50))
    assert np.array_equal(sampler.trace()[0], pages.astype(np.int64))
