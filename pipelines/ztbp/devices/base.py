"""What a device is to the workbench: one frozen `Device` per kind of zoned namespace a command can trace.

A device is named by the CLI value that picks it (`--backend qemu|nvmevirt`, `--host DEV` for a drive of this
machine), which is also meta.json's and loop.json's "backend" value. Everything that differs between devices is a
field here: what it can do (capabilities), how it is brought up and the sentences the reports show about it. Code
elsewhere asks these fields and never compares a device's name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    """One kind of zoned device and what the workbench knows about it."""

    name: str  # the CLI value and meta.json's "backend"
    title: str  # short, the report's front page: "QEMU's ZNS namespace"
    loop_title: str  # the loop summary's "device:" line
    not_modelled: str  # what it does not model, one line (the loop report's front page)
    reset_note: str  # what a zone reset's latency means on it (analysis/resets.py)
    acts_on_set: bool  # it takes the ZTBP SET command: a configuration changes what it does
    answers_status_hits: bool  # it counts its cache hits and reads (kernel log, STATUS)
    has_read_model: bool  # the project replays its read service and cache (analysis/device_replay.py)
    probe_before_appears: bool  # a kernel module makes it: the probe attaches before the module loads
    in_vm: bool  # it lives in the QEMU guest (the VM harness boots it)
    checks_geometry_early: bool  # its geometry is known before anything boots: a workload is checked against it
    geometry_from: str  # where its geometry and zone limits come from

    @property
    def needs_qemu_version(self) -> bool:
        """A run on it records QEMU's version: the harness's QEMU runs every device in the VM."""
        return self.in_vm

    def profile_hint(self) -> str:
        """How to make an interference profile of this device (`ztbp profile`)."""
        if self.in_vm:
            return f"make one with `ztbp profile --backend {self.name}`"
        return "make one with `ztbp profile --device DEV` on the drive"
