"""Find the read-intensive zones: DBSCAN tuned on the run (ZTBP Alg. 3) and a zone-level significance test.

Features ("scaled read accesses"). Every read is an access at an LBA. Accesses are aggregated into cells of
`zone size / cells_per_zone` (1 MiB for 32 MiB zones); all accesses of a cell share one feature vector, so DBSCAN
runs on the cells with the access counts as sample weights — exactly DBSCAN over the accesses, at the cost of the
cells rather than of the reads. A cell's features, both in [0, 1]:
  x = cell index / cells of the device              (where on the device)
  y = log1p(reads of the cell) / log1p(max reads)  (how hot, on a log scale so one spike cannot squash the rest)
The scaler is fitted once on the whole run (Alg. 3: X <- scale_data), and a split's counts are rescaled to the
whole run's size before scaling, so train and test points share one feature space. DBSCAN is analysis/dbscan.py's
grid implementation: scikit-learn's labels in time linear in the cells.

Tuning. Every (eps, min_samples) of the grid is scored by two validations, each of five splits:
  kfold — the paper's KFold(5, shuffled, seeded) over the accesses. Every held-out cell has training twins at the
          same position, so this measures stability under subsampling, not generalisation.
  time  — forward chaining over time: the reads in time order are cut into six equal windows (the blocks of
          scikit-learn's TimeSeriesSplit(5)); split k trains on windows 0..k and scores window k+1.
For each split: fit DBSCAN on the training accesses; label each held-out cell as DBSCAN labels a point that is not
core — the smallest cluster id among the training core samples within eps, else noise; if the held-out labels hold
more than one label (noise counts as one, as in the paper), score them with the silhouette weighted by accesses.
Both mean silhouettes are reported; `validation` (default time) picks the pair. When the winner sits on the grid's
edge — an extreme eps or min_samples that beats its inner neighbour by more than EDGE_MARGIN (0.001) — the grid is
widened one step beyond that edge and scored again (at most MAX_WIDEN times); every widening is reported.

Hot zones. DBSCAN is fitted with the winning pair on the whole run. A cluster is hot when its read density (reads
per cell) is at least `hot_factor` (default 2) times the run's mean density over the cells that were read. A zone
is hot when both hold:
  dense       — at least half of its reads and at least half of its cells (those within the zone capacity) lie in
                hot clusters (one hot cell or page cannot make a zone hot);
  significant — its reads are significantly above what the non-hot rest of the device would give it: one-sided
                exact binomial test of the zone's reads r among r + R (R: the reads of the other read zones that
                are not hot), with success probability e / (e + E) — e, E: the cells read in the zone and in those
                other zones, so a zone cut by the edge of the read region is compared per cell it exposes — Holm's
                step-down correction over every zone that was read, family-wise false-positive rate `alpha` (0.01)
                per run under the null of equal per-cell rates.
The hot set starts empty and grows until it stops changing (a zone found hot leaves the rest the others are compared
with). Hot zones are listed by reads, highest first. With no pair scoring (a single cluster everywhere, e.g.
uniform reads) there is no hot zone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import polars as pl
from scipy.special import bdtrc

from ..errors import ZtbpError
from ..units import check_limit
from .dbscan import Grid, dbscan, predict
from .hashing import mix64
from .params import VALIDATIONS, ClusterParams

N_SPLITS = 5
SILHOUETTE_MAX_POINTS = 2000
MAX_WIDEN = 3
#: An edge value must beat its inner neighbour by more than this silhouette to widen the grid.
EDGE_MARGIN = 1e-3
#: zone_tests lists at most this many zones (the significant or dense ones with the most reads).
ZONE_TESTS_SHOWN = 64


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


def hash_folds(ranks: np.ndarray, seed: int) -> np.ndarray:
    """Held-out fold of the accesses of time-order ranks `ranks`: splitmix64(rank, seed) mod N_SPLITS. A seeded
    random split like KFold's, computable access by access (the streaming path), with fold sizes equal only in
    expectation."""
    return (mix64(ranks, seed) % np.uint64(N_SPLITS)).astype(np.int64)


def time_window_of(idx: np.ndarray, n: int) -> np.ndarray:
    """Time window (0..N_SPLITS) of the accesses at time-order positions `idx` of n: the blocks of
    TimeSeriesSplit(N_SPLITS) — N_SPLITS test windows of n // (N_SPLITS + 1) accesses at the end, the first window
    takes the remainder."""
    size = n // (N_SPLITS + 1)
    first = n - N_SPLITS * size
    if size == 0:
        return np.minimum(idx, N_SPLITS)
    return np.where(idx < first, 0, 1 + (idx - first) // max(1, size))


def time_windows(n: int) -> np.ndarray:
    """Time window of each of n accesses in time order (time_window_of)."""
    return time_window_of(np.arange(n), n)


def cell_geometry(meta: dict[str, Any], cells_per_zone: int) -> tuple[int, int]:
    """(cell_lba, n_cells) of the device; refuses a cells_per_zone that does not divide the zone."""
    zone_lba = meta["zone_size_lba"]
    if cells_per_zone <= 0 or zone_lba % cells_per_zone:
        raise ZtbpError(f"--cells-per-zone {cells_per_zone} must divide the zone size ({zone_lba} LBAs)")
    return zone_lba // cells_per_zone, meta["nr_zones"] * cells_per_zone


def cells_from_tables(fold_table: np.ndarray, window_table: np.ndarray, cell_lba: int) -> Cells:
    """Cells from reads per (fold, cell) [N_SPLITS, n_cells] and per (time window, cell) [N_SPLITS + 1, n_cells]
    of every cell of the device: what both the in-memory and the streaming path aggregate."""
    all_counts = fold_table.sum(0)
    cells = np.flatnonzero(all_counts)
    counts = all_counts[cells]
    log_max = float(np.log1p(counts.max())) if counts.size else 0.0
    return Cells(cells, counts, fold_table[:, cells], window_table[:, cells], fold_table.shape[1], cell_lba, log_max)


def split_tables(cell_of: np.ndarray, folds: np.ndarray, windows: np.ndarray, n_cells: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Reads per (fold, cell) and per (window, cell) of accesses at cells `cell_of` (a chunk's, to be summed)."""
    def per(split: np.ndarray, k: int) -> np.ndarray:
        return np.bincount(split * n_cells + cell_of, minlength=k * n_cells).reshape(k, n_cells)

    return per(folds, N_SPLITS), per(windows, N_SPLITS + 1)


