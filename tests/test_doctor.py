"""`ztbp doctor`: the verdicts on fake machines (one that works, one without BTF, without bpftrace, with a
non-zoned NVMe namespace, without root, ...), the facts read from a fake sysfs tree with canned command outputs,
--json's shape and the exit codes; `ztbp build-ctl` without a compiler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ztbp.cli import main
from ztbp.doctor import facts as facts_mod
from ztbp.doctor.facts import Facts, Namespace, Tool, cpu, gather, parse_info, polars_runtime
from ztbp.doctor.verdicts import FAIL, OK, WARN, checks, ready, report, text
from ztbp.units import GIB, MIB, zone_capacity

ZNS = Namespace("nvme0n1", zoned="host-managed", lba_bytes=4096, zone_bytes=2 * GIB, nr_zones=904,
                max_open_zones=14, max_active_zones=14, size_bytes=904 * 2 * GIB, zone_cap_bytes=1077 * MIB,
                protocol_code=30, protocol_message="device does not implement the ZTBP cache protocol")
ROOT_CAPS = 0x1FFFEFFFFFF  # every capability, CAP_BPF and CAP_PERFMON among them


def working(**changes: object) -> Facts:
    """A machine the host path runs on: BTF, bpftrace that attaches kfunc, a ZNS drive, root, fio, space."""
    f = Facts(kernel="6.1.0-18-amd64", btf_vmlinux=True, btf_modules={"nvme": True, "nvme_core": True},
              kprobe_pmu=True, modules={"nvme": True, "nvme_core": True},
              bpftrace=Tool("/usr/bin/bpftrace", "bpftrace v0.17.0"), bpftrace_info={"kfunc": "yes", "btf": "yes"},
              bpftrace_info_error="", fio=Tool("/usr/bin/fio", "fio-3.33"),
              nvme_cli=Tool("/usr/sbin/nvme", "nvme version 2.4"), blkzone=Tool("/usr/sbin/blkzone", "blkzone 2.38"),
              euid=0, cap_eff=ROOT_CAPS, namespaces=[ZNS], ctl="/home/u/.cache/ztbp/bin/ztbp-ctl",
              ctl_build_missing=[], runs_dir="/home/u/runs", free_bytes=100 * GIB)
    return replace(f, **changes)  # type: ignore[arg-type]


def status(f: Facts, name: str) -> list[str]:
    return [c.status for c in checks(f) if c.name == name]


def failed(f: Facts) -> list[str]:
    return [c.name for c in checks(f) if c.status == FAIL]


def test_a_working_zoned_machine_is_ready() -> None:
    f = working()
    assert failed(f) == [] and ready(checks(f))
    line = next(c.what for c in checks(f) if c.name == "namespace")
    assert line == ("/dev/nvme0n1: host-managed, 4096 B LBAs, 904 zones of 2.0 GiB, zone capacity 1.1 GiB, "
                    "max open 14, max active 14")
    # the only warning: this drive does not speak the ZTBP protocol (captures work, apply cannot send)
    assert [c.name for c in checks(f) if c.status == WARN] == ["protocol"]
    assert status(working(namespaces=[replace(ZNS, protocol_code=0)]), "protocol") == [OK]


def test_no_btf_fails_btf_and_attach() -> None:
    f = working(btf_vmlinux=False, bpftrace_info={})
    assert failed(f) == ["btf", "attach"]
    assert "CONFIG_DEBUG_INFO_BTF" in next(c.fix for c in checks(f) if c.name == "btf")


def test_no_bpftrace_fails_and_says_how_to_install() -> None:
    f = working(bpftrace=Tool(), bpftrace_info={})
    assert failed(f) == ["bpftrace"]
    assert status(f, "attach") == [WARN]  # BTF is there: it should attach once bpftrace is installed
    assert "apt-get install bpftrace" in text(report(f))


def test_bpftrace_that_cannot_attach_kfunc_fails() -> None:
    assert failed(working(bpftrace_info={"fentry": "no"})) == ["attach"]
    # no answer from --info (not root): BTF decides, as a warning
    f = working(bpftrace_info={}, bpftrace_info_error="ERROR: bpftrace currently only supports running as root")
    assert status(f, "attach") == [WARN] and failed(f) == []


def test_a_non_zoned_nvme_namespace_is_not_enough() -> None:
    plain = Namespace("nvme0n1", lba_bytes=512, size_bytes=GIB)
    f = working(namespaces=[plain])
    assert failed(f) == ["zoned"]
    assert status(f, "namespace") == [WARN] and status(f, "protocol") == []  # STATUS is asked of zoned ones only
    assert failed(working(namespaces=[plain, ZNS])) == []


def test_no_nvme_at_all() -> None:
    f = working(modules={"nvme": False, "nvme_core": False}, namespaces=[])
    assert failed(f) == ["nvme", "zoned"]


def test_a_zoned_namespace_without_geometry_fails() -> None:
    assert failed(working(namespaces=[replace(ZNS, nr_zones=None)])) == ["namespace"]


@pytest.mark.parametrize(("kind", "verdict"), [("folder", OK), ("missing", OK), ("file", FAIL), ("other", FAIL)])
def test_a_cache_folder_that_is_a_file_fails(kind: str, verdict: str) -> None:
    f = working(cache_dir="/home/u/.cache/ztbp", cache_kind=kind)
    assert status(f, "cache") == [verdict] and ready(checks(f)) is (verdict == OK)
    if verdict == FAIL:
        assert "set ZTBP_CACHE to a folder" in text(report(f))


def test_gather_sees_what_is_at_the_cache_path(tmp_path: Path) -> None:
    from ztbp.doctor.facts import path_kind

    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "to-file").symlink_to(tmp_path / "file")
    assert [path_kind(tmp_path / n) for n in ("file", "dir", "dangling", "to-file", "none")] == \
        ["file", "folder", "other", "file", "missing"]


def test_module_without_btf_fails() -> None:
    assert failed(working(btf_modules={"nvme": False, "nvme_core": True})) == ["nvme-btf"]


def test_permissions() -> None:
    assert failed(working(euid=1000, cap_eff=0)) == ["permissions"]
    assert failed(working(cap_eff=1 << 0)) == ["permissions"]  # root in a container without CAP_BPF/SYS_ADMIN
    assert failed(working(cap_eff=(1 << 39) | (1 << 38))) == []  # CAP_BPF + CAP_PERFMON


def test_tools_space_and_ztbp_ctl() -> None:
    assert failed(working(fio=Tool(), blkzone=Tool())) == ["fio", "blkzone"]
    assert status(working(nvme_cli=Tool()), "nvme-cli") == [WARN]
    assert failed(working(free_bytes=100 * MIB)) == ["space"]
    assert status(working(free_bytes=2 * GIB), "space") == [WARN]
    assert status(working(ctl=None), "ztbp-ctl") == [WARN]
    nocc = working(ctl=None, ctl_build_missing=["make", "cc"], namespaces=[replace(ZNS, protocol_code=None)])
    assert "make and cc not found" in next(c.what for c in checks(nocc) if c.name == "ztbp-ctl")
    assert status(nocc, "protocol") == [WARN] and failed(nocc) == []


def test_json_shape() -> None:
    doc = json.loads(json.dumps(report(working(euid=1000))))
    assert set(doc) == {"ready", "checks", "facts"} and doc["ready"] is False
    assert all(set(c) == {"name", "status", "what", "fix"} for c in doc["checks"])
    assert {c["status"] for c in doc["checks"]} <= {OK, WARN, FAIL}
    assert doc["facts"]["namespaces"][0]["zone_bytes"] == 2 * GIB and doc["facts"]["bpftrace"]["path"]


# ---- facts from a fake machine ---------------------------------------------------------------------------
def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def fake_sysfs(root: Path) -> Path:
    """/sys of a machine with one ZNS namespace (nvme0n1), one conventional (nvme1n1) and a partition."""
    sysfs = root / "sys"
    write(sysfs / "kernel" / "btf" / "vmlinux", "")
    write(sysfs / "kernel" / "btf" / "nvme", "")
    write(sysfs / "kernel" / "btf" / "nvme_core", "")
    (sysfs / "module" / "nvme").mkdir(parents=True)
    (sysfs / "module" / "nvme_core").mkdir(parents=True)
    q = sysfs / "block" / "nvme0n1" / "queue"
    for name, value in {"zoned": "host-managed", "chunk_sectors": "4194304", "nr_zones": "904",
                        "logical_block_size": "4096", "max_open_zones": "14", "max_active_zones": "0"}.items():
        write(q / name, value)
    write(sysfs / "block" / "nvme0n1" / "size", str(904 * 4194304))
    write(sysfs / "block" / "nvme1n1" / "queue" / "zoned", "none")
    write(sysfs / "block" / "nvme1n1" / "queue" / "logical_block_size", "512")
    write(sysfs / "block" / "nvme1n1p1" / "queue" / "zoned", "none")
    write(root / "proc" / "self" / "status", "Name:\tpython\nCapEff:\t000001ffffffffff\n")
    write(root / "proc" / "sys" / "kernel" / "osrelease", "6.1.0-18-amd64")
    return sysfs


ZONE_REPORT = "  start: 0x000000000, len 0x400000, cap 0x21a800, wptr 0x000000 reset:0 non-seq:0, zcond: 1(em)\n"
INFO = """System
  OS: Linux 6.1.0-18-amd64
