"""Units, size parsing and the bounds of every number a user gives, shared by every stage (one definition of KiB /
MiB, one table of bounds: LIMITS)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .errors import ZtbpError

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
#: The largest size parse_size takes (1 PiB): beyond any zoned namespace, and far inside 64-bit byte offsets.
MAX_SIZE = 1 << 50
#: The most zones a run may have (meta.json `nr_zones`) and the highest zone id + 1 a trace row may address.
MAX_ZONES = 1 << 24
#: Times and latencies in ns stay below 2^63 (292 years): every analysis may add or subtract them as int64.
MAX_NS = 1 << 63
_SUFFIX = {"": 1, "B": 1, "K": KIB, "KB": KIB, "KIB": KIB, "M": MIB, "MB": MIB, "MIB": MIB, "G": GIB, "GB": GIB,
           "GIB": GIB, "T": GIB * KIB, "TB": GIB * KIB, "TIB": GIB * KIB}


def parse_size(text: str) -> int:
    """A size such as 4096, 4k, 32M, 1G (binary units) in bytes; a ZtbpError saying how to write one otherwise."""
    t = str(text).strip().upper()
    num = t.rstrip("KMGTIB")
    suffix = t[len(num):]
    if not num or suffix not in _SUFFIX:
        raise ZtbpError(f"cannot read size {text!r}: use bytes or K/M/G, e.g. 32M")
    try:
        value = float(num)
    except ValueError:
        raise ZtbpError(f"cannot read size {text!r}: use bytes or K/M/G, e.g. 32M") from None
    out = value * _SUFFIX[suffix]
    if not out > 0 or not float(out).is_integer():
        raise ZtbpError(f"size must be positive and whole, got {text!r}")
    if out > MAX_SIZE:
        raise ZtbpError(f"size {text!r} is beyond 1 PiB (1024T), the largest size ztbp takes")
    return int(out)


_CAP_RE = re.compile(r"\bcap\s+(0x[0-9a-f]+)", re.I)


def zone_capacity(text: str) -> int | None:
    """The first zone's capacity in bytes from `blkzone report` (blkzone counts 512-byte sectors); None when the
    report has no capacity column (an old blkzone)."""
    m = _CAP_RE.search(text)
    return int(m.group(1), 16) * 512 if m else None


def parse_zone_list(text: str, what: str = "zone list") -> tuple[int, ...]:
    """'1,7,11' -> (1, 7, 11): non-negative zone ids; a ZtbpError saying how to write them otherwise."""
    try:
        zones = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ZtbpError(f"cannot read {what} {text!r}: use comma-separated zone ids, e.g. 1,7,11") from None
    if any(not 0 <= z < MAX_ZONES for z in zones):
        raise ZtbpError(f"{what} {text!r}: zone ids are in [0, {MAX_ZONES - 1}]")
    return zones


_TIME_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "": 1_000_000_000}


def parse_outstanding(text: str, what: str = "--outstanding") -> tuple[tuple[int, int], ...]:
    """'4x1,36x4' -> ((4, 1), (36, 4)): the outstanding I/O of each cell of a sweep as fio jobs x queue depth, each
    in LIMITS' "outstanding-jobs" and "outstanding-iodepth", none twice; a ZtbpError saying how otherwise."""
    cells: list[tuple[int, int]] = []
    for item in (x.strip().lower() for x in str(text).split(",")):
        jobs, sep, depth = item.partition("x")
        try:
            cell = (int(jobs), int(depth))
        except ValueError:
            cell = None
        if not sep or cell is None:
            raise ZtbpError(f"cannot read {what} {text!r}: give jobs x queue depth, comma-separated, e.g. 4x1,36x4")
        check_limit("outstanding-jobs", cell[0], f"{what} {item}: jobs")
        check_limit("outstanding-iodepth", cell[1], f"{what} {item}: queue depth")
        if cell in cells:
            raise ZtbpError(f"{what} {text!r}: {item} is given twice")
        cells.append(cell)
    return tuple(cells)


def parse_duration(text: str, what: str = "time") -> int:
    """'1.5s', '250ms', '40us', '100ns' or a bare number of seconds -> ns; a ZtbpError saying how otherwise."""
    t = str(text).strip().lower()
    num = t.rstrip("nsuµm")
    unit = t[len(num):]
    try:
        value = float(num)
    except ValueError:
        value = float("nan")
    if unit not in _TIME_UNITS or not 0 <= value < math.inf:
        raise ZtbpError(f"cannot read {what} {text!r}: use a number with s, ms, us or ns, e.g. 1.5s or 250ms")
    ns = value * _TIME_UNITS[unit]
    if ns >= MAX_NS:
        raise ZtbpError(f"{what} {text!r} is beyond 2^63 ns (292 years)")
    return round(ns)


