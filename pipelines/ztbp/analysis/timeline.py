"""What a timeline of a run needs: lanes for overlapping intervals, write pointers, queue depth, nested layer slices.

Pure functions over the events of a run (derived/events.parquet) and the rows of raw/layers.csv; the Perfetto
export (present/perfetto.py) and the static timeline figure (present/figures.py) draw what these return.

- `assign_lanes`: commands of one zone that overlap in time go to different lanes (the lowest free one), so a
  track never holds two overlapping slices; the same for the requests of one thread.
- `write_pointers`: each zone's write pointer (LBAs from the zone start) after every command that moves it, at
  the command's completion. A reset sets it to 0, a finish to the zone capacity, a write (or write_zeroes) to
  at least its end, a zone append advances it by its length (the device chose the LBA; the trace only has the
  zone start). `_all` actions apply to every zone. Failed commands (status ≠ 0) move nothing. The trace sees
  only its own commands: a zone neither reset nor finished in the trace starts at 0 here, which is right for
  writes (the pointer is at least their end) but counts an append from 0.
- `queue_depth`: commands in flight per hardware queue (ctrl, qid), +1 at submission and −1 at completion.
- `layer_slices`: one request of the layer probe as nested slices (request ⊃ kernel crossing ⊃ syscall ⊃ vfs ⊃
  file system ⊃ block ⊃ nvme driver ⊃ device, then the completion on the way back). The probe gives each layer's
  total time, not where inside the request it was spent: each layer's own time is drawn on the way down, the
  completion after the device. Layers with no time are left out.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import polars as pl

from ..errors import ZtbpError
from .layers import LAYERS

#: Ops that write data at the write pointer (zone appends are handled apart).
WRITE_OPS: tuple[str, ...] = ("write", "write_zeroes")
#: The layers of the down path nested in each other, in order (completion comes back up after the device).
CHAIN: tuple[str, ...] = tuple(c for c, _ in LAYERS if c != "completion_ns")
LAYER_NAMES: dict[str, str] = dict(LAYERS)


@numba.njit(cache=True)
def _lanes_sorted(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane of each interval; intervals sorted by (key, start). The lowest lane free at the start (its last
    interval ended at or before it) is taken."""
    n = key.size
    out = np.empty(n, dtype=np.int32)
    ends = np.empty(64, dtype=np.int64)
    used = 0
    for i in range(n):
        if i == 0 or key[i] != key[i - 1]:
            used = 0
        lane = -1
        for j in range(used):
            if ends[j] <= start[i]:
                lane = j
                break
        if lane < 0:
            if used == ends.size:
                grown = np.empty(ends.size * 2, dtype=np.int64)
                grown[:used] = ends[:used]
                ends = grown
            lane = used
            used += 1
        ends[lane] = end[i]
        out[i] = lane
    return out


