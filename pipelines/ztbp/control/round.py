"""The host's half of one loop round (`ztbp loop`), on plain values: the rows the guest handed over become the
round's run directory (raw/nvme.csv, meta.json finished), the round is measured (the trace check, fio, the device
latency of the listed zones against the others, the device's counters, the cache model from a cold cache), then
analysed (its configuration, the previous round's prediction replayed out of sample, the measured gain) or, for an
A/B block, scored with a cache warmed by the reads before it. control/loop.py decides and records."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from .. import stages
from ..acquire.mapcsv import map_rows_csv
from ..acquire.meta import finish_meta
from ..analysis.loop import device_figures, latency_split, measured_gain, warm_hit_ratio
from ..files import env_int
from ..io.loop import RoundFiles
from ..io.run import Run, load
from ..paths import RunPaths
from ..writeback.config import write_config


@dataclass(frozen=True)
class CacheModel:
    """The cache model every round is scored with, and the gain a configuration must promise (--min-gain)."""

    cache_mib: int
    page_kib: int
    min_gain: float


@dataclass(frozen=True)
class Measured:
    """A measured round: its loop.json entry so far, the loaded run, the model's simulation, the run's paths."""

    entry: dict[str, Any]
    run: Run
    sim: dict[str, Any]
    paths: RunPaths


def measure(run_dir: Path, meta: dict[str, Any], started: float, versions: dict[str, str], guest: RoundFiles,
            zones_model: list[int], listed: list[int], model: CacheModel, say: Callable[[str], None]) -> Measured:
    """Finish the round's run directory `run_dir` (its meta.json from `meta`, whose "loop" names the round and the
    zones in force) and measure it: the `listed` zones' device latency against the others, the cache model with
    `zones_model` (plain LRU when empty)."""
    r = meta["loop"]["round"]
    run = RunPaths(run_dir)
    conv, error = map_rows_csv(run)
    say(f"round {r}: {conv['probe_nvme_rows']:,} rows into nvme.csv in {conv['probe_nvme_convert_s']} s on this "
        "machine" + (f"; {error}" if error else "") + "; analysing the round")
    summ = finish_meta(run, meta, 0, False, started, versions)
    loaded = load(run.root)
    sim = stages.simulate(loaded, model.cache_mib, model.page_kib, zones_model, general=False)
    fio = loaded.meta.get("fio", {})
    entry: dict[str, Any] = {
        "round": r, "run": run.root.name, "complete": summ["complete"],
        "zones_in_force": meta["loop"]["zones_in_force"],
        "rows": summ["commands"], "read_rows": summ["reads"], "fio_reads": summ["fio_reads"],
        "lost": summ["lost"],
        "fio": {"read_iops": fio.get("read_iops"), "p50_us": fio.get("read_clat_p50_us"),
                "p99_us": fio.get("read_clat_p99_us"), "runtime_ms": fio.get("runtime_ms")},
        "latency": latency_split(loaded.events, listed),
        "device": device_figures(env_int(guest.device.get("status_before")), env_int(guest.device.get("status_after")),
                                 guest.kernel_log),
        "model": {"lru": sim["lru"], "zone_lru": sim["zone_lru"] if zones_model else None,
                  "sent_zones": zones_model,
                  "sent_hit_ratio": sim["zone_lru"] if zones_model else sim["lru"]},
    }
    return Measured(entry, loaded, sim, run)


def analyse(m: Measured, root: Path, model: CacheModel, pending: dict[str, Any] | None,
            before: dict[str, Any] | None) -> dict[str, Any]:
    """The measured round's loop.json entry with its configuration (written to the run's cache-config.json; the
    simulation is reused when it sends the same zones again), the prediction `pending` (the configuration sent after
    the previous round) replayed out of sample, and the measured gain over the round `before`."""
    entry = m.entry
    cfg = stages.config(m.run, model.cache_mib, model.page_kib, min_gain=model.min_gain, predicted=m.sim)
    write_config(cfg, m.paths.cache_config)
    entry["config"] = {"file": str(m.paths.cache_config.relative_to(root)), "hot_zones": cfg["hot_zones"],
                       "hot_zones_found": cfg["hot_zones_found"], "recommend": cfg["recommend"],
                       "recommend_reason": cfg["recommend_reason"], "held_out": cfg["held_out"]}
    if pending is not None:
        replay = m.sim  # the previous round's prediction, replayed: its zones are the zones of the model above
        entry["out_of_sample"] = {"from_round": pending["round"], "hot_zones": pending["hot_zones"],
                                  "predicted_zone_lru": pending["held_out"]["zone_lru"],
                                  "predicted_lru": pending["held_out"]["lru"],
                                  "replayed_zone_lru": replay["zone_lru"], "replayed_lru": replay["lru"],
                                  "error": round(replay["zone_lru"] - pending["held_out"]["zone_lru"], 4)}
        entry["applied_before"] = pending.get("applied")
    entry["measured_gain"] = measured_gain(entry, before)
    return entry


def warm_score(m: Measured, history: pl.DataFrame | None, first_round: Path, model: CacheModel,
               zones: list[int]) -> tuple[float, pl.DataFrame]:
    """An A/B block's model hit ratio with the cache warmed by the reads before it (round 1's for the first block):
    the device's cache carries over from block to block, so does the model's. Returns it and the reads so far."""
    if history is None:
        history = load(first_round).events.filter(pl.col("op") == "read")
    return warm_hit_ratio(history, m.run.events, m.run.meta, model.cache_mib, model.page_kib, zones)
