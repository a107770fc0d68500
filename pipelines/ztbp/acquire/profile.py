"""The interference profiler's measurement driver (`ztbp profile`): solo and concurrent zone bandwidth with fio.

Two places to measure: the VM (QEMU's zoned namespace or NVMeVirt), where vm/guest/profile.sh serves fio jobs
the host sends through the shared output folder, and a zoned device of this machine, where fio runs directly.
Both look the same to the profiler (`Runner`): `fio(job) -> fio's JSON`, `reset(first, count)`. The grouping
algorithm itself is pure (analysis/interference.py); this module only turns "measure zones A and B together"
into fio jobs and bandwidth numbers, keeps the time budget, and writes the profile's files.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .. import paths
from ..analysis.device_params import ProfileParams
from ..errors import ZtbpError
from ..units import KIB, MIB
from .vm import GuestResult, NvmevirtPlan, VmError, ensure_image, qemu_version, run_in_guest

GUEST_SCRIPT = paths.VM / "guest" / "profile.sh"
#: Seconds the host waits for the guest to boot, load a module and describe its device.
BOOT_TIMEOUT_S = 600
#: Extra seconds a fio request may take beyond its runtime (fio start-up under emulation, job teardown).
FIO_SLACK_S = 120
POLL_S = 0.1
#: Seconds without a single console line after which a boot counts as hung (the guest's first line, "up in",
#: comes after ~30 s under TCG); such a guest is killed and booted again, BOOT_ATTEMPTS times in all.
SILENT_BOOT_S = 240
BOOT_ATTEMPTS = 2
CLOSE_WAIT_S = 300  # after OUT/req/done, before the guest is killed
KILL_WAIT_S = 30  # after SIGTERM to vmtest.sh (it kills QEMU at once), before SIGKILL to its group


class ProfileError(ZtbpError):
    """The profiler cannot measure (device, VM or fio trouble)."""


class SilentBoot(Exception):
    """The guest printed nothing within SILENT_BOOT_S: its boot hung (seen with NVMeVirt under TCG)."""


@dataclass(frozen=True)
class Device:
    """What the profiler knows of the device it measures."""

    name: str
    path: str
    lba_bytes: int
    zone_bytes: int
    nr_zones: int
    backend: str  # qemu, nvmevirt, host
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
    """Boots the guest with vm/guest/profile.sh and sends it fio jobs through OUT/req -> OUT/res."""

    out: Path
    backend: str = "qemu"
    geometry: Any = None
    nvmevirt_ko: Path | None = None
    nvmevirt_plan: NvmevirtPlan | None = None
    timeout_s: int = 7200
    on_line: Callable[[str], None] | None = None
    device: Device = field(init=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)
    _result: GuestResult | None = field(default=None, init=False, repr=False)
    _error: BaseException | None = field(default=None, init=False, repr=False)
    _seq: int = field(default=0, init=False, repr=False)
    _proc: subprocess.Popen[str] | None = field(default=None, init=False, repr=False)
    _lines: int = field(default=0, init=False, repr=False)
    boot_attempts: int = field(default=0, init=False)

    @property
    def req(self) -> Path:
        return self.out / "req"

    @property
    def res(self) -> Path:
        return self.out / "res"

    def start(self) -> None:
        for d in (self.req, self.res):
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)
        (self.out / "device.env").unlink(missing_ok=True)
        extra: list[str] = []
        geometry = self.geometry
        if self.backend == "nvmevirt":
            if self.nvmevirt_ko is None or not self.nvmevirt_ko.is_file():
                raise ProfileError(f"--nvmevirt-ko {self.nvmevirt_ko}: no such file; build nvmev.ko for the guest "
                                   "kernel (see vm/README.md, 'NVMeVirt backend')")
            plan = self.nvmevirt_plan or NvmevirtPlan()
            extra = plan.vmtest_args(self.nvmevirt_ko)
            geometry = None
        try:
            ensure_image(echo=lambda s: self._say(s))
        except VmError as e:
            raise ProfileError(str(e)) from None

        def boot() -> None:
            try:
                self._result = run_in_guest(f"bash /ztbp/src/vm/guest/{GUEST_SCRIPT.name}", self.out,
                                            geometry=geometry, timeout=self.timeout_s, extra_args=extra,
                                            on_line=self._line, on_start=self._started)
            except BaseException as e:  # noqa: BLE001 - surfaced by the waiting side
                self._error = e

        for attempt in range(1, BOOT_ATTEMPTS + 1):
            self.boot_attempts = attempt
            self._lines, self._proc, self._result, self._error = 0, None, None, None
            self._thread = threading.Thread(target=boot, name="ztbp-profile-guest", daemon=True)
            self._thread.start()
            try:
                self.device = self._wait_device()
                return
            except SilentBoot as e:
                self.kill()
                if attempt == BOOT_ATTEMPTS:
                    raise ProfileError(str(e)) from None
                self._say(f"boot-again {e}; killed it, booting again (attempt {attempt + 1} of {BOOT_ATTEMPTS})")

    def _started(self, proc: subprocess.Popen[str]) -> None:
        self._proc = proc

    def _say(self, msg: str) -> None:
        if self.on_line is not None:
            self.on_line(f"ZTBP: stage {msg}")

    def _line(self, line: str) -> None:
        self._lines += 1
        if self.on_line is not None:
            self.on_line(line)

    def _alive(self) -> None:
        if self._error is not None:
            raise ProfileError(f"the VM failed: {self._error}")
        if self._thread is not None and not self._thread.is_alive():
            status = self._result.status if self._result else "?"
            raise ProfileError(f"the guest stopped (status {status}) before the profile was done; see "
                               f"{self.out / 'console.log'}")

    def _wait_device(self) -> Device:
        env_file = self.out / "device.env"
        t0 = time.monotonic()
        while not env_file.is_file():
            self._alive()
            if self._lines == 0 and time.monotonic() - t0 > SILENT_BOOT_S:
                raise SilentBoot(f"the guest printed nothing on its console in {SILENT_BOOT_S} s (a hung boot)")
            if time.monotonic() - t0 > BOOT_TIMEOUT_S:
                raise ProfileError(f"the guest did not describe its device within {BOOT_TIMEOUT_S} s; see "
                                   f"{self.out / 'console.log'}")
            time.sleep(POLL_S)
        return device_from_env(read_env(env_file), self.backend, "/dev/nvme0n1")

    def _submit(self, suffix: str, text: str) -> str:
        self._seq += 1
        rid = f"{self._seq:05d}"
        tmp = self.req / f".{rid}.tmp"
        tmp.write_text(text)
        tmp.replace(self.req / f"{rid}.{suffix}")
        return rid

    def _wait(self, rid: str, timeout_s: float) -> int:
        rc_file = self.res / f"{rid}.rc"
        t0 = time.monotonic()
        while not rc_file.is_file():
            self._alive()
            if time.monotonic() - t0 > timeout_s:
                raise ProfileError(f"request {rid} took more than {timeout_s:.0f} s; see {self.out / 'console.log'}")
            time.sleep(POLL_S)
        return int(rc_file.read_text().strip() or "1")

    def fio(self, job: str, timeout_s: float) -> dict[str, Any]:
        rid = self._submit("fio", job)
        rc = self._wait(rid, timeout_s)
        res = self.res / f"{rid}.json"
        if rc != 0 or not res.is_file():
            raise ProfileError(f"fio failed in the guest (status {rc}) on request {rid}; the job is "
                               f"{self.req / (rid + '.fio')}, the console {self.out / 'console.log'}")
        return json.loads(res.read_text())

    def reset(self, first: int, count: int) -> None:
        rid = self._submit("reset", f"{first} {count}\n")
        if self._wait(rid, FIO_SLACK_S) != 0:
            raise ProfileError(f"blkzone reset of zones {first}..{first + count - 1} failed in the guest")

    def close(self) -> GuestResult | None:
        """Ask the guest to finish (OUT/req/done) and wait for it; kill it if it does not stop in CLOSE_WAIT_S."""
        if self._thread is None:
            return None
        (self.req / "done").write_text("")
        self._thread.join(timeout=CLOSE_WAIT_S)
        if self._thread.is_alive():
            self.kill()
        return self._result

    def kill(self) -> None:
        """Stop the guest now (vmtest.sh kills QEMU on SIGTERM) and wait for the boot thread: no QEMU outlives us."""
        if self._thread is None:
            return
        deadline = time.monotonic() + KILL_WAIT_S
        while self._proc is None and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(POLL_S)  # the boot thread has not started vmtest.sh yet
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
        self._thread.join(timeout=KILL_WAIT_S)
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._thread.join(timeout=KILL_WAIT_S)

    @property
    def versions(self) -> dict[str, str]:
        return {"qemu": qemu_version(), "kernel": self.device.kernel, "fio": self.device.fio}


def read_env(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (device.env of vm/guest/profile.sh)."""
    return dict(line.split("=", 1) for line in path.read_text(errors="replace").splitlines() if "=" in line)


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
        self.device = device_from_env(env, "host", self.path)

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


