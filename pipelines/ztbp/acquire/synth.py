"""`ztbp synth`: write a synthetic run in the run-directory contract (probes/FORMAT.md).

Synthetic runs exercise the analysis exactly as a capture would: the same meta.json and `# ztbp nvme v1` CSV,
`"synthetic": true`, `"backend": "synth"`. Reads are 4 KiB pages; cold reads are uniform over the read region,
by default the paper's [10 MiB, 1 GiB) (clipped to the device; `region=None`: the whole device). Patterns:

- paper80 / paper60 / hotzones: each read goes with probability hot_share (0.8 / 0.6 / 0.8 unless given) to a
  uniformly chosen zone of the hot set (the paper's {1, 7, 11, 15, 19} unless given) at a uniform 4 KiB-aligned
  offset, else to a cold page. With the defaults paper80 and paper60 are the paper's workloads, read for read.
- uniform: every read is a cold page.
- zipf: page popularity follows a Zipf law of exponent `zipf` (1.1 unless given; any exponent > 0) over the
  region's pages, ranks scattered over the region: hot pages, no hot zone.
- hotpage: hot_share (0.3) of the reads go to one 4 KiB page, the middle page of the first hot zone (zone 7 unless
  given); the rest are cold. A hot page, no hot zone.
- hotcells: hot_share (0.5) of the reads go to one 1 MiB cell in each hot zone (the odd zones of the region, at
  most 16, unless given), at a seeded random position in the zone; the rest are cold. Hot cells, no hot zone.
- seqread: 4 interleaved sequential streams of 128 KiB reads over the region's zones.
- seqwrite: resets, then 4 zones written at a time by interleaved 128 KiB sequential writes (no reads).

Every pattern that reads first resets and fills the zones it reads (128 KiB sequential writes; a capture writes 256
KiB a command where the zones allow), so the trace holds resets and writes too (`prefill=False` leaves them out).
`reads` counts read commands (write commands for seqwrite). The geometry — LBA size (512 or 4096), zone size, zone
count — is free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..contract import NVME_COLUMNS, NVME_VERSION_LINE, check_new_run, new_meta, new_run, write_meta
from ..errors import ZtbpError
from ..files import atomic_path, make_dir
from ..paths import RunPaths
from .patterns import DEFAULT_HOT_SHARE, DEFAULT_ZIPF, HOT_CELL_BYTES, HOT_ZONES, PATTERNS, REGION

__all__ = ["HOT_ZONES", "PATTERNS", "SynthGeometry", "SynthOptions", "synthesize", "write_run"]

PAGE = 4096
CHUNK = 128 * 1024
LBA_SIZES = (512, 4096)


@dataclass(frozen=True)
class SynthGeometry:
    lba_bytes: int = 4096
    zone_size_lba: int = 8192  # 32 MiB
    nr_zones: int = 64

    @property
    def zone_bytes(self) -> int:
        return self.lba_bytes * self.zone_size_lba

    @property
    def device_bytes(self) -> int:
        return self.zone_bytes * self.nr_zones

    def check(self) -> None:
        if self.lba_bytes not in LBA_SIZES:
            raise ZtbpError(f"--lba-size {self.lba_bytes}: choose 512 or 4096")
        if self.nr_zones < 1:
            raise ZtbpError("--zones must be ≥ 1")
        if self.zone_bytes < CHUNK or self.zone_bytes % CHUNK:
            raise ZtbpError(f"--zone-size {self.zone_bytes} bytes: give a multiple of 128 KiB, e.g. 32M")


@dataclass(frozen=True)
class SynthOptions:
    """What the read patterns vary; None means the pattern's default (patterns.py)."""

    hot_zones: tuple[int, ...] | None = None
    hot_share: float | None = None
    zipf: float | None = None
    region: tuple[int, int] | None = field(default=REGION)  # cold reads in [start, end) bytes; None: whole device
    prefill: bool = True


@dataclass(frozen=True)
class Plan:
    """The resolved parameters of one synthetic workload."""

    pattern: str
    hot_zones: tuple[int, ...]
    hot_share: float
    zipf: float | None
    lo: int  # cold pages [lo, hi)
    hi: int

    def meta(self) -> dict[str, Any]:
        hot = list(self.hot_zones) if self.pattern in ("paper80", "paper60", "hotzones") else []
        out: dict[str, Any] = {"hot_zones": hot, "hot_share": self.hot_share if hot else 0.0,
                               "region": [self.lo * PAGE, self.hi * PAGE]}
        if self.pattern == "zipf":
            out["zipf"] = self.zipf
        if self.pattern == "hotpage":
            out.update(hot_page_zone=self.hot_zones[0], hot_share=self.hot_share)
        if self.pattern == "hotcells":
            out.update(hot_cell_zones=list(self.hot_zones), hot_share=self.hot_share)
        return out


