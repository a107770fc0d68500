"""Find the read-intensive zones with DBSCAN, eps / min_samples tuned by 5-fold CV (ZTBP Alg. 3).

Features ("scaled read accesses"). Every read is an access at an LBA. Accesses are aggregated into cells of
`zone size / cells_per_zone` (1 MiB for 32 MiB zones); all accesses of a cell share one feature vector, so DBSCAN
runs on the cells with the access counts as sample weights — exactly DBSCAN over the accesses, at the cost of the
cells rather than of the reads (1 M or 10 M reads cluster in well under a second). A cell's features, both in
[0, 1]:
  x = cell index / cells of the device              (where on the device)
  y = log1p(reads of the cell) / log1p(max reads)  (how hot, on a log scale so one spike cannot squash the rest)
The scaler is fitted once on the whole run (Alg. 3: X <- scale_data), and a fold's counts are rescaled to the
whole run's size before scaling, so train and test points share one feature space.

Tuning (Alg. 3). KFold(5, shuffled, seeded) over the accesses. For each (eps, min_samples) of the grid and each
fold: fit DBSCAN on the training accesses; label each held-out cell with the cluster of the nearest training core
sample within eps, else noise (DBSCAN has no predict; the reference code's fit_predict on the test fold is not
used); if the held-out labels hold more than one label (noise counts as one, as in the paper), score them with the
silhouette, weighted by accesses. The pair with the best mean silhouette wins.

Hot zones. DBSCAN is fitted with the winning pair on the whole run. A cluster is hot when its read density (reads
per cell) is at least `hot_factor` (default 2) times the run's mean density over the cells that were read. A zone
is hot when at least half of its reads fall in cells of hot clusters. Hot zones are listed by reads, highest first.
With no pair scoring (a single cluster everywhere, e.g. uniform reads) there is no hot zone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from sklearn.cluster import DBSCAN
from sklearn.neighbors import NearestNeighbors

from ..errors import ZtbpError
from .params import ClusterParams

N_SPLITS = 5
SILHOUETTE_MAX_POINTS = 4000


@dataclass
class Cells:
    """Read accesses aggregated per cell, with the fold of every access."""

    cell: np.ndarray          # cell index of each read cell (sorted)
    counts: np.ndarray        # reads per read cell (whole run)
    fold_counts: np.ndarray   # [N_SPLITS, cells] reads per held-out fold
    n_cells: int              # cells of the device
    cell_lba: int
    log_max: float

    def features(self, mask: np.ndarray, counts: np.ndarray, scale: float) -> np.ndarray:
        """(x, y) of the read cells selected by `mask` with `counts` reads, rescaled by `scale` to the run's size."""
        y = np.log1p(counts[mask] * scale) / self.log_max if self.log_max > 0 else np.zeros(int(mask.sum()))
        return np.column_stack([self.cell[mask] / self.n_cells, y])


