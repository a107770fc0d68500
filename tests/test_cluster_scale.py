"""The clustering's tuning at drive scale gives today's answers: the tuning equals a plain reference built from
scikit-learn's DBSCAN, a brute-force prediction and Generator.choice on the paper's workloads and on a device read
all over; the grid's order and the weighted draw are the textbook ones."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sklearn.cluster import DBSCAN

from ztbp.acquire.synth import SynthGeometry, SynthOptions, synthesize
from ztbp.analysis.cluster import read_cells
from ztbp.analysis.dbscan import Grid, by_square
from ztbp.analysis.params import PAPER_EPS, PAPER_MIN_SAMPLES, ClusterParams
from ztbp.analysis.tuning import (
    N_SPLITS,
    SILHOUETTE_MAX_POINTS,
    draw_weighted,
    grid_rows,
    tune,
    weight_cdf,
    weighted_silhouette,
)


def reference_tune(c: Any, eps_values: list[float], ms_values: list[int], seed: int) -> list[dict[str, Any]]:
    """The tuning as the module's docstring says it, written plainly: every split's features made again for every
    eps, scikit-learn's DBSCAN, each held-out point labelled by the smallest cluster among the core points within
    eps (all distances), the silhouette's sample drawn by Generator.choice."""
    rng = np.random.default_rng(seed)
    n_total = c.counts.sum()
    acc = {(e, m): {"kfold": [], "time": [], "clusters": []} for e in eps_values for m in ms_values}
    for eps in eps_values:
        for validation in ("kfold", "time"):
            for k in range(N_SPLITS):
                train, test = c.split(validation, k)
                tr, te = train > 0, test > 0
                x_tr = c.features(tr, train, n_total / max(1, train.sum()))
                x_te = c.features(te, test, n_total / max(1, test.sum()))
                if not (x_tr.shape[0] and x_te.shape[0]):
                    continue
                dist = np.sqrt(((x_te[:, None, :] - x_tr[None, :, :]) ** 2).sum(-1))
                for ms in ms_values:
                    fit = DBSCAN(eps=eps, min_samples=ms).fit(x_tr, sample_weight=train[tr])
                    core = np.zeros(x_tr.shape[0], dtype=bool)
                    core[fit.core_sample_indices_] = True
                    acc[(eps, ms)]["clusters"].append(int(fit.labels_.max()) + 1)
                    d = dist[:, core] <= eps
                    nearest = np.where(d, fit.labels_[core], x_tr.shape[0]).min(1, initial=x_tr.shape[0])
                    held = np.where(d.any(1), nearest, -1)
                    w = test[te].astype(float)
                    if np.unique(held).size < 2:
                        continue
                    x_s, l_s = x_te, held
                    if x_te.shape[0] > SILHOUETTE_MAX_POINTS:
                        pick = rng.choice(x_te.shape[0], SILHOUETTE_MAX_POINTS, replace=True, p=w / w.sum())
                        idx, times = np.unique(pick, return_counts=True)
                        x_s, l_s, w = x_te[idx], held[idx], times.astype(float)
                        if np.unique(l_s).size < 2:
                            continue
                    acc[(eps, ms)][validation].append(weighted_silhouette(x_s, l_s, w))
    return grid_rows(acc)


@pytest.mark.parametrize(("pattern", "zones", "region", "reads"), [
    ("paper80", 64, "paper", 300_000),
    ("paper60", 64, "paper", 300_000),
    ("hotzones", 64, "all", 300_000),  # 2,048 cells, all read: the silhouette's sample is drawn (two pairs: the
    # reference's distances to every point are slow)
])
def test_the_tuning_equals_the_reference(pattern: str, zones: int, region: str, reads: int) -> None:
    geo = SynthGeometry(nr_zones=zones)
    opts = SynthOptions(prefill=False) if region == "paper" else SynthOptions(
        hot_zones=(3, 20, 37, 50, 62), hot_share=0.6, region=None, prefill=False)
    meta = {"zone_size_lba": geo.zone_size_lba, "nr_zones": zones, "lba_bytes": geo.lba_bytes}
    c = read_cells(synthesize(pattern, reads, 1, geo, opts), meta, ClusterParams())
    if region == "all":
        assert c.counts.size > SILHOUETTE_MAX_POINTS
    eps, ms = (list(PAPER_EPS), list(PAPER_MIN_SAMPLES)) if region == "paper" else ([0.01, 0.04], [20])
    got = tune(c, eps, ms, 1)
    assert got == reference_tune(c, eps, ms, 1)
    assert sum(g["folds_scored"] + g["windows_scored"] for g in got) > 0


def test_the_weighted_draw_is_generator_choice() -> None:
    # the same indices and the generator left in the same state, over weights with zeros, ties and one heavy point
    rng = np.random.default_rng(0)
    for case in range(50):
        w = rng.integers(0, 50, int(rng.integers(1, 5000))).astype(float)
        w[int(rng.integers(0, w.size))] += 1 + 10_000 * (case % 2)
        a, b = np.random.default_rng(case), np.random.default_rng(case)
        k = int(rng.integers(1, 3000))
        assert draw_weighted(a, weight_cdf(w), k).tolist() == b.choice(w.size, k, replace=True,
                                                                         p=w / w.sum()).tolist()
        assert a.random() == b.random()


def test_the_grid_orders_points_by_square_then_x() -> None:
    # the textbook order: np.lexsort by square key, then x, then index — on points in x order (the cells), shuffled,
    # with ties, and on a key range too wide for the counting sort
    rng = np.random.default_rng(5)
    for case in range(60):
        n = int(rng.integers(1, 3000))
        x = np.round(rng.random((n, 2)) * 40) / 40 if case % 3 == 0 else rng.random((n, 2))
        if case % 2:
            x = x[np.argsort(x[:, 0], kind="stable")]
        eps = float(rng.choice([1e-4, 0.01, 0.05, 0.3]))
        g = Grid(x, eps)
        b = np.floor((x - g.origin) / g.side).astype(np.int64) + 2
        key = b[:, 0] * g.ny + b[:, 1]
        want = np.lexsort((x[:, 0], key))
        assert g.order.tolist() == want.tolist(), case
        assert g.xs.tolist() == x[want, 0].tolist()
        assert g.keys.tolist() == np.unique(key).tolist()
        assert g.start.tolist() == np.searchsorted(key[want], np.unique(key)).tolist() + [n]
    assert by_square(np.array([5, -3, 10**12, 5]), np.arange(4)).tolist() == [1, 0, 3, 2]