def plan(pattern: str, geo: SynthGeometry, opts: SynthOptions) -> Plan:
    """Check the options against the geometry and fill in the pattern's defaults."""
    if pattern not in PATTERNS:
        raise ZtbpError(f"unknown pattern {pattern!r}; choose one of {', '.join(PATTERNS)}")
    geo.check()
    start, end = (0, geo.device_bytes) if opts.region is None else (opts.region[0], min(opts.region[1],
                                                                                        geo.device_bytes))
    if start % PAGE or end % PAGE or not 0 <= start < end:
        raise ZtbpError(f"--region {start}:{end}: give 4 KiB-aligned bytes with start < end inside the device "
                        f"({geo.device_bytes} bytes), or 'all'")
    lo, hi = start // PAGE, end // PAGE
    region_zones = range(start // geo.zone_bytes, -(-end // geo.zone_bytes))
    default = {"hotpage": (7 if geo.nr_zones > 7 else 0,),
               "hotcells": tuple(z for z in region_zones if z % 2 == 1)[:16] or (region_zones[0],)}
    hot = tuple(opts.hot_zones) if opts.hot_zones is not None else default.get(pattern, HOT_ZONES)
    if pattern in ("paper80", "paper60", "hotzones", "hotpage", "hotcells"):
        if not hot:
            raise ZtbpError("--hot-zones: give at least one zone")
        bad = [z for z in hot if not 0 <= z < geo.nr_zones]
        if bad:
            raise ZtbpError(f"--hot-zones {bad} are beyond the device's {geo.nr_zones} zones")
        if len(set(hot)) != len(hot):
            raise ZtbpError("--hot-zones lists a zone twice")
    share = opts.hot_share if opts.hot_share is not None else DEFAULT_HOT_SHARE.get(pattern, 0.0)
    if not 0.0 <= share <= 1.0:
        raise ZtbpError(f"--hot-share {share}: give a share in [0, 1]")
    zipf = (opts.zipf if opts.zipf is not None else DEFAULT_ZIPF) if pattern == "zipf" else None
    if zipf is not None and not zipf > 0:
        raise ZtbpError(f"--zipf {zipf}: the exponent must be positive")
    return Plan(pattern, hot, share, zipf, lo, hi)


def zipf_pages(n: int, s: float, lo: int, hi: int, rng: np.random.Generator, seed: int) -> np.ndarray:
    """n pages of [lo, hi) whose popularity ranks follow P(k) ∝ k^-s (k = 1..hi-lo), ranks scattered over the range."""
    span = hi - lo
    cdf = np.cumsum(np.arange(1, span + 1, dtype=np.float64) ** -s)
    ranks = np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"), span - 1)
    return lo + np.random.default_rng(seed + 12345).permutation(span)[ranks]


def read_pages(p: Plan, n: int, rng: np.random.Generator, geo: SynthGeometry, seed: int) -> np.ndarray:
    """4 KiB page numbers of n random reads for the paper / hot / uniform / zipf patterns."""
    if p.pattern == "zipf":
        assert p.zipf is not None
        return zipf_pages(n, p.zipf, p.lo, p.hi, rng, seed)
    cold = rng.integers(p.lo, p.hi, size=n)
    if p.hot_share == 0.0 or p.pattern == "uniform":
        return cold
    pages_per_zone = geo.zone_bytes // PAGE
    if p.pattern == "hotpage":
        hot = np.full(n, p.hot_zones[0] * pages_per_zone + pages_per_zone // 2, dtype=np.int64)
    elif p.pattern == "hotcells":
        cell_pages = min(HOT_CELL_BYTES, geo.zone_bytes) // PAGE
        cells_per_zone = pages_per_zone // cell_pages
        where = np.random.default_rng(seed + 54321).integers(0, cells_per_zone, len(p.hot_zones))
        first = np.asarray(p.hot_zones, dtype=np.int64) * pages_per_zone + where * cell_pages
        hot = first[rng.integers(0, len(p.hot_zones), size=n)] + rng.integers(0, cell_pages, size=n)
    else:
        hot = np.asarray(p.hot_zones, dtype=np.int64)[rng.integers(0, len(p.hot_zones), size=n)] * pages_per_zone
        hot += rng.integers(0, pages_per_zone, size=n)
    return np.where(rng.random(n) < p.hot_share, hot, cold)


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


def _prefill(zones: list[int], geo: SynthGeometry, chunk_lba: int) -> pl.DataFrame:
    """Reset every zone, then fill each sequentially with chunk_lba-sized writes."""
    zone_starts = np.asarray(zones, dtype=np.uint64) * geo.zone_size_lba
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


def _with_fill(zones: list[int], reads: pl.DataFrame, geo: SynthGeometry, opts: SynthOptions) -> pl.DataFrame:
    return pl.concat([_prefill(zones, geo, CHUNK // geo.lba_bytes), reads]) if opts.prefill else reads


def synthesize(pattern: str, reads: int, seed: int, geo: SynthGeometry = SynthGeometry(),
               opts: SynthOptions = SynthOptions()) -> pl.DataFrame:
    """The commands of a synthetic run, in submission order, without timing columns."""
    p = plan(pattern, geo, opts)
    if reads < 0:
        raise ZtbpError("--reads must be ≥ 0")
    rng = np.random.default_rng(seed)
    chunk = CHUNK // geo.lba_bytes
    region_zones = list(range(p.lo * PAGE // geo.zone_bytes, -(-p.hi * PAGE // geo.zone_bytes)))
    if pattern == "seqwrite":
        zones = list(range(geo.nr_zones))
        resets = _commands("zone_mgmt_send", np.asarray(zones, dtype=np.uint64) * geo.zone_size_lba, 0, "reset")
        writes = _commands("write", _interleaved_streams(zones, geo, chunk, reads, streams=4), chunk)
        return pl.concat([resets, writes])
    if pattern == "seqread":
        slba = _interleaved_streams(region_zones, geo, chunk, reads, streams=4)
        return _with_fill(region_zones, _commands("read", slba, chunk), geo, opts)
    pages = read_pages(p, reads, rng, geo, seed)
    lba_per_page = PAGE // geo.lba_bytes
    read_zones = sorted(set(region_zones) | (set(p.hot_zones) if p.hot_share > 0 and pattern != "uniform"
                                             and pattern != "zipf" else set()))
    return _with_fill(read_zones, _commands("read", pages.astype(np.uint64) * lba_per_page, lba_per_page), geo,
                      opts)


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


def write_run(run: Path, pattern: str, reads: int, seed: int, geo: SynthGeometry = SynthGeometry(),
              opts: SynthOptions = SynthOptions(), overwrite: bool = False) -> dict:
    """Write the run: raw/nvme.csv whole, then meta.json. A run already in the directory is refused unless
    `overwrite` (--force); without it the run is written beside the directory and appears in it at once, for this
    command alone (files.publish_new: of two commands that write one new run at the same time, one does and the
    other writes nothing)."""
    target = RunPaths(Path(run))
    check_new_run(target, overwrite)
    p = plan(pattern, geo, opts)
    events = add_timing(synthesize(pattern, reads, seed, geo, opts), seed)
    with new_run(target, overwrite) as rp:
        _write(rp, events, pattern, reads, seed, geo, p)
    return {"run": str(target.root), "pattern": pattern, "commands": events.height, "seed": seed}


def _write(rp: RunPaths, events: pl.DataFrame, pattern: str, reads: int, seed: int, geo: SynthGeometry,
           p: Plan) -> None:
    make_dir(rp.raw)
    # The contract is completion order; synthetic completions keep submission order.
    with atomic_path(rp.nvme_csv) as tmp, tmp.open("x") as f:
        f.write(NVME_VERSION_LINE + "\n")
        events.write_csv(f, include_header=True, quote_style="never")
    meta = new_meta(
        device="nvme0n1", lba_bytes=geo.lba_bytes, zone_size_lba=geo.zone_size_lba,
        zone_cap_lba=geo.zone_size_lba, nr_zones=geo.nr_zones, synthetic=True, backend="synth",
        workload={"name": pattern, "reads": reads if pattern != "seqwrite" else 0, "seed": seed, **p.meta()},
        probes={"nvme": {"file": "raw/nvme.csv", "version": 1, "attach": "synthetic"}},
    )
    meta["lost_events"] = {"nvme": 0}
    write_meta(rp, meta)
