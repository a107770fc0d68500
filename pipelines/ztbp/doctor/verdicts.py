"""What the facts of a machine (`doctor/facts.py`) mean for the host path, as pure functions: one `Check` a line —
what works, what does not and what to do about it. A "fail" stops `ztbp capture-host` (or `ztbp loop --host`); a
"warn" leaves the capture possible but something else out (the ZTBP protocol's write-back, the application
probes). `ready` is what doctor's exit code says.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..units import GIB, MIB
from .facts import AVX_FLAGS, CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, Facts, Namespace, Tool

OK, WARN, FAIL = "ok", "warn", "fail"
#: free space for runs below which a capture fails / is only warned about (a run of the paper's 1,000,000 reads
#: is about 0.3 GiB with its derived files and report)
FREE_FAIL_BYTES = 1 * GIB
FREE_WARN_BYTES = 5 * GIB
#: ztbp-ctl's exit codes doctor explains (tools/ztbp-ctl/README.md)
CTL_PERMISSION, CTL_NO_PROTOCOL = 21, 30
#: bpftrace --info's names for fentry/kfunc attach, by version
ATTACH_KEYS = ("fentry", "kfunc")
INSTALL = "apt-get install bpftrace fio util-linux nvme-cli"


@dataclass(frozen=True)
class Check:
    """One line of doctor's report."""

    name: str
    status: str
    what: str
    fix: str = ""


