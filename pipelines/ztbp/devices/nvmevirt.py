"""NVMeVirt, the ZTBP fork (`--backend nvmevirt --nvmevirt-ko KO`): a kernel module in the guest that models the read
cache, acts on SET and counts its hits. Its build (profile, --slow) is read from the module's folder
(acquire/vm.py nvmevirt_notes) and its memory and CPUs are planned there (NvmevirtPlan)."""

from __future__ import annotations

from .base import Device

NVMEVIRT = Device(
    name="nvmevirt",
    title="NVMeVirt (ZTBP fork)",
    loop_title="NVMeVirt (ZTBP fork): it acts on SET",
    not_modelled="NVMeVirt models the read cache and serves the listed zones with a shorter latency even on a miss; "
                 "a zone reset is a memory clear with no erase time, and there is no queueing model of the NAND",
    reset_note="NVMeVirt clears the zone's memory; its model has no erase time (NAND_ERASE_LATENCY 0), so the "
               "latency is the emulator's memset under the host's CPU, not a flash erase",
    acts_on_set=True,
    answers_status_hits=True,
    has_read_model=True,
    probe_before_appears=True,
    in_vm=True,
    checks_geometry_early=False,
    geometry_from="the module's storage (--nvmevirt-storage) in zones of --zone-size, 512-byte LBAs; the guest "
                  "reports the namespace it made",
)

#: What NVMeVirt (the ZTBP fork) does not model or models in its own way; kept in meta.json and loop.json.
NVMEVIRT_NOTES = {
    "listed_zone_latency": "its latency model favours the listed (SET) zones even on a cache miss: on zn540 a miss "
                           "there costs 7 us of firmware time against 1,000 us (130,000 us above 4 KiB) in other "
                           "zones, and a hit 130 us anywhere, so a listed zone is served faster when it misses than "
                           "when it hits and latency and IOPS gains are not all cache hits (read_service_model has "
                           "the numbers of the module built)",
    "zone_reset": "a zone reset is a memory clear with no modelled erase time (NAND_ERASE_LATENCY 0)",
    "hit_counters": "the module prints its hit/read counters to the kernel log only when its read counter reaches "
                    "1,000,000 (then starts again); the counter starts at -1 and its first read only resets it, so "
                    "the loop reads block 0 once after loading it (traced in .loop/setup-nvme.csv): rounds of "
                    "1,000,000 reads then get exactly their own counters; STATUS answers the read counter (dword 0) "
                    "and the cache's hits (dword 1), both reset together at each print, so every round gets the "
                    "device's own hit ratio (analysis/device_counters.py)",
    "identify": "its Identify handlers write 4,096 bytes from the first data pointer whatever its offset in the "
                "page: a buffer not page-aligned spills into the physically next page (guest memory corruption); "
                "ztbp-ctl passes page-aligned buffers",
    "info": "INFO completes without data: the zones it holds are read from its kernel log (ZONE CLUSTER [i]=z)",
}
