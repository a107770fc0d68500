"""Fragmentation per zone — contiguous fragments read and written, and the gaps between them.

For each zone and each direction (read; write = write + write_zeroes), take the LBA ranges [slba, slba + nlb) that
the run touched, merge overlapping and adjacent ranges, and count the resulting contiguous fragments. The gaps are
the untouched LBA ranges between consecutive fragments of the same zone. A zone written once from its start has one
write fragment and no gap; a zone read at scattered 4 KiB pages has many read fragments separated by gaps whose
size tells how far apart the reads land. Zone appends are not placed (their LBA is chosen by the device and the
trace holds only the zone start), so they are counted, not fragmented. See docs/metrics.md.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import polars as pl

DIRECTIONS: dict[str, tuple[str, ...]] = {"read": ("read",), "write": ("write", "write_zeroes")}


def fragments(events: pl.DataFrame, ops: tuple[str, ...]) -> pl.DataFrame:
    """Merged contiguous fragments per zone: zone, start LBA, end LBA (exclusive), gap before it (LBAs)."""
    ev = (events.filter(pl.col("op").is_in(list(ops)) & (pl.col("nlb") > 0))
          .select("zone", pl.col("slba").cast(pl.Int64).alias("start"),
                  (pl.col("slba").cast(pl.Int64) + pl.col("nlb").cast(pl.Int64)).alias("end"))
          .sort("zone", "start"))
    if ev.height == 0:
        return pl.DataFrame(schema={"zone": pl.UInt32, "start": pl.Int64, "end": pl.Int64, "gap": pl.Int64})
    reach = pl.col("end").cum_max().shift(1).over("zone")  # furthest end seen before this range in the zone
    ev = ev.with_columns(reach.alias("_reach"))
    ev = ev.with_columns(
        (pl.col("_reach").is_null() | (pl.col("start") > pl.col("_reach"))).alias("_new"),
    ).with_columns(pl.col("_new").cast(pl.UInt32).cum_sum().alias("_frag"))
    return (ev.group_by("zone", "_frag", maintain_order=True)
            .agg(pl.col("start").first(), pl.col("end").max(),
                 (pl.col("start").first() - pl.col("_reach").first()).alias("gap"))
            .drop("_frag"))


NLB_BITS = 24  # sort key = slba << 24 | nlb: one int64 sort orders the ranges by start, then length


@numba.njit(cache=True)
def zone_fragments(start: np.ndarray, end: np.ndarray, zones: np.ndarray, n_zones: int) -> np.ndarray:
    """Per zone: fragments, LBAs covered, gaps, gap LBAs summed, largest gap.

    The ranges [start, end) come sorted by start (then end), `zones` the zone of each. A range joins the fragment
    before it when both are in one zone and it starts at or before the fragment's end (they touch or overlap).
    Fragments already merged give their own figures back, so the streamed path can merge part by part first.
    """
    out = np.zeros((n_zones, 5), dtype=np.int64)
    cur_zone = -1
    f_start = 0
    reach = 0
    for i in range(start.size):
        z = zones[i]
        if z != cur_zone or start[i] > reach:
            if cur_zone >= 0:
                out[cur_zone, 1] += reach - f_start  # close the previous fragment
            if z == cur_zone:
                gap = start[i] - reach
                out[z, 2] += 1
                out[z, 3] += gap
                if gap > out[z, 4]:
                    out[z, 4] = gap
            out[z, 0] += 1
            cur_zone = z
            f_start = start[i]
            reach = end[i]
        elif end[i] > reach:
            reach = end[i]
    if cur_zone >= 0:
        out[cur_zone, 1] += reach - f_start
    return out


def _sorted_ranges(ev: pl.DataFrame, zone_size_lba: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ranges sorted by start then length (one int64 sort of slba << NLB_BITS | nlb): start, end, zone."""
    slba = ev["slba"].to_numpy().astype(np.int64)
    nlb = np.minimum(ev["nlb"].to_numpy().astype(np.int64), (1 << NLB_BITS) - 1)
    keys = (slba << NLB_BITS) | nlb
    if zone_size_lba:
        keys = np.sort(keys)
        zones = (keys >> NLB_BITS) // zone_size_lba
    else:
        order = np.argsort(keys, kind="stable")
        keys, zones = keys[order], ev["zone"].to_numpy().astype(np.int64)[order]
    start = keys >> NLB_BITS
    return start, start + (keys & ((1 << NLB_BITS) - 1)), zones


