"""QEMU's emulated zoned namespace (`--backend qemu`, the default): no read cache, refuses the ZTBP commands."""

from __future__ import annotations

from .base import Device

QEMU = Device(
    name="qemu",
    title="QEMU's ZNS namespace",
    loop_title="QEMU's ZNS namespace (it refuses the ZTBP SET command: the loop scores each config on the model only)",
    not_modelled="QEMU's zoned namespace has no read cache and refuses the ZTBP SET command: its latency says "
                 "nothing about the configuration, and it counts no cache hits",
    reset_note="QEMU's emulated zoned namespace punches a hole in its backing file; the latency is a host "
               "file-system call, not a flash erase",
    acts_on_set=False,
    answers_status_hits=False,
    has_read_model=False,
    probe_before_appears=False,
    in_vm=True,
    checks_geometry_early=True,
    geometry_from="the command's geometry options (--zone-size, --zones, ...), given to QEMU's nvme-ns",
)
