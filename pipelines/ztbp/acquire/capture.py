"""Captures: boot the VM, trace a workload with probes/nvme_zone.bt, write a run directory (`ztbp capture`).

`ztbp capture-host DEV WORKLOAD` runs the same guest script (vm/guest/capture.sh) on a real zoned drive of
this machine. Both write exactly the run directory of probes/FORMAT.md; meta.json is written first with
`"complete": false` and finished at the end, so an interrupted capture leaves a valid partial run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import paths
from ..contract import new_meta, write_meta
from ..errors import ZtbpError
from ..io.fio import fio_totals
from ..paths import RunPaths
from ..units import MIB
from .vm import Geometry, GuestResult, NvmevirtPlan, VmError, ensure_image, qemu_version, run_in_guest
from .workload import PRESETS, Workload, WorkloadOptions

GUEST_SCRIPT = paths.VM / "guest" / "capture.sh"
STAGING = ".capture"


class CaptureError(ZtbpError):
    """The capture could not run or failed."""


# ---- run directory ---------------------------------------------------------------------------------------
def new_run_dir(workload: str, out: str | None) -> RunPaths:
    if out:
        run = RunPaths(Path(out))
    else:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        run = RunPaths(paths.RUNS / f"{stamp}-{workload}")
    if run.root.exists() and any(run.root.iterdir()):
        raise CaptureError(f"{run.root} already exists and is not empty; choose another --out")
    run.root.mkdir(parents=True, exist_ok=True)
    return run


def read_guest_env(run: RunPaths) -> dict[str, str]:
    f = run.root / STAGING / "guest.env"
    if not f.is_file():
        return {}
    env: dict[str, str] = {}
    for line in f.read_text(errors="replace").splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            env[k] = v
    return env


def count_commands(csv: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    if not csv.is_file():
        return counts
    with csv.open() as f:
        for i, line in enumerate(f):
            if i < 2:
                continue
            parts = line.split(",")
            if len(parts) >= 12:
                counts[parts[7]] = counts.get(parts[7], 0) + 1
    return counts


def finish_meta(run: RunPaths, meta: dict[str, Any], result_status: int | None, interrupted: bool,
                started: float, extra_versions: dict[str, str]) -> dict[str, Any]:
    """Merge what the guest reported into meta.json; return a summary."""
    genv = read_guest_env(run)
    if genv.get("lba_bytes"):
        lba = int(genv["lba_bytes"])
        zone_sectors = int(genv.get("zone_sectors", "0"))
        cap_sectors = int(genv.get("zone_cap_sectors", "0") or 0)
        if zone_sectors:
            meta["lba_bytes"] = lba
            meta["zone_size_lba"] = zone_sectors * 512 // lba
            meta["zone_cap_lba"] = (cap_sectors or zone_sectors) * 512 // lba
            meta["nr_zones"] = int(genv.get("nr_zones", meta["nr_zones"]))
        meta["device"] = genv.get("device", meta["device"])
        meta["zone_limits"] = {"max_open": int(genv.get("max_open_zones", 0)),
                               "max_active": int(genv.get("max_active_zones", 0))}
    versions = {k: genv[k] for k in ("kernel", "kernel_version", "bpftrace", "fio", "nvme_cli", "blkzone")
                if k in genv}
    versions.update(extra_versions)
    meta["versions"] = versions
    if run.nvme_csv.is_file():
        meta["lost_events"] = {"nvme": int(genv.get("lost_events_nvme", 0))}
        meta["probe_stats"] = {"mode": genv.get("probe_mode", "stream"),
                               "setups": int(genv.get("probe_setups", 0)),
                               "completed": int(genv.get("probe_completed", 0)),
                               "rows": int(genv.get("probe_rows", 0)),
                               "perf_lost": int(genv.get("probe_perf_lost", 0)),
                               "max_rows": int(genv.get("probe_max_rows", 0)),
                               "recursion_misses": int(genv.get("probe_recursion_misses", 0)),
                               "attach_s": int(genv.get("probe_attach_s", 0)),
                               "drain_s": int(genv.get("probe_drain_s", 0))}
    fio = fio_totals(run.fio_json)
    if fio:
        meta["fio"] = fio
    prefill = fio_totals(run.root / STAGING / "prefill-fio.json")
    if prefill:
        meta["prefill"] = {"write_ios": prefill["write_ios"], "seconds": int(genv.get("prefill_s", 0))}
    counts = count_commands(run.nvme_csv)
    meta["commands"] = counts
    status = genv.get("status", "failed")
    meta["complete"] = bool(status == "complete" and result_status == 0 and not interrupted
                            and run.nvme_csv.is_file())
    meta["capture"] = {"guest_status": result_status, "status": status, "interrupted": interrupted,
                       "seconds": round(time.monotonic() - started, 1),
                       "workload_s": float(genv.get("workload_s", 0) or 0)}
    write_meta(run, meta)
    shutil.rmtree(run.root / STAGING, ignore_errors=True)
    return {"run": str(run.root), "commands": sum(counts.values()), "reads": counts.get("read", 0),
            "fio_reads": fio.get("read_ios", 0), "lost": meta.get("lost_events", {}).get("nvme"),
            "seconds": meta["capture"]["seconds"], "iops": fio.get("read_iops", 0) + fio.get("write_iops", 0),
            "complete": meta["complete"]}


def summary_line(s: dict[str, Any]) -> str:
    state = "complete" if s["complete"] else "INCOMPLETE (partial data, \"complete\": false)"
    return (f"capture {state}: {s['commands']:,} commands traced ({s['reads']:,} reads; fio {s['fio_reads']:,}), "
            f"lost events {s['lost']}, {s['seconds']:.0f} s, {s['iops']:,.0f} IOPS -> {s['run']}")


# ---- progress --------------------------------------------------------------------------------------------
class Progress:
    """Turns the guest's "ZTBP:" console lines into progress messages with a countdown."""

    def __init__(self, expected_reads: int, echo_console: bool) -> None:
        self.expected = expected_reads
        self.echo_console = echo_console
        self.start = time.monotonic()
        self.workload_start: float | None = None

    def __call__(self, line: str) -> None:
        if line.startswith("ZTBP: progress "):
            fields = dict(kv.split("=", 1) for kv in line.split()[2:] if "=" in kv)
            self._countdown(int(fields.get("fio") or 0), int(fields.get("traced") or 0))
        elif line.startswith("ZTBP: stage ") or line.startswith("ZTBP: error "):
            msg = line[len("ZTBP: "):].removeprefix("stage ")
            if msg.startswith("workload"):
                self.workload_start = time.monotonic()
            self.say(msg)
        elif line.startswith("vmtest:"):
            self.say(line[len("vmtest: "):])
        elif self.echo_console:
            print(f"  | {line}", flush=True)

    def _countdown(self, done: int, traced: int) -> None:
        if not self.expected or self.workload_start is None:
            return
        elapsed = time.monotonic() - self.workload_start
        left = max(0, self.expected - done)
        eta = f"~{left / (done / elapsed):.0f} s left" if done and elapsed > 0 else "starting"
        self.say(f"workload: {done:,}/{self.expected:,} reads done, {eta} ({traced:,} commands traced)")

    def say(self, msg: str) -> None:
        print(f"[{time.monotonic() - self.start:6.1f}s] {msg}", flush=True)


