"""Parameters and defaults of the device studies (interference profile, zone resets), importable without numpy or
polars: the CLI builds its options from these."""

from __future__ import annotations

from dataclasses import dataclass

from ..units import check_limit

#: A pair of zones interferes when together they reach less than this share of the reference bandwidth: midway
#: between 0.5 (the two zones take turns on one resource) and 1.0 (they run in parallel).
INTERFERENCE_THRESHOLD = 0.75
#: What a pair's total bandwidth is compared with: twice the median solo bandwidth, or the pair's own solos.
REFERENCES: tuple[str, ...] = ("median", "pair")
#: Below this gap between the pair ratios of interfering and independent pairs (share of summed solo bandwidth),
#: the profiler reports no structure: the split is within what repeating a measurement moves.
MIN_SEPARATION = 0.15
#: Interfering and independent pairs must also be this many standard deviations of one measurement apart (pair
#: ratio medians), the deviation measured by repeating measurements during the profile: at 4 the two sides sit
#: two deviations either side of their midpoint, so a pair's side is not a coin toss of the noise.
NOISE_SEPARATION = 4.0
#: Repeated measurements needed before the noise is taken as measured (fewer: the verdict says it is unknown).
MIN_REPEATS = 3
#: The median solo bandwidth may move this much (relative) between the first and the closing solo pass; more
#: means the device or the host changed during the profile, and groups from it are not evidence of structure.
MAX_DRIFT = 0.25
#: Share of measured pairs allowed to contradict the groups (a cross-group pair that interferes, a within-group
#: pair that does not); judged only when every pair was measured (--full-matrix).
MAX_CONTRADICTIONS = 0.1
#: FAR (free-space adaptive runtime zone reset, the study's T): while the device's free-space share is above T a
#: fully invalid zone is reset only once its write pointer is at the zone end; below T the write-pointer
#: threshold is a linear function of the free space.
FAR_T = 0.7
#: FAR's linear threshold below T: T_wp / zone capacity = slope * free share + intercept, clipped to [0, 1].
#: The study gives no coefficients; the default slope 1 / T joins (0, 0) and (T, 1): continuous at T.
FAR_INTERCEPT = 0.0


@dataclass(frozen=True)
class ProfileParams:
    """How the interference profiler measures: one fio job per zone, all at once, for `seconds`."""

    rw: str = "read"
    block_bytes: int = 128 * 1024
    iodepth: int = 4
    seconds: float = 4.0
    ramp_seconds: float = 0.0
    ioengine: str = "io_uring"
    span_mib: float = 0.0  # 0 = the whole zone
    fresh: bool = False  # each measurement reads blocks no earlier one read (defeats a device read cache)
    fill_block_bytes: int = 128 * 1024

    def span_bytes(self, zone_bytes: int) -> int:
        return int(self.span_mib * (1 << 20)) if self.span_mib else zone_bytes

    @property
    def loops(self) -> bool:
        """Measurements run for the whole time, looping over their span (writes: fio resets a zone it finds
        full, zonemode=zbd); fresh reads pass over it once."""
        return not (self.rw == "read" and self.fresh)


@dataclass(frozen=True)
class FarParams:
    """FAR's threshold: T (free-space share) and the linear T_wp below it (share of the zone capacity)."""

    t: float = FAR_T
    slope: float | None = None  # None = 1 / t: the line meets the zone end at T
    intercept: float = FAR_INTERCEPT

    def __post_init__(self) -> None:
        if self.slope is None:
            object.__setattr__(self, "slope", 1 / check_limit("far-t", self.t))

    def check(self) -> None:
        """T, the slope and the intercept in their ranges (units.LIMITS)."""
        check_limit("far-t", self.t)
        assert self.slope is not None
        check_limit("far-line", self.slope, "--far-slope")
        check_limit("far-line", self.intercept, "--far-intercept")

    def threshold(self, free_share: float) -> float:
        """T_wp as a share of the zone capacity at this free-space share."""
        if free_share > self.t:
            return 1.0
        assert self.slope is not None
        return min(1.0, max(0.0, self.slope * free_share + self.intercept))