def parse_window(text: str) -> tuple[int | None, int | None]:
    """'START:END' (either side may be empty) -> (start_ns, end_ns); e.g. '1s:1.5s', ':200ms', '2s:'."""
    start, sep, end = str(text).partition(":")
    if not sep:
        raise ZtbpError(f"cannot read window {text!r}: use START:END from the first command, e.g. 1s:1.5s")
    lo = parse_duration(start, "window start") if start.strip() else None
    hi = parse_duration(end, "window end") if end.strip() else None
    if lo is not None and hi is not None and hi <= lo:
        raise ZtbpError(f"window {text!r}: the end must come after the start")
    return lo, hi


# --- bounds of the numbers a user gives --------------------------------------------------------------------------
def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


@dataclass(frozen=True)
class Bound:
    """A closed (or, with open_lo / open_hi, half-open) range of finite numbers; `integer`: whole numbers only."""

    lo: float
    hi: float
    integer: bool = False
    open_lo: bool = False
    open_hi: bool = False

    def __str__(self) -> str:
        return f"{'(' if self.open_lo else '['}{_num(self.lo)}, {_num(self.hi)}{')' if self.open_hi else ']'}"

    @property
    def kind(self) -> str:
        return "an integer" if self.integer else "a number"

    def contains(self, value: float) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            return False
        if self.integer and not float(value).is_integer():
            return False
        above = value > self.lo if self.open_lo else value >= self.lo
        below = value < self.hi if self.open_hi else value <= self.hi
        return above and below

    def check(self, value: float, what: str) -> float:
        """`value` when it is in range, else a ZtbpError naming `what` and the range."""
        if not self.contains(value):
            raise ZtbpError(f"{what} {value!r} is out of range: give {self.kind} in {self}")
        return value

    def parse(self, text: str) -> int | float:
        """A number from the command line, in range; ValueError (the reason, naming the range) otherwise."""
        try:
            value: int | float = int(text) if self.integer else float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not {self.kind}: give {self.kind} in {self}") from None
        if not self.contains(value):
            raise ValueError(f"{text!r} is out of range: give {self.kind} in {self}")
        return value


