"""A small loop directory made without a VM: two synthetic rounds (`ztbp synth`) and a loop.json as `ztbp loop`
writes it, on QEMU's namespace (the device refuses SET: nothing ever in force, no device counters) or on NVMeVirt
(the device acts on SET and counts its hits). For report tests; the figures are made up but consistent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ztbp.acquire.synth import SynthGeometry, write_run
from ztbp.control.ab import abba

HOT = [1, 7, 11, 15, 19]


def round_entry(r: int, backend: str, reads: int, in_force: list[int], iops: float) -> dict[str, Any]:
    nvmevirt = backend == "nvmevirt"
    hit = 0.27 if not in_force else 0.33
    entry: dict[str, Any] = {
        "round": r, "run": f"round-{r:02d}", "complete": True, "zones_in_force": in_force,
        "rows": reads, "read_rows": reads, "fio_reads": reads, "lost": 0,
        "fio": {"read_iops": iops, "p50_us": 7300.0, "p99_us": 24000.0, "runtime_ms": 60000},
        "latency": {k: {"reads": n, "p50_us": 6000.0, "p99_us": 23000.0, "mean_us": 6300.0}
                    for k, n in (("all", reads), ("listed", reads // 2 if in_force else 0),
                                 ("unlisted", reads - (reads // 2 if in_force else 0)))},
        "device": {"status_before": 0 if nvmevirt else None, "status_after": 0 if nvmevirt else None,
                   "hits_before": 0 if nvmevirt else None, "hits_after": 0 if nvmevirt else None,
                   "status_reads": reads if nvmevirt else None, "status_hits": int(hit * reads) if nvmevirt else None,
                   "hit_ratio": round(int(hit * reads) / reads, 4) if nvmevirt else None,
                   "hit_ratio_note": None if nvmevirt else "the device answered no STATUS (no ZTBP protocol, or "
                                                           "ztbp-ctl failed)",
                   "kernel_log_counters": ({"hits": int(hit * reads), "misses": reads - int(hit * reads),
                                            "reads": reads, "prints": 1, "hit_ratio": round(hit, 4)}
                                           if nvmevirt else None),
                   "replay_reads": reads if nvmevirt else None,
                   "replay_hits": int((hit - 0.01) * reads) if nvmevirt else None,
                   "replay_hit_ratio": round(int((hit - 0.01) * reads) / reads, 4) if nvmevirt else None,
                   "device_minus_replay": 0.01 if nvmevirt else None},
        "model": {"lru": 0.27, "zone_lru": 0.329 if r > 1 else None, "sent_zones": HOT if r > 1 else [],
                  "sent_hit_ratio": 0.329 if r > 1 else 0.27},
        "config": {"file": f"round-{r:02d}/derived/cache-config.json", "hot_zones": HOT, "hot_zones_found": HOT,
                   "recommend": True, "recommend_reason": "zone-LRU gains +0.06 hit ratio over LRU"},
        "decision": {"action": "apply" if r == 1 else "stop", "detail": "rounds done" if r > 1 else ""},
    }
    if r > 1:
        entry["applied_before"] = {
            "action": "apply", "set_exit_code": 0 if nvmevirt else 30, "set_ok": nvmevirt,
            "set_message": None if nvmevirt else "the device refused the ZTBP SET command",
            "info_exit_code": 0 if nvmevirt else 30, "status_after_set": 0 if nvmevirt else None,
            "zones_reported": sorted(HOT) if nvmevirt else [],
            "zones_reported_from": "kernel log (ZONE CLUSTER lines at SET; INFO returns no data)"}
    return entry


def make_loop(root: Path, backend: str = "qemu", reads: int = 20_000) -> Path:
    """`root` as a two-round loop directory of `backend` ("qemu" or "nvmevirt"); returns it."""
    root.mkdir(parents=True)
    geo = SynthGeometry(lba_bytes=4096, zone_size_lba=8192, nr_zones=64)
    rounds = []
    for r in (1, 2):
        run = root / f"round-{r:02d}"
        write_run(run, "paper80", reads, r, geo)
        meta = json.loads((run / "meta.json").read_text())
        meta.update(backend=backend, synthetic=False)  # a traced round of that device, as `ztbp loop` writes it
        (run / "meta.json").write_text(json.dumps(meta, indent=2))
        in_force = HOT if r > 1 and backend == "nvmevirt" else []
        rounds.append(round_entry(r, backend, reads, in_force, 16000.0 if r == 1 else 15200.0))
    doc = {"format": "ztbp-loop/1", "backend": backend,
           "workload": {"name": "paper80", "kind": "hotcold", "reads": reads}, "rounds_asked": 2, "min_gain": 0.01,
           "cache_mib": 64, "page_kib": 4, "rounds": rounds, "stopped": "rounds done (2 of 2)", "complete": True,
           "updated": "2026-11-23T11:42:02Z", "guest_status": 0, "interrupted": False}
    if backend == "nvmevirt":
        doc["emulator"] = json.loads((Path(__file__).parent / "data" / "loops" / "sample-nvmevirt" /
                                      "loop.json").read_text())["emulator"]
    (root / "loop.json").write_text(json.dumps(doc, indent=1))
    return root


def ab_blocks(gain: float, pairs: int = 4, holds: bool = True) -> list[dict]:
    """A/B block records (analysis.compare.ab_effects' input) with IOPS x (1 + gain) when on, a little noise; the
    device holds the configuration in the on blocks, or in none (`holds` False: it refused every SET)."""
    out = []
    for p in range(1, pairs + 1):
        for k, arm in enumerate(abba(pairs)[2 * (p - 1):2 * p]):
            on = arm[0] == "on"
            iops = 1000 * (1 + gain * on) * (1 + 0.01 * ((p + k) % 3 - 1))
            out.append({"round": 2 * p + k, "run": f"round-{2 * p + k:02d}", "arm": arm[0], "pair": p,
                        "device_holds": on and holds,
                        "fio": {"read_iops": iops, "p50_us": 4e6 / iops, "p99_us": 2e7 / iops},
                        "latency": {c: {"reads": 100, "p50_us": 4e6 / iops} for c in ("all", "listed", "unlisted")},
                        "model": {"hit_ratio": 0.27 + 0.05 * on}})
    return out