def kfold_labels(n: int, seed: int) -> np.ndarray:
    """Held-out fold of each of n accesses: the split of KFold(5, shuffle=True, random_state=seed), as labels.

    Same permutation and fold sizes as scikit-learn's KFold, without materialising 5 train/test index arrays.
    """
    folds = np.empty(n, dtype=np.int64)
    if n < N_SPLITS:
        folds[:] = np.arange(n) % N_SPLITS
        return folds
    idx = np.arange(n)
    np.random.RandomState(seed).shuffle(idx)
    sizes = np.full(N_SPLITS, n // N_SPLITS)
    sizes[: n % N_SPLITS] += 1
    folds[idx] = np.repeat(np.arange(N_SPLITS), sizes)
    return folds


def read_cells(events: pl.DataFrame, meta: dict[str, Any], params: ClusterParams) -> Cells:
    zone_lba = meta["zone_size_lba"]
    if params.cells_per_zone <= 0 or zone_lba % params.cells_per_zone:
        raise ZtbpError(f"--cells-per-zone {params.cells_per_zone} must divide the zone size ({zone_lba} LBAs)")
    cell_lba = zone_lba // params.cells_per_zone
    n_cells = meta["nr_zones"] * params.cells_per_zone
    slba = events.filter(pl.col("op") == "read")["slba"].to_numpy()
    cell_of = np.minimum((slba // cell_lba).astype(np.int64), n_cells - 1)
    folds = kfold_labels(cell_of.size, params.seed)
    all_counts = np.bincount(cell_of, minlength=n_cells)
    cells = np.flatnonzero(all_counts)
    counts = all_counts[cells]
    dense = np.full(n_cells, -1, dtype=np.int64)
    dense[cells] = np.arange(cells.size)
    fold_counts = np.bincount(folds * cells.size + dense[cell_of], minlength=N_SPLITS * cells.size).reshape(
        N_SPLITS, cells.size)
    log_max = float(np.log1p(counts.max())) if counts.size else 0.0
    return Cells(cells, counts, fold_counts, n_cells, cell_lba, log_max)


def weighted_silhouette(x: np.ndarray, labels: np.ndarray, w: np.ndarray) -> float:
    """Silhouette of the accesses behind weighted points (w identical accesses per point)."""
    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    uniq = np.unique(labels)
    # sum of weighted distances from every point to each label group
    member = (labels[None, :] == uniq[:, None]).astype(float) * w[None, :]  # [L, n]
    sums = d @ member.T                                                    # [n, L]
    wsum = member.sum(1)                                                   # [L]
    own = np.searchsorted(uniq, labels)
    own_w = wsum[own] - 1.0
    a = np.where(own_w > 0, sums[np.arange(x.shape[0]), own] / np.maximum(own_w, 1e-12), 0.0)
    other = sums / wsum[None, :]
    other[np.arange(x.shape[0]), own] = np.inf
    b = other.min(1)
    s = np.where(own_w > 0, (b - a) / np.maximum(np.maximum(a, b), 1e-12), 0.0)
    return float((s * w).sum() / w.sum())


def label_held_out(db: DBSCAN, x_train: np.ndarray, x_test: np.ndarray, eps: float) -> np.ndarray:
    """Cluster of the nearest training core sample within eps, else -1 (noise)."""
    core = db.core_sample_indices_
    if core.size == 0:
        return np.full(x_test.shape[0], -1)
    nn = NearestNeighbors(n_neighbors=1).fit(x_train[core])
    dist, idx = nn.kneighbors(x_test)
    labels = db.labels_[core][idx[:, 0]]
    return np.where(dist[:, 0] <= eps, labels, -1)


def _fold_score(c: Cells, f: int, eps: float, min_samples: int, rng: np.random.Generator) -> tuple[float | None, int]:
    test = c.fold_counts[f]
    train = c.counts - test
    n_total = c.counts.sum()
    tr, te = train > 0, test > 0
    x_tr = c.features(tr, train, n_total / max(1, train.sum()))
    x_te = c.features(te, test, n_total / max(1, test.sum()))
    if x_tr.shape[0] == 0 or x_te.shape[0] == 0:
        return None, 0
    db = DBSCAN(eps=eps, min_samples=min_samples).fit(x_tr, sample_weight=train[tr])
    n_clusters = int(db.labels_.max()) + 1
    labels = label_held_out(db, x_tr, x_te, eps)
    if np.unique(labels).size < 2:
        return None, n_clusters
    w = test[te].astype(float)
    if x_te.shape[0] > SILHOUETTE_MAX_POINTS:
        pick = rng.choice(x_te.shape[0], SILHOUETTE_MAX_POINTS, replace=False, p=w / w.sum())
        x_te, labels, w = x_te[pick], labels[pick], np.ones(pick.size)
        if np.unique(labels).size < 2:
            return None, n_clusters
    return weighted_silhouette(x_te, labels, w), n_clusters


def tune(c: Cells, params: ClusterParams, on_fit: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Score every (eps, min_samples) of the grid; on_fit(done, total) is called after every fit."""
    rng = np.random.default_rng(params.seed)
    grid = [(e, m) for e in params.eps for m in params.min_samples]
    rows = []
    total, done = len(grid) * N_SPLITS, 0
    for eps, ms in grid:
        scores, clusters = [], []
        for f in range(N_SPLITS):
            s, k = _fold_score(c, f, eps, ms, rng)
            clusters.append(k)
            if s is not None:
                scores.append(s)
            done += 1
            if on_fit is not None:
                on_fit(done, total)
        rows.append({"eps": eps, "min_samples": ms, "silhouette": float(np.mean(scores)) if scores else None,
                     "folds_scored": len(scores), "clusters_mean": float(np.mean(clusters))})
    return rows


def cluster_cells(c: Cells, eps: float, min_samples: int) -> np.ndarray:
    x = c.features(c.counts > 0, c.counts, 1.0)
    return DBSCAN(eps=eps, min_samples=min_samples).fit(x, sample_weight=c.counts).labels_


def hot_zones_from_labels(c: Cells, labels: np.ndarray, params: ClusterParams, cells_per_zone: int
                          ) -> tuple[list[int], list[dict[str, Any]], pl.DataFrame]:
    """Apply the hot rule (module docstring) to cluster labels; return hot zones, clusters, per-zone table."""
    mean_density = c.counts.sum() / max(1, c.counts.size)
    df = pl.DataFrame({"cell": c.cell, "reads": c.counts, "label": labels}).with_columns(
        (pl.col("cell") // cells_per_zone).alias("zone"))
    cl = (df.filter(pl.col("label") >= 0).group_by("label")
          .agg(pl.len().alias("cells"), pl.col("reads").sum(), pl.col("zone").unique().sort().alias("zones"))
          .with_columns((pl.col("reads") / pl.col("cells")).alias("density"))
          .with_columns((pl.col("density") >= params.hot_factor * mean_density).alias("hot"))
          .sort("label"))
    hot_labels = cl.filter(pl.col("hot"))["label"].to_list()
    zt = (df.group_by("zone")
          .agg(pl.col("reads").sum(), pl.col("reads").filter(pl.col("label").is_in(hot_labels)).sum().alias("hot"))
          .with_columns((pl.col("hot") / pl.col("reads")).alias("hot_share"))
          .sort("reads", descending=True))
    hot = zt.filter(pl.col("hot_share") >= params.hot_zone_share)["zone"].cast(pl.Int64).to_list()
    clusters = [{**r, "density_factor": r["density"] / mean_density if mean_density else 0.0}
                for r in cl.to_dicts()]
    return hot, clusters, zt


def run_cluster(events: pl.DataFrame, meta: dict[str, Any], params: ClusterParams = ClusterParams(),
                on_fit: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    c = read_cells(events, meta, params)
    reads = int(c.counts.sum())
    base: dict[str, Any] = {"reads": reads, "cells_read": int(c.cell.size),
                            "cell_bytes": c.cell_lba * meta["lba_bytes"], "hot_factor": params.hot_factor,
                            "seed": params.seed}
    if reads < N_SPLITS * 2:
        return {"hot_zones": [], "eps": None, "min_samples": None, "silhouette": None, "grid": [],
                "clusters": [], "note": f"only {reads} reads: too few to cluster", **base}
    grid = tune(c, params, on_fit)
    scored = [g for g in grid if g["silhouette"] is not None]
    if not scored:
        return {"hot_zones": [], "eps": None, "min_samples": None, "silhouette": None, "grid": grid,
                "clusters": [], "note": "no parameter pair gave more than one cluster: no hot zone", **base}
    best = max(scored, key=lambda g: g["silhouette"])  # first best wins on ties (grid order)
    labels = cluster_cells(c, best["eps"], best["min_samples"])
    hot, clusters, per_zone = hot_zones_from_labels(c, labels, params, params.cells_per_zone)
    reads_by_zone = dict(per_zone.select("zone", "reads").iter_rows())
    scores = [{"zone": z, "reads": int(reads_by_zone[z]), "share": reads_by_zone[z] / reads} for z in hot]
    return {"hot_zones": hot, "eps": best["eps"], "min_samples": best["min_samples"],
            "silhouette": best["silhouette"], "grid": grid, "clusters": clusters, "zone_scores": scores, **base}


def cell_labels(events: pl.DataFrame, meta: dict[str, Any], eps: float, min_samples: int,
                params: ClusterParams = ClusterParams()) -> pl.DataFrame:
    """Per read cell: position, reads, features and DBSCAN label (for plotting the clusters in LBA space)."""
    c = read_cells(events, meta, params)
    labels = cluster_cells(c, eps, min_samples)
    x = c.features(c.counts > 0, c.counts, 1.0)
    return pl.DataFrame({"cell": c.cell, "zone": c.cell // params.cells_per_zone,
                         "lba": c.cell * c.cell_lba, "reads": c.counts, "x": x[:, 0], "y": x[:, 1],
                         "label": labels})
