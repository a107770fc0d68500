"""Hot-zone clustering: the paper's workloads give exactly the hot zones; uniform gives none."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import silhouette_score

from ztbp.acquire.synth import synthesize
from ztbp.analysis.cluster import run_cluster, weighted_silhouette
from ztbp.analysis.params import PAPER_EPS, PAPER_MIN_SAMPLES, ClusterParams
from ztbp.cli import main

META = {"zone_size_lba": 8192, "nr_zones": 64, "lba_bytes": 4096}
HOT = [1, 7, 11, 15, 19]


def reads(pattern: str, n: int, seed: int) -> pl.DataFrame:
    return synthesize(pattern, n, seed).filter(pl.col("op") == "read")


@pytest.mark.parametrize("pattern", ["paper80", "paper60"])
@pytest.mark.parametrize("seed", [1, 2])
def test_paper_workloads_give_exactly_the_hot_zones(pattern: str, seed: int) -> None:
    r = run_cluster(reads(pattern, 300_000, seed), META, ClusterParams(seed=seed))
    assert sorted(r["hot_zones"]) == HOT
    assert r["eps"] in PAPER_EPS and r["min_samples"] in PAPER_MIN_SAMPLES
    assert len(r["grid"]) == len(PAPER_EPS) * len(PAPER_MIN_SAMPLES)
    assert r["silhouette"] == max(g["silhouette"] for g in r["grid"] if g["silhouette"] is not None)


@pytest.mark.parametrize("seed", [1, 2])
def test_uniform_reads_have_no_hot_zone(seed: int) -> None:
    assert run_cluster(reads("uniform", 300_000, seed), META, ClusterParams(seed=seed))["hot_zones"] == []


def test_small_capture_sized_run_still_finds_the_hot_zones() -> None:
    r = run_cluster(reads("paper80", 4000, 3), META, ClusterParams(seed=3))
    assert sorted(r["hot_zones"]) == HOT


def test_too_few_reads_is_reported_not_guessed() -> None:
    r = run_cluster(reads("paper80", 3, 1), META, ClusterParams())
    assert r["hot_zones"] == [] and "too few" in r["note"]


def test_weighted_silhouette_equals_silhouette_of_the_expanded_points() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((30, 2))
    labels = rng.integers(0, 3, 30)
    w = rng.integers(1, 5, 30)
    expanded = np.repeat(x, w, axis=0)
    assert weighted_silhouette(x, labels, w.astype(float)) == pytest.approx(
        silhouette_score(expanded, np.repeat(labels, w)), abs=1e-9)


def test_cluster_cli_json_keys_and_custom_grid(tmp_path, capsys) -> None:
    import json

    from ztbp.acquire.synth import write_run

    write_run(tmp_path / "r", "paper80", 50_000, seed=1)
    assert main(["cluster", str(tmp_path / "r"), "--json", "--eps", "0.02,0.04", "--min-samples", "25"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert {"hot_zones", "eps", "min_samples", "silhouette", "grid"} <= set(r)
    assert [(g["eps"], g["min_samples"]) for g in r["grid"]] == [(0.02, 25), (0.04, 25)]
    assert sorted(r["hot_zones"]) == HOT
    assert main(["cluster", str(tmp_path / "r"), "--eps", "a"]) == 2
    assert "expected numbers" in capsys.readouterr().err


@pytest.mark.parametrize(("n", "seed"), [(5, 0), (23, 1), (1000, 7)])
def test_fold_labels_are_sklearns_kfold(n: int, seed: int) -> None:
    from sklearn.model_selection import KFold

    from ztbp.analysis.cluster import kfold_labels

    labels = kfold_labels(n, seed)
    for f, (_, test) in enumerate(KFold(n_splits=5, shuffle=True, random_state=seed).split(np.empty((n, 1)))):
        assert sorted(np.flatnonzero(labels == f).tolist()) == sorted(test.tolist())
