"""Captures: boot the VM, trace a workload with probes/nvme_zone.bt, write a run directory (`ztbp capture`).

`ztbp capture-host DEV WORKLOAD` runs the same guest script (vm/guest/capture.sh) on a real zoned drive of
this machine; `ztbp capture-layers` runs vm/guest/layers-capture.sh in the VM (the layer probe beside the
streaming NVMe probe). All write exactly the run directory of probes/FORMAT.md, and meta.json only here:
written first with `"complete": false` and finished (`finish_meta`) from what the guest reported in
.capture/guest.env, so an interrupted capture leaves a valid partial run. How big the probes' maps are, how
they are stopped and how their losses are counted is decided in one place, vm/guest/probe-lib.sh.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import paths
from ..commands import run_command
from ..contract import new_meta, probe_header, write_meta
from ..errors import ZtbpError
from ..files import hand_over_tree, make_dir, read_env
from ..io.fio import fio_totals
from ..paths import RunPaths
from ..units import MIB, parse_size, zone_capacity
from .channel import run_here
from .module import DeviceModule, device_present
from .vm import Geometry, GuestResult, VmDevice, ensure_image, nvmevirt_notes, qemu_version, run_in_guest, vm_device
from .workload import PRESETS, Workload, WorkloadOptions, read_user_job, user_job, user_job_meta

GUEST_SCRIPT = paths.VM / "guest" / "capture.sh"
STAGING = ".capture"


class CaptureError(ZtbpError):
    """The capture could not run or failed."""


# ---- run directory ---------------------------------------------------------------------------------------
def new_run_dir(name: str, out: str | None, error: type[ZtbpError] = CaptureError) -> RunPaths:
    """`out`, or runs/<UTC timestamp>-<name>: created, and refused (as `error`) when it holds anything."""
    if out:
        run = RunPaths(Path(out))
    else:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        run = RunPaths(paths.RUNS / f"{stamp}-{name}")
    if run.root.exists() and any(run.root.iterdir()):
        raise error(f"{run.root} already exists and is not empty; choose another --out")
    make_dir(run.root)
    return run


def capture_meta(*, device: str, lba: int, zone_bytes: int, nr_zones: int, workload: dict[str, Any], backend: str,
                 probes: dict[str, str], zone_cap_bytes: int | None = None, module: Path | None = None
                 ) -> dict[str, Any]:
    """meta.json of a capture before it runs: the geometry asked for (the guest's report replaces it), the probes
    (name -> script) and, on NVMeVirt, what the emulator does not model and its read service model (of `module`,
    the nvmev.ko booted)."""
    meta = new_meta(device=device, lba_bytes=lba, zone_size_lba=zone_bytes // lba,
                    zone_cap_lba=(zone_cap_bytes or zone_bytes) // lba, nr_zones=nr_zones, synthetic=False,
                    workload=workload, backend=backend,
                    probes={name: probe_meta(name, script) for name, script in probes.items()})
    if backend == "nvmevirt":
        meta["emulator"] = nvmevirt_notes(module)  # what NVMeVirt does not model (probes/FORMAT.md)
    return meta


def device_meta(dev: VmDevice, workload: dict[str, Any], probes: dict[str, str]) -> dict[str, Any]:
    """capture_meta of a VM capture on `dev` (the guest's namespace nvme0n1)."""
    return capture_meta(device="nvme0n1", lba=dev.lba_bytes, zone_bytes=dev.zone_bytes, nr_zones=dev.nr_zones,
                        workload=workload, backend=dev.backend, probes=probes, zone_cap_bytes=dev.zone_cap_bytes,
                        module=dev.module)


def start_run(name: str, out: str | None, meta: dict[str, Any] | None, *, vm: bool,
              echo: Callable[[str], None] = print, suite: str | None = None,
              error: type[ZtbpError] = CaptureError) -> RunPaths:
    """The preamble of every capture: the guest image built or reused (`vm`), a new empty run directory (`out`
    or runs/<stamp>-<name>), and `meta` written first as its meta.json with "complete": false, so an interrupted
    capture leaves a valid partial run (meta None: a folder of runs, the loop's). Errors are raised as `error`."""
    if vm:
        ensure_image(echo=echo, suite=suite, error=error)
    run = new_run_dir(name, out, error)
    if meta is not None:
        meta["complete"] = False
        write_meta(run, meta)
    return run


def guest_env_file(run: RunPaths) -> Path:
    """Where the guest script leaves its KEY=VALUE report of a capture (read with files.read_env)."""
    return run.root / STAGING / "guest.env"


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


#: The one conversion of the map probe's rows into nvme.csv rows (the guest's probe_extract uses it too).
MAP_ROWS_CSV = paths.ROOT / "probes" / "nvme_zone_csv.sh"
MAP_ROWS = "nvme.rows"


def map_rows_csv(run: RunPaths) -> tuple[dict[str, int | float], str | None]:
    """The host's half of a capture whose rows the guest handed over raw (the loop's rounds): .capture/nvme.rows
    (vm/guest/mapdump.py --raw batches) becomes raw/nvme.csv, converted here at native speed by
    probes/nvme_zone_csv.sh --raw, in completion order; then the round's LOSS RULE (vm/guest/loop.sh): read rows
    missing against the block layer's count, plus rows taken but not converted. The counters join the staged
    guest.env for finish_meta; returned too, with the conversion's seconds, and what went wrong (None: nothing; a
    round whose rows could not all be converted is marked failed)."""
    t0 = time.monotonic()
    staged = run.root / STAGING / MAP_ROWS
    genv = read_env(guest_env_file(run))
    tmp = run.nvme_csv.with_name(run.nvme_csv.name + ".tmp")
    make_dir(run.nvme_csv.parent)
    with tmp.open("w") as out:
        out.write(probe_header("nvme"))
        out.flush()
        proc = subprocess.run(["bash", str(MAP_ROWS_CSV), "--raw", str(staged)], stdout=out, stderr=subprocess.PIPE,
                              text=True, check=False) if staged.is_file() else None
    tmp.replace(run.nvme_csv)
    counts = count_commands(run.nvme_csv)
    rows, reads = sum(counts.values()), counts.get("read", 0)
    taken = int(genv.get("probe_nvme_taken") or 0)
    block_reads = int(genv.get("block_reads") or 0)
    lost = max(0, block_reads - reads) + max(0, taken - rows)
    convert_s = time.monotonic() - t0
    stats: dict[str, int | float] = {
        "probe_nvme_rows": rows, "probe_nvme_read_rows": reads, "probe_nvme_completed": rows + lost,
        "probe_nvme_setups": rows + lost, "probe_nvme_perf_lost": 0, "lost_events_nvme": lost,
        "probe_nvme_stop_s": round(int(genv.get("probe_nvme_dump_s") or 0) + convert_s),
        "probe_nvme_convert_s": round(convert_s, 1)}
    error = None
    if proc is None:
        error = f"the guest handed over no rows ({STAGING}/{MAP_ROWS} missing)"
    elif proc.returncode != 0:
        error = f"{MAP_ROWS_CSV.name} exit {proc.returncode}: {' '.join(proc.stderr.split())[:300]}"
    with guest_env_file(run).open("a") as f:
        f.write("".join(f"{k}={v}\n" for k, v in stats.items()))
        if error:
            f.write("status=failed\n")  # rows that could not be converted: the round is incomplete
    staged.unlink(missing_ok=True)
    return stats, error


#: meta.json statistics object of each probe (probes/FORMAT.md) and the guest.env counters it holds.
PROBE_STATS_KEY = {"nvme": "probe_stats", "layers": "layer_stats"}
_STAT_COUNTERS = ("setups", "completed", "rows", "perf_lost", "max_rows", "recursion_misses", "attach_s", "drain_s",
                  "dump_s", "stop_s")
_ATTACH_KINDS = {"kfunc": "fentry", "kretfunc": "fexit", "tracepoint": "tracepoint", "kprobe": "kprobe",
                 "kretprobe": "kretprobe", "rawtracepoint": "rawtracepoint", "uprobe": "uprobe", "usdt": "usdt"}
_PROBE_POINT = re.compile(r"^(?P<kind>[a-z]+):[^\s]", re.M)


def attach_types(script: str) -> str:
    """How a bpftrace script attaches, from its probe points: "fentry", "fentry+fexit+tracepoint", ..."""
    kinds = {_ATTACH_KINDS[m["kind"]] for m in _PROBE_POINT.finditer(script) if m["kind"] in _ATTACH_KINDS}
    return "+".join(sorted(kinds)) or "unknown"


def probe_meta(name: str, script: str) -> dict[str, Any]:
    """meta.json `probes.<name>`: its CSV, format version, the script that ran and how it attaches."""
    path = Path(script) if Path(script).is_absolute() else paths.ROOT / script
    try:
        attach = attach_types(path.read_text(errors="replace"))
    except OSError:
        attach = "unknown"
    return {"file": f"raw/{name}.csv", "version": 1, "attach": attach, "script": script}


def probe_stats(name: str, genv: dict[str, str]) -> dict[str, Any]:
    """The counters probe-lib.sh reported for one probe (probe_<name>_* in guest.env)."""
    stats: dict[str, Any] = {"mode": genv.get(f"probe_{name}_mode", "stream")}
    for key in _STAT_COUNTERS:
        stats[key] = int(genv.get(f"probe_{name}_{key}", 0) or 0)
    if name == "layers":
        stats["dropped"] = int(genv.get("probe_layers_dropped", 0) or 0)
        stats["unsure"] = int(genv.get("probe_layers_unsure", 0) or 0)
    return stats


def _geometry_from_guest(meta: dict[str, Any], genv: dict[str, str]) -> None:
    if not genv.get("lba_bytes"):
        return
    lba = int(genv["lba_bytes"])
    zone_sectors = int(genv.get("zone_sectors", "0") or 0)
    cap_sectors = int(genv.get("zone_cap_sectors", "0") or 0)
    if zone_sectors:
        meta["lba_bytes"] = lba
        meta["zone_size_lba"] = zone_sectors * 512 // lba
        meta["zone_cap_lba"] = (cap_sectors or zone_sectors) * 512 // lba
        meta["nr_zones"] = int(genv.get("nr_zones", meta["nr_zones"]))
    meta["device"] = genv.get("device", meta["device"])
    meta["zone_limits"] = {"max_open": int(genv.get("max_open_zones", 0) or 0),
                           "max_active": int(genv.get("max_active_zones", 0) or 0)}


def finish_meta(run: RunPaths, meta: dict[str, Any], result_status: int | None, interrupted: bool,
                started: float, extra_versions: dict[str, str]) -> dict[str, Any]:
    """Merge what the guest reported into meta.json (every probe in meta["probes"]); return a summary."""
    genv = read_env(guest_env_file(run))
    _geometry_from_guest(meta, genv)
    versions = {k: genv[k] for k in ("suite", "debian", "kernel", "kernel_version", "bpftrace", "fio", "nvme_cli",
                                     "blkzone")
                if k in genv}
    versions.update(extra_versions)
    meta["versions"] = versions
    lost: dict[str, int] = {}
    for name in list(meta.get("probes", {})):
        script = genv.get(f"probe_{name}_script")
        if script:
            meta["probes"][name] = probe_meta(name, script)
        if run.probe_csv(name).is_file():
            lost[name] = int(genv.get(f"lost_events_{name}", 0) or 0)
            meta[PROBE_STATS_KEY.get(name, f"{name}_stats")] = probe_stats(name, genv)
    meta["lost_events"] = lost
    if "fs_device" in genv:
        meta["workload"]["fs_device"] = genv["fs_device"]
    fio = fio_totals(run.fio_json)
    if fio:
        meta["fio"] = fio
    prefill = fio_totals(run.root / STAGING / "prefill-fio.json")
    if prefill:
        meta["prefill"] = {"write_ios": prefill["write_ios"], "seconds": int(genv.get("prefill_s", 0))}
    counts = count_commands(run.nvme_csv)
    if run.nvme_csv.is_file():
        meta["commands"] = counts
    status = genv.get("status", "failed")
    all_files = all(run.probe_csv(name).is_file() for name in meta.get("probes", {}))
    meta["complete"] = bool(status == "complete" and result_status == 0 and not interrupted and all_files)
    meta["capture"] = {"guest_status": result_status, "status": status, "interrupted": interrupted,
                       "seconds": round(time.monotonic() - started, 1),
                       "workload_s": float(genv.get("workload_s", 0) or 0)}
    write_meta(run, meta)
    shutil.rmtree(run.root / STAGING, ignore_errors=True)
    hand_over_tree(run.root)  # what the capture script wrote as root under sudo goes to the user
    rows = {name: int(genv.get(f"probe_{name}_rows", 0) or 0) for name in lost}
    return {"run": str(run.root), "commands": sum(counts.values()), "reads": counts.get("read", 0),
            "fio_reads": fio.get("read_ios", 0), "lost": lost.get("nvme"), "probes": {
                name: {"rows": rows[name], "lost": lost[name]} for name in lost},
            "seconds": meta["capture"]["seconds"], "iops": fio.get("read_iops", 0) + fio.get("write_iops", 0),
            "complete": meta["complete"]}


def summary_line(s: dict[str, Any]) -> str:
    state = "complete" if s["complete"] else "INCOMPLETE (partial data, \"complete\": false)"
    probes = s.get("probes", {})
    if set(probes) <= {"nvme"}:
        traced = f"{s['commands']:,} commands traced ({s['reads']:,} reads; fio {s['fio_reads']:,}), " \
                 f"lost events {s['lost']}"
    else:
        traced = ", ".join(f"{name} {p['rows']:,} rows" for name, p in sorted(probes.items())) + \
            f" (fio {s['fio_reads']:,} reads), lost events " + \
            ", ".join(f"{name} {p['lost']}" for name, p in sorted(probes.items()))
    return f"capture {state}: {traced}, {s['seconds']:.0f} s, {s['iops']:,.0f} IOPS -> {s['run']}"


# ---- progress --------------------------------------------------------------------------------------------
class Progress:
    """Turns the guest's "ZTBP:" console lines into progress messages with a countdown (on stderr: stdout holds
    only the summary, a line or with --json the JSON document)."""

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
            print(f"  | {line}", file=sys.stderr, flush=True)

    def _countdown(self, done: int, traced: int) -> None:
        if self.workload_start is None:
            return
        if not self.expected:  # a user's job file: how many reads it does is fio's to say
            self.say(f"workload: {done:,} reads done ({traced:,} commands traced)")
            return
        elapsed = time.monotonic() - self.workload_start
        left = max(0, self.expected - done)
        eta = f"~{left / (done / elapsed):.0f} s left" if done and elapsed > 0 else "starting"
        self.say(f"workload: {done:,}/{self.expected:,} reads done, {eta} ({traced:,} commands traced)")

    def say(self, msg: str) -> None:
        print(f"[{time.monotonic() - self.start:6.1f}s] {msg}", file=sys.stderr, flush=True)


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
    backend: str = "qemu"
    nvmevirt_ko: Path | None = None
    nvmevirt_storage_bytes: int = 1 << 30
    nvmevirt_reserve_bytes: int = 0  # 0: the storage
    out: str | None = None
    timeout: int = 3600
    verbose: bool = False
    probe: str | None = None  # a file of NVME_PROBES; None: probes/nvme_zone.bt
    suite: str | None = None  # guest image suite (vm.SUITES); None: bookworm (or ZTBP_SUITE)
    fio_file: Path | None = None  # a user's fio job run instead of the preset's (the preset resets and prefills)


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
    dev = vm_device(req.backend, req.geometry, req.nvmevirt_ko, req.nvmevirt_storage_bytes, CaptureError,
                    req.nvmevirt_reserve_bytes)
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


# ---- ztbp capture-layers -----------------------------------------------------------------------------------
LAYER_FS = ("raw", "ext4", "btrfs")
LAYER_ENGINES = ("psync", "io_uring", "libaio")
#: The probes of a layer capture: the layer probe and, beside it, the NVMe probe whose device time starts at the
#: same nvme_setup_cmd (the streaming one).
LAYER_SCRIPTS = {"nvme": "probes/nvme_zone_stream.bt", "layers": "probes/layers.bt"}


@dataclass(frozen=True)
class LayersCapture:
    """What `ztbp capture-layers` was asked for: fio 4 KiB random reads on one storage stack in the VM, traced
    by the layer probe (and the NVMe probe)."""

    fs: str = "raw"
    engine: str = "psync"
    iodepth: int = 0  # 0: 1 for psync, 4 otherwise
    jobs: int = 1
    runtime_s: int = 5
    reads: int = 0  # > 0: this many reads (reads / jobs each, rounded up) instead of runtime_s
    size: str = "256M"
    probes: tuple[str, ...] = ("nvme", "layers")
    trace_prep: bool = False
    bench: bool = False
    bench_rounds: int = 2
    geometry: Geometry = Geometry(conv_ns_bytes=1 << 30)
    out: str | None = None
    timeout: int = 1800
    verbose: bool = False
    suite: str | None = None  # guest image suite (vm.SUITES); None: bookworm (or ZTBP_SUITE)

    @property
    def depth(self) -> int:
        return self.iodepth or (1 if self.engine == "psync" else 4)

    @property
    def name(self) -> str:
        return f"layers-{self.fs}-{self.engine}"

    def validate(self) -> None:
        if self.fs not in LAYER_FS:
            raise CaptureError(f"--fs {self.fs}: choose one of {', '.join(LAYER_FS)}")
        if self.engine not in LAYER_ENGINES:
            raise CaptureError(f"--engine {self.engine}: choose one of {', '.join(LAYER_ENGINES)}")
        unknown = [p for p in self.probes if p not in LAYER_SCRIPTS]
        if unknown or not self.probes:
            raise CaptureError(f"--probes {','.join(self.probes)}: a comma list of {', '.join(LAYER_SCRIPTS)}")
        if self.runtime_s < 1 or self.jobs < 1 or self.iodepth < 0 or self.bench_rounds < 1:
            raise CaptureError("--runtime, --jobs and --bench-rounds must be at least 1, --iodepth 0 (the default) "
                               "or more")
        if self.fs == "ext4" and not self.geometry.conv_ns_bytes:
            raise CaptureError("--fs ext4 runs on the conventional namespace: give it a size with --conv-ns")
        if self.reads and -(-self.reads // self.jobs) * 4096 > parse_size(self.size):
            raise CaptureError(f"--reads {self.reads:,}: {-(-self.reads // self.jobs):,} 4 KiB reads a job do not fit "
                               f"in --size {self.size} (fio reads each block once); give a larger --size or fewer "
                               "reads")
        if parse_size(self.size) > self.geometry.zone_bytes * self.geometry.zones:
            raise CaptureError(f"--size {self.size} is larger than the zoned namespace "
                               f"({self.geometry.zones} zones of {self.geometry.zone_bytes // MIB} MiB)")
        self.geometry.validate()

    def workload_meta(self) -> dict[str, Any]:
        """meta.json `workload` of a layer capture (`fs_device` is added from the guest)."""
        return {"name": self.name, "kind": "layers", "fio": "randread bs=4k direct=1", "engine": self.engine,
                "iodepth": self.depth, "jobs": self.jobs, "size": self.size, "fs": self.fs,
                **({"reads": self.reads} if self.reads else {"runtime_s": self.runtime_s})}

    def guest_env(self) -> dict[str, str]:
        """vm/guest/layers-capture.sh's environment. ZTBP_EXPECTED: the requests in flight at once, which size the
        layer probe's maps (it forgets a request when it ends; vm/guest/probe-lib.sh, MAP SIZE)."""
        return {"ZTBP_FS": self.fs, "ZTBP_ENGINE": self.engine, "ZTBP_IODEPTH": str(self.depth),
                "ZTBP_JOBS": str(self.jobs), "ZTBP_RUNTIME": str(self.runtime_s), "ZTBP_READS": str(self.reads),
                "ZTBP_SIZE": self.size,
                "ZTBP_PROBES": ",".join(self.probes), "ZTBP_TRACE_PREP": str(int(self.trace_prep)),
                "ZTBP_BENCH": str(int(self.bench)), "ZTBP_BENCH_ROUNDS": str(self.bench_rounds),
                "ZTBP_EXPECTED": str(self.jobs * self.depth)}


def run_layers_capture(req: LayersCapture) -> CaptureOutcome:
    """Trace fio random reads on one storage stack with the layer probe into a new run directory."""
    req.validate()
    g = req.geometry
    progress = Progress(0, req.verbose)
    amount = f"{req.reads:,} reads" if req.reads else f"{req.runtime_s} s"
    progress.say(f"capture {req.name}: fio randread 4 KiB, {req.jobs} job(s) x QD {req.depth}, {amount}; "
                 f"probes {','.join(req.probes)}{', bench first' if req.bench else ''}")
    meta = device_meta(vm_device("qemu", g), req.workload_meta(), {name: LAYER_SCRIPTS[name] for name in req.probes})
    run = start_run(req.name, req.out, meta, vm=True, echo=progress.say, suite=req.suite)
    return run_vm_capture(run, meta, GuestCommand("layers-capture.sh", req.guest_env(), geometry=g,
                                                  timeout=req.timeout, suite=req.suite), progress)


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


def host_zone_cap(dev: str) -> int | None:
    """The zone capacity of a real zoned device in bytes, from `blkzone report -c 1` (None: its blkzone prints no
    capacity, an old util-linux); a CaptureError when blkzone cannot report the device."""
    code, out, err = run_command(["blkzone", "report", "-c", "1", dev], 60)
    if code is None:
        raise CaptureError(f"blkzone report {dev} did not run ({err}); it tells the zone capacity the workload must "
                           "keep within: install util-linux")
    if code != 0:
        raise CaptureError(f"blkzone report {dev} failed: {err.strip()[-300:]}; it tells the zone capacity "
                           "the workload must keep within")
    return zone_capacity(out)


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


def host_tools(error: type[ZtbpError], command: str) -> None:
    """What the host path needs on this machine: bpftrace, fio, blkzone, and root."""
    missing = [t for t in ("bpftrace", "fio", "blkzone") if shutil.which(t) is None]
    if missing:
        raise error(f"missing on this machine: {', '.join(missing)}; install with "
                    "apt-get install bpftrace fio util-linux")
    if os.geteuid() != 0:
        raise error(f"{command} needs root (bpftrace and raw device access); run it with sudo")


def device_geometry(dev: str, sysfs: Path, module: DeviceModule | None = None) -> tuple[int, int, int, int | None]:
    """(lba bytes, zone bytes, nr zones, zone capacity) of this machine's zoned namespace `dev`, checked zoned; with
    `module` (a module that creates the device, NVMeVirt), the module loaded for the moment of reading them and
    unloaded again, before any probe attaches (acquire/module.py). loop --host and watch read it so; capture-host
    without a module refuses its options first (check_writes, --probe) and runs blkzone for the capacity last."""
    with device_present(module, dev):
        check_zoned(dev, sysfs)
        lba, zone_bytes, nr = host_geometry(dev, sysfs)
        return lba, zone_bytes, nr, host_zone_cap(dev)


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
                        backend="host", probes={"nvme": script}, zone_cap_bytes=cap)
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
