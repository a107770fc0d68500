"""Captures: boot the VM, trace a workload with probes/nvme_zone.bt, write a run directory (`ztbp capture`).

`ztbp capture-host DEV WORKLOAD` runs the same guest script (vm/guest/capture.sh) on a real zoned drive of
this machine (acquire/host.py); `ztbp capture-layers` runs vm/guest/layers-capture.sh in the VM (acquire/layers.py).
All write exactly the run directory of probes/FORMAT.md, and meta.json only through acquire/meta.py: written first
with `"complete": false` (`start_run`) and finished (`finish_meta`) from what the guest reported in
.capture/guest.env, so an interrupted capture leaves a valid partial run. How big the probes' maps are, how
they are stopped and how their losses are counted is decided in one place, vm/guest/probe-lib.sh.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import devices, paths
from ..contract import meta_text
from ..devices import QEMU, Device
from ..errors import ZtbpError
from ..files import ClaimError, claim_dir
from ..paths import RunPaths
from .meta import device_meta, finish_meta
from .progress import Progress
from .userjob import read_user_job, user_job, user_job_meta
from .vm import Geometry, GuestResult, ensure_image, qemu_version, run_in_guest, vm_device
from .workload import PRESETS, Workload, WorkloadOptions

GUEST_SCRIPT = paths.VM / "guest" / "capture.sh"


class CaptureError(ZtbpError):
    """The capture could not run or failed."""


# ---- run directory ---------------------------------------------------------------------------------------
def new_run_dir(name: str, out: str | None, error: type[ZtbpError] = CaptureError,
                first: dict[str, str] | None = None) -> RunPaths:
    """`out`, or runs/<UTC timestamp>-<name>: claimed for this command alone (files.claim_dir, holding `first`
    from the moment it appears), and refused (as `error`) when it holds anything — also when another command
    claimed it at the same time, in which case this one wrote nothing."""
    if out:
        run = RunPaths(Path(out))
    else:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        run = RunPaths(paths.RUNS / f"{stamp}-{name}")
    if run.root.exists() and any(run.root.iterdir()):
        raise error(f"{run.root} already exists and is not empty; choose another --out")
    try:
        claim_dir(run.root, first)
    except ClaimError:
        raise error(f"{run.root} was made by another command at the same time; this one wrote nothing: choose "
                    "another --out") from None
    return run


def start_run(name: str, out: str | None, meta: dict[str, Any] | None, *, vm: bool,
              echo: Callable[[str], None] = print, suite: str | None = None,
              error: type[ZtbpError] = CaptureError) -> RunPaths:
    """The preamble of every capture: the guest image built or reused (`vm`), a new empty run directory (`out`
    or runs/<stamp>-<name>) claimed for this command alone, and `meta` in it from the moment it appears as its
    meta.json with "complete": false, so an interrupted capture leaves a valid partial run (meta None: a folder
    of runs, the loop's). Errors are raised as `error`."""
    if vm:
        ensure_image(echo=echo, suite=suite, error=error)
    if meta is not None:
        meta["complete"] = False
    return new_run_dir(name, out, error, None if meta is None else {"meta.json": meta_text(meta)})


def write_jobs(wl: Workload, folder: Path) -> tuple[Path, Path | None]:
    job = folder / f"{wl.name}.fio"
    job.write_text(wl.fio_job())
    pre_text = wl.prefill_job()
    pre = None
    if pre_text is not None:
        pre = folder / "prefill.fio"
        pre.write_text(pre_text)
    return job, pre


#: The NVMe probes a capture can run (--probe); meta.json names the one the guest ran (ZTBP_PROBE may choose).
NVME_PROBES = ("nvme_zone.bt", "nvme_zone_stream.bt")
NVME_SCRIPT = "probes/nvme_zone.bt"


def nvme_probe(name: str | None) -> str:
    """The repository path of an NVMe probe given by its file name (--probe; None: the default)."""
    if name is None:
        return NVME_SCRIPT
    if name not in NVME_PROBES:
        raise CaptureError(f"--probe {name}: choose one of {', '.join(NVME_PROBES)} (see probes/README.md)")
    return f"probes/{name}"


def capture_env(wl: Workload, job: str, prefill: str | None, *, reset: bool = True,
                probe: str | None = None) -> dict[str, str]:
    """The guest script's environment. ZTBP_EXPECTED sizes the probe's map (vm/guest/probe-lib.sh, MAP SIZE);
    `probe` is the path of the probe to run there (default: the script's own, probes/nvme_zone.bt)."""
    env = {"ZTBP_WORKLOAD": job, "ZTBP_DEV": wl.device, "ZTBP_EXPECTED": str(wl.expected_commands)}
    if probe:
        env["ZTBP_PROBE"] = probe
    if prefill and reset:
        env["ZTBP_PREFILL"] = prefill
    if reset and len(wl.reset_zones):
        env["ZTBP_RESET"] = f"{wl.reset_zones.start} {len(wl.reset_zones)}"
    return env


@dataclass(frozen=True)
class VmCapture:
    """What `ztbp capture` was asked for: the workload, the emulated device and where the run goes."""

    workload: WorkloadOptions
    geometry: Geometry = Geometry()
    backend: str = QEMU.name  # the device's name (devices.get)
    nvmevirt_ko: Path | None = None
    nvmevirt_storage_bytes: int = 1 << 30
    nvmevirt_reserve_bytes: int = 0  # 0: the storage
    nvmevirt_params: str = ""  # its read model's parameters (a build with the project's read model)
    out: str | None = None
    timeout: int = 3600
    verbose: bool = False
    probe: str | None = None  # a file of NVME_PROBES; None: probes/nvme_zone.bt
    suite: str | None = None  # guest image suite (vm.SUITES); None: bookworm (or ZTBP_SUITE)
    fio_file: Path | None = None  # a user's fio job run instead of the preset's (the preset resets and prefills)

    @property
    def device(self) -> Device:
        return devices.get(self.backend)


@dataclass
class CaptureOutcome:
    """A finished (or interrupted) capture: its summary and the exit code the CLI returns."""

    summary: dict[str, Any]
    exit_code: int
    error: str | None = None


def run_capture(req: VmCapture) -> CaptureOutcome:
    """Trace req.workload in the VM into a new run directory (meta.json first, marked incomplete until done)."""
    if req.workload.name not in PRESETS:
        raise CaptureError(f"unknown workload '{req.workload.name}'; choose one of: {', '.join(PRESETS)}")
    # a user's job is checked (there, allowed options only) before anything boots
    user_text = None if req.fio_file is None else read_user_job(req.fio_file)
    dev = vm_device(req.device, req.geometry, req.nvmevirt_ko, req.nvmevirt_storage_bytes, CaptureError,
                    req.nvmevirt_reserve_bytes, req.nvmevirt_params)
    script = nvme_probe(req.probe)
    wl = req.workload.build(device="/dev/nvme0n1", zone_bytes=dev.zone_bytes, nr_zones=dev.nr_zones,
                            zone_cap_bytes=dev.zone_cap_bytes)
    if req.fio_file is None:
        name, what, workload = wl.name, wl.describe_line(), wl.meta()
    else:
        name, workload = "fio-file", user_job_meta(wl, req.fio_file)
        what = (f"{req.fio_file} after {wl.name}'s reset and prefill of zones {wl.prefill_zones.start}.."
                f"{wl.prefill_zones.stop - 1}, room for {wl.total_reads:,} reads in the probe's map")
    progress = Progress(wl.total_reads if user_text is None else 0, req.verbose)
    progress.say(f"capture {name}: {what}, backend {req.backend}")
    meta = device_meta(dev, workload, {"nvme": script})
    run = start_run(name, req.out, meta, vm=True, echo=progress.say, suite=req.suite)
    with tempfile.TemporaryDirectory(prefix="ztbp-jobs.") as tmp:
        job, pre = write_jobs(wl, Path(tmp))
        if user_text is not None:
            job.write_text(user_job(user_text, wl.device))
        env = capture_env(wl, f"/ztbp/ctl/{job.name}", f"/ztbp/ctl/{pre.name}" if pre else None,
                          probe=f"/ztbp/src/{script}")
        return run_vm_capture(run, meta, GuestCommand(
            "capture.sh", env, files=[job] + ([pre] if pre else []), extra_args=dev.extra_args,
            geometry=dev.geometry, timeout=req.timeout, suite=req.suite), progress)


@dataclass(frozen=True)
class GuestCommand:
    """One guest script run by `run_vm_capture`: vm/guest/<script> with its environment and QEMU settings."""

    script: str
    env: dict[str, str]
    files: list[Path] = field(default_factory=list)
    extra_args: list[str] = field(default_factory=list)
    geometry: Geometry | None = None
    timeout: int = 3600
    suite: str | None = None


#: Boots a capture may take when the guest kernel crashes (an oops seen once in CI while bpftrace attached a probe
#: under TCG): the run is captured again from the start, the crashed boot's console kept beside it.
GUEST_ATTEMPTS = 2
_CRASH = re.compile(r"(Kernel panic - not syncing[^\n]*|BUG: kernel NULL pointer dereference[^\n]*|Oops: [^\n]*)")


def kernel_crash(lines: list[str]) -> str | None:
    """The first line of a guest kernel crash on the console (panic, oops), or None."""
    for line in lines:
        m = _CRASH.search(line)
        if m:
            return m.group(1).strip()
    return None


def run_vm_capture(run: RunPaths, meta: dict[str, Any], cmd: GuestCommand, progress: Progress) -> CaptureOutcome:
    """The VM half of every capture (after start_run): the guest script, then meta.json finished."""
    started = time.monotonic()
    progress.say(f"booting the VM (output: {run.root})")
    for attempt in range(1, GUEST_ATTEMPTS + 1):
        result: GuestResult = run_in_guest(
            f"bash /ztbp/src/vm/guest/{cmd.script}", run.root, geometry=cmd.geometry, timeout=cmd.timeout,
            files=cmd.files, env=cmd.env, extra_args=cmd.extra_args, on_line=progress, suite=cmd.suite)
        crash = kernel_crash(result.lines)
        if result.interrupted or result.status == 0 or crash is None or attempt == GUEST_ATTEMPTS:
            break
        kept = run.root / f"console-crash-{attempt}.log"
        if run.console_log.is_file():
            run.console_log.replace(kept)
        progress.say(f"the guest kernel crashed ({crash}; console kept as {kept.name}): booting again, attempt "
                     f"{attempt + 1} of {GUEST_ATTEMPTS}")
    meta["guest_attempts"] = attempt
    summ = finish_meta(run, meta, result.status, result.interrupted, started, {"qemu": qemu_version()})
    progress.say("teardown done")
    if result.interrupted:
        return CaptureOutcome(summ, 130)
    if result.status != 0:
        return CaptureOutcome(summ, 1, f"the guest reported status {result.status}; the partial run is in "
                                       f"{run.root} (marked incomplete); see {run.console_log}")
    return CaptureOutcome(summ, 0)
