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
        self.side = eps * _SIDE
        self.origin = (x.min(0) if x.shape[0] else np.zeros(2)) if origin is None else origin
        bx, by = _cells(x, self.origin, self.side)
        self.ny = int(by.max()) + 5 if by.size else 5
        key = bx * self.ny + by
        self.order = np.lexsort((x[:, 0], key)) if x.shape[0] else np.empty(0, dtype=np.int64)  # by square, then x
        self.xs = np.ascontiguousarray(x[self.order, 0])
        sk = key[self.order]
        first = np.ones(sk.size, dtype=bool)
        first[1:] = sk[1:] != sk[:-1]
        self.keys = sk[first]
        self.start = np.append(np.flatnonzero(first), sk.size).astype(np.int64)


def _cells(x: np.ndarray, origin: np.ndarray, side: float) -> tuple[np.ndarray, np.ndarray]:
    b = np.floor((x - origin) / side).astype(np.int64) + 2  # +2: neighbours two squares down stay non-negative
    return b[:, 0], b[:, 1]


@numba.njit(cache=True)
def _square(keys: np.ndarray, k: int) -> int:
    """Index of square key k, or -1."""
    i = np.searchsorted(keys, k)
    if i < keys.size and keys[i] == k:
        return i
    return -1


@numba.njit(cache=True)
def _find(parent: np.ndarray, i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


@numba.njit(cache=True)
def _gap2(lo: np.ndarray, hi: np.ndarray, s: int, qx: float, qy: float, t: int) -> float:
    """Squared distance between the core bounding box of square t and square s's box (s >= 0) or point q (s < 0)."""
    if s >= 0:
        gx = max(0.0, max(lo[s, 0] - hi[t, 0], lo[t, 0] - hi[s, 0]))
        gy = max(0.0, max(lo[s, 1] - hi[t, 1], lo[t, 1] - hi[s, 1]))
    else:
        gx = max(0.0, max(lo[t, 0] - qx, qx - hi[t, 0]))
        gy = max(0.0, max(lo[t, 1] - qy, qy - hi[t, 1]))
    return gx * gx + gy * gy


@numba.njit(cache=True)
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


@numba.njit(cache=True)
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


@numba.njit(cache=True)
def _min_label(q0: float, q1: float, own: int, near: np.ndarray, m: int, x: np.ndarray, xs: np.ndarray,
               core: np.ndarray, order: np.ndarray, start: np.ndarray, ncore: np.ndarray, lo: np.ndarray,
               hi: np.ndarray, sq_label: np.ndarray, eps: float) -> int:
    """The smallest cluster id among the core points within eps of q (all core points of a square share one), -1
    when there is none; own is q's square (-1: none), near[:m] the squares around q that hold core points. The core
    points of q's own square are all within eps of q (a square's diagonal is shorter), so only squares of a smaller
    cluster are looked into then."""
    best = sq_label[own] if own >= 0 and ncore[own] > 0 else -1
    for k in range(m):
        t = near[k]
        if (best >= 0 and sq_label[t] >= best) or _gap2(lo, hi, -1, q0, q1, t) > eps * eps:
            continue
        if _has_core_within(q0, q1, t, x, xs, core, order, start, lo, hi, eps):
            best = sq_label[t]
    return best


@numba.njit(cache=True)
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
    # 2. components of the core points (union-find over points): a square's core points at once, then pairs of
    #    squares — the adjacent ones first, so that most squares two steps apart are already joined
    parent = np.arange(n)
    ncore = np.zeros(ns, dtype=np.int64)
    first = np.full(ns, -1, dtype=np.int64)
    lo = np.full((ns, 2), np.inf)
    hi = np.full((ns, 2), -np.inf)
    for s in range(ns):
        for a in range(start[s], start[s + 1]):
            i = order[a]
            if core[i]:
                ncore[s] += 1
                if first[s] < 0:
                    first[s] = i
                else:
                    parent[_find(parent, i)] = _find(parent, first[s])
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
                    if t < 0 or ncore[t] == 0 or _find(parent, first[s]) == _find(parent, first[t]):
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
                                parent[_find(parent, i)] = _find(parent, j)
                                linked = True
                                break
                        if linked:
                            break
    # 3. cluster ids in order of each component's smallest point index
    labels = np.full(n, -1, dtype=np.int64)
    root_id = np.full(n, -1, dtype=np.int64)
    nxt = 0
    for i in range(n):
        if core[i]:
            r = _find(parent, i)
            if root_id[r] < 0:
                root_id[r] = nxt
                nxt += 1
            labels[i] = root_id[r]
    sq_label = np.full(ns, -1, dtype=np.int64)
    for s in range(ns):
        if first[s] >= 0:
            sq_label[s] = labels[first[s]]
    # 4. border points: the smallest cluster id among the core points within eps
    near = np.empty(25, dtype=np.int64)
    for s in range(ns):
        m = _around(keys[s] // ny, keys[s] % ny, keys, ny, ncore, near)
        for a in range(start[s], start[s + 1]):
            i = order[a]
            if not core[i]:
                labels[i] = _min_label(x[i, 0], x[i, 1], s, near, m, x, xs, core, order, start, ncore, lo, hi,
                                       sq_label, eps)
    return labels, core, ncore, lo, hi, sq_label


@numba.njit(cache=True)
def _predict(q: np.ndarray, qorder: np.ndarray, bx: np.ndarray, by: np.ndarray, x: np.ndarray, xs: np.ndarray,
             core: np.ndarray, eps: float, order: np.ndarray, keys: np.ndarray, start: np.ndarray, ny: int,
             ncore: np.ndarray, lo: np.ndarray, hi: np.ndarray, sq_label: np.ndarray) -> np.ndarray:
    out = np.full(q.shape[0], -1, dtype=np.int64)
    near = np.empty(25, dtype=np.int64)
    m = 0
    own = -1
    for a in range(qorder.size):  # queries sorted by square: the squares around one are looked up once
        i = qorder[a]
        if a == 0 or bx[i] != bx[qorder[a - 1]] or by[i] != by[qorder[a - 1]]:
            m = _around(bx[i], by[i], keys, ny, ncore, near)
            own = _square(keys, bx[i] * ny + by[i]) if bx[i] >= 0 and 0 <= by[i] < ny else -1
        out[i] = _min_label(q[i, 0], q[i, 1], own, near, m, x, xs, core, order, start, ncore, lo, hi, sq_label,
                            eps)
    return out


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


def predict(fit: Fit, q: np.ndarray, eps: float) -> np.ndarray:
    """The label DBSCAN gives a non-core point at each query position: the smallest cluster id among the fit's core
    points within eps, else -1 (noise)."""
    q = np.ascontiguousarray(q, dtype=np.float64)
    if q.shape[0] == 0 or fit.x.shape[0] == 0:
        return np.full(q.shape[0], -1, dtype=np.int64)
    g = fit.grid
    bx, by = _cells(q, g.origin, g.side)
    qorder = np.lexsort((by, bx))
    return _predict(q, qorder, bx, by, fit.x, g.xs, fit.core, float(eps), g.order, g.keys, g.start, g.ny, fit.ncore,
                    fit.lo, fit.hi, fit.sq_label)
