"""Tuning DBSCAN on a run's read cells (ZTBP Alg. 3): every (eps, min_samples) of the grid scored by the two
validations of analysis/cluster.py's docstring ("Tuning"), the grid widened while the winner sits on its edge.

At drive scale (16,384 zones of 32 cells: 524,288 cells) each split's points are made once per clustering (the
tuning and its widenings), the grid and the held-out cells' places on it once per eps, and the ten splits of one
eps are fitted on several threads; the scores are taken in the loops' order, so the answer is the one a single
thread gives (tests/test_cluster_scale.py checks it against a plain reference).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from .dbscan import Grid, Queries, dbscan, predict
from .params import VALIDATIONS, ClusterParams

N_SPLITS = 5
SILHOUETTE_MAX_POINTS = 2000
MAX_WIDEN = 3
#: An edge value must beat its inner neighbour by more than this silhouette to widen the grid.
EDGE_MARGIN = 1e-3


@dataclass
class Cells:
    """Read accesses aggregated per cell, with the KFold fold and the time window of every access."""

    cell: np.ndarray          # cell index of each read cell (sorted)
    counts: np.ndarray        # reads per read cell (whole run)
    fold_counts: np.ndarray   # [N_SPLITS, cells] reads per held-out KFold fold
    window_counts: np.ndarray  # [N_SPLITS + 1, cells] reads per time window
    n_cells: int              # cells of the device
    cell_lba: int
    log_max: float

    def features(self, mask: np.ndarray, counts: np.ndarray, scale: float) -> np.ndarray:
        """(x, y) of the read cells selected by `mask` with `counts` reads, rescaled by `scale` to the run's size."""
        y = np.log1p(counts[mask] * scale) / self.log_max if self.log_max > 0 else np.zeros(int(mask.sum()))
        return np.column_stack([self.cell[mask] / self.n_cells, y])

    def split(self, validation: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(train, test) reads per read cell of split k of a validation."""
        if validation == "kfold":
            test = self.fold_counts[k]
            return self.counts - test, test
        return self.window_counts[: k + 1].sum(0), self.window_counts[k + 1]


@numba.njit(cache=True)
def _silhouette(x: np.ndarray, lab: np.ndarray, w: np.ndarray, n_labels: int) -> float:
    n = x.shape[0]
    sums = np.zeros((n, n_labels))
    wsum = np.zeros(n_labels)
    for i in range(n):
        wsum[lab[i]] += w[i]
        for j in range(i + 1, n):
            dx = x[i, 0] - x[j, 0]
            dy = x[i, 1] - x[j, 1]
            d = np.sqrt(dx * dx + dy * dy)
            sums[i, lab[j]] += w[j] * d
            sums[j, lab[i]] += w[i] * d
    total = 0.0
    for i in range(n):
        own = lab[i]
        own_w = wsum[own] - 1.0
        if own_w <= 0:
            continue  # a lone access scores 0
        a = sums[i, own] / own_w
        b = np.inf
        for m in range(n_labels):
            if m != own and wsum[m] > 0:
                b = min(b, sums[i, m] / wsum[m])
        top = max(a, b)
        if top > 0:
            total += w[i] * (b - a) / top
    return total / w.sum()


def weighted_silhouette(x: np.ndarray, labels: np.ndarray, w: np.ndarray) -> float:
    """Silhouette of the accesses behind weighted points (w identical accesses per point)."""
    _, lab = np.unique(labels, return_inverse=True)
    return float(_silhouette(np.ascontiguousarray(x, dtype=np.float64), lab.astype(np.int64),
                             np.asarray(w, dtype=np.float64), int(lab.max()) + 1))


def weight_cdf(w: np.ndarray) -> np.ndarray:
    """What numpy's Generator.choice(n, p=w / w.sum()) draws from: the cumulative sum of p, scaled to end at 1."""
    cdf = (w / w.sum()).cumsum()
    cdf /= cdf[-1]
    return cdf


def draw_weighted(rng: np.random.Generator, cdf: np.ndarray, k: int) -> np.ndarray:
    """k indices drawn with replacement with the probabilities behind `cdf` (weight_cdf): the same indices, from
    the same random numbers, as rng.choice(cdf.size, k, replace=True, p=...), which builds and checks the whole
    distribution again on every call (a tenth of a tuning at 524,288 cells)."""
    return cdf.searchsorted(rng.random(k), side="right").astype(np.int64)


def _score(x_te: np.ndarray, labels: np.ndarray, w: np.ndarray, rng: np.random.Generator,
           cdf: np.ndarray | None = None) -> float | None:
    """Weighted silhouette of the held-out labels; above SILHOUETTE_MAX_POINTS cells, of that many accesses drawn
    by weight (with replacement: an unbiased estimate; cdf: weight_cdf(w), when made already). None when fewer than
    two labels."""
    if labels.size == 0 or labels.min() == labels.max():
        return None
    if x_te.shape[0] > SILHOUETTE_MAX_POINTS:
        pick = draw_weighted(rng, weight_cdf(w) if cdf is None else cdf, SILHOUETTE_MAX_POINTS)
        idx, times = np.unique(pick, return_counts=True)
        x_te, labels, w = x_te[idx], labels[idx], times.astype(float)
        if np.unique(labels).size < 2:
            return None
    return weighted_silhouette(x_te, labels, w)


def _split_points(c: Cells, validation: str, k: int, n_total: int) -> tuple[Any, ...]:
    """(train points, their reads, held-out points, their reads, the held-out reads' weight_cdf or None) of split k
    of a validation: the same for every eps, so made once per tuning (at 16,384 zones, 524,288 cells, they were a
    fifth of its time)."""
    train, test = c.split(validation, k)
    tr, te = train > 0, test > 0
    x_tr = c.features(tr, train, n_total / max(1, train.sum()))
    x_te = c.features(te, test, n_total / max(1, test.sum()))
    w_te = test[te].astype(float)
    cdf = weight_cdf(w_te) if x_te.shape[0] > SILHOUETTE_MAX_POINTS else None
    return x_tr, train[tr].astype(np.float64), x_te, w_te, cdf


def _fits(c: Cells, split: tuple[Any, ...], eps: float, ms_values: list[int]) -> list[tuple[int, np.ndarray] | None]:
    """For each min_samples: (clusters, held-out labels) of DBSCAN fitted on the split's training cells, or None
    when either side is empty. The grid and the held-out cells' places on it are made once for all of them."""
    x_tr, w_tr, x_te = split[0], split[1], split[2]
    if not (x_tr.shape[0] and x_te.shape[0]):
        return [None] * len(ms_values)
    grid = Grid(x_tr, eps)
    at = Queries(x_te, grid)
    out: list[tuple[int, np.ndarray] | None] = []
    for ms in ms_values:
        fit = dbscan(x_tr, w_tr, eps, ms, grid)
        out.append((int(fit.labels.max()) + 1 if fit.labels.size else 0, predict(fit, None, eps, at)))
    return out


def grid_rows(acc: dict[tuple[float, int], dict[str, list]]) -> list[dict[str, Any]]:
    """The grid's rows from each pair's silhouettes per validation and cluster counts per fit."""
    return [{"eps": e, "min_samples": m,
             "silhouette": float(np.mean(a["kfold"])) if a["kfold"] else None, "folds_scored": len(a["kfold"]),
             "silhouette_time": float(np.mean(a["time"])) if a["time"] else None,
             "windows_scored": len(a["time"]),
             "clusters_mean": float(np.mean(a["clusters"])) if a["clusters"] else 0.0}
            for (e, m), a in acc.items()]


def workers() -> int:
    """Threads the splits of one eps are fitted on: numba's thread count (the machine's processors unless
    NUMBA_NUM_THREADS says otherwise; `ztbp batch` sets it to 1 for its workers), at most the splits."""
    return max(1, min(int(numba.config.NUMBA_NUM_THREADS), N_SPLITS * len(VALIDATIONS)))


def split_points(c: Cells) -> dict[tuple[str, int], tuple[Any, ...]]:
    """Every split's points (_split_points), by (validation, k): made once for a tuning and its widenings."""
    n_total = c.counts.sum()
    return {(v, k): _split_points(c, v, k, n_total) for v in ("kfold", "time") for k in range(N_SPLITS)}


def tune(c: Cells, eps_values: list[float], ms_values: list[int], seed: int,
         on_fit: Callable[[int, int], None] | None = None,
         splits: dict[tuple[str, int], tuple[Any, ...]] | None = None) -> list[dict[str, Any]]:
    """Score every (eps, min_samples) pair by both validations; on_fit(done, total) is called after every fit;
    splits: split_points(c), when made already.

    The ten splits of one eps are fitted side by side (workers(): numba's kernels and numpy's large operations
    let go of the GIL), then scored one after the other in the order of the loops, so the silhouette's sampled
    accesses come from the same random numbers as when everything ran in turn."""
    rng = np.random.default_rng(seed)
    acc: dict[tuple[float, int], dict[str, list]] = {(e, m): {"kfold": [], "time": [], "clusters": []}
                                                     for e in eps_values for m in ms_values}
    total, done = len(acc) * N_SPLITS * len(VALIDATIONS), 0
    order = [(v, k) for v in ("kfold", "time") for k in range(N_SPLITS)]
    splits = split_points(c) if splits is None else splits
    with ThreadPoolExecutor(workers()) as pool:
        for eps in eps_values:
            fitted = pool.map(lambda vk, e=eps: _fits(c, splits[vk], e, ms_values), order)
            for (validation, k), results in zip(order, fitted, strict=True):
                _, _, x_te, w_te, cdf = splits[(validation, k)]
                for ms, res in zip(ms_values, results, strict=True):
                    a = acc[(eps, ms)]
                    if res is not None:
                        a["clusters"].append(res[0])
                        s = _score(x_te, res[1], w_te, rng, cdf)
                        if s is not None:
                            a[validation].append(s)
                    done += 1
                    if on_fit is not None:
                        on_fit(done, total)
    return grid_rows(acc)


SCORE_KEY = {"kfold": "silhouette", "time": "silhouette_time"}


def best_pair(grid: list[dict[str, Any]], validation: str) -> dict[str, Any] | None:
    """The grid row with the best mean silhouette of `validation`; the first in grid order wins ties."""
    key = SCORE_KEY[validation]
    scored = [g for g in grid if g[key] is not None]
    return max(scored, key=lambda g: g[key]) if scored else None


def _beyond(values: list, won: Any, integer: bool) -> tuple[Any, str] | None:
    """One step past the edge the winner sits on: (new value, which edge), or None when it is inside."""
    vs = sorted(values)
    if len(vs) < 2 or won not in (vs[0], vs[-1]):
        return None
    if won == vs[-1]:
        step = vs[-1] - vs[-2]
        new = vs[-1] + step
        return (int(new) if integer else round(new, 10)), "upper"
    step = vs[1] - vs[0]
    new = vs[0] - step if vs[0] - step > 0 else vs[0] / 2
    new = max(1, int(new)) if integer else round(new, 10)
    return (new, "lower") if new != vs[0] else None


def _edge_wins(grid: list[dict[str, Any]], dim: str, won: Any, score: str) -> bool:
    """True when the winning value of `dim` beats its inner neighbour's best by more than EDGE_MARGIN."""
    vs = sorted({g[dim] for g in grid})
    inner = vs[1] if won == vs[0] else vs[-2]

    def best(v: Any) -> float:
        return max((g[score] for g in grid if g[dim] == v and g[score] is not None), default=-np.inf)

    return best(won) > best(inner) + EDGE_MARGIN


def tune_widening(c: Cells, params: ClusterParams, on_fit: Callable[[int, int], None] | None = None
                  ) -> tuple[list[dict[str, Any]], list[str]]:
    """tune() over the parameter grid, widened one step at a time while the winner sits on an edge."""
    eps, ms = list(params.eps), list(params.min_samples)
    splits = split_points(c)
    grid = tune(c, eps, ms, params.seed, on_fit, splits)
    notes: list[str] = []
    for _ in range(MAX_WIDEN if params.widen else 0):
        best = best_pair(grid, params.validation)
        if best is None:
            break
        score = SCORE_KEY[params.validation]
        new_eps, new_ms = [], []
        for dim, values, integer, out in (("eps", eps, False, new_eps), ("min_samples", ms, True, new_ms)):
            step = _beyond(values, best[dim], integer)
            if step is not None and _edge_wins(grid, dim, best[dim], score):
                out.append(step[0])
                notes.append(f"{dim} {best[dim]} won at the {step[1]} edge of the grid ({score} "
                             f"{best[score]:.4f}): added {dim} {step[0]}")
        if not new_eps and not new_ms:
            break
        seed = params.seed + len(notes)
        if new_eps:
            grid += tune(c, new_eps, ms, seed, on_fit, splits)
            eps += new_eps
        if new_ms:
            grid += tune(c, eps, new_ms, seed, on_fit, splits)
            ms += new_ms
    return grid, notes
