"""The project's read model for NVMeVirt (vm/read-model/ztbp_read_model.c, built into the module with build.sh
--read-model) as the analyses replay it: which cache policy the device runs, what its hits and misses cost, and
whether a hit skips the NAND read — read from the module parameters it was loaded with.

`ReadModel.fork_as_is()` is the fork's own read path (analysis/device_model.py: its priority LRU keyed by start LBA,
its three charges); a module built without --read-model runs exactly that. The defaults of `ReadModel()` are the C
file's (tests/test_read_model.py holds the two to each other): the paper's zone-priority LRU over 4 KiB pages, a
hit served from the controller's DRAM, a miss priced as a flash read (docs/metrics.md, "A device whose speed comes
from its cache", gives the figures' sources).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..errors import ZtbpError
from .device_model import (
    CACHE_ENTRIES,
    HIT_FACTOR,
    LISTED_MISS_FACTOR,
    MISS_FACTOR,
    SMALL_BYTES,
    Profile,
    wrap_int32,
)

POLICIES = ("fork", "lru", "zone_lru")
#: ztbp_read_model.c ZTBP_MAX_ENTRIES
MAX_ENTRIES = 1 << 24
#: the firmware figures a parameter may hold, ns (one second)
MAX_NS = 1_000_000_000
_WORD = re.compile(r"([a-z_]+)=(\S*)")


@dataclass(frozen=True)
class ReadModel:
    """A read model as loaded: `policy`, `entries` (start LBAs for fork, 4 KiB pages otherwise), `hit_ns` and
    `miss_ns` (None: the fork's charge from the build's FW_* constants), `shortcut` (a listed-zone miss with the
    check on costs the fork's 7 µs charge), `skip_nand` (a hit is served from DRAM without the NAND read)."""

    policy: str = "zone_lru"
    entries: int = CACHE_ENTRIES
    hit_ns: int | None = 6_200
    miss_ns: int | None = 65_000
    shortcut: bool = False
    skip_nand: bool = True

    @classmethod
    def fork_as_is(cls) -> ReadModel:
        return cls(policy="fork", hit_ns=None, miss_ns=None, shortcut=True, skip_nand=False)

    @classmethod
    def from_params(cls, params: str) -> ReadModel:
        """The model of a module loaded with `params` (insmod's name=value words; other parameters — memmap_start,
        cpus, ... — are the module's own and ignored here), the C file's defaults for what they leave out."""
        m = cls()
        for name, value in _WORD.findall(params or ""):
            if name == "policy":
                if value not in POLICIES:
                    raise ZtbpError(f"read model policy={value!r}: one of {', '.join(POLICIES)}")
                m = replace(m, policy=value)
            elif name == "entries":
                m = replace(m, entries=_int(name, value, 1, MAX_ENTRIES))
            elif name in ("hit_ns", "miss_ns"):
                ns = _int(name, value, -MAX_NS, MAX_NS)
                m = replace(m, **{name: None if ns < 0 else ns})
            elif name in ("shortcut", "skip_nand"):
                m = replace(m, **{name: _bool(name, value)})
        return m

    def params(self) -> str:
        """The module parameters that load this model (the inverse of from_params)."""
        ns = {k: -1 if v is None else v for k, v in (("hit_ns", self.hit_ns), ("miss_ns", self.miss_ns))}
        return (f"policy={self.policy} entries={self.entries} hit_ns={ns['hit_ns']} miss_ns={ns['miss_ns']} "
                f"shortcut={int(self.shortcut)} skip_nand={int(self.skip_nand)}")

    def scaled(self, factor: int) -> ReadModel:
        """The same device `factor` times slower: its own figures × factor (the fork's charges scale with the
        build's --slow already)."""
        if factor < 1:
            raise ZtbpError(f"scale {factor}: a positive integer")
        return replace(self, hit_ns=None if self.hit_ns is None else self.hit_ns * factor,
                       miss_ns=None if self.miss_ns is None else self.miss_ns * factor)

    def entry_hot(self, check_on: bool, listed: bool) -> bool:
        """Whether a read's entries go to the protected segment (ztbp_entry_hot)."""
        if self.policy == "fork":
            return not check_on or listed
        return self.policy == "zone_lru" and check_on and listed

    def firmware_ns(self, p: Profile, hit: bool, check_on: bool, listed: bool, nbytes: int) -> int:
        """The firmware time of one read, ns (ztbp_charge; the fork's charges wrap in 32 bits as it computes them)."""
        if hit:
            return self.hit_ns if self.hit_ns is not None else wrap_int32(p.fw_read * HIT_FACTOR)
        if self.shortcut and check_on and listed:
            return wrap_int32(p.fw_4kb_read * LISTED_MISS_FACTOR)
        if self.miss_ns is not None:
            return self.miss_ns
        return wrap_int32((p.fw_4kb_read if nbytes <= SMALL_BYTES else p.fw_read) * MISS_FACTOR)

    def keys_by_page(self) -> bool:
        """lru and zone_lru look up every 4 KiB page of a read; fork its start LBA once."""
        return self.policy != "fork"


def _int(name: str, value: str, lo: int, hi: int) -> int:
    try:
        n = int(value, 0)
    except ValueError:
        raise ZtbpError(f"read model {name}={value!r}: give a whole number") from None
    if not lo <= n <= hi:
        raise ZtbpError(f"read model {name}={n}: outside {lo:,}..{hi:,}")
    return n


def _bool(name: str, value: str) -> bool:
    # the kernel's bool parameters: 1/0, y/n, Y/N (param_set_bool, kstrtobool)
    if value[:1] in ("1", "y", "Y"):
        return True
    if value[:1] in ("0", "n", "N"):
        return False
    raise ZtbpError(f"read model {name}={value!r}: 1 or 0")

