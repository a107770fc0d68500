"""The figures of one loop round, pure over frames, dicts and text: the device's reads, hits and hit ratio between
two STATUS answers (analysis/device_counters.py), the zones and hit counters NVMeVirt printed in the kernel log,
the device latency of listed and unlisted zones, and the gain the stop rule weighs."""

from __future__ import annotations

import re
from typing import Any

from .device_counters import Counters, counter_delta

_ZONE_LINE = re.compile(r"ZONE CLUSTER \[\d+\]=(\d+)")
_COUNTER = re.compile(r"(Hit cnt|Fail cnt|Total read cnt)= *(\d+)")


def dmesg_figures(text: str) -> dict[str, Any]:
    """The zones the device logged (ZONE CLUSTER) and its counters from a kernel log: the module prints "Fail cnt",
    "Hit cnt", "Total read cnt" when its read counter reaches 1,000,000, then starts again. Every print in `text`
    with reads > 0 is summed (`prints` of them). The first read after loading prints 0 reads (its counter goes from
    -1 to 0): that print is no wrap."""
    zones = [int(z) for z in _ZONE_LINE.findall(text)]
    blocks: list[dict[str, int]] = []
    cur: dict[str, int] = {}
    for name, value in _COUNTER.findall(text):
        key = {"Hit cnt": "hits", "Fail cnt": "misses", "Total read cnt": "reads"}[name]
        cur[key] = int(value)
        if key == "reads":
            blocks.append(cur)
            cur = {}
    real = [b for b in blocks if b.get("reads", 0) > 0]
    if not real:
        return {"zones": zones[-5:], "counters": None}
    tot = {k: sum(b.get(k, 0) for b in real) for k in ("hits", "misses", "reads")}
    tot["prints"] = len(real)
    tot["hit_ratio"] = round(tot["hits"] / tot["reads"], 4)
    return {"zones": zones[-5:], "counters": tot}


def latency_summary(reads: Any) -> dict[str, Any]:
    """The device latency (the probe's lat_ns, issue to completion) of a frame of reads: how many, p50, p99 (each a
    latency measured, the nearest rank) and mean, in µs; None for each figure of no read. The loop's rounds and the
    watch's windows both say it so."""
    import polars as pl

    if reads.height == 0:
        return {"reads": 0, "p50_us": None, "p99_us": None, "mean_us": None}
    lat = reads["lat_ns"].cast(pl.Float64) / 1000
    return {"reads": reads.height, "p50_us": round(float(lat.quantile(0.5, "nearest")), 1),
            "p99_us": round(float(lat.quantile(0.99, "nearest")), 1), "mean_us": round(float(lat.mean()), 1)}


def latency_split(events: Any, listed: list[int]) -> dict[str, Any]:
    """Device latency (the probe's lat_ns) of the round's reads: overall, in the listed zones and in the others."""
    import polars as pl

    reads = events.filter(pl.col("op") == "read")
    inside = pl.col("zone").is_in(listed)
    return {"all": latency_summary(reads), "listed": latency_summary(reads.filter(inside)),
            "unlisted": latency_summary(reads.filter(~inside))}


def measured_gain(this_round: dict[str, Any], previous: dict[str, Any] | None) -> float | None:
    """The rise of the model's hit ratio with the zones sent, from the previous round to this one."""
    now = this_round["model"]["sent_hit_ratio"]
    before = previous["model"]["sent_hit_ratio"] if previous else this_round["model"]["lru"]
    return None if now is None or before is None else round(now - before, 4)


def device_figures(before: Counters, after: Counters, kernel_log: str) -> dict[str, Any]:
    """The device's side of a round: its counters before and after (STATUS: reads, and hits where it answers them),
    the reads, hits and hit ratio it counted between them (its counters' wraps and the hits printed at them read
    from the kernel log), and the hit counters it printed there (a cross-check: only each 1,000,000 reads)."""
    dmesg = dmesg_figures(kernel_log)
    printed = dmesg["counters"] or {}
    delta = counter_delta(before, after, printed.get("prints", 0), printed.get("hits", 0))
    return {"status_before": before.reads, "status_after": after.reads, "hits_before": before.hits,
            "hits_after": after.hits, "status_reads": delta["reads"], "status_hits": delta["hits"],
            "hit_ratio": delta["hit_ratio"], "hit_ratio_note": delta["note"], "kernel_log_counters": dmesg["counters"]}


def with_replay(device: dict[str, Any], replay: dict[str, Any] | None) -> dict[str, Any]:
    """A round's device figures (device_figures) with the project's replay of the device's cache over the round's
    traced reads beside them (device_replay.replay_hits, None off a device the project replays): replay_reads,
    replay_hits, replay_hit_ratio and device_minus_replay, the device's own hit ratio minus the replay's (None
    where either is missing). A difference says where the replay is not the device: reads it dispatched in
    another order than the trace's submission order, reads the trace missed, or a cache that is not the fork's."""
    rep = replay or {}
    own, mine = device.get("hit_ratio"), rep.get("hit_ratio")
    return {**device, "replay_reads": rep.get("reads"), "replay_hits": rep.get("hits"), "replay_hit_ratio": mine,
            "device_minus_replay": None if own is None or mine is None else round(own - mine, 4)}


def warm_hit_ratio(history: Any, events: Any, meta: dict[str, Any], cache_mib: float, page_kib: int,
                   zones: list[int]) -> tuple[float, Any]:
    """The model's hit ratio on the reads of `events` (an A/B block) with the cache warmed by `history` (the reads
    before it, under the same policy: zone-LRU with `zones`, plain LRU when empty), as the device's cache carries
    over from block to block. Returns it and the new history: the last WARM_READS reads, enough to fill any cache
    the loop models several times over."""
    import polars as pl

    from .cachesim import Trace

    reads = events.filter(pl.col("op") == "read")
    both = reads if history is None else pl.concat([history, reads], how="vertical_relaxed")
    n_before = 0 if history is None else history.height
    res = Trace(both, meta, page_kib).held_out(cache_mib, zones, n_before)
    return round(res["zone_lru" if zones else "lru"], 4), both.tail(WARM_READS)


#: reads kept to warm the model's cache before an A/B block
WARM_READS = 200_000