# ---- ztbp capture (VM) -----------------------------------------------------------------------------------


def write_jobs(wl: Workload, folder: Path) -> tuple[Path, Path | None]:
    job = folder / f"{wl.name}.fio"
    job.write_text(wl.fio_job())
    pre_text = wl.prefill_job()
    pre = None
    if pre_text is not None:
        pre = folder / "prefill.fio"
        pre.write_text(pre_text)
    return job, pre


# meta.json "probes.nvme" of a capture: the map-mode probe, one fentry program at completion (FORMAT.md).
NVME_PROBE = {"file": "raw/nvme.csv", "version": 1, "attach": "fentry", "script": "probes/nvme_zone.bt"}
# Room in the probe's row map beyond the commands a workload is expected to issue (the block layer may split
# large writes; other processes may issue I/O to the device while the capture runs).
MAP_ROWS_FACTOR = 1.5
MAP_ROWS_SPARE = 50_000


def map_rows(wl: Workload) -> int:
    """BPFTRACE_MAP_KEYS_MAX for probes/nvme_zone.bt: the rows its map must be able to hold."""
    return int(wl.expected_commands * MAP_ROWS_FACTOR) + MAP_ROWS_SPARE


def capture_env(wl: Workload, job: str, prefill: str | None, *, reset: bool = True) -> dict[str, str]:
    env = {"ZTBP_WORKLOAD": job, "ZTBP_DEV": wl.device, "ZTBP_MAX_ROWS": str(map_rows(wl))}
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
    backend: str = "qemu"
    nvmevirt_ko: Path | None = None
    nvmevirt_storage_bytes: int = 1 << 30
    out: str | None = None
    timeout: int = 3600
    verbose: bool = False