def assign_lanes(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane (0, 1, ...) of each interval [start, end) within its key, so that intervals of one lane never overlap.
    Lanes are numbered per key; an interval takes the lowest lane that is free when it starts."""
    key = np.asarray(key, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.maximum(np.asarray(end, dtype=np.int64), start)
    if key.size == 0:
        return np.empty(0, dtype=np.int32)
    order = np.lexsort((start, key))
    lanes = np.empty(key.size, dtype=np.int32)
    lanes[order] = _lanes_sorted(key[order], start[order], end[order])
    return lanes


def command_lanes(events: pl.DataFrame) -> np.ndarray:
    """Lane of every command within its zone (events in their order)."""
    ts = events["ts_ns"].cast(pl.Int64).to_numpy()
    return assign_lanes(events["zone"].to_numpy(), ts, ts + events["lat_ns"].cast(pl.Int64).to_numpy())


def slice_name() -> pl.Expr:
    """A command's slice name: its op, or for zone management its action (reset, finish, reset_all, ...)."""
    op, act = pl.col("op").cast(pl.Utf8), pl.col("zone_action").cast(pl.Utf8)
    return pl.when((op == "zone_mgmt_send") & (act != "")).then(act).otherwise(op).alias("name")


def select_commands(events: pl.DataFrame, window_ns: tuple[int | None, int | None] | None,
                    zones: tuple[int, ...] | None, nr_zones: int) -> tuple[pl.DataFrame, tuple[int, int] | None]:
    """The commands to show (with their row in `events` as `event`): submitted in the window (ns from the first
    command, either end open) and in the zones. Returns them and the window in trace time."""
    ev = events.with_row_index("event")
    if zones:
        bad = sorted(z for z in zones if z >= nr_zones)
        if bad:
            raise ZtbpError(f"zones {','.join(map(str, bad))}: the device has zones 0-{nr_zones - 1}")
        ev = ev.filter(pl.col("zone").is_in(list(zones)))
    span = None
    if window_ns is not None and events.height:
        t0 = int(events["ts_ns"].min())  # type: ignore[arg-type]
        last = int(events["ts_ns"].max())  # type: ignore[arg-type]
        lo = t0 + (window_ns[0] or 0)
        hi = t0 + window_ns[1] if window_ns[1] is not None else max(last + 1, lo + 1)
        if hi <= lo:
            raise ZtbpError("window: the end must come after the start")
        span = (lo, hi)
        ev = ev.filter((pl.col("ts_ns") >= lo) & (pl.col("ts_ns") < hi))
    if ev.height == 0:
        length = (int(events["ts_ns"].max()) - int(events["ts_ns"].min())) / 1e9 if events.height else 0.0  # type: ignore[arg-type]
        raise ZtbpError(f"no command in this window and these zones (the run's commands span "
                        f"{length:.3f} s from its first command; a window is START:END from there, e.g. 1s:1.5s)")
    return ev, span


def write_pointers(events: pl.DataFrame, nr_zones: int, zone_size_lba: int, zone_cap_lba: int) -> pl.DataFrame:
    """Every write-pointer move: columns event (row of `events`), zone, t_ns (completion), wp_lba (from the zone
    start), sorted by zone and time. A select-all reset or finish gives one row per zone."""
    ev = events.with_row_index("event").filter(pl.col("status") == 0).select(
        "event", "zone", "slba", "nlb", pl.col("op").cast(pl.Utf8), pl.col("zone_action").cast(pl.Utf8),
        (pl.col("ts_ns") + pl.col("lat_ns")).cast(pl.Int64).alias("t_ns"))
    action = pl.col("zone_action").str.replace("_all$", "")
    moving = ev.filter(pl.col("op").is_in(list(WRITE_OPS)) | (pl.col("op") == "zone_append")
                       | ((pl.col("op") == "zone_mgmt_send") & action.is_in(["reset", "finish"])))
    sel_all = moving.filter(pl.col("zone_action").str.ends_with("_all"))
    if sel_all.height:
        every = pl.DataFrame({"zone": pl.arange(0, nr_zones, eager=True).cast(moving["zone"].dtype)})
        moving = pl.concat([moving.filter(~pl.col("zone_action").str.ends_with("_all")),
                            sel_all.drop("zone").join(every, how="cross").select(moving.columns)])
    mgmt = pl.col("op") == "zone_mgmt_send"
    is_append = pl.col("op") == "zone_append"
    end = (pl.col("slba").cast(pl.Int64) + pl.col("nlb").cast(pl.Int64)
           - pl.col("zone").cast(pl.Int64) * zone_size_lba)
    df = moving.sort("zone", "t_ns", "event").with_columns(
        pl.when(mgmt).then(pl.when(action == "finish").then(zone_cap_lba).otherwise(0))
        .when(is_append).then(0).otherwise(end).alias("_e"),
        pl.when(is_append).then(pl.col("nlb").cast(pl.Int64)).otherwise(0).alias("_a"),
        mgmt.cast(pl.Int64).cum_sum().over("zone").alias("_seg"),
    )
    # wp_i = max(wp_{i-1} + a_i, e_i) within a segment that starts at a reset or finish (its e is the start value):
    # with A the running sum of a, wp_i = A_i + max(0, running max of e_j - A_j).
    df = df.with_columns(pl.col("_a").cum_sum().over("zone", "_seg").alias("_A"))
    df = df.with_columns((pl.col("_A") + pl.max_horizontal(
        pl.lit(0), (pl.col("_e") - pl.col("_A")).cum_max().over("zone", "_seg"))).alias("wp_lba"))
    return df.select("event", "zone", "t_ns", "wp_lba")


def queue_depth(events: pl.DataFrame) -> pl.DataFrame:
    """Commands in flight per hardware queue: columns ctrl, qid, t_ns, depth after each submission (+1) and
    completion (−1), sorted by queue and time; at equal times completions count first."""
    ts = pl.col("ts_ns").cast(pl.Int64)
    sub = events.select("ctrl", "qid", ts.alias("t_ns"), pl.lit(1, pl.Int64).alias("d"))
    done = events.select("ctrl", "qid", (ts + pl.col("lat_ns").cast(pl.Int64)).alias("t_ns"),
                         pl.lit(-1, pl.Int64).alias("d"))
    both = pl.concat([sub, done]).sort("ctrl", "qid", "t_ns", "d")
    return both.select("ctrl", "qid", "t_ns", pl.col("d").cum_sum().over("ctrl", "qid").alias("depth"))


def layer_slices(rows: pl.DataFrame) -> pl.DataFrame:
    """Nested slices of each layer-probe request: columns row (index in `rows`), name, depth, start_ns, end_ns.

    Depth 0 is the request ([ts, ts + max(e2e, sum of the layers)]); the down-path layers with time follow, each
    inside the one before; the completion comes after the device at depth 1. Rows with a negative layer must be
    left out first (analysis/layers.py `clean`)."""
    n = rows.height
    own = (np.column_stack([rows[c].cast(pl.Int64).to_numpy() for c in CHAIN]) if n
           else np.zeros((0, len(CHAIN)), dtype=np.int64))
    ts = rows["ts_ns"].cast(pl.Int64).to_numpy()
    has = own > 0
    start = ts[:, None] + np.cumsum(own, axis=1) - own
    depth = 1 + np.cumsum(has, axis=1) - has
    chain_end = ts + own.sum(axis=1)
    comp = rows["completion_ns"].cast(pl.Int64).to_numpy()
    req_end = np.maximum(ts + rows["e2e_ns"].cast(pl.Int64).to_numpy(), chain_end + comp)
    idx = np.arange(n)
    parts: list[dict[str, Any]] = [
        {"row": idx, "name": np.full(n, "request"), "depth": np.zeros(n, dtype=np.int64), "start_ns": ts,
         "end_ns": req_end}]
    for k, c in enumerate(CHAIN):
        m = has[:, k]
        parts.append({"row": idx[m], "name": np.full(int(m.sum()), LAYER_NAMES[c]), "depth": depth[m, k],
                      "start_ns": start[m, k], "end_ns": chain_end[m]})
    m = comp > 0
    parts.append({"row": idx[m], "name": np.full(int(m.sum()), LAYER_NAMES["completion_ns"]),
                  "depth": np.ones(int(m.sum()), dtype=np.int64), "start_ns": chain_end[m],
                  "end_ns": chain_end[m] + comp[m]})
    frames = [pl.DataFrame(p, schema={"row": pl.Int64, "name": pl.Utf8, "depth": pl.Int64, "start_ns": pl.Int64,
                                      "end_ns": pl.Int64}) for p in parts]
    return pl.concat(frames).sort("row", "start_ns", "depth")
