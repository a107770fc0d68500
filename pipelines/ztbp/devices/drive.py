"""A zoned drive of this machine (`--host DEV`, meta.json "backend": "host"): nothing is modelled, and its firmware
may not implement the ZTBP commands. A module that makes the device (`--module KO`, NVMeVirt on the host) is a
choice of the command, not of this device (acquire/module.py)."""

from __future__ import annotations

from .base import Device

DRIVE = Device(
    name="host",
    title="a zoned drive here",
    loop_title="a zoned drive on this machine",
    not_modelled="a real drive: nothing is modelled, but its firmware may not implement the ZTBP commands",
    reset_note="a real drive's zone reset: firmware bookkeeping, the NAND erase may happen then or later",
    acts_on_set=True,
    answers_status_hits=False,
    has_read_model=False,
    probe_before_appears=False,
    in_vm=False,
    checks_geometry_early=False,
    geometry_from="sysfs (queue/logical_block_size, chunk_sectors, nr_zones) and `blkzone report` for the zone "
                  "capacity",
)