def table_zones(nr_zones: int, seen: np.ndarray) -> np.ndarray:
    """The zone ids of a per-zone table, sorted: every zone of the device, then those beyond it that the trace
    addresses (a stray command far beyond the device adds one row, not a row for every zone up to it)."""
    extra = np.unique(seen[seen >= nr_zones]).astype(np.int64)
    return np.concatenate([np.arange(nr_zones, dtype=np.int64), extra])


def table_rows(zones: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The row of each zone in a table of zone ids `ids` (table_zones): the zone itself when there is no gap."""
    return zones if ids.size == 0 or ids[-1] == ids.size - 1 else np.searchsorted(ids, zones)


def frag_table(events: pl.DataFrame, nr_zones: int, lba_bytes: int, zone_size_lba: int | None = None
               ) -> pl.DataFrame:
    """One row per zone of the device, and per zone beyond it that the trace addresses, with the read and write
    fragment and gap figures (bytes).

    Zones without a gap have null gap statistics. Pass zone_size_lba (meta.json) for the fast path.
    """
    ids = table_zones(nr_zones, events["zone"].to_numpy())
    stats = {}
    for d, ops in DIRECTIONS.items():
        ev = events.filter(pl.col("op").is_in(list(ops)) & (pl.col("nlb") > 0))
        start, end, zones = _sorted_ranges(ev, zone_size_lba)
        stats[d] = zone_fragments(start, end, table_rows(zones, ids), ids.size)
    app = events.filter(pl.col("op") == "zone_append")["zone"].to_numpy().astype(np.int64)
    return frag_frame(stats, np.bincount(table_rows(app, ids), minlength=ids.size), ids, lba_bytes)


def frag_frame(stats: dict[str, np.ndarray], appends: np.ndarray, ids: np.ndarray, lba_bytes: int) -> pl.DataFrame:
    """The per-zone table from each direction's zone_fragments figures and the appends per zone; `ids`: the zone
    of each row."""
    cols: dict[str, np.ndarray] = {}
    for d in DIRECTIONS:
        frags, covered, gaps, gap_sum, gap_max = stats[d].T
        cols[f"{d}_fragments"] = frags.astype(np.uint64)
        cols[f"{d}_bytes_covered"] = (covered * lba_bytes).astype(np.uint64)
        cols[f"{d}_gaps"] = gaps.astype(np.uint64)
        cols[f"{d}_gap_bytes_mean"] = gap_sum / np.maximum(gaps, 1) * lba_bytes
        cols[f"{d}_gap_bytes_max"] = (gap_max * lba_bytes).astype(np.uint64)
    df = pl.DataFrame({"zone": ids.astype(np.uint32), **cols, "appends": appends.astype(np.uint64)})
    return df.with_columns(
        pl.when(pl.col(f"{d}_gaps") > 0).then(pl.col(c)).otherwise(None).alias(c)
        for d in DIRECTIONS for c in (f"{d}_gap_bytes_mean", f"{d}_gap_bytes_max"))


def frag_summary(table: pl.DataFrame) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for d in DIRECTIONS:
        touched = table.filter(pl.col(f"{d}_fragments") > 0)
        res[d] = {
            "zones_touched": touched.height,
            "fragments": int(touched[f"{d}_fragments"].sum()) if touched.height else 0,
            "fragments_per_zone_mean": float(touched[f"{d}_fragments"].mean()) if touched.height else 0.0,
            "fragments_per_zone_max": int(touched[f"{d}_fragments"].max()) if touched.height else 0,
        }
    return res
