"""Weighted DBSCAN on 2-D points in linear time per fit: a uniform grid of eps/√2 squares (numba).

The labels are exactly scikit-learn's `DBSCAN(eps, min_samples).fit(x, sample_weight=w).labels_` (a test checks it):

- a point is a core point when the weights of the points within eps of it (itself included, distance ≤ eps) sum to
  at least min_samples;
- clusters are the connected components of the core points, two core points being connected when they lie within
  eps of each other; cluster ids follow the smallest point index of each component (scikit-learn's scan order);
- a point that is not core joins the cluster with the smallest id among the core points within eps of it, else it
  is noise (-1) — what scikit-learn's breadth-first expansion in index order gives.

scikit-learn builds every point's neighbour list, which on a device of 4,096 zones (131,072 cells, thousands of
neighbours each at eps 0.04) takes minutes and gigabytes per fit. Here all points of one grid square are within eps
of each other, so a square holding at least min_samples of weight makes all its points core without a distance, a
square's core points are joined at once, and only squares at most two steps apart are compared, stopping at the
first pair within eps. `predict` labels new points (the held-out cells of the validation) as DBSCAN labels a point
that is not core: the smallest cluster id among the core points within eps, else noise — on the same grid.
"""

from __future__ import annotations

import numba
import numpy as np

#: A grid square's diagonal stays just under eps (rounding must never put two points of a square beyond eps).
_SIDE = 1.0 / np.sqrt(2.0) * (1.0 - 1e-9)


class Grid:
    """Points sorted by grid square: square keys (sorted, unique), start of each square, and point order."""

    def __init__(self, x: np.ndarray, eps: float, origin: np.ndarray | None = None) -> None:
        x = np.ascontiguousarray(x, dtype=np.float64)
        self.side = eps * _SIDE
        self.origin = (_low(x) if x.shape[0] else np.zeros(2)) if origin is None else origin
        bx, by, in_x_order = _squares(x, np.asarray(self.origin, dtype=np.float64), self.side)
        self.ny = int(by.max()) + 5 if by.size else 5
        # by square, then x, then index: a stable sort by square of the points in x order; the cells come in x
        # order, and then one counting sort over the squares does it
        span = _key_span(bx, by, self.ny)
        if in_x_order and span is not None:
            self.order = _counting_sort(bx, by, self.ny, np.arange(x.shape[0]), span[0], span[1])
        else:
            self.order = by_square(bx * self.ny + by, np.argsort(x[:, 0], kind="stable"))
        self.xs, self.keys, self.start = _squares_of(x, bx, by, self.ny, self.order)


def _key_span(bx: np.ndarray, by: np.ndarray, ny: int) -> tuple[int, int] | None:
    """(lowest key, keys' range) of squares keyed bx * ny + by (by within [0, ny)), or None when the range is too
    wide for a counting sort: more than a few times the points (a grid over [0, 1]^2 at the eps DBSCAN is tuned
    with is not)."""
    if bx.size == 0:
        return None
    lo, hi = int(bx.min()) * ny + int(by.min()), int(bx.max()) * ny + int(by.max())
    return (lo, hi - lo + 1) if hi - lo <= 4 * bx.size + 4096 else None


@numba.njit(cache=True, nogil=True)
def _low(x: np.ndarray) -> np.ndarray:
    """The lowest corner of the points (one pass; numpy's x.min(0) over n x 2 took 15 times as long)."""
    low = np.array([x[0, 0], x[0, 1]])
    for i in range(1, x.shape[0]):
        low[0], low[1] = min(low[0], x[i, 0]), min(low[1], x[i, 1])
    return low


@numba.njit(cache=True, nogil=True)
def _squares(x: np.ndarray, origin: np.ndarray, side: float) -> tuple[np.ndarray, np.ndarray, bool]:
    """The grid square (column, row) of each point (+2: neighbours two squares down stay non-negative), and
    whether the points come in x order."""
    bx = np.empty(x.shape[0], dtype=np.int64)
    by = np.empty(x.shape[0], dtype=np.int64)
    in_x_order = True
    for i in range(x.shape[0]):
        bx[i] = np.int64(np.floor((x[i, 0] - origin[0]) / side)) + 2
        by[i] = np.int64(np.floor((x[i, 1] - origin[1]) / side)) + 2
        if i and x[i, 0] < x[i - 1, 0]:
            in_x_order = False
    return bx, by, in_x_order