#: Every numeric option's bounds, by name (the CLI parses each option with its bound, cli/common.bounded; the stages
#: check the parameters a notebook passes against the same bounds). Defaults lie inside them.
LIMITS: dict[str, Bound] = {
    # analyses
    "nts-mib": Bound(0, 1024, open_lo=True),                  # Natural Transfer Size, MiB (default 4)
    "chain-window": Bound(0, 10**9, integer=True),             # requests a chain stays open for; 0 = unlimited
    "top": Bound(0, MAX_ZONES, integer=True),                  # zones listed; 0 = all
    "rows": Bound(0, 10**6, integer=True),                     # rows listed
    "eps": Bound(1e-6, 1.5),                                   # DBSCAN radius; the cells' features lie in [0, 1]^2
    "min-samples": Bound(1, 10**6, integer=True),
    "cells-per-zone": Bound(1, 4096, integer=True),
    "hot-factor": Bound(0, 1000, open_lo=True),                # multiple of the mean read density
    "alpha": Bound(0, 1, open_lo=True, open_hi=True),          # family-wise false-positive rate
    "seed": Bound(0, 2**31 - 1, integer=True),                 # every random seed (numpy, scikit-learn, fio)
    "cache-mib": Bound(0, 1 << 20, open_lo=True),              # cache size, MiB: up to 1 TiB
    "page-kib": Bound(1, 1024, integer=True),                  # cache page, KiB
    "train-share": Bound(0, 1, open_lo=True, open_hi=True),    # share of the reads learnt on
    "min-gain": Bound(0, 1),                                   # hit-ratio gain
    "rate": Bound(0, 1, open_lo=True),                         # SHARDS sampling rate
    "seeds": Bound(1, 1000, integer=True),                     # SHARDS samples per rate
    "far-t": Bound(0, 1, open_lo=True),                        # free-space share
    "far-line": Bound(-1000, 1000),                            # FAR's slope and intercept
    "bin-s": Bound(1e-6, 86_400),                              # time bin, s
    "queue-depth": Bound(1, 65_536, integer=True),
    "dispatch-window": Bound(1, 65_536, integer=True),
    "max-commands": Bound(1, 10**8, integer=True),
    # streamed datasets and batches
    "window-s": Bound(1e-6, 31_536_000),                       # time window of a partition, s (1 us to a year)
    "zone-parts": Bound(1, 4096, integer=True),
    "chunk-mib": Bound(1, 65_536, integer=True),
    "split-at": Bound(4096, (4 << 30) - 1, integer=True),        # a Perfetto trace file's limit, bytes (under 4 GiB)
    "workers": Bound(1, 1024, integer=True),
    # runs, devices and workloads
    "synth-reads": Bound(1, 10**8, integer=True),              # commands of a synthetic run (held in memory)
    "reads": Bound(1, 10**10, integer=True),                   # reads of a fio workload
    "jobs": Bound(0, 1024, integer=True),                      # fio jobs; 0 = the workload's
    "layer-jobs": Bound(1, 1024, integer=True),
    "iodepth": Bound(0, 65_536, integer=True),                 # queue depth; 0 = the workload's
    "profile-iodepth": Bound(1, 65_536, integer=True),
    "hot-share": Bound(0, 1),
    "zipf": Bound(0, 10, open_lo=True),                        # Zipf exponent
    "zones": Bound(1, MAX_ZONES, integer=True),                # zones of a namespace
    "zone-size": Bound(4 * KIB, 64 * GIB, integer=True),       # bytes; real zoned drives: 64 MiB to 2 GiB
    "nvmevirt-reserve": Bound(MIB, 1 << 40, integer=True),     # bytes of guest memory kept for NVMeVirt
    "zone-limit": Bound(0, MAX_ZONES, integer=True),           # max open / active zones; 0 = no limit
    "lba-bytes": Bound(512, 65_536, integer=True),
    "timeout": Bound(1, 7 * 86_400, integer=True),             # seconds, up to a week
    "cell-timeout": Bound(1, 86_400, integer=True),            # seconds per notebook cell
    "runtime": Bound(1, 86_400, integer=True),                 # seconds of a workload
    "duration": Bound(0, 86_400, integer=True),                # seconds; 0 = none
    "bench-rounds": Bound(1, 100, integer=True),
    "keys": Bound(1, 10**9, integer=True),
    "value-size": Bound(1, 1 << 24, integer=True),             # bytes, up to 16 MiB
    "app-reads": Bound(1, 10**9, integer=True),
    "rounds": Bound(1, 100, integer=True),
    "ab": Bound(0, 50, integer=True),                          # A/B pairs of blocks; 0 = none, 1 is refused
    "ab-reads": Bound(1_000, 10**7, integer=True),             # reads per A/B block
    "outstanding-jobs": Bound(1, 1024, integer=True),          # fio jobs of a regime cell
    "outstanding-iodepth": Bound(1, 65_536, integer=True),     # queue depth per job of a regime cell
    "loop-cache-mib": Bound(1, 1 << 20, integer=True),
    "max-zones": Bound(2, 4096, integer=True),                 # zones profiled: pairs grow as its square
    "threshold": Bound(0, 2, open_lo=True, open_hi=True),      # share of the reference bandwidth
    "threshold-mib": Bound(0, 10**7, open_lo=True),            # MiB/s
    "min-separation": Bound(0, 1),
    "confirm": Bound(0, 100, integer=True),
    "budget": Bound(0, 7 * 86_400),                            # seconds; 0 = no limit
    "seconds": Bound(0, 3600, open_lo=True),                   # seconds per measurement
    "ramp": Bound(0, 3600),
    "span-mib": Bound(0, 1 << 20),                             # MiB; 0 = the whole zone
    # ztbp watch
    "window-commands": Bound(1_000, 2_000_000, integer=True),   # commands per window (held in memory: one window)
    "watch-window-s": Bound(0.1, 86_400),                       # seconds per window
    "watch-order-max-s": Bound(0, 3600),                        # seconds rows are held to order them
    "k": Bound(1, 1000, integer=True),                          # windows in a row before a change (hysteresis)
    "budget-per-day": Bound(0, 1000, integer=True),             # applies a day; 0 = never apply
    "min-interval": Bound(0, 7 * 86_400),                       # seconds between two applies
    "backoff": Bound(0, 30 * 86_400),                           # seconds a rolled-back set is not applied again
    "journal-cap": Bound(1 << 20, 1 << 40, integer=True),       # bytes of the rolling Parquet journal
}


def check_limit(name: str, value: float, what: str | None = None) -> float:
    """`value` when it lies in LIMITS[name], else a ZtbpError naming `what` (default: the option --NAME) and the
    range: the stages refuse a notebook's parameter exactly as the command line refuses the option."""
    return LIMITS[name].check(value, what or f"--{name}")
