"""What a zone-to-group table (analysis/conflict_groups.py) means for a captured trace.

- `collision_table`: per time bin, the share of I/O commands issued while another command of the same conflict
  group was in flight, against the share expected if the other in-flight commands fell into groups at random.
- `dispatch_whatif`: FIFO against group-aware dispatch of the trace's I/O commands under a stated device model
  (DispatchModel).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

from ..units import check_limit

IO_OPS = ("read", "write", "zone_append")


def _io(events: pl.DataFrame, groups: Mapping[int, int]) -> tuple[pl.DataFrame, int]:
    """I/O commands with their group; how many I/O commands had a zone the table does not know."""
    table = pl.DataFrame({"zone": list(groups), "group": list(groups.values())},
                         schema={"zone": pl.UInt32, "group": pl.Int64}).filter(pl.col("group") >= 0)
    io = (events.filter(pl.col("op").cast(pl.Utf8).is_in(IO_OPS))
          .select("ts_ns", "lat_ns", "zone", "op", "nlb").sort("ts_ns", maintain_order=True)
          .join(table, on="zone", how="left"))
    unmapped = int(io["group"].null_count())
    return io.filter(pl.col("group").is_not_null()), unmapped


def _others_in_flight(start: np.ndarray, end: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """For each command, how many other commands with the same key were in flight when it was issued (started
    before it, or at the same time and earlier in the trace, and not yet completed)."""
    out = np.zeros(len(start), dtype=np.int64)
    order = np.arange(len(start))
    for k in np.unique(keys):
        idx = order[keys == k]
        s, e = start[idx], np.sort(end[idx])
        began = np.arange(len(idx))  # commands of this key issued earlier (the frame is in issue order)
        done = np.searchsorted(e, s, side="right")
        out[idx] = np.maximum(began - done, 0)
    return out


def collision_table(events: pl.DataFrame, groups: Mapping[int, int], bin_s: float = 1.0
                    ) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Per time bin: I/O commands issued while something else was in flight (`busy`), those issued while
    another command of the same conflict group was in flight (`collide`), of the same zone (`same_zone`), and the
    share you would expect if each other in-flight command fell into a group at random in proportion to the
    groups' traffic (`expected`). Returns the table and run totals."""
    io, unmapped = _io(events, groups)
    if io.is_empty():
        empty = pl.DataFrame(schema={"t_s": pl.Float64, "commands": pl.Int64, "busy": pl.Int64,
                                     "collide": pl.Int64, "same_zone": pl.Int64, "share": pl.Float64,
                                     "expected": pl.Float64})
        return empty, {"commands": 0, "unmapped": unmapped, "share": None, "expected": None}
    start = io["ts_ns"].to_numpy().astype(np.int64)
    end = start + io["lat_ns"].to_numpy().astype(np.int64)
    g = io["group"].to_numpy()
    z = io["zone"].to_numpy()
    total = _others_in_flight(start, end, np.zeros(len(start), dtype=np.int64))
    same_g = _others_in_flight(start, end, g)
    same_z = _others_in_flight(start, end, z)
    keys, counts = np.unique(g, return_counts=True)
    pg = (counts / counts.sum())[np.searchsorted(keys, g)]  # each command's group's share of the traffic
    expected = 1 - (1 - pg) ** total
    t0 = int(start[0])
    frame = pl.DataFrame({"t_s": ((start - t0) / 1e9 // bin_s) * bin_s, "busy": total > 0, "collide": same_g > 0,
                          "same_zone": same_z > 0, "expected": np.where(total > 0, expected, 0.0)})
    per_bin = (frame.group_by("t_s").agg(pl.len().alias("commands"), pl.col("busy").sum(),
                                         pl.col("collide").sum(), pl.col("same_zone").sum(),
                                         pl.col("expected").sum())
               .sort("t_s")
               .with_columns((pl.col("collide") / pl.col("busy")).alias("share"),
                             (pl.col("expected") / pl.col("busy")).alias("expected"))
               .select("t_s", "commands", "busy", "collide", "same_zone", "share", "expected"))
    busy = int((total > 0).sum())
    summary = {"commands": len(start), "unmapped": unmapped, "busy": busy,
               "collide": int((same_g > 0).sum()), "same_zone": int((same_z > 0).sum()),
               "share": round(float((same_g > 0).sum() / busy), 4) if busy else None,
               "expected": round(float(expected[total > 0].mean()), 4) if busy else None,
               "groups": len(set(g.tolist())), "bin_s": bin_s}
    return per_bin, summary


@dataclass(frozen=True)
class DispatchModel:
    """The what-if's device: each conflict group serves one command at a time, for the command's own traced
    latency; at most `queue_depth` commands are dispatched and not completed; commands arrive at their traced
    issue times. FIFO dispatches in arrival order; group-aware dispatch takes, among the first `window` waiting
    commands, the oldest whose group is idle (else the oldest)."""

    queue_depth: int = 32
    window: int = 32
    max_commands: int = 200_000

    def check(self) -> None:
        """Its numbers in their ranges (units.LIMITS)."""
        check_limit("queue-depth", self.queue_depth)
        check_limit("dispatch-window", self.window, "--window")
        check_limit("max-commands", self.max_commands)


def _simulate(arrive: np.ndarray, service: np.ndarray, group: np.ndarray, model: DispatchModel,
              aware: bool) -> dict[str, Any]:
    n = len(arrive)
    waiting: deque[int] = deque()
    busy_until: dict[int, float] = {}
    group_queue: dict[int, int] = {}
    in_flight: list[tuple[float, int]] = []  # (completion, index)
    done = np.zeros(n)
    nxt, t, dispatched, collide = 0, float(arrive[0]) if n else 0.0, 0, 0
    while dispatched < n or in_flight:
        while nxt < n and arrive[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        while waiting and len(in_flight) < model.queue_depth:
            pick = 0
            if aware:
                for k in range(min(model.window, len(waiting))):
                    if busy_until.get(int(group[waiting[k]]), -1.0) <= t:
                        pick = k
                        break
            i = waiting[pick]
            del waiting[pick]
            gi = int(group[i])
            begin = max(t, busy_until.get(gi, -1.0))
            if group_queue.get(gi, 0) > 0:
                collide += 1
            finish = begin + float(service[i])
            busy_until[gi] = finish
            group_queue[gi] = group_queue.get(gi, 0) + 1
            heapq.heappush(in_flight, (finish, i))
            dispatched += 1
        candidates = []
        if in_flight:
            candidates.append(in_flight[0][0])
        if nxt < n:
            candidates.append(float(arrive[nxt]))
        if not candidates:
            break
        t = min(candidates)
        while in_flight and in_flight[0][0] <= t:
            fin, i = heapq.heappop(in_flight)
            done[i] = fin
            group_queue[int(group[i])] -= 1
    lat = done - arrive
    span = float(done.max() - arrive[0]) if n else 0.0
    return {"makespan_s": span / 1e9, "mean_latency_us": float(lat.mean()) / 1e3,
            "p99_latency_us": float(np.percentile(lat, 99)) / 1e3,
            "p999_latency_us": float(np.percentile(lat, 99.9)) / 1e3,
            "dispatched_to_busy_group": collide / n if n else None}


def dispatch_whatif(events: pl.DataFrame, groups: Mapping[int, int], model: DispatchModel = DispatchModel()
                    ) -> dict[str, Any]:
    """FIFO against group-aware dispatch of the trace's I/O commands under `model` (see DispatchModel)."""
    io, unmapped = _io(events, groups)
    total = io.height
    used = min(total, model.max_commands)
    io = io.head(used)
    if io.is_empty():
        return {"commands": 0, "unmapped": unmapped, "model": asdict(model)}
    arrive = io["ts_ns"].to_numpy().astype(float)
    service = io["lat_ns"].to_numpy().astype(float)
    group = io["group"].to_numpy()
    fifo = _simulate(arrive, service, group, model, aware=False)
    aware = _simulate(arrive, service, group, model, aware=True)
    gain = fifo["makespan_s"] / aware["makespan_s"] if aware["makespan_s"] else None
    return {"commands": used, "unmapped": unmapped, "left_out": total - used,
            "model": asdict(model), "fifo": fifo, "group_aware": aware,
            "makespan_gain": round(gain, 4) if gain else None,
            "p999_gain": round(fifo["p999_latency_us"] / aware["p999_latency_us"], 4)
            if aware["p999_latency_us"] else None}
