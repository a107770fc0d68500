"""`ztbp watch`'s pure core: rolling windows of a live trace, the hot set of each, drift with hysteresis, a
held-out gain estimate and the decision to apply, roll back, hold or defer.

Windows. A window is a bounded run of rows (a number of commands, or of seconds); it keeps its reads per cell
(`zone size / cells_per_zone`, as analysis/cluster.py aggregates them) and its read rows (start LBA and blocks),
never more than one window's worth: memory does not grow with the session.

Hot set of a window. The hot rule of analysis/cluster.py (`hot_zones_from_labels`: dense in hot DBSCAN clusters
and significant by the one-sided binomial test with Holm's correction at `alpha`) on the window's cells, with one
(eps, min_samples) pair: a window is far too short to tune the grid of `ztbp cluster`, so the pair is fixed
(`WatchParams.eps`, `min_samples`; defaults the paper grid's first eps and first min_samples).

Held-out gain. The set found on window i is scored on window i + 1 by the cache model of analysis/cachesim.py
(`Trace.held_out`: LRU and zone-LRU hit ratios on window i + 1's reads, the cache warmed by window i's):
the gain is zone-LRU minus LRU. The same measure on the set in force is the measured gain after an apply.

Drift and decisions (`decide`). A candidate is a hot set other than the one in force; it must be the same set for
K consecutive windows (hysteresis: one noisy window does not flip the device) and its held-out gain must reach the
threshold (a configuration that is not recommended is never applied). Then it is applied, unless the budget
(N applies in the last 24 h) or the minimum interval since the last apply forbids it: deferred, with the reason.
The set in force is rolled back (STOP) when its measured gain stays below the threshold for K consecutive windows;
a set rolled back is not applied again for the back-off period.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from .cachesim import Trace
from .cluster import N_SPLITS, Cells, cluster_cells, hot_zones_from_labels
from .loop import latency_summary
from .params import CACHE_MIB, PAGE_KIB, PAPER_EPS, PAPER_MIN_SAMPLES, RECOMMEND_GAIN, ClusterParams

DAY_S = 86_400.0
#: the actions a decision may take
ACTIONS = ("apply", "rollback", "hold", "defer")


@dataclass(frozen=True)
class WatchParams:
    """A watch session's rules: hysteresis K, the gain threshold, the budget and the model's cache."""

    k: int = 3
    threshold: float = RECOMMEND_GAIN
    budget_per_day: int = 10
    min_interval_s: float = 600.0
    backoff_s: float = 3600.0
    cache_mib: float = CACHE_MIB
    page_kib: int = PAGE_KIB
    cells_per_zone: int = 32
    eps: float = PAPER_EPS[0]
    min_samples: int = PAPER_MIN_SAMPLES[0]
    alpha: float = ClusterParams().alpha

    def cluster_params(self) -> ClusterParams:
        return ClusterParams(eps=(self.eps,), min_samples=(self.min_samples,), cells_per_zone=self.cells_per_zone,
                             alpha=self.alpha)


# ---- one window ------------------------------------------------------------------------------------------------
def read_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """The reads of a frame of probe rows that move data: start LBA and blocks (and the device latency, lat_ns,
    where the rows have it)."""
    cols = ["slba", "nlb", *(["lat_ns"] if "lat_ns" in frame.columns else [])]
    return frame.filter((pl.col("op") == "read") & (pl.col("nlb") > 0)).select(cols)


def read_latency(reads: pl.DataFrame, zones: tuple[int, ...], zone_size_lba: int) -> dict[str, Any] | None:
    """The device's read latency (the probe's lat_ns, issue to completion) in the zones of `zones` and in the
    others: reads, p50, p99 and mean in µs of each (loop.latency_summary, as the loop's rounds say it). A device
    that acts on the configuration shows it here (NVMeVirt serves its listed zones in microseconds, the others in a
    millisecond). None without lat_ns."""
    if "lat_ns" not in reads.columns:
        return None
    listed = (pl.col("slba") // zone_size_lba).is_in(list(zones))
    return {"in_force": latency_summary(reads.filter(listed)), "other": latency_summary(reads.filter(~listed))}


def cell_counts(reads: pl.DataFrame, cell_lba: int, n_cells: int) -> np.ndarray:
    """Reads per cell of the device (every cell, read or not) of a frame of reads."""
    cell = np.minimum(reads["slba"].to_numpy().astype(np.int64) // cell_lba, n_cells - 1)
    return np.bincount(cell, minlength=n_cells).astype(np.int64)


def zone_counts(counts: np.ndarray, cells_per_zone: int) -> np.ndarray:
    """Reads per zone from reads per cell."""
    return counts.reshape(-1, cells_per_zone).sum(1)


def window_cells(counts: np.ndarray, cell_lba: int) -> Cells:
    """A window's reads per cell as analysis/cluster.py's Cells (no folds: a window is not tuned)."""
    cells = np.flatnonzero(counts)
    c = counts[cells]
    log_max = float(np.log1p(c.max())) if c.size else 0.0
    empty = np.zeros((N_SPLITS, cells.size), dtype=np.int64)
    return Cells(cells, c, empty, np.zeros((N_SPLITS + 1, cells.size), dtype=np.int64), counts.size, cell_lba,
                 log_max)


#: a row whose issue time is this much older than a row that arrived before it came out of the probe late
LATE_NS = 1_000_000_000


def late_rows(ts_ns: np.ndarray, latest_ns: int, tolerance_ns: int = LATE_NS) -> tuple[int, int]:
    """Rows that arrived out of time order (issue time more than `tolerance_ns` before the latest one seen before
    them, `latest_ns` before this batch), and the latest issue time after them. bpftrace prints the rows of each
    CPU's buffer in turn: when its user space lags (under emulation, or a busy CPU), rows of different times come
    interleaved, and a window of commands in arrival order mixes them."""
    if ts_ns.size == 0:
        return 0, latest_ns
    ts = ts_ns.astype(np.int64)
    before = np.maximum.accumulate(np.concatenate(([latest_ns], ts[:-1])))
    return int((ts + tolerance_ns < before).sum()), int(max(latest_ns, ts.max()))


def hot_set(counts: np.ndarray, meta: dict[str, Any], params: WatchParams) -> tuple[int, ...]:
    """The window's hot zones by the hot rule of analysis/cluster.py with the fixed pair; sorted."""
    cpz = params.cells_per_zone
    cell_lba = meta["zone_size_lba"] // cpz
    c = window_cells(counts, cell_lba)
    if c.counts.sum() < (N_SPLITS + 1) * 2:
        return ()
    labels = cluster_cells(c, params.eps, params.min_samples)
    cap_lba = meta.get("zone_cap_lba") or meta["zone_size_lba"]
    hot, _, _ = hot_zones_from_labels(c, labels, params.cluster_params(), meta["nr_zones"], -(-cap_lba // cell_lba))
    return tuple(sorted(hot))


def held_out_gain(before: pl.DataFrame, after: pl.DataFrame, zones: tuple[int, ...], meta: dict[str, Any],
                  params: WatchParams) -> float | None:
    """zone-LRU minus LRU hit ratio with `zones` on the reads of `after`, the cache warmed by `before` (reads
    frames); None without a zone or a read to score."""
    if not zones or after.height == 0:
        return None
    both = pl.concat([before.select("slba", "nlb"), after.select("slba", "nlb")]).with_columns(
        pl.lit("read").alias("op"))
    r = Trace(both, meta, params.page_kib).held_out(params.cache_mib, list(zones), before.height)
    return float(r["zone_lru"] - r["lru"]) if r["requests"] else None


@dataclass(frozen=True)
class WindowSummary:
    """What one window says: its counts, its hot set, the held-out gain of the previous window's hot set on it and
    the measured gain of the set in force on it."""

    index: int
    t_end: float
    commands: int
    reads: int
    lost: int
    hot: tuple[int, ...]
    previous_hot: tuple[int, ...]
    held_out_gain: float | None
    in_force_gain: float | None
    top_zones: list[dict[str, int]] = field(default_factory=list)
    read_lat: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"window": self.index, "t_end": self.t_end, "commands": self.commands, "reads": self.reads,
                "lost": self.lost, "hot": list(self.hot), "previous_hot": list(self.previous_hot),
                "held_out_gain": self.held_out_gain, "in_force_gain": self.in_force_gain,
                "top_zones": self.top_zones, "read_lat": self.read_lat}


def summarise(index: int, t_end: float, commands: int, lost: int, counts: np.ndarray, reads: pl.DataFrame,
              previous: pl.DataFrame, previous_hot: tuple[int, ...], in_force: tuple[int, ...],
              meta: dict[str, Any], params: WatchParams, top: int = 8) -> WindowSummary:
    """A window's summary from its reads per cell and read rows, with the previous window's reads and hot set."""
    zc = zone_counts(counts, params.cells_per_zone)
    order = np.argsort(-zc, kind="stable")[:top]
    tops = [{"zone": int(z), "reads": int(zc[z])} for z in order if zc[z] > 0]
    return WindowSummary(index, t_end, commands, reads.height, lost, hot_set(counts, meta, params), previous_hot,
                         held_out_gain(previous, reads, previous_hot, meta, params),
                         held_out_gain(previous, reads, in_force, meta, params), tops,
                         read_latency(reads, in_force, meta["zone_size_lba"]))


# ---- decisions -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WatchState:
    """What the decisions remember: the set in force, the streaks, the applies of the last day and the sets
    backing off (zones -> until)."""

    in_force: tuple[int, ...] = ()
    candidate: tuple[int, ...] = ()
    candidate_streak: int = 0
    low_gain_streak: int = 0
    applies: tuple[float, ...] = ()
    backoff: tuple[tuple[tuple[int, ...], float], ...] = ()

    @property
    def last_apply(self) -> float | None:
        return self.applies[-1] if self.applies else None

    def as_dict(self) -> dict[str, Any]:
        return {"in_force": list(self.in_force), "candidate": list(self.candidate),
                "candidate_streak": self.candidate_streak, "low_gain_streak": self.low_gain_streak,
                "applies": list(self.applies), "backoff": [[list(z), t] for z, t in self.backoff]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WatchState:
        return cls(tuple(d["in_force"]), tuple(d["candidate"]), int(d["candidate_streak"]),
                   int(d["low_gain_streak"]), tuple(float(t) for t in d["applies"]),
                   tuple((tuple(z), float(t)) for z, t in d["backoff"]))


@dataclass(frozen=True)
class Decision:
    action: str
    reason: str
    zones: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "reason": self.reason, "zones": list(self.zones)}


def clock_text(t: float) -> str:
    """A time of the session's clock (seconds since the epoch) as UTC date and time."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def next_apply_at(state: WatchState, params: WatchParams, now: float) -> float:
    """The first time an apply is allowed by the budget and the minimum interval (now when it is allowed)."""
    day = sorted(t for t in state.applies if t > now - DAY_S)
    at = now
    if params.budget_per_day == 0:
        return float("inf")
    if len(day) >= params.budget_per_day:
        at = max(at, day[len(day) - params.budget_per_day] + DAY_S)
    if state.last_apply is not None:
        at = max(at, state.last_apply + params.min_interval_s)
    return at


def blocked(state: WatchState, params: WatchParams, now: float) -> str | None:
    """Why an apply is not allowed now (budget or minimum interval), or None."""
    day = [t for t in state.applies if t > now - DAY_S]
    if len(day) >= params.budget_per_day:
        n = params.budget_per_day
        used = f" used at {clock_text(day[-1])}" if day else ""
        return (f"deferred: budget of {n} appl{'y' if n == 1 else 'ies'} a day{used}; next allowed at "
                f"{clock_text(next_apply_at(state, params, now))}" if n else "deferred: budget of 0 applies a day")
    last = state.last_apply
    if last is not None and now - last < params.min_interval_s:
        return (f"deferred: minimum interval of {params.min_interval_s:g} s since the apply at {clock_text(last)}; "
                f"next allowed at {clock_text(last + params.min_interval_s)}")
    return None


def track(state: WatchState, s: WindowSummary, params: WatchParams, now: float) -> WatchState:
    """The streaks after window `s`: the candidate (a hot set other than the one in force) and the windows in a row
    the set in force measured below the threshold; back-offs that ended are dropped."""
    cand, streak = (), 0
    if s.hot and s.hot != state.in_force:
        cand = s.hot
        streak = state.candidate_streak + 1 if s.hot == state.candidate else 1
    low = 0
    if state.in_force:  # a window with no measure (the first after --resume) leaves the streak as it is
        g = s.in_force_gain
        low = state.low_gain_streak if g is None else (state.low_gain_streak + 1 if g < params.threshold else 0)
    return replace(state, candidate=cand, candidate_streak=streak, low_gain_streak=low,
                   backoff=tuple((z, t) for z, t in state.backoff if t > now))


def _gain(g: float | None) -> str:
    return "none" if g is None else f"{g:+.4f}"


def decide(state: WatchState, s: WindowSummary, params: WatchParams, now: float) -> tuple[Decision, WatchState]:
    """The decision after window `s` at time `now` and the state it leaves (module docstring)."""
    st = track(state, s, params, now)
    k = params.k
    rollback_due = bool(st.in_force) and st.low_gain_streak >= k
    why_rollback = (f"rollback: the gain of zones {list(st.in_force)} in force stayed below "
                    f"{params.threshold:+.2f} for {st.low_gain_streak} windows (last {_gain(s.in_force_gain)})")
    note = ""
    if st.candidate and st.candidate_streak >= k:
        backing = [t for z, t in st.backoff if z == st.candidate]
        recommended = (s.previous_hot == st.candidate and s.held_out_gain is not None
                       and s.held_out_gain >= params.threshold)
        if backing:
            note = f"zones {list(st.candidate)} backing off until {clock_text(backing[0])}"
        elif not recommended:
            note = (f"zones {list(st.candidate)} hot for {st.candidate_streak} windows but not recommended: "
                    f"held-out gain {_gain(s.held_out_gain)} below {params.threshold:+.2f}")
        else:
            why = blocked(st, params, now)
            evidence = (f"zones {list(st.candidate)} hot for {st.candidate_streak} windows, held-out gain "
                        f"{_gain(s.held_out_gain)}")
            if why is None:
                reason = f"apply: {evidence}" + (f", replacing {list(st.in_force)}" if st.in_force else "")
                return Decision("apply", reason, st.candidate), replace(
                    st, in_force=st.candidate, candidate=(), candidate_streak=0, low_gain_streak=0,
                    applies=tuple(t for t in st.applies if t > now - DAY_S) + (now,))
            if not rollback_due:
                return Decision("defer", f"{why} ({evidence})", st.candidate), st
            note = f"apply of zones {list(st.candidate)} {why}"
    if rollback_due:
        reason = why_rollback + (f"; {note}" if note else "")
        return Decision("rollback", reason, st.in_force), replace(
            st, in_force=(), low_gain_streak=0, backoff=st.backoff + ((st.in_force, now + params.backoff_s),))
    if note:
        return Decision("hold", f"hold: {note}"), st
    if st.candidate:
        return Decision("hold", f"hold: zones {list(st.candidate)} hot for {st.candidate_streak} of {k} windows"), st
    if st.in_force:
        low = (f", below {params.threshold:+.2f} for {st.low_gain_streak} of {k} windows" if st.low_gain_streak
               else "")
        return Decision("hold", f"hold: zones {list(st.in_force)} in force, gain {_gain(s.in_force_gain)}{low}"), st
    return Decision("hold", "hold: no hot zone"), st