@dataclass
class CaptureOutcome:
    """A finished (or interrupted) capture: its summary and the exit code the CLI returns."""

    summary: dict[str, Any]
    exit_code: int
    error: str | None = None


def run_capture(req: VmCapture) -> CaptureOutcome:
    """Trace req.workload in the VM into a new run directory (meta.json first, marked incomplete until done)."""
    args = req
    if args.workload.name not in PRESETS:
        raise CaptureError(f"unknown workload '{args.workload.name}'; choose one of: {', '.join(PRESETS)}")
    geometry = req.geometry
    plan: NvmevirtPlan | None = None
    extra: list[str] = []
    if args.backend == "nvmevirt":
        if not args.nvmevirt_ko:
            raise CaptureError("--backend nvmevirt needs --nvmevirt-ko FILE: the nvmev.ko you built for the guest "
                               "kernel (see vm/README.md, 'NVMeVirt backend')")
        ko = args.nvmevirt_ko
        if not ko.is_file():
            raise CaptureError(f"--nvmevirt-ko {ko}: no such file")
        plan = NvmevirtPlan(storage_mib=args.nvmevirt_storage_bytes // MIB, zone_mib=geometry.zone_bytes // MIB)
        extra = plan.vmtest_args(ko)
        nr_zones, lba = plan.zones, 512
    else:
        geometry.validate()
        nr_zones, lba = geometry.zones, geometry.lba_bytes
    wl = args.workload.build(device="/dev/nvme0n1", zone_bytes=geometry.zone_bytes, nr_zones=nr_zones)
    progress = Progress(wl.total_reads, args.verbose)
    progress.say(f"capture {wl.name}: {wl.describe_line()}, backend {args.backend}")
    try:
        ensure_image(echo=progress.say)
    except VmError as e:
        raise CaptureError(str(e)) from None
    run = new_run_dir(wl.name, args.out)
    meta = new_meta(device="nvme0n1", lba_bytes=lba, zone_size_lba=geometry.zone_bytes // lba,
                    zone_cap_lba=(geometry.zone_cap_bytes or geometry.zone_bytes) // lba, nr_zones=nr_zones,
                    synthetic=False, workload=wl.meta(), backend=args.backend,
                    probes={"nvme": dict(NVME_PROBE)})
    meta["complete"] = False
    write_meta(run, meta)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ztbp-jobs.") as tmp:
        job, pre = write_jobs(wl, Path(tmp))
        files = [job] + ([pre] if pre else [])
        env = capture_env(wl, f"/ztbp/ctl/{job.name}", f"/ztbp/ctl/{pre.name}" if pre else None)
        progress.say(f"booting the VM (output: {run.root})")
        result: GuestResult = run_in_guest(
            "bash /ztbp/src/vm/guest/capture.sh", run.root, geometry=None if plan else geometry,
            timeout=args.timeout, files=files, env=env, extra_args=extra, on_line=progress)
    summ = finish_meta(run, meta, result.status, result.interrupted, started, {"qemu": qemu_version()})
    progress.say("teardown done")
    if result.interrupted:
        return CaptureOutcome(summ, 130)
    if result.status != 0:
        return CaptureOutcome(summ, 1, f"the guest reported status {result.status}; the partial run is in "
                                       f"{run.root} (marked incomplete); see {run.console_log}")
    return CaptureOutcome(summ, 0)


# ---- ztbp capture-host -----------------------------------------------------------------------------------
def sysfs_block(dev: str, sysfs: Path) -> Path:
    return sysfs / "block" / Path(dev).name


def check_zoned(dev: str, sysfs: Path = Path("/sys")) -> str:
    """Refuse a device that is not a zoned block device; return its zoned model."""
    q = sysfs_block(dev, sysfs) / "queue"
    if not q.is_dir():
        raise CaptureError(f"{dev}: no such block device ({q} missing); give a whole namespace like /dev/nvme0n1")
    model = (q / "zoned").read_text().strip() if (q / "zoned").is_file() else "none"
    if model not in ("host-managed", "host-aware"):
        raise CaptureError(f"{dev} is not a zoned device (queue/zoned = {model}); capture-host traces ZNS drives "
                           "only. Use `just capture` for the emulated one.")
    return model


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


def host_geometry(dev: str, sysfs: Path = Path("/sys")) -> tuple[int, int, int]:
    """(lba bytes, zone bytes, nr zones) of a real zoned device from sysfs."""
    q = sysfs_block(dev, sysfs) / "queue"
    lba = int((q / "logical_block_size").read_text())
    zone_bytes = int((q / "chunk_sectors").read_text()) * 512
    nr = int((q / "nr_zones").read_text())
    return lba, zone_bytes, nr


@dataclass(frozen=True)
class HostCapture:
    """What `ztbp capture-host` was asked for: a real zoned namespace of this machine and the workload."""

    device: str
    workload: WorkloadOptions
    destructive: bool = False
    no_prefill: bool = False
    out: str | None = None
    verbose: bool = False


def run_capture_host(args: HostCapture) -> CaptureOutcome:
    """Trace a workload on a real zoned drive with the same guest script as a VM capture."""
    dev = args.device
    sysfs = Path(os.environ.get("ZTBP_SYSFS", "/sys"))
    check_zoned(dev, sysfs)
    lba, zone_bytes, nr = host_geometry(dev, sysfs)
    wl = args.workload.build(device=dev, zone_bytes=zone_bytes, nr_zones=nr)
    check_writes(dev, wl, args.destructive, args.no_prefill)
    missing = [t for t in ("bpftrace", "fio", "blkzone") if shutil.which(t) is None]
    if missing:
        raise CaptureError(f"missing on this machine: {', '.join(missing)}; install with "
                           "apt-get install bpftrace fio util-linux")
    if os.geteuid() != 0:
        raise CaptureError("capture-host needs root (bpftrace and raw device access); run it with sudo")
    run = new_run_dir(wl.name, args.out)
    meta = new_meta(device=Path(dev).name, lba_bytes=lba, zone_size_lba=zone_bytes // lba,
                    zone_cap_lba=zone_bytes // lba, nr_zones=nr, synthetic=False, workload=wl.meta(), backend="host",
                    probes={"nvme": dict(NVME_PROBE)})
    meta["complete"] = False
    write_meta(run, meta)
    started = time.monotonic()
    progress = Progress(wl.total_reads, args.verbose)
    with tempfile.TemporaryDirectory(prefix="ztbp-host.") as tmp:
        job, pre = write_jobs(wl, Path(tmp))
        env = dict(os.environ)
        env.update(capture_env(wl, str(job), str(pre) if pre else None, reset=not args.no_prefill))
        env.update(ZTBP_OUT=str(run.root), ZTBP_STOP_FILE=str(Path(tmp) / "stop"))
        proc = subprocess.Popen(["bash", str(GUEST_SCRIPT)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        interrupted = False
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                progress(line.rstrip("\n"))
        except KeyboardInterrupt:
            interrupted = True
            (Path(tmp) / "stop").touch()
            for line in proc.stdout:
                progress(line.rstrip("\n"))
        status = proc.wait()
    summ = finish_meta(run, meta, status, interrupted, started, {})
    if interrupted:
        return CaptureOutcome(summ, 130)
    return CaptureOutcome(summ, 0) if status == 0 else CaptureOutcome(
        summ, 1, f"the capture script reported status {status}; the partial run is in {run.root}")
