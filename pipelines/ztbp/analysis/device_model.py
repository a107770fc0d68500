"""NVMeVirt's read service time as the project's fork computes it, in closed form: firmware time by class, the NAND
read, the channel and PCIe transfers. Importable without numpy or polars (meta.json records it at capture time);
analysis/device_replay.py applies it to a trace, request by request, with the device's cache replayed.

Read from the fork's source (GPL-2.0; described here in the project's own words and numbers, no code of it):

- Firmware time (`zns_read`, zns_read_write.c, with ZONE_CLUSTER_FEATURE defined). The cache is asked first
  (`get` with the command's start LBA); on a miss the LBA is `put` in it. Then the read's start is moved by:
  a hit, FW_READ_LATENCY × 1,000 ns, whatever the zone or size (its comment says 1 µs; it is 130 µs on zn540);
  a miss with the cluster check on (SET received, no STOP since) in a listed zone, FW_4KB_READ_LATENCY × 7,000 ns
  whatever the size; any other miss, FW_4KB_READ_LATENCY × 1,000,000 ns for ≤ 4 KiB, FW_READ_LATENCY ×
  1,000,000 ns above (both commented "1000us": 1,000 µs and 130,000 µs on zn540). The constants are `int`
  fields of `ssdparams` (ssd.c `ssd_init_params`), so each product is 32-bit arithmetic: the kernel builds with
  wrapping signed overflow, and the result is sign-extended into the 64-bit clock (`wrap_int32`). With the
  prototype's FW_*READ_LATENCY of 32,150 (meant as ns by upstream NVMeVirt, multiplied here as if µs) a miss is
  +2.09 s at --slow 1 and −0.12 s at --slow 2.
- NAND (`ssd_advance_nand`, ssd.c), after the firmware time, for a hit as for a miss: the read is cut at flash-page
  boundaries (`zns_read`'s loop over its 4 KiB pages); each piece waits for its die (`next_lun_avail_time`),
  takes NAND_4KB_READ_LATENCY when it is exactly 4 KiB, NAND_READ_LATENCY otherwise, then its channel transfer;
  the die stays busy until that transfer ends. Pieces on one die follow each other; on different dies they overlap.
- Transfers (channel_model.c `chmodel_request`): ⌊128 · 10⁹ / (MB/s · 2²⁰)⌋ ns per 128 bytes (+ FW_CH_XFER_LATENCY
  per 4 KiB, ssd.c `ssd_init_ch`); then PCIe for the whole command (`ssd_advance_pcie`, not interleaved). A
  transfer asked for before the channel's current time, or 98,304 slots of 4 µs (393 ms) or more after it, is
  not charged (the second logs "Need to increase array size"). Credits per 4 µs slot are
  ⌊⌊MB/s · 2²⁰ · 4,000 / 10⁹⌋ / 128⌋; at 0 (zn540 at --slow ≥ 15, prototype at ≥ 26) the model divides by zero
  on the first transfer it charges.
- `--slow N` (build.sh) multiplies every NAND_*/FW_* latency define of ssd_config.h by N — FW_4KB_READ_LATENCY,
  FW_READ_LATENCY, FW_CH_XFER_LATENCY and FW_READ_BUF_LATENCY (unused by reads; the prototype's comes from the
  command line and is not scaled) included — and divides NAND_CHANNEL_BANDWIDTH and PCIE_BANDWIDTH by N in
  integer arithmetic (450 / 20 = 22 MB/s).

A prediction here ignores queueing: no other command holds the die, the channel or PCIe (see
analysis/device_replay.py for what that leaves out).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import ZtbpError

#: channel_model.h: UNIT_XFER_SIZE bytes per credit, UNIT_TIME_INTERVAL ns per slot, NR_CREDIT_ENTRIES slots
UNIT_XFER_BYTES = 128
SLOT_NS = 4_000
SLOTS = 98_304
#: how far ahead of its current time the channel model charges a transfer (393.216 ms)
CHANNEL_WINDOW_NS = SLOTS * SLOT_NS
#: ssd.c ssd_init_params: 512-byte sectors, 8 to a 4 KiB mapping page
SECTOR_BYTES = 512
PAGE_BYTES = 4096
#: zns_ftl.c: the cache the read path asks, createLRUCache(cache_64M) — entries, one per start LBA
CACHE_ENTRIES = 16_384
#: zns_read_write.c zns_read: the factors it applies to FW_*READ_LATENCY (ns per unit of the constant)
HIT_FACTOR = 1_000
LISTED_MISS_FACTOR = 7_000
MISS_FACTOR = 1_000_000
#: a read of at most this many bytes is "4 KiB" for the firmware time (LBA_TO_BYTE(nr_lba) <= KB(4))
SMALL_BYTES = 4096


@dataclass(frozen=True)
class Profile:
    """One BASE_SSD of ssd_config.h as build.sh builds it (`slow`: its --slow factor already applied)."""

    name: str
    base_ssd: str
    fw_4kb_read: int  # FW_4KB_READ_LATENCY
    fw_read: int  # FW_READ_LATENCY
    nand_4kb_read_ns: int  # NAND_4KB_READ_LATENCY_LSB/MSB/CSB (equal in both profiles)
    nand_read_ns: int  # NAND_READ_LATENCY_LSB/MSB/CSB
    channel_mbs: int  # NAND_CHANNEL_BANDWIDTH (MB() is MiB: << 20)
    pcie_mbs: int  # PCIE_BANDWIDTH
    fw_ch_xfer_ns: int  # FW_CH_XFER_LATENCY, per 4 KiB of channel transfer
    flash_page: int  # FLASH_PAGE_SIZE (bytes): the NAND read unit, and MAX_CH_XFER_SIZE
    oneshot_page: int  # ONESHOT_PAGE_SIZE: consecutive ones of a zone go to consecutive dies
    channels: int  # NAND_CHANNELS
    luns_per_channel: int  # LUNS_PER_NAND_CH
    dies_per_zone: int  # DIES_PER_ZONE
    slow: int = 1

    def built(self, slow: int) -> Profile:
        """The profile as `build.sh --slow slow` leaves it: latencies × slow, bandwidths // slow."""
        if isinstance(slow, bool) or not isinstance(slow, int) or slow < 1:
            raise ZtbpError(f"--slow {slow!r}: NVMeVirt's build takes a positive integer")
        if slow == 1:
            return self
        return replace(self, fw_4kb_read=self.fw_4kb_read * slow, fw_read=self.fw_read * slow,
                       nand_4kb_read_ns=self.nand_4kb_read_ns * slow, nand_read_ns=self.nand_read_ns * slow,
                       channel_mbs=self.channel_mbs // slow, pcie_mbs=self.pcie_mbs // slow,
                       fw_ch_xfer_ns=self.fw_ch_xfer_ns * slow, slow=slow)


