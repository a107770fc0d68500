"""Zone resets in a trace, and a what-if of FAR (free-space adaptive runtime zone reset) against eager reset.

`reset_table` lists every zone reset (zone_mgmt_send with zone action reset, or reset of all zones) with the
zone's write pointer at that moment, how full the zone was, the device's free space, the reset's latency and the
time since the zone filled. The write pointer comes from the trace itself: in a sequential-write-required zone a
write's start offset is the write pointer, a write moves it to its end, an append adds its length, a reset empties
the zone, a finish fills it. Before a zone's first write the zone report taken at the start of the workload
(raw/zones.txt) gives its state; a zone neither written nor reported is taken as empty.

`far_replay` replays the run's zone life cycles (each zone's data between two resets) under two runtime-reset
policies. A block trace cannot know which data is invalid: the replay assumes the data of a life cycle becomes
invalid, all at once, when the traced host reset that zone, and that data never reset stays valid. It keeps the
run's write volume, order and those invalidation moments, and places each life cycle's data with a simple
allocator (one zone at a time per life cycle; a new life cycle takes a zone whose data is all invalid but that
still has room when the policy left one, else an empty zone):

- eager: a zone is reset as soon as all its data is invalid (what ZenFS's runtime reset does);
- FAR: such a zone is reset only when its write pointer has reached T_wp, which is the zone end while the free
  share is above T and a linear function of the free share below it (FarParams); otherwise it is kept, and later
  data fills the rest of it before it is erased.

Every reset is one erase of the zone's blocks; erases saved = eager's resets minus FAR's. When neither an empty
zone nor a reusable one is left, the replay resets a fully invalid zone regardless of the policy (counted as
forced; the real host would clean zones there), and counts bytes it could not place (out_of_space).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import polars as pl

from .. import devices
from .device_params import FarParams

SERIES_POINTS = 2000


def reset_cost_note(backend: str | None) -> str:
    """What a reset's latency means on the run's device (meta.json "backend"; each device's text is in devices/)."""
    dev = devices.find(backend)
    return dev.reset_note if dev else f"backend {backend!r}: unknown cost model of a reset"


# ---- the zone report (blkzone report) ---------------------------------------------------------------------------
_ZONE_RE = re.compile(r"start:\s*(0x[0-9a-f]+),\s*len\s*(0x[0-9a-f]+),\s*(?:cap\s*(0x[0-9a-f]+),\s*)?"
                      r"wptr\s*(0x[0-9a-f]+)", re.I)


def parse_zone_report(text: str, zone_size_lba: int, lba_bytes: int) -> dict[int, int]:
    """blkzone report -> {zone: write pointer in LBAs from the zone start}. blkzone prints 512-byte sectors."""
    out: dict[int, int] = {}
    per_lba = lba_bytes // 512
    for line in text.splitlines():
        m = _ZONE_RE.search(line)
        if not m:
            continue
        start, wp = int(m.group(1), 16), int(m.group(4), 16)
        zone = start // per_lba // zone_size_lba
        out[zone] = wp // per_lba
    return out


# ---- the reset table ----------------------------------------------------------------------------------------
WP_OPS = ("write", "zone_append", "zone_mgmt_send")


@dataclass
class _Zones:
    """Write pointers (LBAs) of every zone while walking the trace."""

    nr: int
    cap: int
    wp: np.ndarray
    full_at: dict[int, int] = field(default_factory=dict)
    source: dict[int, str] = field(default_factory=dict)

    def used(self) -> int:
        return int(np.minimum(self.wp, self.cap).sum())

    def free_share(self) -> float:
        return 1 - self.used() / (self.nr * self.cap)

    def set(self, z: int, wp: int, t_done: int) -> None:
        if 0 <= z < self.nr:
            was_full = self.wp[z] >= self.cap
            self.wp[z] = wp
            if wp >= self.cap and not was_full:
                self.full_at[z] = t_done
            elif wp < self.cap:
                self.full_at.pop(z, None)


def _start_state(ev: pl.DataFrame, nr: int, zsz: int, cap: int, report: Mapping[int, int] | None) -> _Zones:
    """Each zone's write pointer before the trace. A zone the trace writes before any reset: its first write's
    offset (exact: a sequential zone is written at its write pointer). A zone the trace does not touch: the zone
    report (taken when the workload started; such a zone did not change), else empty. A zone whose first traced
    command is a reset or an append: unknown, counted as empty for the free space."""
    wp = np.zeros(nr, dtype=np.int64)
    source = {z: "empty" for z in range(nr)}
    for z, w in (report or {}).items():
        if 0 <= z < nr:
            wp[z], source[z] = w, "report"
    firsts = ev.filter(pl.col("zone") < nr).group_by("zone", maintain_order=True).first()
    for z, op, slba in firsts.select("zone", "op", "slba").iter_rows():
        if op == "write":
            wp[z], source[z] = int(slba) - z * zsz, "first_write"
        else:
            wp[z], source[z] = 0, "unknown"
    st = _Zones(nr, cap, wp, source=source)
    for z in range(nr):
        if wp[z] >= cap:
            st.full_at[z] = -1  # full before the trace
    return st


def reset_table(events: pl.DataFrame, meta: Mapping[str, Any], report: Mapping[int, int] | None = None
                ) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Every zone reset of the trace with its zone state (see the module doc), and the run's totals."""
    nr, zsz, cap = int(meta["nr_zones"]), int(meta["zone_size_lba"]), int(meta["zone_cap_lba"])
    lba = int(meta["lba_bytes"])
    ev = (events.filter(pl.col("op").cast(pl.Utf8).is_in(WP_OPS))
          .select("ts_ns", "lat_ns", "op", "slba", "nlb", "zone_action", "status", "zone")
          .with_columns(pl.col("op").cast(pl.Utf8), pl.col("zone_action").cast(pl.Utf8)))
    st = _start_state(ev, nr, zsz, cap, report)
    t0 = int(events["ts_ns"].min()) if events.height else 0
    t1 = int(events["ts_ns"].max()) if events.height else 0
    rows: list[dict[str, Any]] = []
    skipped = {"failed": 0, "beyond_device": 0}
    for ts, lat, op, slba, nlb, action, status, z in ev.iter_rows():
        done = int(ts) + int(lat)
        if status != 0:
            skipped["failed"] += 1
            continue
        if op != "zone_mgmt_send" and z >= nr:
            skipped["beyond_device"] += 1
            continue
        if op == "write":
            st.set(z, max(int(st.wp[z]), int(slba) - z * zsz + int(nlb)), done)
        elif op == "zone_append":
            st.set(z, int(st.wp[z]) + int(nlb), done)
        elif action in ("reset", "reset_all"):
            targets = range(nr) if action == "reset_all" else [z]
            free = st.free_share()
            for t in targets:
                if t >= nr:
                    skipped["beyond_device"] += 1
                    continue
                known = st.source.get(t) != "unknown"
                w = int(st.wp[t])
                full_at = st.full_at.get(t)
                rows.append({
                    "t_s": (int(ts) - t0) / 1e9, "zone": t, "wp_lba": w if known else None,
                    "wp_mib": w * lba / (1 << 20) if known else None,
                    "fullness": min(w, cap) / cap if known else None, "free_share": free, "lat_us": int(lat) / 1e3,
                    "since_full_s": None if full_at is None else ((int(ts) - full_at) / 1e9 if full_at >= 0
                                                                  else math.nan),
                    "all": action == "reset_all", "wp_from": st.source.get(t, "empty")})
                st.set(t, 0, done)
                st.source[t] = "trace"
        elif action == "finish":
            st.set(z, cap, done)
            st.source[z] = "trace"
        if op == "write" and 0 <= z < nr:
            st.source[z] = "trace"  # a write's offset is the write pointer: known from here on
    schema = {"t_s": pl.Float64, "zone": pl.UInt32, "wp_lba": pl.Int64, "wp_mib": pl.Float64,
              "fullness": pl.Float64, "free_share": pl.Float64, "lat_us": pl.Float64, "since_full_s": pl.Float64,
              "all": pl.Boolean, "wp_from": pl.Utf8}
    table = pl.DataFrame(rows, schema=schema)
    return table, reset_summary(table, (t1 - t0) / 1e9, meta, skipped)


def reset_summary(table: pl.DataFrame, duration_s: float, meta: Mapping[str, Any],
                  skipped: Mapping[str, int]) -> dict[str, Any]:
    n = table.height
    backend = meta.get("backend")
    out: dict[str, Any] = {"resets": n, "duration_s": round(duration_s, 3),
                           "resets_per_s": round(n / duration_s, 3) if duration_s > 0 else None,
                           "zones_reset": int(table["zone"].n_unique()) if n else 0, "skipped": dict(skipped),
                           "backend": backend, "latency_means": reset_cost_note(backend)}
    if n:
        lat = table["lat_us"]
        full = table["fullness"]
        out.update(
            lat_p50_us=round(float(lat.quantile(0.5, "nearest")), 1),
            lat_p99_us=round(float(lat.quantile(0.99, "nearest")), 1), lat_max_us=round(float(lat.max()), 1),
            empty_resets=int((table["wp_lba"] == 0).sum()), full_resets=int((full >= 1).sum()),
            partial_resets=int(((full > 0) & (full < 1)).sum()), unknown_wp_resets=int(full.null_count()),
            mean_fullness=round(float(full.mean()), 4) if full.null_count() < n else None,
            mean_free_share=round(float(table["free_share"].mean()), 4),
            per_zone=(table.group_by("zone").agg(pl.len().alias("resets"), pl.col("fullness").mean())
                      .sort("zone").to_dicts()))
    return out


# ---- FAR what-if ------------------------------------------------------------------------------------------------
@dataclass
class _Sim:
    nr: int
    cap: int  # bytes
    params: FarParams | None  # None = eager
    wp: list[int] = field(init=False)
    valid: list[dict[int, int]] = field(init=False)  # zone -> {life cycle: valid bytes}
    kept: set[int] = field(default_factory=set)  # all data invalid, not reset, room left (FAR)
    open: dict[int, int] = field(default_factory=dict)  # life cycle -> zone it writes into
    resets: int = 0
    deferred: int = 0
    deferred_zones: set[int] = field(default_factory=set)
    forced: int = 0
    out_of_space: int = 0
    written: int = 0
    series: list[tuple[float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.wp = [0] * self.nr
        self.valid = [{} for _ in range(self.nr)]

    def free_share(self) -> float:
        return 1 - sum(min(w, self.cap) for w in self.wp) / (self.nr * self.cap)

    def _reset(self, z: int) -> None:
        self.wp[z] = 0
        self.valid[z] = {}
        self.kept.discard(z)
        self.resets += 1

    def consider(self, z: int) -> None:
        """All data of zone z is invalid: reset it now (eager, or FAR with wp >= T_wp) or keep it (FAR)."""
        if self.wp[z] == 0 or any(self.valid[z].values()):
            return
        if z in self.open.values():
            return
        if self.params is None or self.wp[z] >= self.params.threshold(self.free_share()) * self.cap:
            self._reset(z)
        elif z not in self.kept:
            self.kept.add(z)
            self.deferred += 1
            self.deferred_zones.add(z)

    def recheck(self) -> None:
        if self.params is not None:
            for z in sorted(self.kept):
                self.consider(z)

    def _take_zone(self) -> int | None:
        if self.kept:
            z = min(self.kept, key=lambda k: (-self.wp[k], k))  # the fullest kept zone: it is closest to erase
            self.kept.discard(z)
            return z
        for z in range(self.nr):
            if self.wp[z] == 0 and z not in self.open.values():
                return z
        invalid = [z for z in range(self.nr) if self.wp[z] > 0 and not any(self.valid[z].values())
                   and z not in self.open.values()]
        if invalid:
            z = max(invalid, key=lambda k: self.wp[k])
            self._reset(z)
            self.forced += 1
            return z
        return None

    def write(self, cycle: int, nbytes: int) -> None:
        while nbytes > 0:
            z = self.open.get(cycle)
            if z is None or self.wp[z] >= self.cap:
                z = self._take_zone()
                if z is None:
                    self.out_of_space += nbytes
                    return
                self.open[cycle] = z
            n = min(nbytes, self.cap - self.wp[z])
            self.wp[z] += n
            self.valid[z][cycle] = self.valid[z].get(cycle, 0) + n
            self.written += n
            nbytes -= n

    def invalidate(self, cycle: int) -> None:
        zones = [z for z in range(self.nr) if cycle in self.valid[z]]
        for z in zones:
            del self.valid[z][cycle]
        self.open.pop(cycle, None)
        for z in zones:
            self.consider(z)

    def result(self) -> dict[str, Any]:
        erases = self.resets
        return {"resets": self.resets, "forced_resets": self.forced, "deferred": self.deferred,
                "written_bytes": self.written,
                "zones_deferred": len(self.deferred_zones), "kept_at_end": len(self.kept),
                "written_mib": round(self.written / (1 << 20), 3),
                "mib_per_erase": round(self.written / (1 << 20) / erases, 3) if erases else None,
                "out_of_space_mib": round(self.out_of_space / (1 << 20), 3),
                "final_free_share": round(self.free_share(), 4)}


def life_cycles(events: pl.DataFrame, meta: Mapping[str, Any], report: Mapping[int, int] | None = None
                ) -> tuple[pl.DataFrame, pl.DataFrame, dict[int, int]]:
    """The trace as life cycles: (write chunks: t_s, cycle, bytes), (invalidations: t_s, cycle) and the bytes
    each zone held before the trace (cycle id = zone x 1,000,000 + the zone's reset count before it)."""
    nr, zsz, lba = int(meta["nr_zones"]), int(meta["zone_size_lba"]), int(meta["lba_bytes"])
    ev = (events.filter(pl.col("op").cast(pl.Utf8).is_in(WP_OPS) & (pl.col("status") == 0))
          .select("ts_ns", "op", "slba", "nlb", "zone_action", "zone")
          .with_columns(pl.col("op").cast(pl.Utf8), pl.col("zone_action").cast(pl.Utf8)))
    st = _start_state(ev, nr, zsz, int(meta["zone_cap_lba"]), report)
    initial = {z: int(st.wp[z]) * lba for z in range(nr) if st.wp[z] > 0}
    t0 = int(events["ts_ns"].min()) if events.height else 0
    gen = [0] * nr
    writes: list[tuple[float, int, int]] = []
    inval: list[tuple[float, int]] = []
    for ts, op, _slba, nlb, action, z in ev.iter_rows():
        t = (int(ts) - t0) / 1e9
        if op in ("write", "zone_append"):
            if 0 <= z < nr:
                writes.append((t, z * 1_000_000 + gen[z], int(nlb) * lba))
        elif action in ("reset", "reset_all"):
            for tz in (range(nr) if action == "reset_all" else [z]):
                if 0 <= tz < nr:
                    inval.append((t, tz * 1_000_000 + gen[tz]))
                    gen[tz] += 1
    w = pl.DataFrame(writes, schema={"t_s": pl.Float64, "cycle": pl.Int64, "bytes": pl.Int64}, orient="row")
    i = pl.DataFrame(inval, schema={"t_s": pl.Float64, "cycle": pl.Int64}, orient="row")
    return w, i, initial


def _replay(writes: pl.DataFrame, inval: pl.DataFrame, initial: Mapping[int, int], nr: int, cap: int,
            params: FarParams | None) -> dict[str, Any]:
    sim = _Sim(nr, cap, params)
    for z, b in initial.items():  # data from before the trace: its life cycle continues in its own zone
        sim.wp[z] = b
        sim.valid[z][z * 1_000_000] = b
        sim.open[z * 1_000_000] = z
    w_t, w_c, w_b = writes["t_s"].to_list(), writes["cycle"].to_list(), writes["bytes"].to_list()
    events = sorted([(t, 0, i) for i, t in enumerate(w_t)] + [(t, 1, c) for t, c in inval.iter_rows()])
    step = max(1, len(events) // SERIES_POINTS)
    pending: dict[int, int] = {}

    def flush(t: float) -> None:
        for c, b in pending.items():
            sim.write(c, b)
        pending.clear()
        sim.recheck()
        sim.series.append((t, sim.free_share()))

    for k, (t, kind, x) in enumerate(events):
        if kind == 0:  # writes are merged per life cycle until the next invalidation or sample
            pending[w_c[x]] = pending.get(w_c[x], 0) + w_b[x]
            if k % step == 0:
                flush(t)
        else:
            flush(t)
            sim.invalidate(x)
            sim.recheck()
            sim.series.append((t, sim.free_share()))
    if events:
        flush(events[-1][0])
    res = sim.result()
    res["free_series"] = sim.series
    return res


def far_replay(events: pl.DataFrame, meta: Mapping[str, Any], params: FarParams = FarParams(),
               report: Mapping[int, int] | None = None) -> dict[str, Any]:
    """Eager runtime reset against FAR over the run's life cycles (module doc: model and assumptions)."""
    nr, cap = int(meta["nr_zones"]), int(meta["zone_cap_lba"]) * int(meta["lba_bytes"])
    writes, inval, initial = life_cycles(events, meta, report)
    return far_compare(writes, inval, initial, nr, cap, params) | {
        "traced_resets": inval.height, "life_cycles": int(writes["cycle"].n_unique()) if writes.height else 0}


def far_compare(writes: pl.DataFrame, inval: pl.DataFrame, initial: Mapping[int, int], nr: int, cap: int,
                params: FarParams = FarParams()) -> dict[str, Any]:
    """Both replays of the same life cycles, and what FAR saves."""
    eager = _replay(writes, inval, initial, nr, cap, None)
    far = _replay(writes, inval, initial, nr, cap, params)
    saved = eager["resets"] - far["resets"]
    return {"params": asdict(params), "eager": eager, "far": far, "erases_saved": saved,
            "erases_saved_share": round(saved / eager["resets"], 4) if eager["resets"] else None,
            "lifetime_gain": round(eager["resets"] / far["resets"], 4) if far["resets"] else None,
            "assumes": "data of a life cycle turns invalid when the traced host resets its zone; data never reset "
                       "stays valid; each life cycle's data is written in trace order into zones of its own"}