Build
  version: v0.17.0
Kernel features
  btf: yes
Probe types
  kprobe: yes
  kfunc: yes
"""


def test_gather_reads_a_fake_machine(tmp_path: Path) -> None:
    sysfs = fake_sysfs(tmp_path)
    ctl = tmp_path / "bin" / "ztbp-ctl"
    write(ctl, "#!/bin/sh")
    ctl.chmod(0o755)
    calls: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int | None, str, str]:
        calls.append(argv)
        name, args = Path(argv[0]).name, argv[1:]
        if name == "bpftrace":
            return (0, INFO, "") if args == ["--info"] else (0, "bpftrace v0.17.0\n", "")
        if name == "blkzone" and args[0] == "report":
            return 0, ZONE_REPORT, ""
        if name == "ztbp-ctl":
            return 30, '{"ok": false, "exit_code": 30, "message": "device does not implement the ZTBP cache ' \
                       'protocol (NVMe status 0x4001)"}\n', ""
        return 0, f"{name} 1.0\n", ""

    f = gather(sysfs=sysfs, proc=tmp_path / "proc", dev_dir=Path("/dev"), run=run,
               which=lambda name: f"/usr/bin/{name}", euid=0, runs_dir=tmp_path / "runs", ctl=ctl)
    assert f.kernel == "6.1.0-18-amd64" and f.btf_vmlinux and not f.kprobe_pmu
    assert f.bpftrace == Tool("/usr/bin/bpftrace", "bpftrace v0.17.0") and f.bpftrace_info["kfunc"] == "yes"
    assert [n.name for n in f.namespaces] == ["nvme0n1", "nvme1n1"]  # not the partition
    zns, plain = f.namespaces
    assert (zns.zoned, zns.lba_bytes, zns.zone_bytes, zns.nr_zones, zns.max_open_zones, zns.max_active_zones) == \
        ("host-managed", 4096, 2 * GIB, 904, 14, 0)
    assert zns.zone_cap_bytes == 0x21A800 * 512 and zns.protocol_code == 30
    assert "does not implement" in zns.protocol_message
    assert plain.zoned == "none" and plain.zone_cap_bytes is None and plain.protocol_code is None
    # only STATUS is ever sent, and only to the zoned namespace
    assert [a for a in calls if Path(a[0]).name == "ztbp-ctl"] == [[str(ctl), "status", "--json", "--",
                                                                   "/dev/nvme0n1"]]
    assert f.cap_eff == 0x1FFFFFFFFFF and f.free_bytes and f.free_bytes > 0
    assert ready(checks(f))


def test_parsers() -> None:
    assert parse_info(INFO)["version"] == "v0.17.0"
    assert zone_capacity("start: 0x0, len 0x80000, cap 0x80000, wptr 0x0") == 0x80000 * 512
    assert zone_capacity("start: 0x0, len 0x80000, wptr 0x0") is None  # an old blkzone: no capacity column


# ---- the command ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("machine", "code"), [(working(), 0), (working(bpftrace=Tool()), 1)])
def test_exit_code_and_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], machine: Facts,
                            code: int) -> None:
    monkeypatch.setattr(facts_mod, "gather", lambda **_: machine)
    assert main(["doctor", "--json"]) == code
    doc = json.loads(capsys.readouterr().out)
    assert doc["ready"] is (code == 0)
    assert main(["doctor"]) == code
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("doctor: the host path can run" if code == 0 else "doctor: the host path cannot run")


def test_doctor_on_this_machine_exits_with_a_verdict() -> None:
    """The real gather on the test machine: no traceback, JSON on stdout, and its exit code follows its verdict."""
    proc = subprocess.run([sys.executable, "-m", "ztbp.cli", "doctor", "--json"], capture_output=True, text=True,
                          check=False, timeout=120)
    doc = json.loads(proc.stdout)
    assert proc.returncode == (0 if doc["ready"] else 1), proc.stderr
    assert "Traceback" not in proc.stderr


def test_build_ctl_without_a_compiler(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}
    env.pop("CC", None)
    proc = subprocess.run([sys.executable, "-m", "ztbp.cli", "build-ctl"], capture_output=True, text=True,
                          check=False, env=env, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "ztbp build-ctl: error: cannot build ztbp-ctl: make and cc not found; install make and a C compiler "
        "(`just deps`), then `ztbp build-ctl`"]


CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: QEMU TCG CPU version 2.5+
flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt bmi1 bmi2
"""