PROFILES: dict[str, Profile] = {
    "zn540": Profile("zn540", "WD_ZN540", fw_4kb_read=1, fw_read=130, nand_4kb_read_ns=5_000, nand_read_ns=5_800,
                     channel_mbs=450, pcie_mbs=3_050, fw_ch_xfer_ns=0, flash_page=32 << 10,
                     oneshot_page=96 << 10, channels=8, luns_per_channel=4, dies_per_zone=32),
    "prototype": Profile("prototype", "ZNS_PROTOTYPE", fw_4kb_read=37_540 - 7_390 + 2_000,
                         fw_read=37_540 - 7_390 + 2_000, nand_4kb_read_ns=25_485, nand_read_ns=40_950,
                         channel_mbs=800, pcie_mbs=3_200, fw_ch_xfer_ns=413, flash_page=64 << 10,
                         oneshot_page=128 << 10, channels=8, luns_per_channel=16, dies_per_zone=1),
}


def profile(name: str, slow: int = 1) -> Profile:
    """The named profile (build.sh --profile) built with --slow `slow`."""
    if name not in PROFILES:
        raise ZtbpError(f"unknown NVMeVirt profile {name!r}: choose one of {', '.join(PROFILES)}")
    return PROFILES[name].built(slow)


def wrap_int32(x: int) -> int:
    """x as a 32-bit signed int computes it (two's complement wrap), the value added to the 64-bit clock."""
    x &= 0xFFFF_FFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def firmware_ns(p: Profile, listed: bool, hit: bool, cluster_on: bool, small: bool) -> int:
    """The firmware time zns_read adds before the NAND read (ns; negative when the product wrapped so)."""
    if hit:
        return wrap_int32(p.fw_read * HIT_FACTOR)
    if cluster_on and listed:
        return wrap_int32(p.fw_4kb_read * LISTED_MISS_FACTOR)
    return wrap_int32((p.fw_4kb_read if small else p.fw_read) * MISS_FACTOR)


