"""Hot-zone clustering: exact hot sets over varied geometry and hot sets; negative controls give none."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest
from sklearn.metrics import silhouette_score

from ztbp.acquire.synth import SynthGeometry, SynthOptions, synthesize
from ztbp.analysis.cluster import (
    holm,
    kfold_labels,
    run_cluster,
    time_windows,
    zone_p_values,
)
from ztbp.analysis.params import PAPER_EPS, PAPER_MIN_SAMPLES, ClusterParams
from ztbp.analysis.tuning import weighted_silhouette
from ztbp.cli import main
from ztbp.paths import ROOT

META = {"zone_size_lba": 8192, "nr_zones": 64, "lba_bytes": 4096}
HOT = [1, 7, 11, 15, 19]


def reads(pattern: str, n: int, seed: int, geo: SynthGeometry = SynthGeometry(),
          opts: SynthOptions = SynthOptions()) -> pl.DataFrame:
    return synthesize(pattern, n, seed, geo, SynthOptions(**{**opts.__dict__, "prefill": False}))


def meta(geo: SynthGeometry) -> dict[str, int]:
    return {"zone_size_lba": geo.zone_size_lba, "nr_zones": geo.nr_zones, "lba_bytes": geo.lba_bytes}


@pytest.mark.parametrize("pattern", ["paper80", "paper60"])
@pytest.mark.parametrize("seed", [1, 2])
def test_paper_workloads_give_exactly_the_hot_zones(pattern: str, seed: int) -> None:
    r = run_cluster(reads(pattern, 300_000, seed), META, ClusterParams(seed=seed))
    assert sorted(r["hot_zones"]) == HOT
    assert r["silhouette"] == max(g["silhouette_time"] for g in r["grid"] if g["silhouette_time"] is not None)
    # a pair outside the paper's grid is there only because the grid was widened, and says so
    grid_pairs = {(g["eps"], g["min_samples"]) for g in r["grid"]}
    paper = {(e, m) for e in PAPER_EPS for m in PAPER_MIN_SAMPLES}
    assert paper <= grid_pairs and (grid_pairs == paper) == (not r["widened"])
    assert {z["zone"] for z in r["zone_tests"] if z["hot"]} == set(HOT)
    assert all(z["significant"] and z["dense"] for z in r["zone_tests"] if z["hot"])


def test_committed_sample_run_still_gives_the_papers_hot_zones(capsys) -> None:
    run = ROOT / "tests" / "data" / "runs" / "sample-paper80"
    assert main(["cluster", str(run), "--json"]) == 0
    assert sorted(json.loads(capsys.readouterr().out)["hot_zones"]) == HOT


# --- negative controls: nothing is hot by construction -----------------------------------------------------------

NEGATIVE = [
    pytest.param("zipf", SynthOptions(zipf=0.8), id="zipf-0.8"),
    pytest.param("zipf", SynthOptions(zipf=1.0), id="zipf-1.0"),
    pytest.param("zipf", SynthOptions(zipf=1.2), id="zipf-1.2"),
    pytest.param("uniform", SynthOptions(), id="uniform"),
    pytest.param("hotpage", SynthOptions(), id="hot-4k-page"),
    pytest.param("hotpage", SynthOptions(hot_share=0.8), id="hot-4k-page-0.8"),
    pytest.param("hotcells", SynthOptions(), id="hot-1m-cells-16-zones"),
    pytest.param("hotcells", SynthOptions(hot_share=0.8, hot_zones=tuple(range(0, 32, 3))), id="hot-1m-cells-0.8"),
]


@pytest.mark.parametrize(("pattern", "opts"), NEGATIVE)
@pytest.mark.parametrize("seed", [1, 2])
def test_negative_controls_have_no_hot_zone(pattern: str, opts: SynthOptions, seed: int) -> None:
    r = run_cluster(reads(pattern, 300_000, seed, opts=opts), META, ClusterParams(seed=seed))
    assert r["hot_zones"] == []
    if pattern in ("hotpage", "hotcells"):
        # the zones holding the hot page or cells are significantly above the rest: the cell rule rejects them
        assert r["significant_zones"] >= 1 and r["dense_zones"] == 0


def test_hot_cells_would_pass_a_reads_only_rule() -> None:
    """The failure the cell rule fixes: hot 1 MiB cells put most of their zone's reads in a hot cluster."""
    r = run_cluster(reads("hotcells", 300_000, 1, opts=SynthOptions(hot_share=0.8)), META, ClusterParams(seed=1))
    cells = [z for z in r["zone_tests"] if z["hot_read_share"] >= 0.5]
    assert cells and all(z["hot_cell_share"] < 0.5 and not z["hot"] for z in cells)


# --- positive controls: the exact hot set over geometry, hot sets and shares ------------------------------------

