"""Python side of the QEMU harness vm/vmtest.sh: run a command in the ZTBP guest, NVMeVirt parameters.

`run_in_guest("uname -r", out=Path("/tmp/o"))` boots the guest (building the image on first use), runs the
command with bash, and returns its exit status and the console; OUTDIR is /ztbp/out in the guest and the
repository /ztbp/src. See vm/vmtest.sh --help for every option.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import paths
from ..analysis.device_model import PROFILES, read_service_record
from ..analysis.read_model import ReadModel
from ..devices import NVMEVIRT_NOTES, Device
from ..errors import ZtbpError
from ..units import MIB

VMTEST = paths.VM / "vmtest.sh"
IMAGE_SH = paths.VM / "image.sh"
QEMU = "qemu-system-x86_64"
INSTALL_HINT = "install the host packages with `just deps` (bash vm/install-deps.sh; as root)"
#: Debian suites of the guest image (vm/image.sh --suite): bookworm (Linux 6.1, bpftrace 0.17; the default) and
#: trixie (Linux 6.12, bpftrace 0.23).
SUITES = ("bookworm", "trixie")


#: The zoned namespace every command boots or describes unless told otherwise (vm/vmtest.sh has the same).
ZONE_BYTES = 32 * MIB
ZONES = 64
LBA_BYTES = 4096


class VmError(ZtbpError):
    """The VM path cannot run (missing tools, bad geometry, guest failure)."""


@dataclass(frozen=True)
class Geometry:
    """The emulated zoned namespace (QEMU nvme-ns)."""

    zone_bytes: int = ZONE_BYTES
    zones: int = ZONES
    zone_cap_bytes: int | None = None
    max_open: int = 0
    max_active: int = 0
    lba_bytes: int = LBA_BYTES
    conv_ns_bytes: int | None = None

    def validate(self) -> None:
        if self.lba_bytes not in (512, 4096):
            raise VmError(f"LBA size must be 512 or 4096 bytes, got {self.lba_bytes}")
        if self.zone_bytes <= 0 or self.zone_bytes % self.lba_bytes:
            raise VmError(f"zone size {self.zone_bytes} must be a positive multiple of the LBA size {self.lba_bytes}")
        if self.zones < 1:
            raise VmError(f"zone count must be at least 1, got {self.zones}")
        cap = self.zone_cap_bytes
        if cap is not None and (cap <= 0 or cap > self.zone_bytes or cap % self.lba_bytes):
            raise VmError(f"zone capacity {cap} must be a multiple of the LBA size and at most the zone size")
        if self.max_open < 0 or self.max_active < 0:
            raise VmError("max open/active zones must be 0 (no limit) or positive")

    def vmtest_args(self) -> list[str]:
        self.validate()
        args = ["--zone-size", str(self.zone_bytes), "--zones", str(self.zones),
                "--max-open", str(self.max_open), "--max-active", str(self.max_active),
                "--lba-size", str(self.lba_bytes)]
        if self.zone_cap_bytes is not None:
            args += ["--zone-cap", str(self.zone_cap_bytes)]
        if self.conv_ns_bytes:
            args += ["--conv-ns", str(self.conv_ns_bytes)]
        return args


#: build.sh's default module folder: <kernel release>-<profile>[-slow<N>][-m<hash of a read model>][-p<hash of patches>]
_BUILD_DIR = re.compile(r"-(?P<profile>" + "|".join(PROFILES) + r")(?:-slow(?P<slow>[1-9][0-9]*))?"
                        r"(?P<model>-m[0-9a-f]{12})?(?:-p[0-9a-f]{12})?$")


def nvmevirt_build(ko: Path | None) -> tuple[str, int] | None:
    """(profile, --slow factor) of a module built by build.sh into its default folder, read from the folder's name;
    None when the name does not say (a module built elsewhere)."""
    m = _BUILD_DIR.search(ko.resolve().parent.name) if ko is not None else None
    return (m["profile"], int(m["slow"] or 1)) if m else None


def nvmevirt_read_model(ko: Path | None) -> bool:
    """Whether the module `ko` was built with the project's read model (build.sh --read-model: its folder's -m<hash>
    suffix)."""
    m = _BUILD_DIR.search(ko.resolve().parent.name) if ko is not None else None
    return bool(m and m["model"])


def nvmevirt_notes(ko: Path | None, params: str = "") -> dict[str, object]:
    """NVMEVIRT_NOTES with `read_service_model`: the read service times of the module `ko` as built (its profile and
    --slow factor from its folder's name), or, when the name does not say, of each profile at --slow 1; for a build
    with the project's read model, `read_model`: the model its parameters `params` load (analysis/read_model.py)."""
    folder = ko.resolve().parent.name if ko is not None else "none given"
    build = nvmevirt_build(ko)
    model: dict[str, object]
    if build is not None:
        model = {**read_service_record(*build), "build_from": f"module folder {folder}"}
        if nvmevirt_read_model(ko):
            model["read_model"] = ReadModel.from_params(params).params()
            model["read_model_note"] = ("the project's read model (vm/read-model/ztbp_read_model.c) in place of the "
                                        "fork's cache block: its policy and charges as `read_model` says; the "
                                        "fork's figures above are what `policy=fork hit_ns=-1 miss_ns=-1 "
                                        "shortcut=1 skip_nand=0` charges")
    else:
        model = {"profile": None, "slow": None,
                 "build_from": f"unknown: the module's folder ({folder}) is not build.sh's "
                               "<release>-<profile>[-slowN]; below, each profile at --slow 1 (--slow N multiplies "
                               "the times by N until a product overflows 32 bits)",
                 "profiles": {name: read_service_record(name, 1) for name in PROFILES}}
    return {**NVMEVIRT_NOTES, "read_service_model": model}


@dataclass(frozen=True)
class NvmevirtPlan:
    """Guest settings for the NVMeVirt ZNS module (see /vm/README.md): memory reservation and module parameters.

    NVMeVirt needs `memmap=<size>$<start>` on the kernel command line, the same range as module parameters,
    storage = memmap_size - 1 MiB as a whole number of zones, guest RAM above start + size, and at least two
    CPUs for its dispatcher and worker threads (they busy-poll, so they get their own vCPUs: -smp 3, cpus=1,2).
    `reserve_mib` (0: the storage) reserves more guest memory than the storage uses, the module taking the start of
    it: commands with other storage sizes but the same reserve boot the same guest (one pooled guest serves them).
    """

    storage_mib: int = 1024
    zone_mib: int = 32
    start_mib: int = 4096
    cpus: tuple[int, ...] = (1, 2)
    reserve_mib: int = 0
    extra_params: str = ""  # the read model's parameters (--nvmevirt-params), checked by vm_device

    def __post_init__(self) -> None:
        if self.storage_mib <= 0 or self.zone_mib <= 0 or self.storage_mib % self.zone_mib:
            raise VmError(f"NVMeVirt storage ({self.storage_mib} MiB) must be a positive multiple of the zone size "
                          f"({self.zone_mib} MiB), or the module hits a BUG_ON")
        if len(self.cpus) < 2:
            raise VmError("NVMeVirt needs at least two CPUs (dispatcher and worker), e.g. cpus=1,2")
        if 0 in self.cpus:
            raise VmError("keep CPU 0 for the guest's own work: NVMeVirt's threads busy-poll their CPUs")
        if self.reserve_mib and self.reserve_mib < self.storage_mib:
            raise VmError(f"NVMeVirt reserve ({self.reserve_mib} MiB) is smaller than its storage "
                          f"({self.storage_mib} MiB): reserve at least the storage, or 0 for just the storage")

    @property
    def memmap_size_mib(self) -> int:
        """The module's range: its storage and 1 MiB."""
        return self.storage_mib + 1

    @property
    def reserved_mib(self) -> int:
        """The range the guest kernel keeps out of its own use (memmap=): the reserve, at least the module's."""
        return max(self.reserve_mib, self.storage_mib) + 1

    @property
    def zones(self) -> int:
        return self.storage_mib // self.zone_mib

    @property
    def smp(self) -> int:
        return max(self.cpus) + 1

    @property
    def memory_mib(self) -> int:
        """Guest RAM: the reserved range ends at start + size; leave 2 GiB above it for the guest."""
        end = self.start_mib + self.reserved_mib
        return -(-(end + 2048) // 1024) * 1024

    @property
    def kernel_append(self) -> str:
        return f"memmap={_mib_text(self.reserved_mib)}${_mib_text(self.start_mib)}"

    @property
    def module_params(self) -> str:
        return (f"memmap_start={_mib_text(self.start_mib)} memmap_size={_mib_text(self.memmap_size_mib)} "
                f"cpus={','.join(map(str, self.cpus))}" + (f" {self.extra_params}" if self.extra_params else ""))

    def vmtest_args(self, ko: Path) -> list[str]:
        return ["--no-zns", "--smp", str(self.smp), "--memory", f"{self.memory_mib}M",
                "--append", self.kernel_append, "--file", str(ko),
                "--env", f"ZTBP_KO=/ztbp/ctl/{ko.name}", "--env", f"ZTBP_KO_PARAMS={self.module_params}"]


NVMEVIRT_HINT = "build nvmev.ko for the guest kernel (see vm/README.md, 'NVMeVirt backend')"


def nvmevirt_module(ko: Path | None, error: type[ZtbpError] = VmError) -> Path:
    """The NVMeVirt module (--nvmevirt-ko) of a `--backend nvmevirt` command: given, and a file."""
    if ko is None:
        raise error(f"--backend nvmevirt needs --nvmevirt-ko FILE: {NVMEVIRT_HINT}")
    if not ko.is_file():
        raise error(f"--nvmevirt-ko {ko}: no such file; {NVMEVIRT_HINT}")
    return ko


@dataclass(frozen=True)
class VmDevice:
    """The zoned device a guest boots with: QEMU's namespace (`geometry`) or a module's (`geometry` None, the
    module and its memory in `extra_args`), and the geometry a run records before the guest reports its own."""

    device: Device
    geometry: Geometry | None
    extra_args: list[str]
    nr_zones: int
    lba_bytes: int
    zone_bytes: int
    zone_cap_bytes: int | None = None
    module: Path | None = None  # NVMeVirt's nvmev.ko
    module_params: str = ""  # its read model's parameters (--nvmevirt-params)


def vm_device(device: Device, geometry: Geometry, ko: Path | None = None, storage_bytes: int = 1 << 30,
              error: type[ZtbpError] = VmError, reserve_bytes: int = 0, module_params: str = "") -> VmDevice:
    """The VM's `device`: QEMU's namespace of `geometry` (checked), or one a module makes after the probe attached
    (NVMeVirt: `ko`, checked) with `storage_bytes` of storage in zones of geometry.zone_bytes and 512-byte LBAs, in a
    guest that reserves `reserve_bytes` for it (0: the storage), its read model loaded with `module_params` (a
    build with the project's read model only)."""
    try:
        if device.probe_before_appears:
            module = nvmevirt_module(ko, error)
            params = read_model_params(module, module_params)
            plan = NvmevirtPlan(storage_mib=storage_bytes // MIB, zone_mib=geometry.zone_bytes // MIB,
                                reserve_mib=reserve_bytes // MIB, extra_params=params)
            return VmDevice(device, None, plan.vmtest_args(module), plan.zones, 512, geometry.zone_bytes,
                            module=module, module_params=params)
        if module_params:
            raise VmError("--nvmevirt-params sets the read model of an NVMeVirt module: use it with --backend "
                          "nvmevirt")
        geometry.validate()
    except VmError as e:
        raise error(str(e)) from None
    return VmDevice(device, geometry, [], geometry.zones, geometry.lba_bytes, geometry.zone_bytes,
                    geometry.zone_cap_bytes)


def read_model_params(ko: Path, params: str) -> str:
    """`params` checked for the module `ko`: the read model's parameters (analysis/read_model.py), whole, for a
    build with the project's read model; none for any other build (its module has no such parameters)."""
    if not params:
        return ""
    if not nvmevirt_read_model(ko):
        raise VmError(f"--nvmevirt-params sets the project's read model, and {ko} was not built with it (its folder "
                      "has no -m<hash>): build it with ../shared/nvmevirt/build.sh RELEASE --read-model "
                      "vm/read-model/ztbp_read_model.c")
    return ReadModel.from_params(params).params()


def _mib_text(mib: int) -> str:
    """Kernel size syntax: 4096 -> '4G', 1025 -> '1025M'."""
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"


@dataclass
class GuestResult:
    status: int
    out: Path
    console: Path
    interrupted: bool = False
    lines: list[str] = field(default_factory=list)


def check_host(suite: str | None = None) -> None:
    """Raise VmError naming what to install when the VM path cannot run here."""
    if not VMTEST.is_file():  # an installed wheel carries the host path only
        raise VmError("the VM path runs from a checkout of the project (an installed ztbp carries the host path: "
                      "capture-host, loop --host, the analyses and reports); clone it and run `just capture`")
    if shutil.which(QEMU) is None:
        raise VmError(f"{QEMU} not found: {INSTALL_HINT}")
    image = image_dir(suite)
    if not (image / "rootfs.ext4").is_file() and shutil.which("mmdebstrap") is None:
        raise VmError(f"the guest image is not built and mmdebstrap is missing: {INSTALL_HINT}")


def suite_args(suite: str | None) -> list[str]:
    """`--suite SUITE` for vm/image.sh and vm/vmtest.sh; none for None (their default, or ZTBP_SUITE)."""
    if suite is None:
        return []
    if suite not in SUITES:
        raise VmError(f"unknown guest suite {suite!r}: choose one of {', '.join(SUITES)}")
    return ["--suite", suite]


def image_dir(suite: str | None = None) -> Path:
    """The image folder the current recipe maps to (it may not be built yet)."""
    if not IMAGE_SH.is_file():
        raise VmError("the guest image is made from a checkout of the project (vm/image.sh); an installed ztbp "
                      "carries the host path only")
    out = subprocess.run(["bash", str(IMAGE_SH), "--print", *suite_args(suite)], capture_output=True, text=True,
                         check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def ensure_image(echo: Callable[[str], None] = print, suite: str | None = None,
                 error: type[ZtbpError] = VmError) -> Path:
    """Build the guest image (of `suite`) if the recipe changed (minutes), streaming its progress; return its
    folder. What stops it (missing tools, a failed build) is raised as `error` (the calling command's error)."""
    try:
        return _ensure_image(echo, suite)
    except VmError as e:
        if error is VmError:
            raise
        raise error(str(e)) from None


def _ensure_image(echo: Callable[[str], None], suite: str | None) -> Path:
    check_host(suite)
    proc = subprocess.Popen(["bash", str(IMAGE_SH), *suite_args(suite)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    last = ""
    for line in proc.stdout:
        line = line.rstrip("\n")
        if line.startswith("image"):
            echo(line)
        last = line or last
    if proc.wait() != 0:
        raise VmError("building the guest image failed (see the messages above); retry with `just image`")
    return Path(last)


def run_in_guest(command: str, out: Path, *, geometry: Geometry | None = None, timeout: int = 900,
                 files: Iterable[Path] = (), env: Mapping[str, str] | None = None, extra_args: Iterable[str] = (),
                 on_line: Callable[[str], None] | None = None, echo: bool = False,
                 suite: str | None = None,
                 on_start: Callable[[subprocess.Popen[str]], None] | None = None) -> GuestResult:
    """Boot the guest, run `command` (bash) in it, return its status. OUTDIR `out` is /ztbp/out in the guest.

    Console lines go to `on_line` (and to stdout with echo=True); they are saved in out/console.log.
    Ctrl-C asks the guest to stop (it sees /ztbp/ctl/stop) and waits for it to save its data. `suite` picks the
    guest image (SUITES; None: bookworm, or ZTBP_SUITE). `on_start` gets the vmtest.sh process as soon as it runs
    (a caller driving the guest from another thread stops it with SIGTERM: vmtest.sh then kills QEMU).
    """
    check_host(suite)
    out.mkdir(parents=True, exist_ok=True)
    args = ["bash", str(VMTEST), "-o", str(out), "-t", str(timeout), *suite_args(suite)]
    if geometry is not None:
        args += geometry.vmtest_args()
    for f in files:
        args += ["--file", str(f)]
    for k, v in (env or {}).items():
        args += ["--env", f"{k}={v}"]
    args += list(extra_args)
    args += ["--", command]
    # Own session: a terminal Ctrl-C reaches only us; we forward exactly one SIGINT (= "stop and save").
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    result = GuestResult(status=-1, out=out, console=out / "console.log")
    assert proc.stdout is not None
    if on_start is not None:
        on_start(proc)
    try:
        _pump(proc, result, on_line, echo)
    except KeyboardInterrupt:
        result.interrupted = True
        proc.send_signal(signal.SIGINT)
        try:
            _pump(proc, result, on_line, echo)
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)  # second Ctrl-C: vmtest.sh kills the guest
            proc.wait()
    result.status = proc.wait()
    return result


def _pump(proc: subprocess.Popen[str], result: GuestResult, on_line: Callable[[str], None] | None,
          echo: bool) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.rstrip("\r\n")
        result.lines.append(line)
        if echo:
            print(line, flush=True)
        if on_line is not None:
            on_line(line)


def qemu_version() -> str:
    try:
        out = subprocess.run([QEMU, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.splitlines()[0].strip() if out else "unknown"