def size_text(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def kernel(f: Facts) -> list[Check]:
    btf = (Check("btf", OK, "kernel BTF present (/sys/kernel/btf/vmlinux)") if f.btf_vmlinux else
           Check("btf", FAIL, "no kernel BTF (/sys/kernel/btf/vmlinux missing): the NVMe probe's kfunc probes "
                 "cannot attach", "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y (Debian 12's own has it)"))
    return [Check("kernel", OK, f"Linux {f.kernel}"), btf]


def bpftrace(f: Facts) -> list[Check]:
    if f.bpftrace.path is None:
        return [Check("bpftrace", FAIL, "bpftrace not found", f"install it: {INSTALL}"), attach(f)]
    return [Check("bpftrace", OK, f"{f.bpftrace.version or 'version unknown'} ({f.bpftrace.path})"), attach(f)]


def attach(f: Facts) -> Check:
    """Whether bpftrace can attach fentry/kfunc probes: what `bpftrace --info` says, else what BTF implies."""
    said = next((f.bpftrace_info[k] for k in ATTACH_KEYS if k in f.bpftrace_info), None)
    if said is not None:
        if said.lower().startswith("yes"):
            return Check("attach", OK, "fentry/kfunc probes can attach (bpftrace --info)")
        return Check("attach", FAIL, f"bpftrace --info says fentry/kfunc: {said}: the NVMe probe cannot attach",
                     "a kernel with BTF and BPF trampolines (x86-64 or arm64, CONFIG_DEBUG_INFO_BTF=y) and a "
                     "bpftrace built with them")
    if not f.btf_vmlinux:
        return Check("attach", FAIL, "fentry/kfunc probes cannot attach without kernel BTF", "see btf above")
    if f.bpftrace.path is None:
        return Check("attach", WARN, "bpftrace cannot be asked (not installed); kernel BTF is there, so "
                     "fentry/kfunc probes should attach", "install bpftrace, then doctor again")
    why = f.bpftrace_info_error or "it lists no fentry/kfunc line"
    return Check("attach", WARN, f"bpftrace --info gave no answer ({why}); kernel BTF is there, so fentry/kfunc "
                 "probes should attach", "run doctor as root to ask bpftrace itself")


def kprobes(f: Facts) -> Check:
    if f.kprobe_pmu:
        return Check("kprobes", OK, "kprobes available")
    return Check("kprobes", WARN, "no kprobe support (/sys/bus/event_source/devices/kprobe missing): the "
                 "application probes (appops.bt, cachestat.bt) cannot attach; the NVMe probe needs none",
                 "a kernel with CONFIG_KPROBES=y and CONFIG_KPROBE_EVENTS=y, for `ztbp capture-app` only")


def nvme_driver(f: Facts) -> list[Check]:
    if not f.modules.get("nvme") and not f.namespaces:
        return [Check("nvme", FAIL, "NVMe driver not loaded (no /sys/module/nvme) and no NVMe namespace",
                      "attach an NVMe drive, or `modprobe nvme`")]
    out = [Check("nvme", OK, f"NVMe driver loaded, {len(f.namespaces)} namespace(s)")]
    missing = [m for m in f.modules if f.modules[m] and not f.btf_modules.get(m)]
    if missing:
        out.append(Check("nvme-btf", FAIL, f"no BTF for the loaded module(s) {', '.join(missing)} "
                         f"(/sys/kernel/btf/{missing[0]} missing): kfunc:nvme… probes cannot attach",
                         "a kernel built with CONFIG_DEBUG_INFO_BTF_MODULES=y"))
    return out


def geometry_text(ns: Namespace) -> str:
    """nvme0n1's geometry in one phrase: LBA, zone size and count, capacity, open/active limits."""
    parts = [f"{ns.zoned}", f"{ns.lba_bytes} B LBAs" if ns.lba_bytes else "LBA size unknown"]
    if ns.zone_bytes and ns.nr_zones:
        parts.append(f"{ns.nr_zones:,} zones of {size_text(ns.zone_bytes)}")
    parts.append(f"zone capacity {size_text(ns.zone_cap_bytes)}" if ns.zone_cap_bytes else
                 f"zone capacity unknown ({ns.zone_cap_error or 'blkzone not found'})")
    limits = [f"max open {ns.max_open_zones or 'unlimited'}", f"max active {ns.max_active_zones or 'unlimited'}"]
    return ", ".join(parts + limits)


def namespace(ns: Namespace) -> Check:
    name = f"/dev/{ns.name}"
    if ns.zoned == "none":
        return Check("namespace", WARN, f"{name}: not zoned (queue/zoned = none): capture-host refuses it")
    if not (ns.lba_bytes and ns.zone_bytes and ns.nr_zones):
        return Check("namespace", FAIL, f"{name}: zoned but sysfs gives no full geometry "
                     "(logical_block_size, chunk_sectors, nr_zones)", "a kernel with zoned block device support "
                     "(CONFIG_BLK_DEV_ZONED=y)")
    return Check("namespace", OK, f"{name}: {geometry_text(ns)}")


def zoned(f: Facts) -> list[Check]:
    if not f.namespaces:
        return [Check("zoned", FAIL, "no NVMe namespace, so no zoned one: capture-host traces ZNS drives",
                      "attach a ZNS drive, or trace the emulated one in the VM from a checkout (`just capture`)")]
    out = [namespace(ns) for ns in f.namespaces]
    if not any(ns.zoned != "none" for ns in f.namespaces):
        out.append(Check("zoned", FAIL, "no zoned namespace: capture-host traces ZNS drives only",
                         "attach a ZNS drive, or trace the emulated one in the VM from a checkout (`just capture`)"))
    return out


def protocol(f: Facts) -> list[Check]:
    """The ZTBP protocol's STATUS on each zoned namespace (never more than STATUS)."""
    out = []
    for ns in (n for n in f.namespaces if n.zoned != "none"):
        name = f"/dev/{ns.name}"
        if ns.protocol_code is None:
            out.append(Check("protocol", WARN, f"{name}: ZTBP protocol not asked (ztbp-ctl not built)",
                             "`ztbp build-ctl`, then doctor again"))
        elif ns.protocol_code == 0:
            out.append(Check("protocol", OK, f"{name}: answers the ZTBP protocol's STATUS"))
        elif ns.protocol_code == CTL_NO_PROTOCOL:
            out.append(Check("protocol", WARN, f"{name}: does not implement the ZTBP protocol: traces and reports "
                             "work, `ztbp apply` cannot send a cache configuration to it"))
        elif ns.protocol_code == CTL_PERMISSION:
            out.append(Check("protocol", WARN, f"{name}: STATUS not allowed ({ns.protocol_message})",
                             "run doctor as root"))
        else:
            out.append(Check("protocol", WARN, f"{name}: STATUS failed (ztbp-ctl exit code {ns.protocol_code}: "
                             f"{ns.protocol_message or 'no message'})"))
    return out


def ctl(f: Facts) -> Check:
    if f.ctl:
        return Check("ztbp-ctl", OK, f"built ({f.ctl})")
    if f.ctl_build_missing:
        return Check("ztbp-ctl", WARN, f"not built, and cannot be: {' and '.join(f.ctl_build_missing)} not found",
                     "install make and a C compiler (apt-get install make gcc), then `ztbp build-ctl`")
    return Check("ztbp-ctl", WARN, "not built yet: it is built on first use", "or now: `ztbp build-ctl`")


def has_cap(caps: int, bit: int) -> bool:
    return bool(caps >> bit & 1)


def permissions(f: Facts) -> Check:
    bpf = has_cap(f.cap_eff, CAP_SYS_ADMIN) or (has_cap(f.cap_eff, CAP_BPF) and has_cap(f.cap_eff, CAP_PERFMON))
    if f.euid != 0:
        return Check("permissions", FAIL, "not root: capture-host needs root (bpftrace, raw device access)",
                     "run it with sudo (and doctor too, to check the rest as root)")
    if not bpf:
        return Check("permissions", FAIL, "root without CAP_BPF+CAP_PERFMON or CAP_SYS_ADMIN (a container?): "
                     "bpftrace cannot load its programs", "run on the host, or grant those capabilities")
    return Check("permissions", OK, "root, with " + ("CAP_BPF" if has_cap(f.cap_eff, CAP_BPF) else "CAP_SYS_ADMIN"))


def tools(f: Facts) -> list[Check]:
    def needed(name: str, t: Tool, why: str) -> Check:
        return (Check(name, OK, f"{t.version or 'version unknown'} ({t.path})") if t.path else
                Check(name, FAIL, f"{name} not found: {why}", f"install it: {INSTALL}"))

    nvme = (Check("nvme-cli", OK, f"{f.nvme_cli.version or 'version unknown'} ({f.nvme_cli.path})")
            if f.nvme_cli.path else Check("nvme-cli", WARN, "nvme-cli not found: runs will not record its version",
                                          f"install it: {INSTALL}"))
    return [needed("fio", f.fio, "it runs the workloads"),
            needed("blkzone", f.blkzone, "captures reset and report zones with it"), nvme]


def space(f: Facts) -> Check:
    if f.free_bytes is None:
        return Check("space", WARN, f"free space for runs unknown ({f.runs_dir})")
    line = f"{size_text(f.free_bytes)} free for runs ({f.runs_dir})"
    if f.free_bytes < FREE_FAIL_BYTES:
        return Check("space", FAIL, line, f"free at least {size_text(FREE_FAIL_BYTES)}, or set ZTBP_RUNS elsewhere")
    if f.free_bytes < FREE_WARN_BYTES:
        return Check("space", WARN, line, "enough for a few runs; set ZTBP_RUNS to a larger disk for more")
    return Check("space", OK, line)


def cache(f: Facts) -> Check:
    """The project's cache folder (ZTBP_CACHE): the guest image, the kernels, ztbp-ctl and numba's compiled
    functions go there, so a file in its place fails every command that builds or compiles."""
    if f.cache_kind in ("folder", "missing"):
        return Check("cache", OK, f"cache folder {f.cache_dir}" + (" (made when first needed)"
                                                                    if f.cache_kind == "missing" else ""))
    what = "a file" if f.cache_kind == "file" else "not a folder (a device, a pipe or a dangling link)"
    return Check("cache", FAIL, f"the cache folder {f.cache_dir} (ZTBP_CACHE, else ~/.cache/ztbp) is {what}: "
                 "the guest image, ztbp-ctl and numba's compiled functions cannot be kept there",
                 "set ZTBP_CACHE to a folder, or move that file away")


def checks(f: Facts) -> list[Check]:
    """Every verdict on the facts, in the order a person reads them."""
    return [*kernel(f), *bpftrace(f), kprobes(f), *nvme_driver(f), *zoned(f), *protocol(f), ctl(f),
            permissions(f), *tools(f), space(f), cache(f), cpu(f)]


#: QEMU names the CPU it emulates (TCG) so in /proc/cpuinfo ("QEMU TCG CPU version 2.5+")
TCG_CPU = "QEMU TCG CPU"
#: a guest CPU for QEMU's TCG without the AVX family (vm/vmtest.sh's default)
NO_AVX_CPU = "-cpu max,avx=off,avx2=off,fma=off,f16c=off"


def cpu(f: Facts) -> Check:
    """Whether the analysis's compiled libraries run right on this CPU: polars' default runtimes need AVX2 and FMA
    (SIGILL without them); QEMU 7.2's TCG emulates AVX2 wrongly (numpy's argsort out of order or SIGSEGV, polars'
    group_by SIGSEGV, measured in the project's guest)."""
    what = f"{f.cpu_model or 'CPU model unknown'}; {', '.join(f.cpu_avx) or 'no AVX'}"
    missing = [x for x in AVX_FLAGS if x not in f.cpu_avx]
    if f.polars_runtime in ("32", "64") and missing and f.cpu_model:
        return Check("cpu", FAIL, f"{what}: polars' default runtime needs {', '.join(missing)} and would die with "
                     "SIGILL", "pip install 'polars[rtcompat]' (polars' runtime for any x86-64 CPU)")
    if TCG_CPU in f.cpu_model and "avx2" in f.cpu_avx:
        return Check("cpu", WARN, f"{what}: QEMU's TCG emulates AVX2, and QEMU 7.2 does it wrongly (numpy's and "
                     "polars' AVX2 code gave wrong results or SIGSEGV)",
                     f"start the VM with {NO_AVX_CPU} and install 'polars[rtcompat]'")
    runtime = {"compat": "polars' compat runtime", "": "polars not installed"}.get(
        f.polars_runtime, f"polars' runtime {f.polars_runtime}")
    return Check("cpu", OK, f"{what}; {runtime}")


def ready(cs: list[Check]) -> bool:
    """The host path can run: nothing failed."""
    return all(c.status != FAIL for c in cs)


def report(f: Facts) -> dict[str, Any]:
    """doctor --json: {"ready", "checks": [{name, status, what, fix}], "facts"} (stable keys)."""
    cs = checks(f)
    return {"ready": ready(cs), "checks": [asdict(c) for c in cs], "facts": f.as_dict()}


def text(doc: dict[str, Any]) -> str:
    """doctor's lines: one a check (what, then what to do), then the verdict."""
    lines = []
    for c in doc["checks"]:
        lines.append(f"{c['status'].upper():<4}  {c['name']}: {c['what']}")
        if c["fix"] and c["status"] != OK:
            lines.append(f"      -> {c['fix']}")
    failed = sum(c["status"] == FAIL for c in doc["checks"])
    lines.append("doctor: the host path can run here (`sudo ztbp capture-host DEV`)" if doc["ready"] else
                 f"doctor: the host path cannot run here: {failed} check(s) FAIL above")
    return "\n".join(lines)
