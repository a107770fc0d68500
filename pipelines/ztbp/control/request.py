"""What `ztbp loop` is asked for (`LoopRequest`), checked before anything boots or is touched, and its error: the
loop (control/loop.py) and its rounds (control/round.py) both take it from here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import devices
from ..acquire.module import DeviceModule
from ..acquire.userjob import read_user_job
from ..acquire.vm import Geometry, nvmevirt_module
from ..acquire.workload import PRESETS, WorkloadOptions
from ..analysis.params import AB_READS, CACHE_MIB, PAGE_KIB, RECOMMEND_GAIN
from ..errors import ZtbpError
from ..units import check_limit


class LoopError(ZtbpError):
    """The loop cannot run or failed."""


@dataclass(frozen=True)
class LoopRequest:
    """What `ztbp loop` was asked for."""

    workload: WorkloadOptions
    rounds: int = 3
    min_gain: float = RECOMMEND_GAIN
    backend: str = devices.QEMU.name  # the device's name: a --backend value, or "host" (--host DEV)
    nvmevirt_ko: Path | None = None
    nvmevirt_reserve_bytes: int = 0  # guest memory kept for NVMeVirt (0: its storage)
    geometry: Geometry = Geometry()
    host_device: str | None = None
    fio_file: Path | None = None
    cache_mib: int = CACHE_MIB
    page_kib: int = PAGE_KIB
    out: str | None = None
    timeout: int = 7200
    verbose: bool = False
    ab_pairs: int = 0  # > 0: the A/B mode (round 1, then this many pairs of on/off blocks)
    ab_reads: int = AB_READS
    module: DeviceModule | None = None  # --host: the module that creates the device (NVMeVirt), checked

    @property
    def device(self) -> devices.Device:
        return devices.get(self.backend)

    def validate(self) -> None:
        dev = self.device  # an unknown name is refused first
        check_limit("rounds", self.rounds)
        check_limit("min-gain", self.min_gain)
        check_limit("loop-cache-mib", self.cache_mib, "--cache-mib")
        check_limit("page-kib", self.page_kib)
        check_limit("timeout", self.timeout)
        check_limit("ab", self.ab_pairs)
        if self.ab_pairs == 1:
            raise LoopError("--ab 1: give at least 2 pairs of blocks (an interval needs 2), or 0 for no A/B blocks")
        check_limit("ab-reads", self.ab_reads)
        if self.workload.name not in PRESETS:
            raise LoopError(f"unknown workload '{self.workload.name}'; choose one of: {', '.join(PRESETS)}")
        if dev.checks_geometry_early:  # its namespace is known now: the workload must fit it before a boot
            self.geometry.validate()
            self.workload.build(device="/dev/nvme0n1", zone_bytes=self.geometry.zone_bytes,
                                zone_cap_bytes=self.geometry.zone_cap_bytes,
                                nr_zones=self.geometry.zones)
        if self.module is not None and dev.in_vm:
            raise LoopError("--module is for --host DEV (a device module on this machine); in the VM NVMeVirt is "
                            "--backend nvmevirt --nvmevirt-ko KO")
        if self.fio_file is not None:  # its options are checked before a VM boots or a device is touched
            read_user_job(self.fio_file)
        if dev.in_vm and dev.probe_before_appears:  # NVMeVirt in the guest: its module is given
            nvmevirt_module(self.nvmevirt_ko, LoopError)