def spec_dict(spec: ProfileParams) -> dict[str, Any]:
    return asdict(spec)


# ---- the profile: measure, group, write ------------------------------------------------------------------------
PROFILE_FORMAT = "ztbp-profile/1"
Z2C_FORMAT = "ztbp-z2c/1"
#: Answer keys of devices whose layout is known: name -> nvmevirt_layout arguments.
KEYS: dict[str, dict[str, int]] = {
    "nvmevirt-prototype": {"channels": 8, "luns_per_channel": 16, "dies_per_zone": 1},
    "nvmevirt-zn540": {"channels": 8, "luns_per_channel": 4, "dies_per_zone": 32},
}


@dataclass(frozen=True)
class ProfileRequest:
    """What `ztbp profile` was asked for."""

    zones: tuple[int, ...] | None  # None = every zone of the device (up to max_zones)
    spec: ProfileParams = ProfileParams()
    threshold: float = 0.75
    threshold_mib: float | None = None
    reference: str = "median"
    full_matrix: bool = False
    confirm: int = 1
    recheck: bool = True  # every zone's solo bandwidth again at the end: the drift and the noise of a measurement
    budget_s: float = 0.0
    fill: bool = True
    key: str | None = None
    max_zones: int = 32
    min_separation: float = 0.15


def choose_zones(req: ProfileRequest, device: Device) -> list[int]:
    if req.zones is None:
        return list(range(min(device.nr_zones, req.max_zones)))
    bad = [z for z in req.zones if z >= device.nr_zones]
    if bad:
        raise ProfileError(f"zones {bad} are beyond the device's {device.nr_zones} zones")
    if len(set(req.zones)) < 2:
        raise ProfileError("give at least two different zones to profile")
    return list(dict.fromkeys(req.zones))


