"""Parameters and defaults of the analyses, importable without the analyses' heavy dependencies (the CLI builds
its options from these without loading numpy, scikit-learn or numba)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

#: The paper's grid: eps in range(0.01, 0.05, 0.01), min_samples in range(20, 50, 10).
PAPER_EPS: tuple[float, ...] = (0.01, 0.02, 0.03, 0.04)
PAPER_MIN_SAMPLES: tuple[int, ...] = (20, 30, 40)
#: Ops whose sequential chains are measured (zone appends are placed by the device, so they are not chained).
CHAIN_OPS: tuple[str, ...] = ("read", "write", "write_zeroes")
#: A chain stays open for continuation while its last request is among this many most recent requests of its op.
CHAIN_WINDOW = 256
#: Natural Transfer Size of the object-storage study, MiB.
NTS_MIB = 4.0
#: Cache sizes of `cachesim --sweep`, MiB.
SWEEP_MIB: tuple[int, ...] = (4, 8, 16, 32, 64, 128, 256, 512)
#: The paper's device cache, MiB, and page, KiB.
CACHE_MIB = 64
PAGE_KIB = 4
#: `ztbp watch`'s TimeOrder: the probe's rows are held at least ORDER_MIN_S, twice the longest lag of a row's arrival
#: behind its issue over the last ORDER_SPAN_S, at most ORDER_MAX_S (`--order-max-s`) and ORDER_MAX_ROWS rows.
ORDER_MIN_S, ORDER_MAX_S, ORDER_SPAN_S, ORDER_MAX_ROWS = 2.0, 60.0, 60.0, 1_000_000
#: Keys `ztbp layers --by` can split by, and the column each names.
LAYER_GROUP_KEYS: dict[str, str] = {"op": "op", "size": "bytes", "zone": "zone", "mode": "mode", "stack": "stack"}


#: How the (eps, min_samples) grid is scored: "time" (tune on earlier windows, score on later ones) or "kfold" (the
#: paper's 5-fold split of the accesses). Both are always reported; this one picks the pair.
VALIDATIONS: tuple[str, ...] = ("time", "kfold")
#: Family-wise false-positive rate of the zone significance test per run (Holm over the zones that were read).
ALPHA = 0.01
#: `ztbp config` learns on this share of the run's reads (in time order) and predicts on the rest.
TRAIN_SHARE = 0.5
#: `ztbp config` recommends a configuration when zone-LRU beats LRU on the held-out reads by at least this much.
RECOMMEND_GAIN = 0.01


@dataclass(frozen=True)
class ClusterParams:
    eps: tuple[float, ...] = PAPER_EPS
    min_samples: tuple[int, ...] = PAPER_MIN_SAMPLES
    cells_per_zone: int = 32
    hot_factor: float = 2.0
    hot_zone_share: float = 0.5   # share of a hot zone's reads in hot clusters
    hot_cell_share: float = 0.5   # share of a hot zone's cells in hot clusters
    alpha: float = ALPHA
    validation: str = "time"
    widen: bool = True            # widen the grid while the winner sits on its edge
    seed: int = 0

    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.__dict__, sort_keys=True).encode()).hexdigest()[:16]


#: `ztbp compare`: each run's reads are split into this many equal time blocks (the within-run replicates).
COMPARE_BLOCKS = 10
#: ... and at most this many.
COMPARE_MAX_BLOCKS = 1000
#: `ztbp compare`: the run-to-run coefficient of variation assumed between two separate runs (one run each cannot
#: measure it): runs of one workload without a tracer varied by a CV of 8-12 % in the QEMU VM.
RUN_NOISE_CV = 0.10
#: Two-sided level of the comparisons' intervals: 0.05 gives 95 % intervals.
COMPARE_ALPHA = 0.05
#: The A/B blocks' planning (analysis/robust.pairs_needed): the smallest change worth finding, 10 % of a speed or
#: latency and 1 percentage point of a hit ratio, with this power, at the level Holm's family asks of one true
#: effect
COMPARE_TARGET_PCT = 10.0
COMPARE_TARGET_PP = 1.0
COMPARE_POWER = 0.8

# ---- the loop's A/B mode (`ztbp loop --ab PAIRS`) --------------------------------------------------------------
#: reads per block: enough for a block's IOPS and latency percentiles, few enough for several blocks per arm (the
#: bounds of --ab and --ab-reads are in units.LIMITS)
AB_READS = 20_000

#: The ZTBP paper's measured effect of the configuration on its drive (Tables II and III), by the workload that
#: reproduces each: read IOPS, fio p50 (us) and the drive's cache hit ratio, without -> with the configuration.
PAPER_TABLES = {
    "paper80": {"table": "Table II (80 % of the reads on five zones)", "read_iops": (69_100, 79_200),
                "p50_us": (1_876, 1_811), "hit_ratio": (0.26, 0.30)},
    "paper60": {"table": "Table III (60 % of the reads on five zones)", "read_iops": (105_000, 115_000),
                "p50_us": (1_876, 1_663), "hit_ratio": (0.17, 0.24)},
}
