"""What this machine has for the host path (`ztbp capture-host`, `ztbp loop --host`), gathered in one place: the
kernel and its BTF, bpftrace and what it says it can attach, the NVMe driver, every NVMe namespace's zone geometry
from sysfs (and its zone capacity from `blkzone report`), whether a zoned device answers the ZTBP protocol's STATUS
(with ztbp-ctl, when it is built; never anything else), permissions, fio, nvme-cli, and the free space for runs.

Only reading: nothing is attached, built, written or sent (STATUS reads the device's read count). Every outside
command runs through one `Runner` with a timeout, so the tests hand in a fake machine: a sysfs tree under tmp_path,
a /proc/self/status file and canned command outputs. The verdicts on these facts are `doctor/verdicts.py`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from .. import commands
from ..commands import Runner
from ..units import zone_capacity

Which = Callable[[str], str | None]
#: seconds one outside command may take (bpftrace --info probes the kernel; a wedged device must not hang doctor)
TIMEOUT_S = 20
#: the kernel modules whose BTF the NVMe probe's kfunc probes attach to (kfunc:nvme:…, kfunc:nvme_core:…)
NVME_MODULES = ("nvme", "nvme_core")
#: the capabilities bpftrace needs without root: CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39


@dataclass(frozen=True)
class Tool:
    """A command of the machine: where it is and the version it prints (None when missing)."""

    path: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class Namespace:
    """One NVMe namespace's block device as sysfs describes it (sizes in bytes; None: sysfs has no such entry)."""

    name: str
    zoned: str = "none"
    lba_bytes: int | None = None
    zone_bytes: int | None = None
    nr_zones: int | None = None
    max_open_zones: int | None = None
    max_active_zones: int | None = None
    size_bytes: int | None = None
    #: the first zone's capacity from `blkzone report -c 1` (None: not asked, or it failed: zone_cap_error)
    zone_cap_bytes: int | None = None
    zone_cap_error: str = ""
    #: ztbp-ctl status's exit code (0: it answered; 30: no ZTBP protocol; None: not asked) and its message
    protocol_code: int | None = None
    protocol_message: str = ""


@dataclass(frozen=True)
class Facts:
    """Everything doctor's verdicts are made of."""

    kernel: str
    btf_vmlinux: bool
    btf_modules: dict[str, bool]
    kprobe_pmu: bool
    modules: dict[str, bool]
    bpftrace: Tool
    #: bpftrace --info's "name: value" lines (empty when it failed: bpftrace_info_error)
    bpftrace_info: dict[str, str]
    bpftrace_info_error: str
    fio: Tool
    nvme_cli: Tool
    blkzone: Tool
    euid: int
    cap_eff: int
    namespaces: list[Namespace]
    ctl: str | None
    ctl_build_missing: list[str]
    runs_dir: str
    free_bytes: int | None
    #: the CPU's model name (/proc/cpuinfo) and which of the AVX family it has ("avx", "avx2", "fma")
    cpu_model: str = ""
    cpu_avx: tuple[str, ...] = ()
    #: the polars runtime the analysis will load: "compat", "64", "32", or "" when polars is not installed
    polars_runtime: str = ""
    #: the project's cache folder (ZTBP_CACHE, else ~/.cache/ztbp) and what is there: "folder", "missing" (made when
    #: first needed), "file" (a regular file, or a link to one) or "other" (a device, a pipe, a dangling link)
    cache_dir: str = ""
    cache_kind: str = "folder"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_command(argv: list[str]) -> tuple[int | None, str, str]:
    """One outside command with a timeout of TIMEOUT_S (commands.run_command)."""
    return commands.run_command(argv, TIMEOUT_S)


def read_text(path: Path) -> str | None:
    """A sysfs or proc file's text, stripped; None when it is missing or unreadable."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def read_int(path: Path) -> int | None:
    text = read_text(path)
    return int(text) if text is not None and text.isdigit() else None


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def tool(name: str, version_args: list[str], which: Which, run: Runner) -> Tool:
    """Where `name` is and the first line its version option prints."""
    path = which(name)
    if path is None:
        return Tool()
    code, out, err = run([path, *version_args])
    return Tool(path, first_line(out or err) or None if code is not None else None)


def parse_info(text: str) -> dict[str, str]:
    """bpftrace --info's "  name: value" lines as a mapping (names lowercased)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition(":")
        if sep and name and value.strip():
            out[name.strip().lower()] = value.strip()
    return out


def cap_eff(status_text: str | None) -> int:
    """The effective capability set of /proc/self/status (0 when it cannot be read)."""
    m = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", status_text or "", re.M)
    return int(m.group(1), 16) if m else 0


def namespace(block: Path) -> Namespace:
    """One NVMe block device's geometry from its sysfs folder."""
    q = block / "queue"
    chunk = read_int(q / "chunk_sectors")
    size = read_int(block / "size")
    return Namespace(name=block.name, zoned=read_text(q / "zoned") or "none",
                     lba_bytes=read_int(q / "logical_block_size"), zone_bytes=chunk * 512 if chunk else None,
                     nr_zones=read_int(q / "nr_zones"), max_open_zones=read_int(q / "max_open_zones"),
                     max_active_zones=read_int(q / "max_active_zones"),
                     size_bytes=size * 512 if size is not None else None)


def nvme_namespaces(sysfs: Path) -> list[Namespace]:
    """Every NVMe namespace block device (nvme0n1, not its partitions) sysfs lists."""
    found = sorted((sysfs / "block").glob("nvme*n*")) if (sysfs / "block").is_dir() else []
    return [namespace(b) for b in found if re.fullmatch(r"nvme\d+n\d+", b.name)]


