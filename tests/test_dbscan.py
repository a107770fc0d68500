"""The grid DBSCAN gives scikit-learn's labels exactly; `predict` labels new points as DBSCAN labels border points."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.cluster import DBSCAN

from ztbp.analysis.dbscan import dbscan, predict


@st.composite
def weighted_points(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, float, int, np.ndarray]:
    n = draw(st.integers(1, 250))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([1.0, 0.2, 0.05]))
    x = rng.random((n, 2)) * scale
    if draw(st.booleans()):
        # a lattice: many points at the same distances (1/53 keeps every distance off eps, where rounding decides)
        x = np.round(x * 53) / 53
    w = rng.integers(1, 6, n).astype(float)
    q = rng.random((40, 2)) * scale
    return x, w, draw(st.sampled_from([0.005, 0.01, 0.02, 0.04, 0.1])), draw(st.integers(1, 15)), q


@settings(max_examples=150, deadline=None)
@given(weighted_points())
def test_labels_and_core_points_are_scikit_learns(case) -> None:
    x, w, eps, ms, _ = case
    ref = DBSCAN(eps=eps, min_samples=ms).fit(x, sample_weight=w)
    fit = dbscan(x, w, eps, ms)
    core = np.zeros(x.shape[0], dtype=bool)
    core[ref.core_sample_indices_] = True
    assert fit.labels.tolist() == ref.labels_.tolist()
    assert fit.core.tolist() == core.tolist()


@settings(max_examples=100, deadline=None)
@given(weighted_points())
def test_predict_gives_the_smallest_cluster_among_core_points_within_eps(case) -> None:
    x, w, eps, ms, q = case
    fit = dbscan(x, w, eps, ms)
    d = np.sqrt(((q[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    within = (d <= eps) & fit.core[None, :]
    want = [int(fit.labels[row].min()) if row.any() else -1 for row in within]
    assert predict(fit, q, eps).tolist() == want


def test_a_point_of_the_fit_is_predicted_into_its_own_cluster() -> None:
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(0.2, 0.01, (200, 2)), rng.normal(0.7, 0.01, (200, 2))])
    fit = dbscan(x, np.ones(400), 0.02, 5)
    assert set(fit.labels.tolist()) == {0, 1}
    assert predict(fit, x[fit.core], 0.02).tolist() == fit.labels[fit.core].tolist()
    assert predict(fit, np.array([[0.45, 0.45]]), 0.02).tolist() == [-1]


def test_empty_input() -> None:
    fit = dbscan(np.empty((0, 2)), np.empty(0), 0.01, 5)
    assert fit.labels.size == 0 and predict(fit, np.array([[0.1, 0.1]]), 0.01).tolist() == [-1]