def read_cells(events: pl.DataFrame, meta: dict[str, Any], params: ClusterParams, folds: str = "kfold") -> Cells:
    """The run's reads (events in time order) per cell, fold and time window. folds: "kfold" (scikit-learn's
    shuffled KFold permutation, the default) or "hash" (hash_folds: what the streaming path can compute)."""
    cell_lba, n_cells = cell_geometry(meta, params.cells_per_zone)
    slba = events.filter(pl.col("op") == "read")["slba"].to_numpy()
    cell_of = np.minimum((slba // cell_lba).astype(np.int64), n_cells - 1)
    if folds == "kfold":
        fold = kfold_labels(cell_of.size, params.seed)
    elif folds == "hash":
        fold = hash_folds(np.arange(cell_of.size), params.seed)
    else:
        raise ZtbpError(f"folds {folds!r}: kfold or hash")
    return cells_from_tables(*split_tables(cell_of, fold, time_windows(cell_of.size), n_cells), cell_lba)


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


def _score(x_te: np.ndarray, labels: np.ndarray, w: np.ndarray, rng: np.random.Generator) -> float | None:
    """Weighted silhouette of the held-out labels; above SILHOUETTE_MAX_POINTS cells, of that many accesses drawn
    by weight (with replacement: an unbiased estimate). None when fewer than two labels."""
    if np.unique(labels).size < 2:
        return None
    if x_te.shape[0] > SILHOUETTE_MAX_POINTS:
        pick = rng.choice(x_te.shape[0], SILHOUETTE_MAX_POINTS, replace=True, p=w / w.sum())
        idx, times = np.unique(pick, return_counts=True)
        x_te, labels, w = x_te[idx], labels[idx], times.astype(float)
        if np.unique(labels).size < 2:
            return None
    return weighted_silhouette(x_te, labels, w)


def tune(c: Cells, eps_values: list[float], ms_values: list[int], seed: int,
         on_fit: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Score every (eps, min_samples) pair by both validations; on_fit(done, total) is called after every fit."""
    rng = np.random.default_rng(seed)
    n_total = c.counts.sum()
    acc: dict[tuple[float, int], dict[str, list]] = {(e, m): {"kfold": [], "time": [], "clusters": []}
                                                     for e in eps_values for m in ms_values}
    total, done = len(acc) * N_SPLITS * len(VALIDATIONS), 0
    for eps in eps_values:
        for validation in ("kfold", "time"):
            for k in range(N_SPLITS):
                train, test = c.split(validation, k)
                tr, te = train > 0, test > 0
                x_tr = c.features(tr, train, n_total / max(1, train.sum()))
                x_te = c.features(te, test, n_total / max(1, test.sum()))
                grid = Grid(x_tr, eps) if x_tr.shape[0] else None
                for ms in ms_values:
                    a = acc[(eps, ms)]
                    if grid is not None and x_te.shape[0]:
                        fit = dbscan(x_tr, train[tr], eps, ms, grid)
                        a["clusters"].append(int(fit.labels.max()) + 1 if fit.labels.size else 0)
                        held = predict(fit, x_te, eps)
                        s = _score(x_te, held, test[te].astype(float), rng)
                        if s is not None:
                            a[validation].append(s)
                    done += 1
                    if on_fit is not None:
                        on_fit(done, total)
    return [{"eps": e, "min_samples": m,
             "silhouette": float(np.mean(a["kfold"])) if a["kfold"] else None, "folds_scored": len(a["kfold"]),
             "silhouette_time": float(np.mean(a["time"])) if a["time"] else None,
             "windows_scored": len(a["time"]),
             "clusters_mean": float(np.mean(a["clusters"])) if a["clusters"] else 0.0}
            for (e, m), a in acc.items()]


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
    grid = tune(c, eps, ms, params.seed, on_fit)
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
            grid += tune(c, new_eps, ms, seed, on_fit)
            eps += new_eps
        if new_ms:
            grid += tune(c, eps, new_ms, seed, on_fit)
            ms += new_ms
    return grid, notes


def cluster_cells(c: Cells, eps: float, min_samples: int) -> np.ndarray:
    x = c.features(c.counts > 0, c.counts, 1.0)
    return dbscan(x, c.counts, eps, min_samples).labels


def holm(p: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values (step-down, family = all of p)."""
    m = p.size
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out = np.empty(m)
    out[order] = adj
    return out


def zone_p_values(reads: np.ndarray, exposure: np.ndarray, hot: np.ndarray) -> np.ndarray:
    """One-sided p-value of each read zone's reads against the per-cell rate of the other read zones outside `hot`:
    P(X >= r), X ~ Binomial(r + R, e / (e + E)). 1 for a zone with nothing to compare with."""
    rest = (reads > 0) & ~hot
    mine = np.where(rest, reads, 0)
    n_other = reads[rest].sum() - mine
    e_other = exposure[rest].sum() - np.where(rest, exposure, 0)
    p = np.ones(reads.size)
    ok = (reads > 0) & (e_other > 0)
    # P(X >= r) = P(X > r - 1): the binomial survival function from scipy.special (scipy.stats' binom.sf gives
    # the same within 4e-10 relative, but importing scipy.stats cost 3.9 s of `ztbp watch`'s 5.2 s of imports here,
    # and minutes under emulation)
    p[ok] = bdtrc(reads[ok] - 1, reads[ok] + n_other[ok], exposure[ok] / (exposure[ok] + e_other[ok]))
    return p


def hot_zones_from_labels(c: Cells, labels: np.ndarray, params: ClusterParams, nr_zones: int,
                          cap_cells: int | None = None) -> tuple[list[int], list[dict[str, Any]], pl.DataFrame]:
    """Apply the hot rule (module docstring) to cluster labels; return hot zones, clusters, per-zone table.
    cap_cells: the cells of a zone that lie within its capacity (the readable ones; default all)."""
    cpz = params.cells_per_zone
    readable = min(cpz, cap_cells) if cap_cells else cpz
    mean_density = c.counts.sum() / max(1, c.counts.size)
    df = pl.DataFrame({"cell": c.cell, "reads": c.counts, "label": labels}).with_columns(
        (pl.col("cell") // cpz).alias("zone"))
    cl = (df.filter(pl.col("label") >= 0).group_by("label")
          .agg(pl.len().alias("cells"), pl.col("reads").sum(), pl.col("zone").unique().sort().alias("zones"))
          .with_columns((pl.col("reads") / pl.col("cells")).alias("density"))
          .with_columns((pl.col("density") >= params.hot_factor * mean_density).alias("hot"))
          .sort("label"))
    hot_labels = np.asarray(cl.filter(pl.col("hot"))["label"].to_list(), dtype=np.int64)
    zone = c.cell // cpz
    in_hot = np.isin(labels, hot_labels)
    reads = np.bincount(zone, c.counts, nr_zones).astype(np.int64)
    exposure = np.bincount(zone, minlength=nr_zones).astype(np.int64)
    hot_reads = np.bincount(zone, c.counts * in_hot, nr_zones)
    hot_cells = np.bincount(zone, in_hot, nr_zones)
    dense = (reads > 0) & (hot_reads >= params.hot_zone_share * np.maximum(reads, 1)) & (
        hot_cells >= params.hot_cell_share * readable)
    hot = np.zeros(nr_zones, dtype=bool)
    read = reads > 0
    while True:
        p = zone_p_values(reads, exposure, hot)
        p_holm = np.ones(nr_zones)
        p_holm[read] = holm(p[read])
        grown = hot | ((p_holm <= params.alpha) & dense)
        if (grown == hot).all():
            break
        hot = grown
    zt = pl.DataFrame({"zone": np.arange(nr_zones), "reads": reads, "cells_read": exposure,
                       "hot_read_share": hot_reads / np.maximum(reads, 1), "hot_cell_share": hot_cells / readable,
                       "p_value": p, "p_holm": p_holm, "significant": p_holm <= params.alpha, "dense": dense,
                       "hot": hot}).filter(pl.col("reads") > 0).sort("reads", descending=True)
    hot_list = zt.filter(pl.col("hot"))["zone"].cast(pl.Int64).to_list()
    clusters = [{**r, "density_factor": r["density"] / mean_density if mean_density else 0.0}
                for r in cl.to_dicts()]
    return hot_list, clusters, zt


def _empty(note: str, grid: list[dict[str, Any]], base: dict[str, Any]) -> dict[str, Any]:
    return {"hot_zones": [], "eps": None, "min_samples": None, "silhouette": None, "grid": grid, "clusters": [],
            "zone_scores": [], "note": note, **base}


def run_cluster(events: pl.DataFrame, meta: dict[str, Any], params: ClusterParams = ClusterParams(),
                on_fit: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Tune DBSCAN on the run's reads and apply the hot rule (module docstring); events in time order."""
    check_params(params)
    return cluster_from_cells(read_cells(events, meta, params), meta, params, on_fit)


def check_params(params: ClusterParams) -> None:
    """Refuse parameters outside their ranges (units.LIMITS), as the command line does."""
    if params.validation not in VALIDATIONS:
        raise ZtbpError(f"--validation {params.validation!r}: choose one of {', '.join(VALIDATIONS)}")
    if not params.eps or not params.min_samples:
        raise ZtbpError("--eps and --min-samples: give at least one value each")
    for e in params.eps:
        check_limit("eps", e)
    for m in params.min_samples:
        check_limit("min-samples", m)
    for name in ("cells-per-zone", "hot-factor", "alpha", "seed"):
        check_limit(name, getattr(params, name.replace("-", "_")))
    for share in ("hot_zone_share", "hot_cell_share"):
        check_limit("hot-share", getattr(params, share), share)


def cluster_from_cells(c: Cells, meta: dict[str, Any], params: ClusterParams = ClusterParams(),
                       on_fit: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """run_cluster on reads already aggregated per cell, fold and time window (in memory or streamed)."""
    check_params(params)
    reads = int(c.counts.sum())
    base: dict[str, Any] = {"reads": reads, "cells_read": int(c.cell.size),
                            "cell_bytes": c.cell_lba * meta["lba_bytes"], "hot_factor": params.hot_factor,
                            "seed": params.seed, "validation": params.validation,
                            "rule": {"test": "one-sided exact binomial, zone vs the non-hot rest per cell read",
                                     "correction": "holm", "alpha": params.alpha,
                                     "hot_zone_share": params.hot_zone_share,
                                     "hot_cell_share": params.hot_cell_share}}
    if reads < (N_SPLITS + 1) * 2:
        return _empty(f"only {reads} reads: too few to cluster", [], base)
    grid, widened = tune_widening(c, params, on_fit)
    base["widened"] = widened
    picks = {v: best_pair(grid, v) for v in VALIDATIONS}
    base["scores"] = {v: None if b is None else {"eps": b["eps"], "min_samples": b["min_samples"],
                                                  "silhouette": b[SCORE_KEY[v]]} for v, b in picks.items()}
    best = picks[params.validation]
    if best is None:
        return _empty("no parameter pair gave more than one cluster: no hot zone", grid, base)
    labels = cluster_cells(c, best["eps"], best["min_samples"])
    cap_lba = meta.get("zone_cap_lba") or meta["zone_size_lba"]
    hot, clusters, zt = hot_zones_from_labels(c, labels, params, meta["nr_zones"], -(-cap_lba // c.cell_lba))
    reads_by_zone = dict(zt.select("zone", "reads").iter_rows())
    scores = [{"zone": z, "reads": int(reads_by_zone[z]), "share": reads_by_zone[z] / reads} for z in hot]
    shown = zt.filter(pl.col("significant") | pl.col("dense")).head(ZONE_TESTS_SHOWN)
    return {"hot_zones": hot, "eps": best["eps"], "min_samples": best["min_samples"],
            "silhouette": best[SCORE_KEY[params.validation]], "grid": grid, "clusters": clusters,
            "zone_scores": scores, "zones_read": zt.height, "significant_zones": int(zt["significant"].sum()),
            "dense_zones": int(zt["dense"].sum()), "zone_tests": shown.to_dicts(), **base}


def cell_labels(events: pl.DataFrame, meta: dict[str, Any], eps: float, min_samples: int,
                params: ClusterParams = ClusterParams()) -> pl.DataFrame:
    """Per read cell: position, reads, features and DBSCAN label (for plotting the clusters in LBA space)."""
    c = read_cells(events, meta, params)
    labels = cluster_cells(c, eps, min_samples)
    x = c.features(c.counts > 0, c.counts, 1.0)
    return pl.DataFrame({"cell": c.cell, "zone": c.cell // params.cells_per_zone,
                         "lba": c.cell * c.cell_lba, "reads": c.counts, "x": x[:, 0], "y": x[:, 1],
                         "label": labels})