class Reporter:
    """Progress lines with the elapsed time and, for pairs, what is left at most."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.echo = echo
        self.t0 = time.monotonic()
        self.pair_times: list[float] = []

    def say(self, msg: str) -> None:
        self.echo(f"[{time.monotonic() - self.t0:7.1f}s] {msg}")


def run_profile(req: ProfileRequest, runner: GuestRunner | HostRunner, out: Path,
                echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure, group and write the profile's files into `out`; return the profile document."""
    from ..analysis.conflict_groups import (
        UNCLASSIFIED,
        adjusted_rand,
        nvmevirt_layout,
        pair_matrix,
        profile_zones,
    )

    rep = Reporter(echo)
    out.mkdir(parents=True, exist_ok=True)
    rep.say(f"starting the {runner.__class__.__name__.removesuffix('Runner').lower()} side")
    t_boot = time.monotonic()
    with started(runner) as r:
        dev = r.device
        boot_s = time.monotonic() - t_boot
        zones = choose_zones(req, dev)
        rep.say(f"device {dev.name} ({dev.backend}): {dev.nr_zones} zones of {dev.zone_bytes // MIB} MiB, "
                f"LBA {dev.lba_bytes} B; profiling {len(zones)} zones, {req.spec.rw} "
                f"{req.spec.block_bytes // KIB} KiB QD {req.spec.iodepth}, {req.spec.seconds:g} s per measurement")
        meter = Meter(r, req.spec)
        fill_s = 0.0
        if req.fill and req.spec.rw == "read":
            rep.say(f"resetting and writing the {len(zones)} zones full (reads of unwritten blocks say nothing)")
            fill_s = meter.fill(zones)
            rep.say(f"filled in {fill_s:.0f} s")
        budget = Budget(req.budget_s)

        seen: set[tuple[int, ...]] = set()

        def measure(zs: Sequence[int]) -> dict[int, float]:
            bw = meter.measure(zs)
            what = " + ".join(f"{z}: {bw[z]:.2f}" for z in zs)
            kind = ("solo" if len(zs) == 1 else "pair") + (" again" if tuple(zs) in seen else "")
            seen.add(tuple(zs))
            rep.say(f"{kind} {what} MiB/s ({meter.log[-1]['wall_s']:.0f} s)")
            return bw

        def on_step(kind: str, done: int, total: int) -> None:
            if kind == "pair" and done % 10 == 0:
                left = "" if not req.budget_s else f", {max(0, req.budget_s - budget.spent()):.0f} s of budget left"
                rep.say(f"pairs measured: {done} (at most {total}){left}")

        t_meas = time.monotonic()
        res = profile_zones(zones, measure, threshold=req.threshold, threshold_mib=req.threshold_mib,
                            reference=req.reference, full_matrix=req.full_matrix, confirm=req.confirm,
                            min_separation=req.min_separation, recheck=req.recheck, on_step=on_step,
                            stop=budget.exhausted)
        measure_s = time.monotonic() - t_meas
        versions = r.versions
    doc: dict[str, Any] = {
        "format": PROFILE_FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": asdict(dev), "spec": asdict(req.spec), "request": {
            "threshold": req.threshold, "threshold_mib": req.threshold_mib, "reference": req.reference,
            "full_matrix": req.full_matrix, "confirm": req.confirm, "recheck": req.recheck,
            "budget_s": req.budget_s, "fill": req.fill, "key": req.key},
        "versions": versions,
        "timing": {"boot_s": round(boot_s, 1), "fill_s": round(fill_s, 1), "measure_s": round(measure_s, 1),
                   "total_s": round(time.monotonic() - rep.t0, 1), "measurements": res.measurements,
                   "fresh_wraps": meter.wraps, "boot_attempts": getattr(r, "boot_attempts", 1),
                   "budget_exhausted": res.stopped_early},
        **res.as_dict(),
        "matrix": pair_matrix(res.zones, res.pairs),
        "log": meter.log,
    }
    if req.key:
        if req.key not in KEYS:
            raise ProfileError(f"unknown answer key {req.key!r}; choose one of {', '.join(KEYS)}")
        lay = nvmevirt_layout(res.zones, **KEYS[req.key])
        doc["key"] = {"name": req.key, "layout": lay.to_dicts(),
                      "ari_channel": adjusted_rand(dict(zip(lay["zone"], lay["channel"], strict=True)), res.groups),
                      "ari_die": adjusted_rand(dict(zip(lay["zone"], lay["die"], strict=True)), res.groups)}
    write_profile(out, doc)
    doc["unclassified"] = [z for z, g in res.groups.items() if g == UNCLASSIFIED]
    return doc