@numba.njit(cache=True, nogil=True)
def _squares_of(x: np.ndarray, bx: np.ndarray, by: np.ndarray, ny: int, order: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x of the points in `order`, the keys of their squares (unique, in order) and where each square starts."""
    n = order.size
    xs = np.empty(n, dtype=np.float64)
    keys = np.empty(n, dtype=np.int64)
    start = np.empty(n + 1, dtype=np.int64)
    m = 0
    for a in range(n):
        i = order[a]
        xs[a] = x[i, 0]
        k = bx[i] * ny + by[i]
        if a == 0 or k != keys[m - 1]:
            keys[m], start[m] = k, a
            m += 1
    start[m] = n
    return xs, keys[:m].copy(), start[: m + 1].copy()


def by_square(key: np.ndarray, order: np.ndarray) -> np.ndarray:
    """`order` stably sorted by `key` (each point's square): a counting sort over the squares' range when it is no
    wider than a few times the points, numpy's stable sort otherwise. np.lexsort over the 524,288 cells of 16,384
    zones took 30 ms a call, 300 calls a clustering."""
    if order.size == 0:
        return order.astype(np.int64)
    lo, hi = int(key.min()), int(key.max())
    if hi - lo > 4 * order.size + 4096:
        return order[np.argsort(key[order], kind="stable")]
    return _counting_sort(key, np.zeros_like(key), 1, order, lo, hi - lo + 1)


@numba.njit(cache=True, nogil=True)
def _counting_sort(bx: np.ndarray, by: np.ndarray, ny: int, order: np.ndarray, lo: int, span: int) -> np.ndarray:
    """`order` stably sorted by key bx * ny + by, the keys within [lo, lo + span)."""
    count = np.zeros(span + 1, dtype=np.int64)
    for i in order:
        count[bx[i] * ny + by[i] - lo + 1] += 1
    for k in range(span):
        count[k + 1] += count[k]
    out = np.empty(order.size, dtype=np.int64)
    for i in order:
        k = bx[i] * ny + by[i] - lo
        out[count[k]] = i
        count[k] += 1
    return out


@numba.njit(cache=True, nogil=True)
def _square(keys: np.ndarray, k: int) -> int:
    """Index of square key k, or -1."""
    i = np.searchsorted(keys, k)
    if i < keys.size and keys[i] == k:
        return i
    return -1


@numba.njit(cache=True, nogil=True)
def _find(parent: np.ndarray, i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


@numba.njit(cache=True, nogil=True)
def _gap2(lo: np.ndarray, hi: np.ndarray, s: int, qx: float, qy: float, t: int) -> float:
    """Squared distance between the core bounding box of square t and square s's box (s >= 0) or point q (s < 0)."""
    if s >= 0:
        gx = max(0.0, max(lo[s, 0] - hi[t, 0], lo[t, 0] - hi[s, 0]))
        gy = max(0.0, max(lo[s, 1] - hi[t, 1], lo[t, 1] - hi[s, 1]))
    else:
        gx = max(0.0, max(lo[t, 0] - qx, qx - hi[t, 0]))
        gy = max(0.0, max(lo[t, 1] - qy, qy - hi[t, 1]))
    return gx * gx + gy * gy


@numba.njit(cache=True, nogil=True)
def _around(kx: int, ky: int, keys: np.ndarray, ny: int, ncore: np.ndarray, near: np.ndarray) -> int:
    """The squares within two steps of square (kx, ky) that hold core points, into near; their count."""
    m = 0
    for dx in range(-2, 3):
        for dy in range(-2, 3):
            if kx + dx < 0 or ky + dy < 0 or ky + dy >= ny:
                continue
            t = _square(keys, (kx + dx) * ny + ky + dy)
            if t >= 0 and ncore[t] > 0:
                near[m] = t
                m += 1
    return m


@numba.njit(cache=True, nogil=True)
def _has_core_within(q0: float, q1: float, t: int, x: np.ndarray, xs: np.ndarray, core: np.ndarray,
                     order: np.ndarray, start: np.ndarray, lo: np.ndarray, hi: np.ndarray, eps: float) -> bool:
    """Whether square t holds a core point within eps of q: from its core box when that decides, else by scanning
    the square's points (sorted by x) in the x range the box's y gap leaves."""
    fx = max(abs(q0 - lo[t, 0]), abs(q0 - hi[t, 0]))
    fy = max(abs(q1 - lo[t, 1]), abs(q1 - hi[t, 1]))
    eps2 = eps * eps
    if fx * fx + fy * fy <= eps2:
        return True  # the whole core box is within eps
    gy = max(0.0, max(lo[t, 1] - q1, q1 - hi[t, 1]))
    if gy > eps:
        return False
    r = np.sqrt(eps2 - gy * gy)
    a = start[t] + np.searchsorted(xs[start[t]:start[t + 1]], q0 - r)
    while a < start[t + 1] and xs[a] <= q0 + r:
        j = order[a]
        if core[j]:
            ddx = q0 - x[j, 0]
            ddy = q1 - x[j, 1]
            if ddx * ddx + ddy * ddy <= eps2:
                return True
        a += 1
    return False


@numba.njit(cache=True, nogil=True)
def _labels_near(q: np.ndarray, qorder: np.ndarray, bx: np.ndarray, by: np.ndarray, out: np.ndarray, x: np.ndarray,
                 xs: np.ndarray, core: np.ndarray, eps: float, order: np.ndarray, keys: np.ndarray, start: np.ndarray,
                 ny: int, ncore: np.ndarray, lo: np.ndarray, hi: np.ndarray, sq_label: np.ndarray) -> None:
    """Into out[i], for the points q[i] of qorder (sorted by their square (bx[i], by[i])): the smallest cluster id
    among the core points within eps (all core points of a square share one), -1 when there is none. The squares
    around one are looked up once. The core points of q's own square are all within eps of q (a square's diagonal
    is shorter), so only squares of a smaller cluster are looked into then. One loop over all the points: a
    function called point by point (its array arguments' reference counts kept each call) took four times as long
    on a device of 524,288 cells."""
    near = np.empty(25, dtype=np.int64)
    m = 0
    own = -1
    eps2 = eps * eps
    for a in range(qorder.size):
        i = qorder[a]
        if a == 0 or bx[i] != bx[qorder[a - 1]] or by[i] != by[qorder[a - 1]]:
            m = _around(bx[i], by[i], keys, ny, ncore, near)
            own = _square(keys, bx[i] * ny + by[i]) if bx[i] >= 0 and 0 <= by[i] < ny else -1
            least = -1  # the smallest cluster around, or -1 when none: a point its own square labels no higher
            for k in range(m):  # needs no look around
                if least < 0 or sq_label[near[k]] < least:
                    least = sq_label[near[k]]
        q0, q1 = q[i, 0], q[i, 1]
        best = sq_label[own] if own >= 0 and ncore[own] > 0 else -1
        if best >= 0 and best <= least:
            out[i] = best
            continue
        for k in range(m):
            t = near[k]
            if (best >= 0 and sq_label[t] >= best) or _gap2(lo, hi, -1, q0, q1, t) > eps2:
                continue
            if _has_core_within(q0, q1, t, x, xs, core, order, start, lo, hi, eps):
                best = sq_label[t]
        out[i] = best


@numba.njit(cache=True, nogil=True)
def _fit(x: np.ndarray, xs: np.ndarray, w: np.ndarray, eps: float, min_samples: float, order: np.ndarray,
         keys: np.ndarray, start: np.ndarray, ny: int) -> tuple[np.ndarray, ...]:
    n = x.shape[0]
    eps2 = eps * eps
    ns = keys.size
    core = np.zeros(n, dtype=np.bool_)
    # 1. core points: a heavy square makes all its points core; else sum the weights within eps
    for s in range(ns):
        tot = 0.0
        for a in range(start[s], start[s + 1]):
            tot += w[order[a]]
        if tot >= min_samples:
            for a in range(start[s], start[s + 1]):
                core[order[a]] = True
            continue
        kx, ky = keys[s] // ny, keys[s] % ny
        for a in range(start[s], start[s + 1]):
            i = order[a]
            acc = 0.0
            for dx in range(-2, 3):
                for dy in range(-2, 3):
                    t = _square(keys, (kx + dx) * ny + ky + dy)
                    if t < 0:
                        continue
                    for b in range(start[t], start[t + 1]):
                        j = order[b]
                        ddx = x[i, 0] - x[j, 0]
                        ddy = x[i, 1] - x[j, 1]
                        if ddx * ddx + ddy * ddy <= eps2:
                            acc += w[j]
                    if acc >= min_samples:
                        break
                if acc >= min_samples:
                    break
            core[i] = acc >= min_samples
    # 2. components of the core points: all core points of a square are within eps of each other, so the
    #    union-find runs over the squares that hold any; pairs of squares are joined by a pair of their core points
    #    within eps — the adjacent ones first, so that most squares two steps apart are already joined
    parent = np.arange(ns)
    ncore = np.zeros(ns, dtype=np.int64)
    least = np.full(ns, n, dtype=np.int64)  # the smallest index of a core point in each square
    lo = np.full((ns, 2), np.inf)
    hi = np.full((ns, 2), -np.inf)
    for s in range(ns):
        for a in range(start[s], start[s + 1]):
            i = order[a]
            if core[i]:
                ncore[s] += 1
                least[s] = min(least[s], i)
                for d in range(2):
                    lo[s, d] = min(lo[s, d], x[i, d])
                    hi[s, d] = max(hi[s, d], x[i, d])
    for reach in range(1, 3):
        for s in range(ns):
            if ncore[s] == 0:
                continue
            kx, ky = keys[s] // ny, keys[s] % ny
            for dx in range(0, reach + 1):
                for dy in range(-reach, reach + 1):
                    if (dx == 0 and dy <= 0) or max(dx, abs(dy)) != reach:
                        continue  # each pair of squares once, at its own reach
                    t = _square(keys, (kx + dx) * ny + ky + dy)
                    if t < 0 or ncore[t] == 0 or _find(parent, s) == _find(parent, t):
                        continue
                    if _gap2(lo, hi, s, 0.0, 0.0, t) > eps2:
                        continue  # the bounding boxes of their core points are too far apart
                    linked = False
                    for a in range(start[s], start[s + 1]):
                        i = order[a]
                        if not core[i]:
                            continue
                        if _gap2(lo, hi, -1, x[i, 0], x[i, 1], t) > eps2:
                            continue
                        for b in range(start[t], start[t + 1]):
                            j = order[b]
                            if not core[j]:
                                continue
                            ddx = x[i, 0] - x[j, 0]
                            ddy = x[i, 1] - x[j, 1]
                            if ddx * ddx + ddy * ddy <= eps2:
                                parent[_find(parent, s)] = _find(parent, t)
                                linked = True
                                break
                        if linked:
                            break
    # 3. cluster ids in order of each component's smallest core point index (scikit-learn's scan order)
    low = np.full(ns, n, dtype=np.int64)  # per component (at its root): its smallest core point index
    for s in range(ns):
        if ncore[s]:
            r = _find(parent, s)
            low[r] = min(low[r], least[s])
    roots = np.array([r for r in range(ns) if ncore[r] and _find(parent, r) == r], dtype=np.int64)
    root_id = np.full(ns, -1, dtype=np.int64)
    for k, r in enumerate(roots[np.argsort(low[roots])]):
        root_id[r] = k
    sq_label = np.full(ns, -1, dtype=np.int64)
    labels = np.full(n, -1, dtype=np.int64)
    for s in range(ns):
        if ncore[s]:
            sq_label[s] = root_id[_find(parent, s)]
            for a in range(start[s], start[s + 1]):
                if core[order[a]]:
                    labels[order[a]] = sq_label[s]
    # 4. border points: the smallest cluster id among the core points within eps (in square order, as queries)
    m = n - int(ncore.sum())
    if m:
        q, bq = np.empty((m, 2)), np.empty(m, dtype=np.int64)
        bx, by = np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64)
        j = 0
        for s in range(ns):
            for a in range(start[s], start[s + 1]):
                i = order[a]
                if not core[i]:
                    q[j, 0], q[j, 1], bq[j], bx[j], by[j] = x[i, 0], x[i, 1], i, keys[s] // ny, keys[s] % ny
                    j += 1
        found = np.empty(m, dtype=np.int64)
        _labels_near(q, np.arange(m), bx, by, found, x, xs, core, eps, order, keys, start, ny, ncore, lo, hi,
                     sq_label)
        labels[bq] = found
    return labels, core, ncore, lo, hi, sq_label


class Fit:
    """One DBSCAN fit: the points, their grid, labels and core mask, and each square's core box and cluster."""

    def __init__(self, x: np.ndarray, grid: Grid, labels: np.ndarray, core: np.ndarray, ncore: np.ndarray,
                 lo: np.ndarray, hi: np.ndarray, sq_label: np.ndarray) -> None:
        self.x, self.grid, self.labels, self.core = x, grid, labels, core
        self.ncore, self.lo, self.hi, self.sq_label = ncore, lo, hi, sq_label


def dbscan(x: np.ndarray, w: np.ndarray, eps: float, min_samples: float, grid: Grid | None = None) -> Fit:
    """Weighted DBSCAN (scikit-learn's labels: `.labels`, `.core`); pass the grid of an earlier fit on the same
    points and eps to skip building it again."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    g = Grid(x, eps) if grid is None else grid
    if x.shape[0] == 0:
        e = np.empty(0, dtype=np.int64)
        return Fit(x, g, e, np.empty(0, dtype=bool), e, np.empty((0, 2)), np.empty((0, 2)), e)
    out = _fit(x, g.xs, np.asarray(w, dtype=np.float64), float(eps), float(min_samples), g.order, g.keys, g.start,
               g.ny)
    return Fit(x, g, *out)


class Queries:
    """Points to label against the fits made on one grid (a split's held-out cells, for each min_samples of an
    eps): their squares worked out once and the points put in square order, so the labelling reads them in turn."""

    def __init__(self, q: np.ndarray, grid: Grid) -> None:
        q = np.ascontiguousarray(q, dtype=np.float64)
        self.grid, self.n = grid, q.shape[0]
        bx, by, _ = _squares(q, np.asarray(grid.origin, dtype=np.float64), grid.side)
        # grouped by square (the squares around one looked up once), by a key of their own: any order of squares
        rows = int(by.max()) - int(by.min()) + 1 if self.n else 1
        span = _key_span(bx, by, rows)
        order = np.arange(self.n)
        self.order = _counting_sort(bx, by, rows, order, *span) if span else by_square(bx * rows + by, order)
        self.q, self.bx, self.by = _in_order(q, bx, by, self.order)
        self.turn = np.arange(self.n)


@numba.njit(cache=True, nogil=True)
def _in_order(q: np.ndarray, bx: np.ndarray, by: np.ndarray, order: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, bx and by taken in `order` (numpy's fancy indexing of an n x 2 array is several passes)."""
    n = order.size
    qo, bxo, byo = np.empty((n, 2)), np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    for a in range(n):
        i = order[a]
        qo[a, 0], qo[a, 1], bxo[a], byo[a] = q[i, 0], q[i, 1], bx[i], by[i]
    return qo, bxo, byo


def predict(fit: Fit, q: np.ndarray | None, eps: float, queries: Queries | None = None) -> np.ndarray:
    """The label DBSCAN gives a non-core point at each query position q (or at `queries`, made on the fit's grid):
    the smallest cluster id among the fit's core points within eps, else -1 (noise)."""
    at = Queries(np.empty((0, 2)) if q is None else q, fit.grid) if queries is None else queries
    if at.grid is not fit.grid:
        raise ValueError("predict: the queries were placed on another grid than the fit's")
    out = np.full(at.n, -1, dtype=np.int64)
    if at.n == 0 or fit.x.shape[0] == 0:
        return out
    g = fit.grid
    found = np.empty(at.n, dtype=np.int64)
    _labels_near(at.q, at.turn, at.bx, at.by, found, fit.x, g.xs, fit.core, float(eps), g.order, g.keys, g.start,
                 g.ny, fit.ncore, fit.lo, fit.hi, fit.sq_label)
    out[at.order] = found
    return out
