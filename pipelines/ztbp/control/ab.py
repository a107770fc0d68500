"""The loop's A/B mode (`ztbp loop --ab PAIRS`): round 1's configuration switched on and off in blocks, the blocks'
order, the decision after each block, loop.json's "ab" section and NVMeVirt's read service model over the session."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..analysis.loop import warm_hit_ratio
from ..errors import ZtbpError
from ..io.run import Run, load


@dataclass
class AbPlan:
    """The A/B mode: round 1's configuration switched on (SET) and off (STOP) in blocks of `reads` reads, pairs
    of blocks in ABBA order (on/off, off/on, ...) so that a drift over the session cancels out of the pairs."""

    config: str  # the configuration file as the guest sees it
    listed: list[int]  # its zones: the "listed" zone class of every block, on and off
    arms: list[tuple[str, int]]  # (arm, pair) of blocks 1, 2, ...
    reads: int
    blocks: list[dict[str, Any]] = field(default_factory=list)
    history: Any = None  # the reads before the next block (round 1's first), to warm the model's cache
    service: dict[str, Any] | None = None  # the emulator's read service model over the blocks (ab_service)


def abba(pairs: int) -> list[tuple[str, int]]:
    """(arm, pair) of each block: pair 1 on then off, pair 2 off then on, and so on."""
    return [(arm, p) for p in range(1, pairs + 1) for arm in (("on", "off") if p % 2 else ("off", "on"))]


def start_ab(config: str, listed: list[int], pairs: int, reads: int, events: pl.DataFrame) -> AbPlan:
    """The A/B blocks once round 1 recommended `config` (its zones `listed`): `pairs` pairs of blocks of `reads` reads,
    the model's cache warmed for the first block by round 1's reads (of its `events`)."""
    return AbPlan(config=config, listed=listed, arms=abba(pairs), reads=reads,
                  history=events.filter(pl.col("op") == "read"))


def score_block(ab: AbPlan, entry: dict[str, Any], run: Run, cache_mib: int, page_kib: int, zones: list[int],
                holds: bool, applied: dict[str, Any] | None) -> tuple[str, str]:
    """The A/B block of round `entry` (its loaded `run`) scored: the model's hit ratio with `zones` (plain LRU when
    empty) and the cache warmed by the reads before it, as the device's cache carries over from block to block;
    recorded with what the guest `applied` before it and whether the device `holds` the configuration; the decision
    that switches the configuration for the next block (ab_next), set in the entry too."""
    block = entry["round"] - 1
    arm, pair = ab.arms[block - 1]
    warm, ab.history = warm_hit_ratio(ab.history, run.events, run.meta, cache_mib, page_kib, zones)
    entry["model"]["warm_hit_ratio"] = warm
    entry["ab"] = {"block": block, "arm": arm, "pair": pair, "device_holds": holds}
    entry["applied_before"] = applied
    action, arg = ab_next(ab, block)
    entry["decision"] = {"action": action, "detail": arg}
    ab.blocks.append({"round": entry["round"], "run": entry["run"], "block": block, "arm": arm, "pair": pair,
                      "device_holds": holds, "trace_complete": entry["lost"] == 0
                      and entry["read_rows"] == entry["fio_reads"], "fio": entry["fio"], "latency": entry["latency"],
                      "device": entry["device"], "model": {"hit_ratio": warm}})
    return action, arg


def ab_doc(ab: AbPlan, pairs: int) -> dict[str, Any]:
    """loop.json's "ab" section: the plan, each block's figures and the effects with their intervals."""
    from ..analysis.compare import ab_effects

    done = [b for b in ab.blocks if sum(o["pair"] == b["pair"] for o in ab.blocks) == 2]
    try:
        effects = ab_effects(done) if len({b["pair"] for b in done}) >= 2 else None
    except ZtbpError as e:
        effects = {"error": str(e)}
    return {"pairs": pairs, "reads_per_block": ab.reads, "listed": ab.listed, "config": ab.config,
            "order": [a for a, _ in ab.arms], "device_acted": any(b["device_holds"] for b in ab.blocks),
            "blocks": ab.blocks, "effects": effects, "service_model": ab.service}


def ab_next(ab: AbPlan, block: int) -> tuple[str, str]:
    """The decision after block `block`: switch the configuration on ("apply") or off ("clear"), keep it ("skip")
    or stop after the last block."""
    if block >= len(ab.arms):
        return "stop", f"A/B done: {len(ab.arms) // 2} pairs of blocks"
    arm, nxt = ab.arms[block - 1][0], ab.arms[block][0]
    if nxt == arm:
        return "skip", f"A/B block {block + 1} keeps the configuration {arm}"
    return ("apply", ab.config) if nxt == "on" else ("clear", "")


def ab_service(ab: AbPlan | None, root: Path, meta: dict[str, Any]) -> dict[str, Any] | None:
    """NVMeVirt's read service model (analysis/device_replay.py) over the A/B session: round 1 and then every block
    replayed in order on one cache (the module stays loaded, and SET and STOP leave its cache as it is), each block
    with the zone check of its arm as the device held it; the predicted time per arm beside the measured one, and
    the predicted change split into cache hits, the emulator's listed-zone shortcut and the rest. None off NVMeVirt
    or when the module's build (profile, --slow) is unknown. `root`: the loop directory; `meta`: its runs' meta.json
    as the loop began (the emulator's model, the zone size)."""
    model = (meta.get("emulator") or {}).get("read_service_model") or {}
    if ab is None or not model.get("profile"):
        return None
    from ..analysis.device_replay import decompose, device_cache, predict_service, service_summary

    cache = device_cache(meta)  # the device's read model: the fork as it is, or the project's (--nvmevirt-params)
    zone_lbas = meta["zone_size_lba"]

    def replay(run: Path, listed: list[int], on: bool) -> pl.DataFrame:
        return predict_service(load(run).events, listed, on, model["profile"], model["slow"] or 1, cache=cache,
                               zone_lbas=zone_lbas)

    replay(root / "round-01", [], False)  # round 1 fills the cache, the check off
    arms: dict[str, list[pl.DataFrame]] = {"off": [], "on": []}
    for b in ab.blocks:
        arms[b["arm"]].append(replay(root / b["run"], ab.listed, b["arm"] == "on" and b["device_holds"]))
    if not (arms["off"] and arms["on"]):
        return None
    off, on = pl.concat(arms["off"]), pl.concat(arms["on"])
    return {"profile": model["profile"], "slow": model["slow"], "cache_entries": cache.lru.capacity,
            "read_model": cache.model.params(),
            "off": service_summary(off), "on": service_summary(on), "decomposition": decompose(off, on)}