def unit_ns(mbs: int, extra_per_4k_ns: int = 0) -> int:
    """ns per 128-byte unit of a channel_model of `mbs` MB/s: BANDWIDTH_TO_TX_TIME (+ the firmware's per-unit share
    of extra_per_4k_ns, as ssd_init_ch adds it)."""
    return UNIT_XFER_BYTES * 1_000_000_000 // (mbs << 20) + extra_per_4k_ns * UNIT_XFER_BYTES // 4096


def transfer_ns(mbs: int, nbytes: int, extra_per_4k_ns: int = 0) -> int:
    """An uncontended transfer of nbytes: whole 128-byte units of unit_ns each."""
    return -(-nbytes // UNIT_XFER_BYTES) * unit_ns(mbs, extra_per_4k_ns)


def credits_per_slot(mbs: int) -> int:
    """BANDWIDTH_TO_MAX_CREDITS: 128-byte units a channel moves per 4 µs slot (0: the model divides by zero)."""
    return (mbs << 20) * SLOT_NS // 1_000_000_000 // UNIT_XFER_BYTES


def read_chunks(p: Profile, slba: int, nlb: int, zone_lbas: int) -> list[tuple[int, int]]:
    """(die, bytes) of each NAND read of a command of nlb 512-byte LBAs from slba: its 4 KiB pages cut at
    flash-page boundaries, as zns_read's loop does; a zone's pages start on die (zone × DIES_PER_ZONE) mod the
    dies, and each one-shot page of the zone goes to the next of its DIES_PER_ZONE dies (`__lpn_to_ppa`)."""
    per_oneshot = p.oneshot_page // PAGE_BYTES
    per_flash = p.flash_page // PAGE_BYTES
    zone_pages = zone_lbas * SECTOR_BYTES // PAGE_BYTES
    lpn, last = slba * SECTOR_BYTES // PAGE_BYTES, (slba + nlb - 1) * SECTOR_BYTES // PAGE_BYTES
    out = []
    while lpn <= last:
        zone, off = divmod(lpn, zone_pages)
        pages = min(last - lpn + 1, per_flash - off % per_oneshot % per_flash)
        out.append((die_of(p, zone, off // per_oneshot), pages * PAGE_BYTES))
        lpn += pages
    return out


def die_of(p: Profile, zone: Any, oneshot: Any) -> Any:
    """The die (channel = die mod NAND_CHANNELS) of a zone's one-shot page (ints or arrays)."""
    return (zone * p.dies_per_zone) % (p.channels * p.luns_per_channel) + oneshot % p.dies_per_zone


@dataclass(frozen=True)
class Service:
    """One read's predicted device time (ns from its dispatch), without queueing: firmware, then the NAND and
    channel part (the slowest die), then PCIe; `total` is when the device completes it (0: at once, its time
    lies in the past)."""

    firmware: int
    nand: int
    pcie: int
    total: int


def _charged(t: int) -> bool:
    """Whether chmodel_request charges a transfer asked for at t ns after the dispatch (≈ its current time)."""
    return 0 <= t < CHANNEL_WINDOW_NS


def service_ns(p: Profile, fw: int, chunks: list[tuple[int, int]], nbytes: int) -> Service:
    """A read's device time from its firmware time and NAND reads (read_chunks), no other command in the way."""
    free: dict[int, int] = {}
    end = fw
    for die, size in chunks:
        nand_end = max(free.get(die, fw), fw) + (p.nand_4kb_read_ns if size == PAGE_BYTES else p.nand_read_ns)
        ch = transfer_ns(p.channel_mbs, size, p.fw_ch_xfer_ns) if _charged(nand_end) else 0
        free[die] = nand_end + ch
        end = max(end, free[die])
    pcie = transfer_ns(p.pcie_mbs, nbytes) if _charged(end) else 0
    return Service(firmware=fw, nand=end - fw, pcie=pcie, total=max(0, end + pcie))


def read_4k_us(p: Profile, fw: int) -> float:
    """The device time of an aligned 4 KiB read with firmware time fw (µs)."""
    return service_ns(p, fw, read_chunks(p, 0, PAGE_BYTES // SECTOR_BYTES, 1 << 30), PAGE_BYTES).total / 1000


# ---- the constants, for a reader ------------------------------------------------------------------------------

def _constants(p: Profile) -> dict[str, dict[str, Any]]:
    """Each read-path constant in µs (at the profile's --slow), with where it comes from."""
    cfg = "ssd_config.h"
    return {
        "fw_hit_us": {"us": firmware_ns(p, False, True, False, True) / 1000, "symbol": "FW_READ_LATENCY",
                      "value": p.fw_read, "file": cfg, "use": "zns_read_write.c zns_read: × 1,000 ns, any hit"},
        "fw_miss_listed_us": {"us": firmware_ns(p, True, False, True, True) / 1000, "symbol": "FW_4KB_READ_LATENCY",
                              "value": p.fw_4kb_read, "file": cfg,
                              "use": "zns_read: × 7,000 ns, a miss in a listed zone while the check is on"},
        "fw_miss_4k_us": {"us": firmware_ns(p, False, False, False, True) / 1000, "symbol": "FW_4KB_READ_LATENCY",
                          "value": p.fw_4kb_read, "file": cfg,
                          "use": "zns_read: × 1,000,000 ns (32-bit), any other miss of ≤ 4 KiB"},
        "fw_miss_large_us": {"us": firmware_ns(p, False, False, False, False) / 1000, "symbol": "FW_READ_LATENCY",
                             "value": p.fw_read, "file": cfg,
                             "use": "zns_read: × 1,000,000 ns (32-bit), any other miss above 4 KiB"},
        "nand_read_4k_us": {"us": p.nand_4kb_read_ns / 1000, "symbol": "NAND_4KB_READ_LATENCY_LSB",
                            "value": p.nand_4kb_read_ns, "file": cfg,
                            "use": "ssd.c ssd_advance_nand: a NAND read of exactly 4 KiB, hit or miss"},
        "nand_read_us": {"us": p.nand_read_ns / 1000, "symbol": "NAND_READ_LATENCY_LSB", "value": p.nand_read_ns,
                         "file": cfg, "use": "ssd_advance_nand: any other NAND read (up to a flash page)"},
        "channel_4k_us": {"us": transfer_ns(p.channel_mbs, PAGE_BYTES, p.fw_ch_xfer_ns) / 1000,
                          "symbol": "NAND_CHANNEL_BANDWIDTH", "value": p.channel_mbs, "file": cfg,
                          "use": "channel_model.c, 128-byte units; + FW_CH_XFER_LATENCY "
                                 f"{p.fw_ch_xfer_ns} ns per 4 KiB (ssd.c ssd_init_ch)"},
        "pcie_4k_us": {"us": transfer_ns(p.pcie_mbs, PAGE_BYTES) / 1000, "symbol": "PCIE_BANDWIDTH",
                       "value": p.pcie_mbs, "file": cfg, "use": "ssd.c ssd_advance_pcie, after the NAND part"},
    }


def _layout(p: Profile) -> dict[str, Any]:
    return {"flash_page_kib": p.flash_page >> 10, "oneshot_page_kib": p.oneshot_page >> 10,
            "channels": p.channels, "luns_per_channel": p.luns_per_channel, "dies_per_zone": p.dies_per_zone,
            "cache_entries": CACHE_ENTRIES, "source": "ssd_config.h; cache: zns_ftl.c createLRUCache(cache_64M)"}


#: Each profile's read-path constants in µs at --slow 1, with the source file and symbol of each, and its layout.
EMULATOR_MODELS: dict[str, dict[str, Any]] = {
    name: {"base_ssd": p.base_ssd, **_constants(p), "layout": _layout(p)} for name, p in PROFILES.items()}


CACHE_NOTE = ("16,384 entries keyed by the read command's start LBA (512-byte units, as a C int), not by page: the "
              "same data read from another start LBA misses and a long read takes one entry; reads only (writes "
              "and resets neither enter nor invalidate it). A miss puts the LBA with priority 1 (a listed zone, or "
              "any zone while the check is off) or 2; priority-1 entries stand before priority-2 ones, each group "
              "most recent first; a hit moves the entry to the front of its group with the priority it entered "
              "with; when full, the last entry goes: the least recent priority-2 one, else the least recent "
              "priority-1 one. SET and STOP do not touch it: only unloading the module empties it.")


def caveats(p: Profile) -> list[str]:
    """What makes this build's read times other than its constants suggest."""
    out = []
    for key, (product, factor) in {"hit": (p.fw_read, HIT_FACTOR), "listed miss": (p.fw_4kb_read, LISTED_MISS_FACTOR),
                                   "4 KiB miss": (p.fw_4kb_read, MISS_FACTOR),
                                   "larger miss": (p.fw_read, MISS_FACTOR)}.items():
        ns = wrap_int32(product * factor)
        if ns != product * factor:
            out.append(f"{key}: {product} x {factor:,} ns overflows 32 bits and wraps to {ns / 1000:,.0f} us")
        if ns < 0:
            out.append(f"{key}: a negative firmware time stamps the read in the past: the device completes it at "
                       "once, with no channel or PCIe time (its die still queues it behind earlier reads)")
        elif ns >= CHANNEL_WINDOW_NS:
            out.append(f"{key}: {ns / 1000:,.0f} us of firmware time is beyond the channel model's 393 ms "
                       "window: no channel or PCIe time is charged")
    for what, mbs in (("channel", p.channel_mbs), ("PCIe", p.pcie_mbs)):
        if credits_per_slot(mbs) == 0:
            out.append(f"{what} credits per 4 us slot round to 0 at {mbs} MB/s: the channel model divides by zero "
                       "on the first transfer it charges")
    return out


def read_service_record(profile_name: str, slow: int) -> dict[str, Any]:
    """The read service model of one build, for meta.json's emulator section: firmware time by class, the NAND
    and transfer parts, an aligned 4 KiB read's total by class (no queueing), the cache, and the caveats."""
    p = profile(profile_name, slow)
    fw = {name: firmware_ns(p, listed, hit, on, True) for name, listed, hit, on in (
        ("hit", False, True, False), ("miss_listed", True, False, True), ("miss_other", False, False, True))}
    return {
        "profile": p.name, "slow": p.slow, "units": "us, from the command's dispatch, no queueing",
        "constants": {k: v["us"] for k, v in _constants(p).items()},
        "read_4k_us": {name: read_4k_us(p, ns) for name, ns in fw.items()},
        "firmware_rule": "a hit: fw_hit (any zone); a miss while the check is on (SET, no STOP since) in a listed "
                         "zone: fw_miss_listed (any size); any other miss: fw_miss_4k up to 4 KiB, fw_miss_large "
                         "above; then the NAND read and both transfers, for a hit as for a miss",
        "queueing": "a die takes one NAND read at a time and stays busy until its channel transfer ends, and a "
                    "read's NAND part starts only after its firmware time: a read dispatched later waits behind "
                    "an earlier one on its die even when its own firmware time ends first",
        "cache": CACHE_NOTE, "caveats": caveats(p), "layout": _layout(p),
    }
