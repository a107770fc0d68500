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

Tuning (analysis/tuning.py). Every (eps, min_samples) of the grid is scored by two validations, each of five
splits:
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
from typing import Any

import numpy as np
import polars as pl
from scipy.special import bdtrc

from ..errors import ZtbpError
from ..units import check_limit
from .dbscan import dbscan
from .hashing import mix64
from .params import VALIDATIONS, ClusterParams
from .tuning import N_SPLITS, SCORE_KEY, Cells, best_pair, tune_widening

#: zone_tests lists at most this many zones (the significant or dense ones with the most reads).
ZONE_TESTS_SHOWN = 64


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
