"""NVMeVirt's read path replayed on a trace: its cache request by request, each read's predicted device time, a
summary by zone class, and the split of a change in mean service time into what the cache hits explain and what
the fork's listed-zone shortcut explains (analysis/device_model.py has the closed-form model and its sources).

The cache is replayed exactly (analysis/cache_policies.SegmentedLRU, `sticky`: checked against the fork's own list
code compiled outside the kernel): keys are the reads' start LBAs in submission order (the dispatcher takes
commands as they are submitted and asks the cache before it times them), priority 1 = segment kept longer. A
prediction leaves queueing out — the die an earlier read holds (the NAND model serves a die's reads one at a time
in dispatch order, and a read holds its die from its own firmware time's end), channel and PCIe contention, and
the emulator's own dispatch time (its threads under TCG) — so a measured latency is the prediction plus those.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from ..errors import ZtbpError
from .cache_policies import SegmentedLRU
from .device_model import (
    CACHE_ENTRIES,
    SECTOR_BYTES,
    SMALL_BYTES,
    Profile,
    firmware_ns,
    profile,
    read_chunks,
    service_ns,
)

#: NVMeVirt's zones as the project builds it: 32 MiB of 512-byte LBAs
ZONE_LBAS = (32 << 20) // SECTOR_BYTES
CLASSES = ("listed", "other")


class DeviceCache:
    """The fork's read cache across calls: start LBA -> entry, priority kept from insertion. Pass one to several
    predict_service calls to carry the device's cache from one arm into the next (the module keeps it across
    SET and STOP; only unloading it empties it)."""

    def __init__(self, entries: int = CACHE_ENTRIES) -> None:
        self.lru = SegmentedLRU(entries, sticky=True)
        self.keys = np.zeros(0, dtype=np.int64)  # sorted known keys
        self.ids = np.zeros(0, dtype=np.int64)  # their dense ids

    def _dense(self, keys: np.ndarray) -> np.ndarray:
        uniq, inv = np.unique(keys, return_inverse=True)
        pos = np.searchsorted(self.keys, uniq)
        known = (pos < self.keys.size) & (self.keys[np.minimum(pos, self.keys.size - 1)] == uniq) \
            if self.keys.size else np.zeros(uniq.size, dtype=np.bool_)
        uid = np.empty(uniq.size, dtype=np.int64)
        uid[known] = self.ids[pos[known]]
        fresh = ~known
        uid[fresh] = self.ids.size + np.arange(int(fresh.sum()))
        allk, allid = np.concatenate([self.keys, uniq[fresh]]), np.concatenate([self.ids, uid[fresh]])
        order = np.argsort(allk, kind="stable")
        self.keys, self.ids = allk[order], allid[order]
        return uid[inv.reshape(-1)]

    def replay(self, slba: np.ndarray, priority1: np.ndarray) -> np.ndarray:
        """Whether each read (start LBA, in dispatch order) hits; misses enter with priority 1 where priority1."""
        keys = (slba.astype(np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)  # the key is the LBA as a C int
        return self.lru.feed_hits(self._dense(keys), priority1.astype(np.bool_))


def reads_in_dispatch_order(events: pl.DataFrame, zone_lbas: int) -> pl.DataFrame:
    """The successful data reads of a trace in submission order (ties in trace order), with their zone."""
    reads = events.filter((pl.col("op") == "read") & (pl.col("nlb") > 0))
    if "status" in reads.columns:
        reads = reads.filter(pl.col("status") == 0)
    cols = ["ts_ns", "slba", "nlb"] + [c for c in ("lat_ns",) if c in reads.columns]
    return (reads.select(cols).with_row_index("row").sort("ts_ns", "row", maintain_order=True)
            .with_columns((pl.col("slba") // zone_lbas).alias("zone")))


def _service_table(p: Profile, keys: pl.DataFrame, zone_lbas: int) -> pl.DataFrame:
    """Device time parts of each distinct (placement, size, firmware time)."""
    rows = []
    for off, nlb, fw in keys.iter_rows():
        s = service_ns(p, fw, read_chunks(p, off, nlb, zone_lbas), nlb * SECTOR_BYTES)
        rows.append((off, nlb, fw, s.nand, s.pcie, s.total))
    return pl.DataFrame(rows, schema={"off": pl.Int64, "nlb": pl.Int64, "fw_ns": pl.Int64, "nand_ns": pl.Int64,
                                      "pcie_ns": pl.Int64, "total_ns": pl.Int64}, orient="row")


def _timed(p: Profile, df: pl.DataFrame, fw_col: str, zone_lbas: int) -> pl.DataFrame:
    """Each read's device time (ns) with the firmware time in fw_col: computed once per distinct placement within
    its die pattern (its offset in the one-shot page, or its whole offset when it crosses into the next zone)."""
    oneshot = p.oneshot_page // SECTOR_BYTES
    off_in_zone = pl.col("slba") % zone_lbas
    crosses = off_in_zone + pl.col("nlb") > zone_lbas
    base = df.select(pl.when(crosses).then(off_in_zone).otherwise(off_in_zone % oneshot).alias("off"),
                     pl.col("nlb").cast(pl.Int64), pl.col(fw_col).alias("fw_ns"))
    table = _service_table(p, base.unique(), zone_lbas)
    return base.join(table, on=["off", "nlb", "fw_ns"], how="left", maintain_order="left")


def _firmware(p: Profile, listed: np.ndarray, small: np.ndarray, *, hit: bool, cluster_on: bool) -> np.ndarray:
    """firmware_ns of each read (ns), hit or missing as told."""
    t = {(li, sm): firmware_ns(p, li, hit, cluster_on, sm) for li in (False, True) for sm in (False, True)}
    return np.where(listed, np.where(small, t[True, True], t[True, False]),
                    np.where(small, t[False, True], t[False, False])).astype(np.int64)


def predict_service(events: pl.DataFrame, listed: Sequence[int], cluster_on: bool, profile_name: str = "zn540",
                    slow: int = 1, cache_entries: int = CACHE_ENTRIES, *, zone_lbas: int = ZONE_LBAS,
                    cache: DeviceCache | None = None) -> pl.DataFrame:
    """Each read of `events` with its predicted device time on NVMeVirt (`profile_name` built with --slow `slow`),
    the cluster check on (after SET of `listed`) or off, the cache replayed from `cache` (default: empty, of
    `cache_entries`). Columns: ts_ns, slba, nlb, zone, lat_us (measured, when the trace has it), listed (zone in
    `listed`, whatever the check), class, hit, small, fw_us, nand_us (NAND reads and channel, slowest die),
    pcie_us, service_us (no queueing), and for the decomposition hit_us / miss_real_us (what this read would cost
    as a hit / as a miss on a drive whose listed-zone misses cost like any miss) and real_us (its actual hit or
    miss at those prices)."""
    p = profile(profile_name, slow)
    if zone_lbas <= 0:
        raise ZtbpError(f"zone size {zone_lbas} LBAs: give a positive zone size")
    reads = reads_in_dispatch_order(events, zone_lbas)
    is_listed = reads["zone"].is_in(list(listed)).to_numpy()
    cache = cache if cache is not None else DeviceCache(cache_entries)
    hit = cache.replay(reads["slba"].to_numpy(), is_listed if cluster_on else np.ones(reads.height, dtype=np.bool_))
    small = (reads["nlb"].to_numpy().astype(np.int64) * SECTOR_BYTES) <= SMALL_BYTES
    fw = {name: _firmware(p, is_listed, small, hit=h, cluster_on=on)
          for name, h, on in (("fw_hit", True, cluster_on), ("fw_miss", False, cluster_on),
                              ("fw_miss_real", False, False))}
    df = reads.with_columns(pl.Series("listed", is_listed, pl.Boolean), pl.Series("hit", hit, pl.Boolean),
                            pl.Series("small", small, pl.Boolean),
                            *[pl.Series(k, v, pl.Int64) for k, v in fw.items()])
    df = df.with_columns(pl.when(pl.col("hit")).then(pl.col("fw_hit")).otherwise(pl.col("fw_miss")).alias("fw"))
    actual = _timed(p, df, "fw", zone_lbas)
    as_hit = _timed(p, df, "fw_hit", zone_lbas)["total_ns"]
    as_miss_real = _timed(p, df, "fw_miss_real", zone_lbas)["total_ns"]
    us = 1 / 1000
    out = df.select(
        "ts_ns", "slba", "nlb", "zone",
        *([(pl.col("lat_ns") * us).alias("lat_us")] if "lat_ns" in df.columns else []),
        "listed", pl.when(pl.col("listed")).then(pl.lit(CLASSES[0])).otherwise(pl.lit(CLASSES[1])).alias("class"),
        "hit", "small", (pl.col("fw") * us).alias("fw_us"))
    return out.with_columns(
        (actual["nand_ns"] * us).alias("nand_us"), (actual["pcie_ns"] * us).alias("pcie_us"),
        (actual["total_ns"] * us).alias("service_us"), (as_hit * us).alias("hit_us"),
        (as_miss_real * us).alias("miss_real_us")).with_columns(
        pl.when(pl.col("hit")).then(pl.col("hit_us")).otherwise(pl.col("miss_real_us")).alias("real_us"))


def _summary(df: pl.DataFrame) -> dict[str, Any]:
    if df.height == 0:
        return {"reads": 0, "hits": 0, "hit_ratio": None, "mean_us": None, "p50_us": None}
    out: dict[str, Any] = {"reads": df.height, "hits": int(df["hit"].sum()),
                           "hit_ratio": round(float(df["hit"].mean()), 4),
                           "mean_us": round(float(df["service_us"].mean()), 3),
                           "p50_us": round(float(df["service_us"].quantile(0.5, "nearest")), 3)}
    if "lat_us" in df.columns:
        out["measured_mean_us"] = round(float(df["lat_us"].mean()), 3)
        out["measured_p50_us"] = round(float(df["lat_us"].quantile(0.5, "nearest")), 3)
    return out


def service_summary(pred: pl.DataFrame) -> dict[str, Any]:
    """Reads, hits, hit ratio, predicted mean and p50 (and the measured ones, when the trace has latencies) of
    all reads and of each class (listed, other)."""
    return {"all": _summary(pred), **{c: _summary(pred.filter(pl.col("class") == c)) for c in CLASSES}}


def _parts(df: pl.DataFrame) -> dict[str, float]:
    """Means of the three prices: actual, on a drive without the shortcut, and that drive if every read missed."""
    if df.height == 0:
        return {"service": 0.0, "real": 0.0, "miss_real": 0.0, "hit_ratio": 0.0}
    return {"service": float(df["service_us"].mean()), "real": float(df["real_us"].mean()),
            "miss_real": float(df["miss_real_us"].mean()), "hit_ratio": float(df["hit"].mean())}


def _split(before: pl.DataFrame, after: pl.DataFrame) -> dict[str, Any]:
    b, a = _parts(before), _parts(after)
    change = a["service"] - b["service"]
    cache = (a["real"] - a["miss_real"]) - (b["real"] - b["miss_real"])
    shortcut = (a["service"] - a["real"]) - (b["service"] - b["real"])
    rest = a["miss_real"] - b["miss_real"]
    kept = cache + rest
    return {"reads_before": before.height, "reads_after": after.height,
            "hit_ratio_before": round(b["hit_ratio"], 4), "hit_ratio_after": round(a["hit_ratio"], 4),
            "mean_before_us": round(b["service"], 3), "mean_after_us": round(a["service"], 3),
            "change_us": round(change, 3), "cache_hits_us": round(cache, 3),
            "listed_shortcut_us": round(shortcut, 3), "rest_us": round(rest, 3),
            "real_drive_keeps_us": round(kept, 3),
            "real_drive_keeps_share": round(kept / change, 4) if change < 0 else None}


def decompose(before: pl.DataFrame, after: pl.DataFrame) -> dict[str, Any]:
    """Split the change of the predicted mean service time from `before` (e.g. the check off) to `after` (the
    check on, listed zones) — predict_service frames — into three parts that add up to it exactly:

    - cache_hits_us: the change in hits, each hit priced at what it saves against a miss of its own size on a
      drive where a listed-zone miss costs like any miss (mean of hit_us − miss_real_us over the hits);
    - listed_shortcut_us: what the fork's cheaper listed-zone misses take off (service_us − real_us: FW 7 µs
      instead of 1,000 µs on zn540);
    - rest_us: what changes even if every read missed (sizes, placement: a different trace).

    real_drive_keeps_us = cache_hits_us + rest_us is what a drive without the shortcut would keep of the change;
    real_drive_keeps_share its share of a gain (None when the mean did not fall). The same split per class."""
    out = _split(before, after)
    out["by_class"] = {c: _split(before.filter(pl.col("class") == c), after.filter(pl.col("class") == c))
                       for c in CLASSES}
    out["statement"] = statement(out)
    return out


def statement(split: dict[str, Any]) -> str:
    """One sentence for a report, beside the measurement."""
    s = split
    text = (f"predicted mean device time {s['mean_before_us']:,.1f} -> {s['mean_after_us']:,.1f} us "
            f"({s['change_us']:+,.1f} us): cache hits {s['cache_hits_us']:+,.1f} us (hit ratio "
            f"{s['hit_ratio_before']:.4f} -> {s['hit_ratio_after']:.4f}), the emulator's listed-zone shortcut "
            f"{s['listed_shortcut_us']:+,.1f} us, the rest {s['rest_us']:+,.1f} us")
    drive = "a drive whose listed-zone misses cost like any miss"
    if s["real_drive_keeps_share"] is None:
        return text + "; the mean did not fall"
    if s["real_drive_keeps_us"] >= 0:
        return text + f"; {drive} keeps none of the gain (its mean moves {s['real_drive_keeps_us']:+,.1f} us)"
    return (text + f"; {drive} keeps {-s['real_drive_keeps_us']:,.1f} us of the {-s['change_us']:,.1f} us gain "
            f"({s['real_drive_keeps_share']:.0%})")