def test_cpu_facts_come_from_cpuinfo_and_polars_runtimes_without_importing_polars(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert cpu(CPUINFO) == ("QEMU TCG CPU version 2.5+", ())
    assert cpu(CPUINFO.replace("sse2 ", "sse2 avx fma avx2 "))[1] == ("avx", "avx2", "fma")
    assert cpu(None) == ("", ())
    present = {"_polars_runtime_32", "_polars_runtime_compat"}
    monkeypatch.delenv("POLARS_FORCE_PKG", raising=False)
    assert polars_runtime(lambda m: m if m in present else None) == "compat"  # polars prefers compat too
    monkeypatch.setenv("POLARS_FORCE_PKG", "32")
    assert polars_runtime(lambda m: m if m in present else None) == "32"
    assert polars_runtime(lambda m: None) == ""


def test_a_cpu_without_avx2_needs_polars_compat_runtime_and_tcg_avx2_is_warned() -> None:
    fine = working(cpu_model="AMD EPYC", cpu_avx=("avx", "avx2", "fma"), polars_runtime="32")
    assert status(fine, "cpu") == ["ok"] and ready(checks(fine))
    old = working(cpu_model="QEMU TCG CPU version 2.5+", cpu_avx=(), polars_runtime="32")
    assert status(old, "cpu") == ["fail"] and "cpu" in failed(old)
    assert "rtcompat" in next(c.fix for c in checks(old) if c.name == "cpu")
    assert status(replace(old, polars_runtime="compat"), "cpu") == ["ok"]  # the guest's set-up
    tcg = working(cpu_model="QEMU TCG CPU version 2.5+", cpu_avx=("avx", "avx2", "fma"), polars_runtime="compat")
    assert status(tcg, "cpu") == ["warn"] and ready(checks(tcg))
    assert "avx2=off" in next(c.fix for c in checks(tcg) if c.name == "cpu")
