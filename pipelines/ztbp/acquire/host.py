"""`ztbp capture-host`: a workload traced on a real zoned drive of this machine with the guest script of a VM
capture (vm/guest/capture.sh); the drive is checked and read by acquire/drive.py (acquire/module.py when a kernel
module makes it)."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..devices import DRIVE
from .capture import (
    GUEST_SCRIPT,
    NVME_SCRIPT,
    CaptureError,
    CaptureOutcome,
    capture_env,
    nvme_probe,
    start_run,
    write_jobs,
)
from .channel import run_here
from .drive import check_zoned, host_geometry, host_tools, host_zone_cap
from .meta import capture_meta, finish_meta
from .module import DeviceModule, device_geometry
from .progress import Progress
from .workload import Workload, WorkloadOptions


def check_writes(dev: str, workload: Workload, destructive: bool, no_prefill: bool) -> None:
    """Refuse a workload that writes or resets zones unless --destructive."""
    if no_prefill and workload.writes:
        raise CaptureError(f"--no-prefill does not apply to '{workload.name}', which writes; use --destructive")
    resets = 0 if no_prefill else len(workload.reset_zones)
    if (workload.writes or resets) and not destructive:
        what = "writes to" if workload.writes else "resets and rewrites (prefill)"
        raise CaptureError(
            f"workload '{workload.name}' {what} zones {workload.reset_zones.start}..{workload.reset_zones.stop - 1} "
            f"of {dev}, destroying their data. Add --destructive if that is what you want, or --no-prefill to "
            "only read what is already written.")


@dataclass(frozen=True)
class HostCapture:
    """What `ztbp capture-host` was asked for: a real zoned namespace of this machine and the workload."""

    device: str
    workload: WorkloadOptions
    destructive: bool = False
    no_prefill: bool = False
    out: str | None = None
    verbose: bool = False
    probe: str | None = None  # None: ZTBP_PROBE of the environment, else probes/nvme_zone.bt
    module: DeviceModule | None = None  # the module that creates `device` (NVMeVirt), checked (validate())


def run_capture_host(req: HostCapture) -> CaptureOutcome:
    """Trace a workload on a real zoned drive with the same guest script as a VM capture. With a device module the
    device exists only while it is loaded: its geometry is read with the module loaded for that moment, and the
    script loads it again after its probe attached and unloads it before the probe stops (ZTBP_KO)."""
    dev = req.device
    sysfs = Path(os.environ.get("ZTBP_SYSFS", "/sys"))
    cap: int | None = None
    if req.module is not None:  # root first: the module is loaded before anything else is checked
        host_tools(CaptureError, "capture-host")
        lba, zone_bytes, nr, cap = device_geometry(dev, sysfs, req.module)
    else:
        check_zoned(dev, sysfs)
        lba, zone_bytes, nr = host_geometry(dev, sysfs)
    wl = req.workload.build(device=dev, zone_bytes=zone_bytes, nr_zones=nr)
    check_writes(dev, wl, req.destructive, req.no_prefill)
    script = nvme_probe(req.probe) if req.probe else os.environ.get("ZTBP_PROBE", NVME_SCRIPT)
    if req.module is None:
        host_tools(CaptureError, "capture-host")
        cap = host_zone_cap(dev)
    if cap and cap < zone_bytes:  # a real drive's zones hold less than their size: the workload keeps within (the
        # first build had no capacity: blkzone runs after the options are refused or accepted)
        wl = req.workload.build(device=dev, zone_bytes=zone_bytes, nr_zones=nr, zone_cap_bytes=cap)
    meta = capture_meta(device=Path(dev).name, lba=lba, zone_bytes=zone_bytes, nr_zones=nr, workload=wl.meta(),
                        kind=DRIVE, probes={"nvme": script}, zone_cap_bytes=cap)
    if req.module is not None:
        meta["device_module"] = {"ko": str(req.module.ko), "params": req.module.params}
    run = start_run(wl.name, req.out, meta, vm=False)
    started = time.monotonic()
    progress = Progress(wl.total_reads, req.verbose)
    with tempfile.TemporaryDirectory(prefix="ztbp-host.") as tmp:
        job, pre = write_jobs(wl, Path(tmp))
        env = capture_env(wl, str(job), str(pre) if pre else None, reset=not req.no_prefill,
                          probe=str(paths.ROOT / script) if req.probe else None)
        env["ZTBP_OUT"] = str(run.root)
        if req.module is not None:  # capture.sh: the probe, then insmod; rmmod, then the probe stops
            env.update(req.module.env())
        status, interrupted = run_here(GUEST_SCRIPT, env, Path(tmp) / "stop", progress)
    summ = finish_meta(run, meta, status, interrupted, started, {})
    if interrupted:
        return CaptureOutcome(summ, 130)
    return CaptureOutcome(summ, 0) if status == 0 else CaptureOutcome(
        summ, 1, f"the capture script reported status {status}; the partial run is in {run.root}")
