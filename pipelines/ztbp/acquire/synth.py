"""`ztbp synth`: write a synthetic run in the run-directory contract (probes/FORMAT.md).

Synthetic runs exercise the analysis exactly as a capture would: the same meta.json and `# ztbp nvme v1` CSV,
`"synthetic": true`, `"backend": "synth"`. Read patterns follow the ZTBP paper's workloads:

- paper80 / paper60: each read goes with probability 0.8 / 0.6 to a uniformly chosen hot zone of
  {1, 7, 11, 15, 19} at a uniform 4 KiB-aligned offset, else to a uniform 4 KiB page in [10 MiB, 1 GiB).
- uniform: every read is a uniform 4 KiB page in [10 MiB, 1 GiB).
- zipf: 4 KiB reads over [10 MiB, 1 GiB) whose page popularity follows Zipf(s=1.1) with ranks scattered
  over the range (a hot page set with no zone structure).
- seqread: 4 interleaved sequential streams of 128 KiB reads over the prefilled zones.
- seqwrite: resets, then 4 zones written at a time by interleaved 128 KiB sequential writes (no reads).

Every pattern that reads first resets and fills the zones it reads (128 KiB sequential writes), as the capture
does, so the trace holds resets and writes too. `--reads` counts read commands (write commands for seqwrite).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from ..contract import NVME_COLUMNS, NVME_VERSION_LINE, new_meta, write_meta
from ..errors import ZtbpError
from ..paths import RunPaths
from ..units import MIB
from .patterns import HOT_ZONES, PATTERNS

__all__ = ["HOT_ZONES", "PATTERNS", "SynthGeometry", "synthesize", "write_run"]



@dataclass(frozen=True)
class SynthGeometry:
    lba_bytes: int = 4096
    zone_size_lba: int = 8192  # 32 MiB
    nr_zones: int = 64

    @property
    def zone_bytes(self) -> int:
        return self.lba_bytes * self.zone_size_lba


def _hot_share(pattern: str) -> float:
    return {"paper80": 0.8, "paper60": 0.6}.get(pattern, 0.0)


def read_pages(pattern: str, n: int, rng: np.random.Generator, geo: SynthGeometry) -> np.ndarray:
    """4 KiB page numbers of n random reads for the paper / uniform / zipf patterns."""
    page = 4096
    lo, hi = 10 * MIB // page, 1024 * MIB // page
    if pattern == "zipf":
        span = hi - lo
        ranks = rng.zipf(1.1, size=n)
        ranks = ranks[ranks <= span]
        while ranks.size < n:  # redraw the (rare) ranks beyond the range
            more = rng.zipf(1.1, size=n - ranks.size)
            ranks = np.concatenate([ranks, more[more <= span]])
        perm = np.random.default_rng(12345).permutation(span)
        return lo + perm[ranks - 1]
    cold = rng.integers(lo, hi, size=n)
    share = _hot_share(pattern)
    if share == 0.0:
        return cold
    pages_per_zone = geo.zone_bytes // page
    hot = np.asarray(HOT_ZONES)[rng.integers(0, len(HOT_ZONES), size=n)] * pages_per_zone
    hot += rng.integers(0, pages_per_zone, size=n)
    return np.where(rng.random(n) < share, hot, cold)


def _commands(op: str, slba: np.ndarray, nlb: np.ndarray | int, action: str = "") -> pl.DataFrame:
    opcode = {"read": 2, "write": 1, "zone_mgmt_send": 0x79}[op]
    n = slba.size
    return pl.DataFrame({
        "opcode": np.full(n, opcode, dtype=np.uint8),
        "op": [op] * n if n < 64 else pl.repeat(op, n, eager=True),
        "slba": slba.astype(np.uint64),
        "nlb": np.broadcast_to(np.asarray(nlb, dtype=np.uint32), (n,)).copy(),
        "zone_action": pl.repeat(action, n, eager=True, dtype=pl.String),
    })


def _prefill(zones: range, geo: SynthGeometry, chunk_lba: int) -> pl.DataFrame:
    """Reset every zone, then fill each sequentially with chunk_lba-sized writes."""
    zone_starts = np.asarray(list(zones), dtype=np.uint64) * geo.zone_size_lba
    resets = _commands("zone_mgmt_send", zone_starts, 0, "reset")
    offsets = np.arange(0, geo.zone_size_lba, chunk_lba, dtype=np.uint64)
    writes = _commands("write", (zone_starts[:, None] + offsets[None, :]).ravel(), chunk_lba)
    return pl.concat([resets, writes])


def _interleaved_streams(zones: list[int], geo: SynthGeometry, chunk_lba: int, n: int, streams: int) -> np.ndarray:
    """Start LBAs of n chunk_lba-sized requests from `streams` sequential streams, round robin."""
    per_zone = geo.zone_size_lba // chunk_lba
    seq = (np.asarray(zones, dtype=np.int64)[:, None] * geo.zone_size_lba
           + np.arange(per_zone, dtype=np.int64)[None, :] * chunk_lba).ravel()
    width = -(-seq.size // streams)
    padded = np.full(width * streams, -1, dtype=np.int64)
    padded[: seq.size] = seq
    order = padded.reshape(streams, width).T.ravel()  # stream 0, 1, 2, 3, stream 0, ...
    order = order[order >= 0]
    reps = -(-n // max(1, order.size))
    return np.tile(order, reps)[:n].astype(np.uint64)


def synthesize(pattern: str, reads: int, seed: int, geo: SynthGeometry = SynthGeometry()) -> pl.DataFrame:
    """The commands of a synthetic run, in submission order, without timing columns."""
    if pattern not in PATTERNS:
        raise ZtbpError(f"unknown pattern {pattern!r}; choose one of {', '.join(PATTERNS)}")
    if reads < 0:
        raise ZtbpError("--reads must be ≥ 0")
    rng = np.random.default_rng(seed)
    lba_per_page = 4096 // geo.lba_bytes
    chunk = (128 * 1024) // geo.lba_bytes
    read_zones = range(0, min(geo.nr_zones, (1024 * MIB) // geo.zone_bytes))
    if pattern == "seqwrite":
        zones = list(range(geo.nr_zones))
        resets = _commands("zone_mgmt_send", np.asarray(zones, dtype=np.uint64) * geo.zone_size_lba, 0, "reset")
        writes = _commands("write", _interleaved_streams(zones, geo, chunk, reads, streams=4), chunk)
        return pl.concat([resets, writes])
    fill = _prefill(read_zones, geo, chunk)
    if pattern == "seqread":
        slba = _interleaved_streams(list(read_zones), geo, chunk, reads, streams=4)
        return pl.concat([fill, _commands("read", slba, chunk)])
    pages = read_pages(pattern, reads, rng, geo)
    return pl.concat([fill, _commands("read", pages.astype(np.uint64) * lba_per_page, lba_per_page)])


def add_timing(cmds: pl.DataFrame, seed: int, iops: float = 12_500.0) -> pl.DataFrame:
    """Submission times at `iops`, plausible latencies, and queue / command ids, in the contract's columns."""
    rng = np.random.default_rng(seed + 1)
    n = cmds.height
    gaps = rng.exponential(1e9 / iops, size=n)
    ts = (1_000_000_000 + np.cumsum(gaps)).astype(np.uint64)
    op = cmds["op"].to_numpy()
    base = np.where(op == "read", 80_000.0, np.where(op == "write", 40_000.0, 2_000_000.0))
    lat = (base * rng.lognormal(0.0, 0.35, size=n)).astype(np.uint64)
    idx = np.arange(n)
    return cmds.with_columns(
        pl.Series("ts_ns", ts),
        pl.Series("lat_ns", lat),
        pl.lit(0, dtype=pl.UInt32).alias("ctrl"),
        pl.Series("qid", (1 + idx % 4).astype(np.uint32)),
        pl.Series("cid", ((idx // 4) % 1024).astype(np.uint32)),
        pl.lit(1, dtype=pl.UInt32).alias("nsid"),
        pl.lit(0, dtype=pl.UInt16).alias("status"),
    ).select(NVME_COLUMNS)


def write_run(run: Path, pattern: str, reads: int, seed: int, geo: SynthGeometry = SynthGeometry()) -> dict:
    rp = RunPaths(Path(run))
    rp.raw.mkdir(parents=True, exist_ok=True)
    events = add_timing(synthesize(pattern, reads, seed, geo), seed)
    # The contract is completion order; synthetic completions keep submission order.
    with rp.nvme_csv.open("w") as f:
        f.write(NVME_VERSION_LINE + "\n")
        events.write_csv(f, include_header=True, quote_style="never")
    meta = new_meta(
        device="nvme0n1", lba_bytes=geo.lba_bytes, zone_size_lba=geo.zone_size_lba,
        zone_cap_lba=geo.zone_size_lba, nr_zones=geo.nr_zones, synthetic=True, backend="synth",
        workload={"name": pattern, "reads": reads if pattern != "seqwrite" else 0, "seed": seed,
                  "hot_zones": list(HOT_ZONES) if _hot_share(pattern) else [],
                  "hot_share": _hot_share(pattern)},
        probes={"nvme": {"file": "raw/nvme.csv", "version": 1, "attach": "synthetic"}},
    )
    meta["lost_events"] = {"nvme": 0}
    write_meta(rp, meta)
    return {"run": str(rp.root), "pattern": pattern, "commands": events.height, "seed": seed}