def write_profile(out: Path, doc: dict[str, Any]) -> None:
    """profile.json (everything), z2c.json and z2c.csv (the zone-to-group table), matrix.csv (pair ratios)."""
    (out / "profile.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    z2c = {"format": Z2C_FORMAT, "device": doc["device"]["name"], "backend": doc["device"]["backend"],
           "threshold": doc["threshold"], "threshold_mib": doc["threshold_mib"], "reference": doc["reference"],
           "structure": doc["verdict"].get("structure"), "verdict": doc["verdict"].get("reason"),
           "groups": doc["groups"]}
    (out / "z2c.json").write_text(json.dumps(z2c, indent=1) + "\n")
    lines = ["zone,group"] + [f"{z},{g}" for z, g in sorted(doc["groups"].items(), key=lambda kv: int(kv[0]))]
    (out / "z2c.csv").write_text("\n".join(lines) + "\n")
    zones = doc["zones"]
    rows = ["zone," + ",".join(map(str, zones))]
    for z, row in zip(zones, doc["matrix"], strict=True):
        rows.append(f"{z}," + ",".join("" if v is None else f"{v:.4f}" for v in row))
    (out / "matrix.csv").write_text("\n".join(rows) + "\n")


def read_profile(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """profile.json of a `ztbp profile` output folder (or the file itself)."""
    from ..paths import resolve_run

    path = resolve_run(folder).root
    path = path / "profile.json" if path.is_dir() else path
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ProfileError(f"{path}: cannot read a profile ({e}); give the folder `ztbp profile` wrote") from None
    if not isinstance(doc, dict) or doc.get("format") != PROFILE_FORMAT:
        raise ProfileError(f"{path} is not a {PROFILE_FORMAT} document")
    return doc


def read_z2c(path: str | os.PathLike[str]) -> dict[int, int]:
    """A zone-to-group table: z2c.json of a profile (or its folder), a profile.json, or a zone,group CSV."""
    from ..paths import resolve_run

    path = resolve_run(path).root
    if path.is_dir():
        path = path / "z2c.json"
    if not path.is_file():
        raise ProfileError(f"{path}: no such file; give the z2c.json (or z2c.csv) a `ztbp profile` wrote")
    text = path.read_text(errors="replace")
    if path.suffix == ".csv":
        out: dict[int, int] = {}
        for n, line in enumerate(text.splitlines()[1:], start=2):
            parts = line.split(",")
            try:
                out[int(parts[0])] = int(parts[1])
            except (ValueError, IndexError):
                raise ProfileError(f"{path}:{n}: expected 'zone,group' integers, found {line!r}") from None
        return out
    try:
        data = json.loads(text)
        return {int(k): int(v) for k, v in data["groups"].items()}
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        raise ProfileError(f"{path} is not a zone-to-group table (z2c.json with a 'groups' object)") from None
