"""The interference profiler's measurement driver (`ztbp profile`): solo and concurrent zone bandwidth with fio.

Two places to measure: the VM (QEMU's zoned namespace or NVMeVirt), where vm/guest/profile.sh serves fio jobs
the host sends through the host<->guest channel (acquire/channel.py), and a zoned device of this machine, where
fio runs directly.
Both look the same to the profiler (`Runner`): `fio(job) -> fio's JSON`, `reset(first, count)`. The grouping
algorithm itself is pure (analysis/conflict_groups.py); this module only turns "measure zones A and B together"
into fio jobs and bandwidth numbers and keeps the time budget; control/profile.py drives it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .. import devices, paths
from ..analysis.device_params import ProfileParams
from ..devices import DRIVE, QEMU
from ..errors import ProfileError
from ..io.mailbox import Mailbox
from ..units import KIB, MIB
from .channel import GuestSession
from .vm import GuestResult, NvmevirtPlan, nvmevirt_module, qemu_version

GUEST_SCRIPT = paths.VM / "guest" / "profile.sh"
#: Extra seconds a fio request may take beyond its runtime (fio start-up under emulation, job teardown).
FIO_SLACK_S = 120


@dataclass(frozen=True)
class Device:
    """What the profiler knows of the device it measures."""

    name: str
    path: str
    lba_bytes: int
    zone_bytes: int
    nr_zones: int
    backend: str  # the name of its kind of device (devices/)
    model: str = ""
    kernel: str = ""
    fio: str = ""


class Runner(Protocol):
    """Runs fio jobs and zone resets on one zoned device."""

    device: Device

    def fio(self, job: str, timeout_s: float) -> dict[str, Any]: ...

    def reset(self, first: int, count: int) -> None: ...


# ---- fio jobs ------------------------------------------------------------------------------------------------
def _global(device: str, spec: ProfileParams) -> list[str]:
    return ["[global]", f"filename={device}", f"ioengine={spec.ioengine}", "direct=1", "thread=1",
            "group_reporting=0"]


def measure_job(device: str, zone_bytes: int, zones: Sequence[int], spec: ProfileParams,
                starts: Mapping[int, int] | None = None) -> str:
    """fio job reading (or writing) `zones` at once: one job per zone, for `spec.seconds`.

    Each job covers [zone start + starts[zone], + span) of its zone and loops over it until the time is up, unless
    `spec.fresh` (then each block is read once and the job ends early when the span is done). Writes go to the
    zone's write pointer; fio resets a zone it finds full (zonemode=zbd).
    """
    span = spec.span_bytes(zone_bytes)
    starts = starts or {}
    end = max((starts.get(z, 0) for z in zones), default=0) + span
    if end > zone_bytes:
        raise ProfileError(f"the measured span ({end // MIB} MiB into the zone) is beyond the zone size "
                           f"{zone_bytes // MIB} MiB")
    lines = [f"; ztbp profile: zones {' '.join(map(str, zones))} together, {spec.rw} {spec.block_bytes // KIB}k "
             f"QD {spec.iodepth}, {spec.seconds:g} s"]
    lines += _global(device, spec)
    for z in zones:
        lines += ["", f"[z{z}]", f"rw={spec.rw}", f"bs={spec.block_bytes}", f"iodepth={spec.iodepth}",
                  f"offset={z * zone_bytes + starts.get(z, 0)}", f"size={span}", f"runtime={spec.seconds:g}s"]
        if spec.loops:
            lines.append("time_based=1")
        if spec.ramp_seconds:
            lines.append(f"ramp_time={spec.ramp_seconds:g}s")
        if spec.rw == "write":
            lines.append("zonemode=zbd")
    return "\n".join(lines) + "\n"


def fill_job(device: str, zone_bytes: int, zones: Sequence[int], spec: ProfileParams) -> str:
    """fio job writing `zones` full, all at once (they were reset first)."""
    lines = [f"; ztbp profile: fill zones {' '.join(map(str, zones))}"]
    lines += _global(device, spec)
    for z in zones:
        lines += ["", f"[fill{z}]", "rw=write", "zonemode=zbd", f"bs={spec.fill_block_bytes}", "iodepth=1",
                  f"offset={z * zone_bytes}", f"size={zone_bytes}"]
    return "\n".join(lines) + "\n"


def zone_bandwidth(result: dict[str, Any], rw: str) -> dict[int, float]:
    """MiB/s per zone from fio's JSON of `measure_job` (jobs named z<zone>)."""
    out: dict[int, float] = {}
    for job in result.get("jobs", []):
        name = str(job.get("jobname", ""))
        if not name.startswith("z") or not name[1:].isdigit():
            continue
        out[int(name[1:])] = float(job.get(rw, {}).get("bw_bytes", 0)) / MIB
    return out


