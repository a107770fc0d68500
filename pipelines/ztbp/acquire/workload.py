"""fio job files for the capture workloads (`ztbp workload NAME -o FILE` writes one).

Every read workload reads 4 KiB blocks inside the *read region* (by default the first 1 GiB of the namespace)
and needs that region written first: `prefill_job()` writes it sequentially with fio's zoned mode after the
capture has reset the zones. Read totals are exact: each job section gets `number_ios` (and a matching
`io_size`), and sections are split so that the per-job counts add up to the requested total.

paper80 / paper60 follow the ZTBP paper: a share p (0.8 / 0.6) of the reads go to a uniformly chosen hot zone
of {1, 7, 11, 15, 19} at a uniform 4 KiB offset (fio `random_distribution=zoned_abs` over the hot zones), the
rest to a uniform 4 KiB block in [10 MiB, 1 GiB). The paper ran 36 jobs x QD 4 (80 %) and 48 jobs x QD 4
(60 %); the hot jobs get round(p x jobs) of the jobs and exactly round(p x reads) of the reads.

A real drive's zones may hold less than their size (zone capacity: a ZN540's 2 GiB zones take 1,077 MiB). On such
a device (`zone_cap_bytes` below `zone_bytes`) the prefill writes each zone up to its capacity, and the reads stay
in the written part of every zone: the hot zones' and the cold range's `zoned_abs` specs leave out each zone's tail
past its capacity (0 % of the reads there), their shares in proportion to the bytes each part holds. zipf and mixed,
whose reads spread over the whole region by fio's own distributions, are refused there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ZtbpError
from ..units import KIB, MIB, parse_size, parse_zone_list
from .patterns import HOT_ZONES

__all__ = ["KIB", "MIB", "PRESETS", "Workload", "WorkloadError", "WorkloadOptions", "parse_size", "parse_zone_list"]
BLOCK = 4 * KIB
#: the prefill's writes: 256 KiB where the zone's capacity is a multiple of it, else 128 KiB. Each command is traced:
#: under TCG with the streaming probe attached, 1.5 GiB written in 128 KiB commands took 26 s of a 4,000-read
#: capture (12,288 rows). 256 KiB is what both emulated devices take in one command (QEMU's 512 KiB, NVMeVirt's zn540
#: 256 KiB: MDTS 6), so the commands a test counts are the writes fio issues.
PREFILL_BS, PREFILL_BS_MIN = 256 * KIB, 128 * KIB
PAPER_HOT_ZONES: tuple[int, ...] = HOT_ZONES  # one list of the paper's hot zones (acquire/patterns.py)
PAPER_READS = 1_000_000
COLD_START = 10 * MIB
READ_REGION = 1024 * MIB
#: zonecycle: 64 KiB writes, three passes over the region, at most 4 zones written at once; once the written share
#: of the region passes 0.4, fio resets the zone it is about to write every 1 / 0.05 = 20 writes.
WRITE_ONLY = ("seqwrite", "zonecycle")
CYCLE_BLOCK = 64 * KIB
CYCLE_PASSES = 3
CYCLE_OPEN_ZONES = 4
CYCLE_RESET_THRESHOLD = 0.4
CYCLE_RESET_FREQUENCY = 0.05
#: parts of a zoned_abs spec fio takes (its zone split holds 256 entries)
ZONED_ABS_MAX = 256


class WorkloadError(ZtbpError):
    """A workload was asked for with options that cannot work."""


@dataclass(frozen=True)
class Preset:
    """Defaults of one named workload."""

    kind: str  # hotcold, uniform, zipf, seqwrite, mixed, zonecycle
    jobs: int
    iodepth: int
    hot_share: float = 0.0
    help: str = ""


PRESETS: dict[str, Preset] = {
    "paper80": Preset("hotcold", 36, 4, 0.8, "80 % of 4 KiB random reads on zones 1,7,11,15,19 (36 jobs x QD 4)"),
    "paper60": Preset("hotcold", 48, 4, 0.6, "60 % of 4 KiB random reads on zones 1,7,11,15,19 (48 jobs x QD 4)"),
    "uniform": Preset("uniform", 4, 4, help="uniform 4 KiB random reads over the read region"),
    "zipf": Preset("zipf", 4, 4, help="4 KiB random reads, zipf(1.2) over the read region"),
    "seqwrite": Preset("seqwrite", 1, 1, help="sequential 128 KiB writes filling the read region's zones"),
    "zonecycle": Preset("zonecycle", 1, 4, help="64 KiB zoned random writes, three passes over the region's zones: "
                        "fio resets a full zone it comes back to and, once 40 % of the region is written, a partly "
                        "written one every 20 writes (zone_reset_threshold/frequency)"),
    "mixed": Preset("mixed", 4, 4, help="random reads over the read region plus sequential writes after it"),
}


def fio_seed(seed: int) -> int:
    """fio's randseed for the workload's `seed`. fio keeps 32 bits of randseed and seeds the generators of a job's
    clone t (its thread number) from randseed times t (times a constant), so with consecutive seeds seed 1's clone 2
    drew the offsets of seed 2's clone 1. (seed mod 2^16) * 2^16 + 1 keeps every (seed, clone) pair apart for
    thread numbers below 2^16; seeds 2^16 apart draw alike (tests/test_workload.py)."""
    return (seed % (1 << 16)) << 16 | 1


@dataclass
class Workload:
    """One workload instance: everything needed to write its fio job file and describe it in meta.json."""

    name: str
    reads: int = PAPER_READS
    jobs: int = 0  # 0 = the preset's
    iodepth: int = 0
    device: str = "/dev/nvme0n1"
    zone_bytes: int = 32 * MIB
    nr_zones: int = 64
    zone_cap_bytes: int = 0  # bytes a zone can hold (a real drive's zone capacity); 0: the zone size
    ioengine: str = "io_uring"
    hot_zones: tuple[int, ...] = PAPER_HOT_ZONES
    hot_share: float | None = None
    zipf_theta: float = 1.2
    write_share: float = 0.25
    seed: int = 1
    region_bytes: int = READ_REGION
    preset: Preset = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.name not in PRESETS:
            raise WorkloadError(f"unknown workload '{self.name}'; choose one of: {', '.join(PRESETS)}")
        self.preset = PRESETS[self.name]
        self.jobs = self.jobs or self.preset.jobs
        self.iodepth = self.iodepth or self.preset.iodepth
        if self.hot_share is None:
            self.hot_share = self.preset.hot_share
        self.validate()

    # ---- checks -------------------------------------------------------------------------------------------
    def validate(self) -> None:
        if self.reads < 1:
            raise WorkloadError(f"--reads must be at least 1, got {self.reads}")
        if self.jobs < 1 or self.iodepth < 1:
            raise WorkloadError(f"--jobs and --iodepth must be at least 1 (got {self.jobs}, {self.iodepth})")
        if self.zone_bytes % BLOCK or self.zone_bytes <= 0:
            raise WorkloadError(f"zone size must be a positive multiple of 4 KiB, got {self.zone_bytes} bytes")
        if self.zone_cap_bytes and (self.zone_cap_bytes % BLOCK or not 0 < self.zone_cap_bytes <= self.zone_bytes):
            raise WorkloadError(f"zone capacity must be a multiple of 4 KiB up to the zone size, got "
                                f"{self.zone_cap_bytes} bytes for zones of {self.zone_bytes} bytes")
        if self.capped:
            if self.preset.kind in ("zipf", "mixed"):
                raise WorkloadError(f"workload '{self.name}' reads by fio's own distribution over the whole region, "
                                    f"past the capacity of its zones ({self.cap_bytes // MIB} MiB of "
                                    f"{self.zone_bytes // MIB} MiB): use paper80, paper60 or uniform there")
            if 2 * self.region_zones > ZONED_ABS_MAX:
                raise WorkloadError(f"reads kept within the zone capacity over {self.region_zones} zones need "
                                    f"{2 * self.region_zones} parts of fio's zoned_abs (it takes {ZONED_ABS_MAX}): "
                                    "give a smaller --region")
            if self.preset.kind == "hotcold" and self.cap_bytes <= COLD_START:
                raise WorkloadError(f"the cold reads start at {COLD_START // MIB} MiB, past the zone capacity "
                                    f"({self.cap_bytes // MIB} MiB)")
        if self.region_bytes % self.zone_bytes:
            raise WorkloadError(f"the read region ({self.region_bytes // MIB} MiB) must be a whole number of "
                                f"zones of {self.zone_bytes // MIB} MiB")
        need = self.region_zones + (self.write_zones if self.preset.kind == "mixed" else 0)
        if need > self.nr_zones:
            raise WorkloadError(f"workload '{self.name}' needs {need} zones of {self.zone_bytes // MIB} MiB but "
                                f"the namespace has {self.nr_zones}; use more zones (--zones) or a smaller "
                                "region")
        if self.preset.kind == "hotcold":
            assert self.hot_share is not None
            if not 0 < self.hot_share < 1:
                raise WorkloadError(f"--hot-share must be between 0 and 1, got {self.hot_share}")
            if self.jobs < 2:
                raise WorkloadError(f"{self.name} needs at least 2 jobs (hot and cold), got {self.jobs}")
            bad = [z for z in self.hot_zones if z < 0 or (z + 1) * self.zone_bytes > self.region_bytes]
            if bad or not self.hot_zones:
                raise WorkloadError(f"hot zones {bad or '[]'} are outside the read region of "
                                    f"{self.region_zones} zones")
            if len(set(self.hot_zones)) != len(self.hot_zones):
                raise WorkloadError(f"hot zones repeat: {list(self.hot_zones)}")

    # ---- geometry -----------------------------------------------------------------------------------------
    @property
    def region_zones(self) -> int:
        return self.region_bytes // self.zone_bytes

    @property
    def cap_bytes(self) -> int:
        """The bytes of a zone that can be written, and so read back."""
        return self.zone_cap_bytes or self.zone_bytes

    @property
    def capped(self) -> bool:
        """The zones hold less than their size."""
        return self.cap_bytes < self.zone_bytes

    @property
    def write_zones(self) -> int:
        """Zones the mixed workload writes into (after the read region)."""
        writes = self.writes
        return max(1, -(-writes * BLOCK // self.zone_bytes))

    @property
    def writes(self) -> int:
        if self.preset.kind == "mixed":
            return max(1, round(self.reads * self.write_share))
        if self.preset.kind == "seqwrite":
            return self.region_zones * self.cap_bytes // (128 * KIB)
        if self.preset.kind == "zonecycle":
            return CYCLE_PASSES * self.region_bytes // CYCLE_BLOCK
        return 0

    @property
    def total_reads(self) -> int:
        return 0 if self.preset.kind in WRITE_ONLY else self.reads

    @property
    def expected_commands(self) -> int:
        """NVMe commands a capture of this workload issues: zone resets, the prefill's writes (counted as 128 KiB
        commands: a device with a smaller transfer limit splits them), the workload's reads and writes (the capture
        leaves room for other splits too)."""
        prefill = len(self.prefill_zones) * self.cap_bytes // PREFILL_BS_MIN  # a device may split each write
        return len(self.reset_zones) + prefill + self.total_reads + self.writes

    @property
    def prefill_bs(self) -> int:
        """The prefill's write size: PREFILL_BS where the zone's capacity holds a whole number of them."""
        return PREFILL_BS if self.cap_bytes % PREFILL_BS == 0 else PREFILL_BS_MIN

    @property
    def prefill_zones(self) -> range:
        """Zones the capture resets and writes before the workload (those the reads touch)."""
        return range(0, 0 if self.preset.kind in WRITE_ONLY else self.region_zones)

    @property
    def reset_zones(self) -> range:
        """Zones reset before the workload: the prefilled ones, plus the ones the workload writes."""
        if self.preset.kind in WRITE_ONLY:
            return range(0, self.region_zones)
        if self.preset.kind == "mixed":
            return range(0, self.region_zones + self.write_zones)
        return self.prefill_zones

    def hot_split(self) -> tuple[int, int, int, int]:
        """(hot jobs, cold jobs, hot reads, cold reads) of a hot/cold workload."""
        assert self.hot_share is not None
        hot_jobs = min(self.jobs - 1, max(1, round(self.hot_share * self.jobs)))
        hot_reads = round(self.hot_share * self.reads)
        return hot_jobs, self.jobs - hot_jobs, hot_reads, self.reads - hot_reads

    def zoned_abs_spec(self) -> tuple[int, int, str]:
        """(offset, size, spec) of the hot jobs: equal shares of the hot zones (their first cap_bytes), 0 % for the
        gaps."""
        zones = sorted(self.hot_zones)
        zb, cap = self.zone_bytes, self.cap_bytes
        shares = _shares_by_size(100, [1] * len(zones))  # integers that differ by at most one
        parts: list[str] = []
        for i, z in enumerate(zones):
            if i:
                gap = (z - zones[i - 1] - 1) * zb + zb - cap
                if gap:
                    parts.append(f"0/{_size(gap)}")
            parts.append(f"{shares[i]}/{_size(cap)}")
        offset = zones[0] * zb
        size = zones[-1] * zb + cap - offset
        return offset, size, ":".join(parts)

    def readable_spec(self, start: int) -> tuple[int, str]:
        """(size, zoned_abs spec) of uniform reads over [start, region) that keep to the first cap_bytes of every
        zone: each zone's written part gets reads in proportion to its bytes, its tail past the capacity none."""
        zb, cap = self.zone_bytes, self.cap_bytes
        spans: list[tuple[int, int]] = []  # (readable bytes, tail bytes) of each zone from `start` on
        for z in range(start // zb, self.region_zones):
            lo = max(start, z * zb)
            spans.append((max(0, z * zb + cap - lo), (z + 1) * zb - max(lo, z * zb + cap)))
        end = max(i for i, (r, _) in enumerate(spans) if r)  # no tail after the last written part
        shares = _shares_by_size(100, [r for r, _ in spans[:end + 1]])
        parts: list[str] = []
        for i, (readable, tail) in enumerate(spans[:end + 1]):
            if readable:
                parts.append(f"{shares[i]}/{_size(readable)}")
            if tail and i < end:
                parts.append(f"0/{_size(tail)}")
        size = sum(r + t for r, t in spans[:end]) + spans[end][0]
        return size, ":".join(parts)

    def _uniform_reads(self, start: int) -> list[str]:
        """fio options of uniform 4 KiB reads over [start, region): within the zone capacity on a capped device."""
        if not self.capped:
            return [f"offset={start}", f"size={self.region_bytes - start}"]
        size, spec = self.readable_spec(start)
        return [f"offset={start}", f"size={size}", f"random_distribution=zoned_abs:{spec}"]

    # ---- job files ----------------------------------------------------------------------------------------
    def _global(self) -> list[str]:
        return [
            "[global]",
            f"filename={self.device}",
            f"ioengine={self.ioengine}",
            "direct=1",
            "thread=1",
            "group_reporting=1",
            f"randseed={fio_seed(self.seed)}",
            # fio (3.33, Debian 12's) ignores randseed while randrepeat is on, its default: every seed gave the
            # same offsets, so the loop's rounds re-read the pages of the round before (tests/test_workload.py)
            "randrepeat=0",
        ]

    def _read_sections(self, label: str, count: int, jobs: int, extra: list[str]) -> list[str]:
        """Sections with `jobs` jobs that do exactly `count` 4 KiB random reads in total."""
        out: list[str] = []
        for n_jobs, per_job, suffix in _split_counts(count, jobs):
            out += [
                "",
                f"[{label}{suffix}]",
                "rw=randread",
                f"bs={BLOCK // KIB}k",
                f"iodepth={self.iodepth}",
                f"numjobs={n_jobs}",
                "norandommap=1",
                f"number_ios={per_job}",
                f"io_size={per_job * BLOCK}",
                *extra,
            ]
        return out

    def fio_job(self) -> str:
        """The workload's fio job file (the measured part; the prefill is separate)."""
        kind = self.preset.kind
        lines = [f"; ztbp workload {self.name}: {self.describe_line()}", f"; preset: {self.preset.help}"]
        lines += self._global()
        if kind == "hotcold":
            hot_jobs, cold_jobs, hot_reads, cold_reads = self.hot_split()
            offset, size, spec = self.zoned_abs_spec()
            lines += self._read_sections("hot", hot_reads, hot_jobs, [
                f"offset={offset}", f"size={size}", f"random_distribution=zoned_abs:{spec}"])
            lines += self._read_sections("cold", cold_reads, cold_jobs, self._uniform_reads(COLD_START))
        elif kind == "uniform":
            lines += self._read_sections("uniform", self.reads, self.jobs, self._uniform_reads(0))
        elif kind == "zipf":
            lines += self._read_sections("zipf", self.reads, self.jobs, [
                "offset=0", f"size={self.region_bytes}", f"random_distribution=zipf:{self.zipf_theta}"])
        elif kind == "mixed":
            lines += self._read_sections("read", self.reads, max(1, self.jobs - 1), [
                "offset=0", f"size={self.region_bytes}"])
            lines += self._write_section("write", self.region_bytes, self.write_zones * self.zone_bytes,
                                         self.writes * BLOCK, BLOCK)
        elif kind == "zonecycle":
            lines += ["", "[cycle]", "rw=randwrite", "zonemode=zbd", f"bs={CYCLE_BLOCK // KIB}k",
                      f"iodepth={self.iodepth}", "numjobs=1", "offset=0", f"size={self.region_bytes}",
                      f"io_size={self.writes * CYCLE_BLOCK}", f"max_open_zones={CYCLE_OPEN_ZONES}",
                      f"zone_reset_threshold={CYCLE_RESET_THRESHOLD}",
                      f"zone_reset_frequency={CYCLE_RESET_FREQUENCY}"]
        elif kind == "seqwrite":
            lines += self._write_section("fill", 0, self.region_bytes, self.region_zones * self.cap_bytes,
                                         128 * KIB)
        return "\n".join(lines) + "\n"

    def _write_section(self, label: str, offset: int, size: int, io_size: int, bs: int) -> list[str]:
        return [
            "",
            f"[{label}]",
            "rw=write",
            "zonemode=zbd",
            f"bs={bs // KIB}k",
            "iodepth=1",
            "numjobs=1",
            f"offset={offset}",
            f"size={size}",
            f"io_size={io_size}",
        ]

    def prefill_job(self) -> str | None:
        """fio job that writes the zones the reads need (after the capture has reset them), or None."""
        zones = self.prefill_zones
        if not zones:
            return None
        size = len(zones) * self.zone_bytes
        lines = [f"; ztbp prefill for {self.name}: write zones {zones.start}..{zones.stop - 1} sequentially"
                 + (f", each up to its capacity ({self.cap_bytes // MIB} MiB)" if self.capped else "")]
        lines += self._global()
        # fio's zoned mode moves on to the next zone at a zone's capacity: io_size is what the zones hold
        lines += self._write_section("prefill", zones.start * self.zone_bytes, size, len(zones) * self.cap_bytes,
                                     self.prefill_bs)
        return "\n".join(lines) + "\n"

    def describe_line(self) -> str:
        cap = f" cap={self.cap_bytes // MIB}MiB" if self.capped else ""
        return (f"reads={self.total_reads} writes={self.writes} jobs={self.jobs} iodepth={self.iodepth} "
                f"zone={self.zone_bytes // MIB}MiB{cap} region={self.region_bytes // MIB}MiB")

    def meta(self) -> dict[str, Any]:
        """The `workload` object of meta.json."""
        d: dict[str, Any] = {
            "name": self.name,
            "kind": self.preset.kind,
            "reads": self.total_reads,
            "writes": self.writes,
            "jobs": self.jobs,
            "iodepth": self.iodepth,
            "block_bytes": BLOCK,
            "ioengine": self.ioengine,
            "region_bytes": self.region_bytes,
            "prefill_zones": [self.prefill_zones.start, self.prefill_zones.stop],
            "reset_zones": [self.reset_zones.start, self.reset_zones.stop],
            "seed": self.seed,
        }
        if self.capped:
            d["zone_cap_bytes"] = self.cap_bytes
        if self.preset.kind == "hotcold":
            hot_jobs, cold_jobs, hot_reads, cold_reads = self.hot_split()
            d.update(hot_zones=list(self.hot_zones), hot_share=self.hot_share, hot_jobs=hot_jobs,
                     cold_jobs=cold_jobs, hot_reads=hot_reads, cold_reads=cold_reads,
                     zoned_abs=self.zoned_abs_spec()[2], cold_range=[COLD_START, self.region_bytes])
        if self.preset.kind == "zipf":
            d["zipf_theta"] = self.zipf_theta
        return d

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("preset", None)
        return d


def _size(n: int) -> str:
    """Bytes as fio size text (exact)."""
    for unit, mult in (("G", 1 << 30), ("M", MIB), ("K", KIB)):
        if n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


def _shares_by_size(total: int, sizes: list[int]) -> list[int]:
    """Split `total` into integers in proportion to `sizes` (largest remainders first, ties to the earlier part)."""
    whole = sum(sizes)
    exact = [total * s / whole for s in sizes]
    shares = [int(x) for x in exact]
    for i in sorted(range(len(sizes)), key=lambda i: (shares[i] - exact[i], i))[:total - sum(shares)]:
        shares[i] += 1
    return shares


def _split_counts(count: int, jobs: int) -> list[tuple[int, int, str]]:
    """Split `count` I/Os over `jobs` jobs as (n_jobs, per_job, section suffix) groups with exact total."""
    if count <= 0:
        return []
    jobs = min(jobs, count)
    per, extra = divmod(count, jobs)
    groups: list[tuple[int, int, str]] = []
    if extra:
        groups.append((extra, per + 1, "-a"))
    if jobs - extra:
        groups.append((jobs - extra, per, "-b" if extra else ""))
    return groups


@dataclass(frozen=True)
class WorkloadOptions:
    """What a user chose for a workload before the device is known (the options of `ztbp workload` / `capture`)."""

    name: str = "paper80"
    reads: int = PAPER_READS
    jobs: int = 0
    iodepth: int = 0
    hot_zones: tuple[int, ...] = PAPER_HOT_ZONES
    hot_share: float | None = None
    ioengine: str = "io_uring"
    seed: int = 1
    region_bytes: int = READ_REGION

    def build(self, *, device: str, zone_bytes: int, nr_zones: int, zone_cap_bytes: int | None = None) -> Workload:
        """The workload on a device of this geometry (checked: WorkloadError when it cannot work there);
        `zone_cap_bytes` None: the zones hold their size."""
        return Workload(name=self.name, reads=self.reads, jobs=self.jobs, iodepth=self.iodepth, device=device,
                        zone_bytes=zone_bytes, nr_zones=nr_zones, zone_cap_bytes=zone_cap_bytes or 0,
                        ioengine=self.ioengine, hot_zones=self.hot_zones,
                        hot_share=self.hot_share, seed=self.seed, region_bytes=self.region_bytes)
