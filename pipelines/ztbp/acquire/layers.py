"""`ztbp capture-layers`: fio random reads on one storage stack in the VM (vm/guest/layers-capture.sh), traced by
the layer probe beside the streaming NVMe probe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..devices import QEMU
from ..units import MIB, parse_size
from .capture import CaptureError, CaptureOutcome, GuestCommand, run_vm_capture, start_run
from .meta import device_meta
from .progress import Progress
from .vm import Geometry, vm_device

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
    meta = device_meta(vm_device(QEMU, g), req.workload_meta(), {name: LAYER_SCRIPTS[name] for name in req.probes})
    run = start_run(req.name, req.out, meta, vm=True, echo=progress.say, suite=req.suite)
    return run_vm_capture(run, meta, GuestCommand("layers-capture.sh", req.guest_env(), geometry=g,
                                                  timeout=req.timeout, suite=req.suite), progress)