# ---- the VM: a measurement server in the guest ---------------------------------------------------------------
@dataclass
class GuestRunner:
    """Boots the guest with vm/guest/profile.sh (a GuestSession) and sends it fio jobs and zone resets as numbered
    requests through its mailbox, OUT/req -> OUT/res."""

    out: Path
    backend: str = QEMU.name  # --backend: the device's name (devices.get)
    geometry: Any = None
    nvmevirt_ko: Path | None = None
    nvmevirt_plan: NvmevirtPlan | None = None
    timeout_s: int = 7200
    on_line: Callable[[str], None] | None = None
    device: Device = field(init=False)
    session: GuestSession = field(init=False)

    def __post_init__(self) -> None:
        self.session = GuestSession(GUEST_SCRIPT.name, self.out, Mailbox(self.out / "req", self.out / "res"),
                                    "device.env", timeout_s=self.timeout_s, on_line=self.on_line,
                                    error=ProfileError, purpose="the profile", ready_what="describe its device")

    @property
    def mailbox(self) -> Mailbox:
        return self.session.mailbox

    @property
    def boot_attempts(self) -> int:
        return self.session.boot_attempts

    def start(self) -> None:
        self.session.geometry = self.geometry
        if devices.get(self.backend).probe_before_appears:  # a module makes it (NVMeVirt): no QEMU namespace
            plan = self.nvmevirt_plan or NvmevirtPlan()
            self.session.extra_args = plan.vmtest_args(nvmevirt_module(self.nvmevirt_ko, ProfileError))
            self.session.geometry = None
        self.device = device_from_env(self.session.start(), self.backend, "/dev/nvme0n1")

    def _status(self, rid: str, timeout_s: float) -> int:
        rc = self.mailbox.status(rid, timeout_s, self.session.alive)
        if rc is None:
            raise ProfileError(f"request {rid} took more than {timeout_s:.0f} s; see {self.session.console}")
        return rc

    def fio(self, job: str, timeout_s: float) -> dict[str, Any]:
        rid = self.mailbox.request("fio", job)
        rc = self._status(rid, timeout_s)
        res = self.mailbox.answer(f"{rid}.json")
        if rc != 0 or not res.is_file():
            raise ProfileError(f"fio failed in the guest (status {rc}) on request {rid}; the job is "
                               f"{self.mailbox.outbox / (rid + '.fio')}, the console {self.session.console}")
        return json.loads(res.read_text())

    def reset(self, first: int, count: int) -> None:
        rid = self.mailbox.request("reset", f"{first} {count}\n")
        if self._status(rid, FIO_SLACK_S) != 0:
            raise ProfileError(f"blkzone reset of zones {first}..{first + count - 1} failed in the guest")

    def close(self) -> GuestResult | None:
        """Ask the guest to finish and wait for it (GuestSession.close)."""
        return self.session.close()

    def kill(self) -> None:
        """Stop the guest now (GuestSession.kill): no QEMU outlives the profiler."""
        self.session.kill()

    @property
    def versions(self) -> dict[str, str]:
        return {"qemu": qemu_version(), "kernel": self.device.kernel, "fio": self.device.fio}


def device_from_env(env: dict[str, str], backend: str, path: str) -> Device:
    zoned = env.get("zoned", "none")
    if zoned not in ("host-managed", "host-aware"):
        raise ProfileError(f"{path} is not a zoned device (queue/zoned = {zoned}); the profiler measures zones")
    lba = int(env["lba_bytes"])
    return Device(name=env.get("device", Path(path).name), path=path, lba_bytes=lba,
                  zone_bytes=int(env["zone_sectors"]) * 512, nr_zones=int(env["nr_zones"]), backend=backend,
                  model=env.get("model", "").strip(), kernel=env.get("kernel", ""), fio=env.get("fio", ""))