def _case(z: int, zone_mib: int, lba: int, share: float, hot: tuple[int, ...]) -> tuple[SynthGeometry, SynthOptions]:
    geo = SynthGeometry(lba_bytes=lba, zone_size_lba=zone_mib * (1 << 20) // lba, nr_zones=z)
    return geo, SynthOptions(hot_zones=hot, hot_share=share, region=None)


@pytest.mark.parametrize(("z", "zone_mib", "lba", "share", "hot"), [
    pytest.param(4096, 32, 4096, 0.3, tuple(range(100, 4096, 205)), id="4096-zones-20-hot-0.3"),
    pytest.param(32, 256, 512, 0.9, (4, 5, 6, 7), id="256MiB-512B-contiguous"),
    pytest.param(32, 16, 4096, 0.9, (0,), id="16MiB-zone-0"),
    pytest.param(1024, 64, 512, 0.5, tuple(range(1004, 1024)), id="20-contiguous-at-the-end"),
    pytest.param(64, 32, 4096, 0.3, (31,), id="one-hot-zone-0.3"),
])
def test_positive_controls_give_the_exact_hot_set(z, zone_mib, lba, share, hot) -> None:
    geo, opts = _case(z, zone_mib, lba, share, hot)
    r = run_cluster(reads("hotzones", 200_000, 5, geo, opts), meta(geo), ClusterParams(seed=5))
    assert sorted(r["hot_zones"]) == sorted(hot)


@st.composite
def hot_workloads(draw: st.DrawFn) -> tuple[SynthGeometry, SynthOptions, int]:
    z = draw(st.sampled_from([32, 64, 256, 1024, 4096]))
    zone_mib = draw(st.sampled_from([16, 32, 64, 128, 256]))
    lba = draw(st.sampled_from([512, 4096]))
    share = draw(st.floats(0.3, 0.9))
    # hot by construction: a hot zone's cell rate, share * zones / hot + 1 - share times the mean cell's, is at
    # least 3 (hot_factor 2 plus a margin): at most share * zones / (2 + share) hot zones
    most = max(1, min(20, int(share * z / (2 + share))))
    h = draw(st.integers(1, most))
    if draw(st.booleans()):
        first = draw(st.integers(0, z - h))
        hot = tuple(range(first, first + h))
    else:
        hot = tuple(sorted(draw(st.sets(st.integers(0, z - 1), min_size=h, max_size=h))))
    geo, opts = _case(z, zone_mib, lba, share, hot)
    return geo, opts, draw(st.integers(0, 1000))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hot_workloads())
def test_random_hot_sets_over_geometry_give_the_exact_hot_set(case) -> None:
    geo, opts, seed = case
    r = run_cluster(reads("hotzones", 200_000, seed, geo, opts), meta(geo), ClusterParams(seed=seed))
    assert sorted(r["hot_zones"]) == sorted(opts.hot_zones)


# --- the rule's parts ------------------------------------------------------------------------------------------

def test_zone_p_values_are_the_exact_binomial_test_against_the_rest() -> None:
    reads = np.array([50, 30, 20, 0, 25])
    cells = np.array([32, 32, 16, 0, 32])
    hot = np.array([False, False, False, False, True])
    p = zone_p_values(reads, cells, hot)
    # zone 0 against zones 1 and 2 (zone 3 unread, zone 4 hot): 50 of 100 reads on 32 of 80 cells
    assert p[0] == pytest.approx(binomtest(50, 100, 32 / 80, alternative="greater").pvalue, rel=1e-9)
    assert p[2] == pytest.approx(binomtest(20, 100, 16 / 80, alternative="greater").pvalue, rel=1e-9)
    assert p[3] == 1.0


def test_holm_adjustment() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1 -> 0.02, 0.03, 0.06, 0.06 (monotone)
    assert holm(p).tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_significance_test_false_positive_rate_on_uniform_zones() -> None:
    """Family-wise false-positive rate of the test alone, uniform reads over 32 zones: at most alpha (0.01),
    within three binomial standard errors over 2,000 simulated runs."""
    rng = np.random.default_rng(0)
    runs, hits = 2000, 0
    cells = np.full(32, 32)
    for _ in range(runs):
        r = rng.multinomial(100_000, np.full(32, 1 / 32))
        hits += bool((holm(zone_p_values(r, cells, np.zeros(32, dtype=bool))) <= 0.01).any())
    assert hits / runs <= 0.01 + 3 * np.sqrt(0.01 * 0.99 / runs)


