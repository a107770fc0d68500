"""The loop's capture side (`ztbp loop`): what it traces and where (`LoopCapture`, checked before anything boots),
resolved once before the first round into one immutable `LoopSetup` (`set_up_loop`): where it runs (`Place`: the VM's
namespace, or this machine's drive, checked, its geometry read), the workload and the fio job each round runs, the
loop directory, the runs' first meta.json content and the guest script's environment. control/loop.py and its rounds
take it from here."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import devices, paths
from ..errors import ZtbpError
from .capture import start_run
from .drive import host_tools
from .meta import capture_meta
from .module import DeviceModule, device_geometry
from .userjob import read_user_job, user_job, user_job_meta
from .vm import Geometry, VmDevice, nvmevirt_module, vm_device
from .workload import PRESETS, Workload, WorkloadOptions

#: the probe every round runs, under one bpftrace session for the whole loop
LOOP_PROBE = "probes/nvme_zone.bt"


class LoopError(ZtbpError):
    """The loop cannot run or failed."""


@dataclass(frozen=True)
class LoopCapture:
    """What a loop traces and where: the capture half of `ztbp loop`'s request (control/request.py adds the rounds,
    the cache model and the A/B blocks)."""

    workload: WorkloadOptions
    backend: str = devices.QEMU.name  # the device's name: a --backend value, or "host" (--host DEV)
    nvmevirt_ko: Path | None = None
    nvmevirt_reserve_bytes: int = 0  # guest memory kept for NVMeVirt (0: its storage)
    nvmevirt_params: str = ""  # its read model's parameters (a build with the project's read model)
    geometry: Geometry = Geometry()
    host_device: str | None = None
    fio_file: Path | None = None
    out: str | None = None
    module: DeviceModule | None = None  # --host: the module that creates the device (NVMeVirt), checked

    @property
    def device(self) -> devices.Device:
        return devices.get(self.backend)


def check_capture(req: LoopCapture) -> None:
    """Refuse what the loop cannot trace, before a VM boots or a device is touched."""
    dev = req.device
    if req.workload.name not in PRESETS:
        raise LoopError(f"unknown workload '{req.workload.name}'; choose one of: {', '.join(PRESETS)}")
    if dev.checks_geometry_early:  # its namespace is known now: the workload must fit it before a boot
        req.geometry.validate()
        req.workload.build(device="/dev/nvme0n1", zone_bytes=req.geometry.zone_bytes,
                           zone_cap_bytes=req.geometry.zone_cap_bytes, nr_zones=req.geometry.zones)
    if req.module is not None and dev.in_vm:
        raise LoopError("--module is for --host DEV (a device module on this machine); in the VM NVMeVirt is "
                        "--backend nvmevirt --nvmevirt-ko KO")
    if not dev.in_vm and not req.host_device:
        raise LoopError("--host needs the zoned namespace, e.g. --host /dev/nvme0n1")
    if req.fio_file is not None:  # its options are checked before a VM boots or a device is touched
        read_user_job(req.fio_file)
    if dev.in_vm and dev.probe_before_appears:  # NVMeVirt in the guest: its module is given
        nvmevirt_module(req.nvmevirt_ko, LoopError)


@dataclass(frozen=True)
class Place:
    """Where a loop runs: the namespace the guest script traces and its geometry, and how the host names the loop
    directory to that script (the VM's /ztbp/out, or the folder itself on this machine)."""

    device: str
    lba_bytes: int
    zone_bytes: int
    nr_zones: int
    vm: VmDevice | None = None  # the VM's device, None on this machine
    zone_cap_bytes: int | None = None  # None: the zones hold their size

    def prefix(self, root: Path) -> str:
        return "/ztbp/out" if self.vm is not None else str(root)


@dataclass(frozen=True)
class LoopSetup:
    """A loop resolved once: its place, the workload, the user's job every round runs (`fixed_job`: --fio-file, read,
    checked and pointed at the device once; None: the preset's, each round with its own seed), the loop directory
    `root`, the runs' first meta.json content, and the guest script's environment and the files it is given."""

    place: Place
    workload: Workload
    fixed_job: str | None
    root: Path
    meta: dict[str, Any]
    env: dict[str, str]
    files: list[Path]

    @property
    def guest_prefix(self) -> str:
        """How the guest names the loop directory."""
        return self.place.prefix(self.root)

    def job(self, r: int, reads: int | None = None) -> str:
        """The fio job of round r: the user's job, or the workload with round r's seed (`reads`: an A/B block's)."""
        if self.fixed_job is not None:
            return self.fixed_job
        wl = replace(self.workload, seed=self.workload.seed + r - 1)
        return (wl if reads is None else replace(wl, reads=reads)).fio_job()


def set_up_loop(req: LoopCapture, rounds: int, tmp: Path, say: Callable[[str], None],
                ctl: Callable[[], Path], block_reads: int = 0) -> LoopSetup:
    """`req` checked (check_capture) and resolved once, before the first of its `rounds` rounds: the place (the VM's
    namespace; or this machine's drive: the tools there, root, zoned, its geometry read with its module loaded for
    that moment), the workload, its prefill job (written in `tmp`) and the job each round runs, the loop directory
    opened (--out or runs/<stamp>-loop-<name>; the guest image built or reused in the VM), the runs' first meta.json
    content and the guest script's environment. `ctl()`: ztbp-ctl's path, built when missing (after the checks), for
    the guest script to apply each decision with."""
    check_capture(req)
    ctl_path = ctl()
    dev = req.device
    if dev.in_vm:
        vm = vm_device(dev, req.geometry, req.nvmevirt_ko, error=LoopError, reserve_bytes=req.nvmevirt_reserve_bytes,
                       module_params=req.nvmevirt_params)
        place = Place("/dev/nvme0n1", vm.lba_bytes, vm.zone_bytes, vm.nr_zones, vm, vm.zone_cap_bytes)
    else:  # the module (loop.sh loads it again after its probe attached) is unloaded when the geometry is read
        host_tools(LoopError, "loop --host")
        drive = req.host_device
        assert drive is not None  # check_capture
        lba, zone_bytes, nr, cap = device_geometry(drive, Path(os.environ.get("ZTBP_SYSFS", "/sys")), req.module,
                                                   LoopError)
        place = Place(drive, lba, zone_bytes, nr, zone_cap_bytes=cap)
    wl = req.workload.build(device=place.device, zone_bytes=place.zone_bytes, nr_zones=place.nr_zones,
                            zone_cap_bytes=place.zone_cap_bytes)
    prefill = wl.prefill_job()
    if req.fio_file is None:
        job, workload = None, wl.meta()
    else:
        job, workload = user_job(read_user_job(req.fio_file), wl.device), user_job_meta(wl, req.fio_file)
    root = start_run(f"loop-{wl.name if job is None else 'fio-file'}", req.out, None, vm=place.vm is not None,
                     echo=say, error=LoopError).root
    root = root if place.vm is not None else root.resolve()
    meta = capture_meta(device=Path(wl.device).name, lba=place.lba_bytes, zone_bytes=place.zone_bytes,
                        nr_zones=place.nr_zones, workload=workload, kind=dev, probes={"nvme": LOOP_PROBE},
                        zone_cap_bytes=place.zone_cap_bytes, module=req.nvmevirt_ko,
                        module_params=place.vm.module_params if place.vm is not None else "")
    if req.module is not None:
        meta["device_module"] = {"ko": str(req.module.ko), "params": req.module.params}
    files = []
    # ZTBP_EXPECTED sizes the probe's map (vm/guest/probe-lib.sh, MAP SIZE): emptied after the set-up and after each
    # round, it holds at most the set-up's and round 1's commands, or one A/B block's (`block_reads`, which may be
    # more than round 1's: a map sized for round 1 alone lost 117,665 of each 300,000-read block, counted)
    expected = max(wl.expected_commands, block_reads + wl.writes)
    env = {"ZTBP_DEV": wl.device, "ZTBP_ROUNDS": str(rounds), "ZTBP_EXPECTED": str(expected)}
    if prefill is not None:
        pre = tmp / "prefill.fio"
        pre.write_text(prefill)
        files.append(pre)
        env["ZTBP_PREFILL"] = f"/ztbp/ctl/{pre.name}" if place.vm is not None else str(pre)
    if len(wl.reset_zones):
        env["ZTBP_RESET"] = f"{wl.reset_zones.start} {len(wl.reset_zones)}"
    if place.vm is not None:
        env["ZTBP_PROBE"] = f"/ztbp/src/{LOOP_PROBE}"
    else:
        env.update(ZTBP_OUT=str(root), ZTBP_PROBE=str(paths.ROOT / LOOP_PROBE), ZTBP_CTL=str(ctl_path))
        if req.module is not None:  # loop.sh: the probe, then insmod; rmmod, then the probe stops
            env.update(req.module.env())
    return LoopSetup(place, wl, job, root, meta, env, files)