# ---- a zoned device of this machine --------------------------------------------------------------------------
@dataclass
class HostRunner:
    """fio and blkzone on a zoned device of this machine (root)."""

    path: str
    sysfs: Path = Path("/sys")
    device: Device = field(init=False)

    def start(self) -> None:
        for tool in ("fio", "blkzone"):
            if shutil.which(tool) is None:
                raise ProfileError(f"{tool} not found: install fio and util-linux")
        q = self.sysfs / "block" / Path(self.path).name / "queue"
        if not q.is_dir():
            raise ProfileError(f"{self.path}: no such block device ({q} missing); give a whole namespace such "
                               "as /dev/nvme0n1")
        env = {"device": Path(self.path).name,
               "zoned": _read(q / "zoned", "none"), "lba_bytes": _read(q / "logical_block_size", "512"),
               "zone_sectors": _read(q / "chunk_sectors", "0"), "nr_zones": _read(q / "nr_zones", "0"),
               "kernel": os.uname().release, "model": _read(q.parent / "device" / "model", "")}
        self.device = device_from_env(env, DRIVE.name, self.path)

    def fio(self, job: str, timeout_s: float) -> dict[str, Any]:
        proc = subprocess.run(["fio", "--eta=never", "--output-format=json", "-"], input=job, text=True,
                              capture_output=True, timeout=timeout_s)
        if proc.returncode != 0:
            raise ProfileError(f"fio failed on {self.path}: {proc.stderr.strip()[-300:]}")
        return json.loads(proc.stdout[proc.stdout.find("{"):])

    def reset(self, first: int, count: int) -> None:
        sectors = self.device.zone_bytes // 512
        proc = subprocess.run(["blkzone", "reset", "-o", str(first * sectors), "-c", str(count), self.path],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise ProfileError(f"blkzone reset failed on {self.path}: {proc.stderr.strip()}")

    def close(self) -> None:
        return None

    @property
    def versions(self) -> dict[str, str]:
        return {"kernel": self.device.kernel}


def _read(p: Path, default: str) -> str:
    try:
        return p.read_text().strip()
    except OSError:
        return default


@contextmanager
def started(runner: GuestRunner | HostRunner) -> Iterator[GuestRunner | HostRunner]:
    """The runner, started, and closed at the end; a guest that fails to start (no device described in time, an
    error) is killed rather than left running after the command exits."""
    try:
        runner.start()
    except BaseException:
        if isinstance(runner, GuestRunner):
            runner.kill()
        raise
    try:
        yield runner
    finally:
        runner.close()


# ---- measuring -----------------------------------------------------------------------------------------------
class Budget:
    """A wall-clock budget: `left()` seconds, `spent()` seconds; 0 means no limit."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.t0 = time.monotonic()

    def spent(self) -> float:
        return time.monotonic() - self.t0

    def exhausted(self) -> bool:
        return bool(self.seconds) and self.spent() >= self.seconds


@dataclass
class Meter:
    """Measures zones alone and together on a runner; remembers every measurement it made."""

    runner: Runner
    spec: ProfileParams
    log: list[dict[str, Any]] = field(default_factory=list)
    wraps: int = 0
    _next_start: dict[int, int] = field(default_factory=dict)

    def _starts(self, zones: Sequence[int]) -> dict[int, int]:
        """Where in each zone this measurement reads: the zone start every time, or (spec.fresh) the next span
        that no earlier measurement of that zone read, so a device cache keyed by LBA never sees a block twice;
        when a zone has no fresh span left it starts over (counted in `wraps`)."""
        if not self.spec.fresh:
            return {z: 0 for z in zones}
        zb = self.runner.device.zone_bytes
        span = self.spec.span_bytes(zb)
        out: dict[int, int] = {}
        for z in zones:
            start = self._next_start.get(z, 0)
            if start + span > zb:
                start = 0
                self.wraps += 1
            out[z] = start
            self._next_start[z] = start + span
        return out

    def measure(self, zones: Sequence[int]) -> dict[int, float]:
        dev = self.runner.device
        t0 = time.monotonic()
        starts = {z: 0 for z in zones} if self.spec.rw == "write" else self._starts(zones)
        job = measure_job(dev.path, dev.zone_bytes, zones, self.spec, starts)
        bw = zone_bandwidth(self.runner.fio(job, self.spec.seconds + self.spec.ramp_seconds + FIO_SLACK_S),
                            self.spec.rw)
        missing = [z for z in zones if z not in bw]
        if missing:
            raise ProfileError(f"fio reported no bandwidth for zones {missing}")
        self.log.append({"zones": list(zones), "MiB_per_s": [round(bw[z], 4) for z in zones],
                         "start_bytes": [starts[z] for z in zones], "wall_s": round(time.monotonic() - t0, 2)})
        return bw

    def fill(self, zones: Sequence[int]) -> float:
        """Reset `zones` and write them full (reads of unwritten blocks are not what a profile measures)."""
        dev = self.runner.device
        t0 = time.monotonic()
        for first, count in _runs(sorted(zones)):
            self.runner.reset(first, count)
        self.runner.fio(fill_job(dev.path, dev.zone_bytes, zones, self.spec), 3600)
        return time.monotonic() - t0


def _runs(zones: list[int]) -> list[tuple[int, int]]:
    """[0,1,2,5,6] -> [(0,3), (5,2)]: consecutive zone ids as (first, count)."""
    out: list[tuple[int, int]] = []
    for z in zones:
        if out and out[-1][0] + out[-1][1] == z:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((z, 1))
    return out