def test_cells_beyond_the_zone_capacity_do_not_count_against_a_hot_zone() -> None:
    """A device whose zones hold data in their first 40 % only (zone capacity < zone size): the hot zones are read
    all over their capacity, so they are dense, though 60 % of their cells can never be read."""
    ev = reads("paper80", 200_000, 2)
    off = ev["slba"] % 8192
    squeezed = ev.with_columns((ev["slba"] - off + off * 2 // 5).alias("slba"))
    cap = {**META, "zone_cap_lba": 8192 * 2 // 5}
    r = run_cluster(squeezed, cap, ClusterParams(seed=2))
    assert sorted(r["hot_zones"]) == HOT
    assert all(z["hot_cell_share"] >= 0.9 for z in r["zone_tests"] if z["hot"])


def test_only_one_zone_read_is_not_hot() -> None:
    ev = reads("uniform", 50_000, 1, opts=SynthOptions(region=(32 << 20, 64 << 20)))
    r = run_cluster(ev, META, ClusterParams())
    assert r["hot_zones"] == []


def test_too_few_reads_is_reported_not_guessed() -> None:
    r = run_cluster(reads("paper80", 3, 1), META, ClusterParams())
    assert r["hot_zones"] == [] and "too few" in r["note"]


def test_small_capture_sized_run_still_finds_the_hot_zones() -> None:
    r = run_cluster(reads("paper80", 4000, 3), META, ClusterParams(seed=3))
    assert sorted(r["hot_zones"]) == HOT


def test_both_validations_are_reported_and_either_can_choose() -> None:
    ev = reads("paper60", 100_000, 4)
    by_time = run_cluster(ev, META, ClusterParams(widen=False))
    by_kfold = run_cluster(ev, META, ClusterParams(widen=False, validation="kfold"))
    for r in (by_time, by_kfold):
        assert set(r["scores"]) == {"time", "kfold"} and sorted(r["hot_zones"]) == HOT
        assert all(g["folds_scored"] == 5 and g["windows_scored"] == 5 for g in r["grid"])
    assert by_kfold["silhouette"] == by_kfold["scores"]["kfold"]["silhouette"]
    assert by_time["silhouette"] == by_time["scores"]["time"]["silhouette"]


def test_a_winner_on_the_edge_widens_the_grid() -> None:
    ev = reads("paper80", 100_000, 1)
    narrow = run_cluster(ev, META, ClusterParams(eps=(0.002, 0.004), min_samples=(20,)))
    assert narrow["widened"] and "upper edge" in narrow["widened"][0]
    assert len({g["eps"] for g in narrow["grid"]}) > 2
    kept = run_cluster(ev, META, ClusterParams(eps=(0.002, 0.004), min_samples=(20,), widen=False))
    assert kept["widened"] == [] and [g["eps"] for g in kept["grid"]] == [0.002, 0.004]


def test_weighted_silhouette_equals_silhouette_of_the_expanded_points() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((30, 2))
    labels = rng.integers(0, 3, 30)
    w = rng.integers(1, 5, 30)
    expanded = np.repeat(x, w, axis=0)
    assert weighted_silhouette(x, labels, w.astype(float)) == pytest.approx(
        silhouette_score(expanded, np.repeat(labels, w)), abs=1e-9)


def test_cluster_cli_json_keys_and_custom_grid(tmp_path, capsys) -> None:
    from ztbp.acquire.synth import write_run

    write_run(tmp_path / "r", "paper80", 50_000, seed=1)
    assert main(["cluster", str(tmp_path / "r"), "--json", "--eps", "0.02,0.04", "--min-samples", "25",
                 "--no-widen"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert {"hot_zones", "eps", "min_samples", "silhouette", "grid", "scores", "widened", "rule",
            "zone_tests"} <= set(r)
    assert [(g["eps"], g["min_samples"]) for g in r["grid"]] == [(0.02, 25), (0.04, 25)]
    assert sorted(r["hot_zones"]) == HOT
    assert main(["cluster", str(tmp_path / "r"), "--eps", "a"]) == 2
    assert "'a' is not a number: give a number in [1e-06, 1.5]" in capsys.readouterr().err
    assert main(["cluster", str(tmp_path / "r"), "--alpha", "2"]) == 2
    assert "--alpha" in capsys.readouterr().err


@pytest.mark.parametrize(("n", "seed"), [(5, 0), (23, 1), (1000, 7)])
def test_fold_labels_are_sklearns_kfold(n: int, seed: int) -> None:
    from sklearn.model_selection import KFold

    labels = kfold_labels(n, seed)
    for f, (_, test) in enumerate(KFold(n_splits=5, shuffle=True, random_state=seed).split(np.empty((n, 1)))):
        assert sorted(np.flatnonzero(labels == f).tolist()) == sorted(test.tolist())


@pytest.mark.parametrize("n", [6, 23, 1000, 1001])
def test_time_windows_are_sklearns_time_series_split(n: int) -> None:
    from sklearn.model_selection import TimeSeriesSplit

    w = time_windows(n)
    for k, (train, test) in enumerate(TimeSeriesSplit(n_splits=5).split(np.empty((n, 1)))):
        assert np.flatnonzero(w <= k).tolist() == train.tolist()
        assert np.flatnonzero(w == k + 1).tolist() == test.tolist()