def with_zone_capacity(ns: Namespace, blkzone: Tool, dev_dir: Path, run: Runner) -> Namespace:
    """The namespace with its first zone's capacity from `blkzone report -c 1` (a zoned one, when blkzone is
    there)."""
    if ns.zoned == "none" or blkzone.path is None:
        return ns
    code, out, err = run([blkzone.path, "report", "-c", "1", str(dev_dir / ns.name)])
    cap = zone_capacity(out) if code == 0 else None
    return replace(ns, zone_cap_bytes=cap,
                   zone_cap_error="" if cap else first_line(err) or "blkzone report printed no capacity")


def with_protocol(ns: Namespace, ctl: str | None, dev_dir: Path, run: Runner) -> Namespace:
    """The namespace with ztbp-ctl STATUS's answer (a zoned one, when ztbp-ctl is built). Only STATUS: it reads
    the device's read count and changes nothing."""
    if ns.zoned == "none" or ctl is None:
        return ns
    code, out, err = run([ctl, "status", "--json", "--", str(dev_dir / ns.name)])
    message = err.strip().removeprefix("ztbp-ctl: error: ")
    try:
        doc = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        message = str(doc.get("message") or message) if isinstance(doc, dict) else message
    except json.JSONDecodeError:
        pass
    return replace(ns, protocol_code=code, protocol_message=first_line(message))


def free_space(folder: Path) -> int | None:
    """Free bytes of the file system `folder` is (or would be made) on."""
    for p in (folder, *folder.parents):
        if p.exists():
            try:
                return shutil.disk_usage(p).free
            except OSError:
                return None
    return None


#: the x86 features polars' default runtimes (32 and 64) are built for; "compat" runs without them
AVX_FLAGS = ("avx", "avx2", "fma")
#: the runtimes polars looks for, in its own order of preference (polars/_plr.py)
POLARS_RUNTIMES = (("compat", "_polars_runtime_compat"), ("64", "_polars_runtime_64"), ("32", "_polars_runtime_32"))


def path_kind(path: Path) -> str:
    """What is at `path`: "folder", "missing", "file" or "other" (Facts.cache_kind)."""
    if path.is_dir():
        return "folder"
    if path.is_file():
        return "file"
    return "other" if path.is_symlink() or path.exists() else "missing"


def cpu(cpuinfo: str | None) -> tuple[str, tuple[str, ...]]:
    """The first CPU's model name and the AVX-family flags it has, from /proc/cpuinfo's text."""
    model, flags = "", set()
    for line in (cpuinfo or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
            break
    return model, tuple(f for f in AVX_FLAGS if f in flags)


def polars_runtime(find: Callable[[str], object] | None = None) -> str:
    """Which polars runtime an import would load (POLARS_FORCE_PKG first), found without importing polars: its
    default runtimes die with SIGILL on a CPU without AVX2, and doctor must be able to say so."""
    import importlib.util

    look = find or importlib.util.find_spec
    forced = os.environ.get("POLARS_FORCE_PKG")
    for name, module in POLARS_RUNTIMES:
        if (forced is None or forced == name) and look(module) is not None:
            return name
    return ""


def gather(sysfs: Path = Path("/sys"), proc: Path = Path("/proc"), dev_dir: Path = Path("/dev"),
           run: Runner = run_command, which: Which = shutil.which, euid: int | None = None,
           runs_dir: Path | None = None, ctl: Path | None = None, cache_dir: Path | None = None) -> Facts:
    """The facts of this machine (or of the fake one the arguments describe)."""
    from .. import paths
    from ..writeback.ctl import CTL, missing_tools

    bpftrace = tool("bpftrace", ["--version"], which, run)
    info: dict[str, str] = {}
    info_error = ""
    if bpftrace.path:
        code, out, err = run([bpftrace.path, "--info"])
        info = parse_info(out + "\n" + err) if code == 0 else {}
        info_error = "" if code == 0 else first_line(err or out) or f"exit code {code}"
    blkzone = tool("blkzone", ["--version"], which, run)
    built = ctl if ctl is not None else CTL
    ctl_path = str(built) if built.is_file() and os.access(built, os.X_OK) else None
    namespaces = [with_protocol(with_zone_capacity(ns, blkzone, dev_dir, run), ctl_path, dev_dir, run)
                  for ns in nvme_namespaces(sysfs)]
    runs = runs_dir if runs_dir is not None else paths.RUNS
    model, avx = cpu(read_text(proc / "cpuinfo"))
    cache = cache_dir if cache_dir is not None else paths.CACHE
    return Facts(
        kernel=read_text(proc / "sys" / "kernel" / "osrelease") or os.uname().release,
        btf_vmlinux=(sysfs / "kernel" / "btf" / "vmlinux").is_file(),
        btf_modules={m: (sysfs / "kernel" / "btf" / m).is_file() for m in NVME_MODULES},
        kprobe_pmu=(sysfs / "bus" / "event_source" / "devices" / "kprobe").is_dir(),
        modules={m: (sysfs / "module" / m).is_dir() for m in NVME_MODULES},
        bpftrace=bpftrace, bpftrace_info=info, bpftrace_info_error=info_error,
        fio=tool("fio", ["--version"], which, run), nvme_cli=tool("nvme", ["version"], which, run),
        blkzone=blkzone,
        euid=os.geteuid() if euid is None else euid,
        cap_eff=cap_eff(read_text(proc / "self" / "status")),
        namespaces=namespaces, ctl=ctl_path, ctl_build_missing=missing_tools(which),
        runs_dir=str(runs), free_bytes=free_space(runs),
        cpu_model=model, cpu_avx=avx, polars_runtime=polars_runtime(), cache_dir=str(cache),
        cache_kind=path_kind(cache))
