"""NVMeVirt's read path replayed on a trace: its cache request by request, each read's predicted device time, a
summary by zone class, and the split of a change in mean service time into what the cache hits explain and what
the fork's listed-zone shortcut explains (analysis/device_model.py has the closed-form model and its sources).

The cache is replayed exactly (analysis/cache_policies.SegmentedLRU, `sticky`: checked against the fork's own list
code compiled outside the kernel): keys are the reads' start LBAs in submission order (the dispatcher takes
commands as they are submitted and asks the cache before it times them), priority 1 = segment kept longer.

`service_us` leaves queueing out. `queueing=True` adds the one queue the NAND model itself makes (`queued_us`):
a die serves its NAND reads one at a time in dispatch order, each from the end of its read's firmware time, so a
read waits behind an earlier read on its die even when its own firmware time ends first — a miss's 1,000 µs
holds its die for every read dispatched to it meanwhile. There the reads are dispatched at the trace's
submission times. Neither counts channel or PCIe contention or the emulator's own dispatch time (its threads
under TCG): a measured latency is the prediction plus those.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import polars as pl

from ..errors import ZtbpError
from .cache_policies import SegmentedLRU
from .device_model import (
    CACHE_ENTRIES,
    CHANNEL_WINDOW_NS,
    PAGE_BYTES,
    SECTOR_BYTES,
    SMALL_BYTES,
    UNIT_XFER_BYTES,
    Profile,
    die_of,
    profile,
    unit_ns,
)
from .read_model import ReadModel

#: NVMeVirt's zones as the project builds it: 32 MiB of 512-byte LBAs
ZONE_LBAS = (32 << 20) // SECTOR_BYTES
CLASSES = ("listed", "other")


class DeviceCache:
    """The fork's read cache across calls: start LBA -> entry, priority kept from insertion. Pass one to several
    predict_service calls to carry the device's cache from one arm into the next (the module keeps it across
    SET and STOP; only unloading it empties it)."""

    def __init__(self, entries: int = CACHE_ENTRIES, model: ReadModel | None = None) -> None:
        self.model = model or ReadModel.fork_as_is()
        fork = self.model.policy == "fork"
        self.lru = SegmentedLRU(entries, zone_aware=self.model.policy != "lru", sticky=fork)
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

    def replay(self, slba: np.ndarray, priority1: np.ndarray, nlb: np.ndarray | None = None) -> np.ndarray:
        """Whether each read (start LBA, in dispatch order) hits; its entries go to the protected segment where
        `priority1` (the fork's priority 1; the read model's hot segment: ReadModel.entry_hot). The fork keys by
        the start LBA as a C int; a page-keyed model (lru, zone_lru) looks up every 4 KiB page of the read (`nlb`
        512-byte LBAs, one page when not given) and the read hits when all of them were cached."""
        if not self.model.keys_by_page():
            keys = (slba.astype(np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)  # the key is the LBA as a C int
            return self.lru.feed_hits(self._dense(keys), priority1.astype(np.bool_))
        per_page = PAGE_BYTES // SECTOR_BYTES
        first = slba.astype(np.int64) // per_page
        count = (np.ones(slba.size, dtype=np.int64) if nlb is None
                 else (slba.astype(np.int64) + np.maximum(nlb, 1) - 1) // per_page - first + 1)
        starts = np.cumsum(count) - count
        pages = np.repeat(first, count) + (np.arange(int(count.sum())) - np.repeat(starts, count))
        hit = self.lru.feed_hits(self._dense(pages), np.repeat(priority1.astype(np.bool_), count))
        return np.logical_and.reduceat(hit, starts) if slba.size else hit


def read_model_of(meta: dict[str, Any]) -> ReadModel:
    """The read model a run's device ran: meta.json's emulator.read_service_model.read_model (the module parameters
    of a build with the project's read model), else the fork as it is."""
    model = (meta.get("emulator") or {}).get("read_service_model") or {}
    params = model.get("read_model")
    return ReadModel.from_params(params) if isinstance(params, str) else ReadModel.fork_as_is()


def device_cache(meta: dict[str, Any]) -> DeviceCache:
    """An empty cache of the device's policy and size: its read model (read_model_of), else the fork's cache of
    meta.json's emulator.read_service_model.cache_entries, else of the fork's CACHE_ENTRIES."""
    model = (meta.get("emulator") or {}).get("read_service_model") or {}
    rm = read_model_of(meta)
    entries = rm.entries if isinstance(model.get("read_model"), str) else model.get("cache_entries") or CACHE_ENTRIES
    return DeviceCache(entries, rm)


def replay_hits(events: pl.DataFrame, listed: Sequence[int], cluster_on: bool, cache: DeviceCache,
                zone_lbas: int = ZONE_LBAS) -> dict[str, Any]:
    """The device's cache replayed over the successful reads of `events` in submission order, carried on in
    `cache` (the module keeps it across SET and STOP): with the zone check on (SET of `listed`) a miss in a listed
    zone enters with priority 1, the others with 2; with it off every miss enters with priority 1. Reads, hits and
    hit ratio, as the device's own counters count them (its firmware timing is left out: predict_service)."""
    reads = reads_in_dispatch_order(events, zone_lbas)
    slba, nlb = reads["slba"].to_numpy().astype(np.int64), reads["nlb"].to_numpy().astype(np.int64)
    hot = entry_hot(cache.model, reads["zone"].is_in(list(listed)).to_numpy(), cluster_on)
    hits = int(cache.replay(slba, hot, nlb).sum())
    return {"reads": reads.height, "hits": hits, "hit_ratio": round(hits / reads.height, 4) if reads.height else None}


def entry_hot(model: ReadModel, listed: np.ndarray, check_on: bool) -> np.ndarray:
    """ReadModel.entry_hot of each read: whether its entries go to the protected segment."""
    return np.array([model.entry_hot(check_on, bool(x)) for x in (False, True)], dtype=np.bool_)[
        listed.astype(np.int64)]


def reads_in_dispatch_order(events: pl.DataFrame, zone_lbas: int) -> pl.DataFrame:
    """The successful data reads of a trace in submission order (ties in trace order), with their zone."""
    reads = events.filter((pl.col("op") == "read") & (pl.col("nlb") > 0))
    if "status" in reads.columns:
        reads = reads.filter(pl.col("status") == 0)
    cols = ["ts_ns", "slba", "nlb"] + [c for c in ("lat_ns",) if c in reads.columns]
    return (reads.select(cols).with_row_index("row").sort("ts_ns", "row", maintain_order=True)
            .with_columns((pl.col("slba") // zone_lbas).alias("zone")))


@dataclass(frozen=True)
class Chunks:
    """Every NAND read of a run's reads (device_model.read_chunks over arrays): the read it belongs to (in order),
    its die, its NAND time and its channel transfer time (ns)."""

    read: np.ndarray
    die: np.ndarray
    nand_ns: np.ndarray
    xfer_ns: np.ndarray


def chunk_table(p: Profile, slba: np.ndarray, nlb: np.ndarray, zone_lbas: int) -> Chunks:
    """The NAND reads of each read: its 4 KiB pages cut at flash-page boundaries (whole flash pages of the device,
    when a zone is a whole number of them), each on the die of its one-shot page."""
    if (zone_lbas * SECTOR_BYTES) % p.flash_page:
        raise ZtbpError(f"a zone of {zone_lbas} LBAs is not a whole number of {p.name}'s flash pages")
    per_flash, per_oneshot = p.flash_page // PAGE_BYTES, p.oneshot_page // PAGE_BYTES
    zone_pages = zone_lbas * SECTOR_BYTES // PAGE_BYTES
    first = slba.astype(np.int64) * SECTOR_BYTES // PAGE_BYTES
    last = (slba.astype(np.int64) + nlb - 1) * SECTOR_BYTES // PAGE_BYTES
    f0 = first // per_flash
    n = last // per_flash - f0 + 1
    read = np.repeat(np.arange(slba.size, dtype=np.int64), n)
    flash = np.repeat(f0, n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
    lo = np.maximum(flash * per_flash, first[read])
    nbytes = (np.minimum(flash * per_flash + per_flash - 1, last[read]) - lo + 1) * PAGE_BYTES
    zone, off = np.divmod(lo, zone_pages)
    return Chunks(read, die_of(p, zone, off // per_oneshot).astype(np.int64),
                  np.where(nbytes == PAGE_BYTES, p.nand_4kb_read_ns, p.nand_read_ns).astype(np.int64),
                  -(-nbytes // UNIT_XFER_BYTES) * unit_ns(p.channel_mbs, p.fw_ch_xfer_ns))


@numba.njit(cache=True)
def _device_times(start: np.ndarray, fw: np.ndarray, read: np.ndarray, die: np.ndarray, nand: np.ndarray,
                  xfer: np.ndarray, pcie: np.ndarray, n_dies: int, window: int, queue: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Each read's device time (ns from its start) and its NAND-and-channel part, by ssd_advance_nand's rule: a
    NAND read starts when its die is free and its read's firmware time has passed, and the die is busy until its
    channel transfer ends; transfers are charged only from 0 to `window` ns after the read's start. queue=False:
    every read finds its dies free (its own NAND reads on one die still follow each other)."""
    never = np.int64(-(1 << 62))
    free = np.full(n_dies, never, dtype=np.int64)
    total = np.zeros(start.size, dtype=np.int64)
    part = np.zeros(start.size, dtype=np.int64)
    j = 0
    for i in range(start.size):
        t = start[i] + fw[i]
        k = j
        while k < read.size and read[k] == i:
            if not queue:
                free[die[k]] = never
            k += 1
        end = t
        while j < k:
            e = max(free[die[j]], t) + nand[j]
            if 0 <= e - start[i] < window:
                e += xfer[j]
            free[die[j]] = e
            end = max(end, e)
            j += 1
        part[i] = end - t
        if 0 <= end - start[i] < window:
            end += pcie[i]
        total[i] = max(0, end - start[i])
    return total, part


def device_times(p: Profile, chunks: Chunks, start: np.ndarray, fw: np.ndarray, nbytes: np.ndarray,
                 queue: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(device time, NAND-and-channel part) in ns of reads dispatched at `start` with firmware times `fw`."""
    pcie = -(-nbytes.astype(np.int64) // UNIT_XFER_BYTES) * unit_ns(p.pcie_mbs)
    return _device_times(start.astype(np.int64), fw.astype(np.int64), chunks.read, chunks.die, chunks.nand_ns,
                         chunks.xfer_ns, pcie, p.channels * p.luns_per_channel, CHANNEL_WINDOW_NS, queue)


def _firmware(model: ReadModel, p: Profile, listed: np.ndarray, nbytes: np.ndarray, *, hit: bool, cluster_on: bool
              ) -> np.ndarray:
    """ReadModel.firmware_ns of each read (ns), hit or missing as told."""
    small = nbytes <= SMALL_BYTES
    t = {(li, sm): model.firmware_ns(p, hit, cluster_on, li, SMALL_BYTES if sm else SMALL_BYTES + 1)
         for li in (False, True) for sm in (False, True)}
    return np.where(listed, np.where(small, t[True, True], t[True, False]),
                    np.where(small, t[False, True], t[False, False])).astype(np.int64)


def _without(chunks: Chunks, reads: np.ndarray) -> Chunks:
    """The NAND reads of `chunks` but those of the reads marked in `reads` (served from DRAM)."""
    keep = ~reads[chunks.read]
    return Chunks(chunks.read[keep], chunks.die[keep], chunks.nand_ns[keep], chunks.xfer_ns[keep])


def predict_service(events: pl.DataFrame, listed: Sequence[int], cluster_on: bool, profile_name: str = "zn540",
                    slow: int = 1, cache_entries: int = CACHE_ENTRIES, *, zone_lbas: int = ZONE_LBAS,
                    cache: DeviceCache | None = None, queueing: bool = False,
                    model: ReadModel | None = None) -> pl.DataFrame:
    """Each read of `events` with its predicted device time on NVMeVirt (`profile_name` built with --slow `slow`),
    the cluster check on (after SET of `listed`) or off, the cache replayed from `cache` (default: empty, of
    `cache_entries`) under the device's read `model` (default: the cache's, the fork as it is). Columns: ts_ns, slba,
    nlb, zone, lat_us (measured, when the trace has it), listed (zone in `listed`, whatever the check), class, hit,
    small (≤ 4 KiB), fw_us, nand_us (NAND reads and channel, slowest die; 0 for a hit a DRAM-serving model skips),
    service_us (with PCIe; no queueing), and for the decomposition hit_us / miss_real_us (this read as a hit / as a
    miss on a drive whose listed-zone misses cost like any miss) and real_us (its actual hit or miss at those
    prices). queueing=True adds queued_us, queued_real_us, queued_miss_real_us: the same three with the dies'
    queue (see the module's docstring)."""
    p = profile(profile_name, slow)
    if zone_lbas <= 0:
        raise ZtbpError(f"zone size {zone_lbas} LBAs: give a positive zone size")
    reads = reads_in_dispatch_order(events, zone_lbas)
    slba, nlb = reads["slba"].to_numpy().astype(np.int64), reads["nlb"].to_numpy().astype(np.int64)
    is_listed = reads["zone"].is_in(list(listed)).to_numpy()
    cache = cache if cache is not None else DeviceCache(cache_entries, model)
    rm = model or cache.model
    hit = cache.replay(slba, entry_hot(rm, is_listed, cluster_on), nlb)
    nbytes = nlb * SECTOR_BYTES
    fw_hit = _firmware(rm, p, is_listed, nbytes, hit=True, cluster_on=cluster_on)
    fw_miss_real = _firmware(rm, p, is_listed, nbytes, hit=False, cluster_on=False)
    prices = {"": np.where(hit, fw_hit, _firmware(rm, p, is_listed, nbytes, hit=False, cluster_on=cluster_on)),
              "real_": np.where(hit, fw_hit, fw_miss_real), "miss_real_": fw_miss_real}
    chunks = chunk_table(p, slba, nlb, zone_lbas)
    none = np.zeros(reads.height, dtype=np.bool_)
    skip = hit if rm.skip_nand else none  # the reads served from DRAM, without their NAND reads
    nand = {"": _without(chunks, skip), "real_": _without(chunks, skip), "miss_real_": chunks,
            "hit_": _without(chunks, ~none if rm.skip_nand else none)}
    start = reads["ts_ns"].to_numpy()
    service, nand_part = device_times(p, nand[""], start, prices[""], nbytes)
    us = 1 / 1000
    cols = {"listed": is_listed, "hit": hit, "small": nbytes <= SMALL_BYTES, "fw_us": prices[""] * us,
            "nand_us": nand_part * us, "service_us": service * us,
            "hit_us": device_times(p, nand["hit_"], start, fw_hit, nbytes)[0] * us,
            "miss_real_us": device_times(p, chunks, start, fw_miss_real, nbytes)[0] * us}
    if queueing:
        cols |= {f"queued_{k}us": device_times(p, nand[k], start, fw, nbytes, queue=True)[0] * us
                 for k, fw in prices.items()}
    out = reads.select("ts_ns", "slba", "nlb", "zone",
                       *([(pl.col("lat_ns") * us).alias("lat_us")] if "lat_ns" in reads.columns else []))
    out = out.with_columns(pl.Series(k, v) for k, v in cols.items())
    return out.with_columns(
        pl.when(pl.col("listed")).then(pl.lit(CLASSES[0])).otherwise(pl.lit(CLASSES[1])).alias("class"),
        pl.when(pl.col("hit")).then(pl.col("hit_us")).otherwise(pl.col("miss_real_us")).alias("real_us"))


def _summary(df: pl.DataFrame) -> dict[str, Any]:
    if df.height == 0:
        return {"reads": 0, "hits": 0, "hit_ratio": None, "mean_us": None, "p50_us": None}
    out: dict[str, Any] = {"reads": df.height, "hits": int(df["hit"].sum()),
                           "hit_ratio": round(float(df["hit"].mean()), 4),
                           "mean_us": round(float(df["service_us"].mean()), 3),
                           "p50_us": round(float(df["service_us"].quantile(0.5, "nearest")), 3)}
    if "queued_us" in df.columns:
        out["queued_mean_us"] = round(float(df["queued_us"].mean()), 3)
        out["queued_p50_us"] = round(float(df["queued_us"].quantile(0.5, "nearest")), 3)
    if "lat_us" in df.columns:
        out["measured_mean_us"] = round(float(df["lat_us"].mean()), 3)
        out["measured_p50_us"] = round(float(df["lat_us"].quantile(0.5, "nearest")), 3)
    return out


def service_summary(pred: pl.DataFrame) -> dict[str, Any]:
    """Reads, hits, hit ratio, predicted mean and p50 (with the dies' queue too when predicted so, and the measured
    ones when the trace has latencies) of all reads and of each class (listed, other)."""
    return {"all": _summary(pred), **{c: _summary(pred.filter(pl.col("class") == c)) for c in CLASSES}}


#: the columns of the three prices: actual, on a drive without the shortcut, that drive if every read missed
PRICES = {False: ("service_us", "real_us", "miss_real_us"), True: ("queued_us", "queued_real_us",
                                                                   "queued_miss_real_us")}


def _parts(df: pl.DataFrame, queued: bool) -> dict[str, float]:
    """Means of the three prices (PRICES) and the hit ratio."""
    if df.height == 0:
        return {"service": 0.0, "real": 0.0, "miss_real": 0.0, "hit_ratio": 0.0}
    means = [float(df[c].mean()) for c in PRICES[queued]]
    return {"service": means[0], "real": means[1], "miss_real": means[2], "hit_ratio": float(df["hit"].mean())}


def _split(before: pl.DataFrame, after: pl.DataFrame, queued: bool) -> dict[str, Any]:
    b, a = _parts(before, queued), _parts(after, queued)
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


def decompose(before: pl.DataFrame, after: pl.DataFrame, queued: bool = False) -> dict[str, Any]:
    """Split the change of the predicted mean service time from `before` (e.g. the check off) to `after` (the
    check on, listed zones) — predict_service frames — into three parts that add up to it exactly:

    - cache_hits_us: the change in hits, each hit priced at what it saves against a miss of its own size on a
      drive where a listed-zone miss costs like any miss (mean of hit_us − miss_real_us over the hits);
    - listed_shortcut_us: what the fork's cheaper listed-zone misses take off (service_us − real_us: FW 7 µs
      instead of 1,000 µs on zn540);
    - rest_us: what changes even if every read missed (sizes, placement: a different trace).

    real_drive_keeps_us = cache_hits_us + rest_us is what a drive without the shortcut would keep of the change;
    real_drive_keeps_share its share of a gain (None when the mean did not fall). The same split per class.
    queued=True splits the times with the dies' queue (frames predicted with queueing=True) instead."""
    out = _split(before, after, queued)
    out["by_class"] = {c: _split(before.filter(pl.col("class") == c), after.filter(pl.col("class") == c), queued)
                       for c in CLASSES}
    out["times"] = "with the dies' queue" if queued else "no queueing"
    out["statement"] = statement(out)
    return out


def statement(split: dict[str, Any]) -> str:
    """One sentence for a report, beside the measurement."""
    s = split
    text = (f"predicted mean device time ({s['times']}) {s['mean_before_us']:,.1f} -> {s['mean_after_us']:,.1f} us "
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
