"""Generated NVMeVirt guest settings, QEMU geometry arguments and capture-host refusals (no VM needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ztbp.acquire.capture import CaptureError
from ztbp.acquire.drive import check_zoned, host_geometry
from ztbp.acquire.host import check_writes
from ztbp.acquire.vm import Geometry, NvmevirtPlan, VmError
from ztbp.acquire.workload import Workload
from ztbp.cli import main

MIB = 1 << 20


def test_default_plan_matches_the_measured_setup() -> None:
    plan = NvmevirtPlan()
    assert plan.kernel_append == "memmap=1025M$4G"  # '$' reaches the kernel literally (argv, no shell)
    assert plan.module_params == "memmap_start=4G memmap_size=1025M cpus=1,2"
    assert plan.zones == 32
    assert plan.smp == 3
    assert plan.memory_mib * MIB > (4096 + 1025) * MIB  # RAM above start + size


def test_vmtest_args(tmp_path: Path) -> None:
    ko = tmp_path / "nvmev.ko"
    args = NvmevirtPlan(storage_mib=2048).vmtest_args(ko)
    assert args[args.index("--append") + 1] == "memmap=2049M$4G"
    assert args[args.index("--smp") + 1] == "3"
    assert "--no-zns" in args
    assert "--file" in args and str(ko) in args
    assert "ZTBP_KO=/ztbp/ctl/nvmev.ko" in args
    assert "ZTBP_KO_PARAMS=memmap_start=4G memmap_size=2049M cpus=1,2" in args
    assert int(args[args.index("--memory") + 1].removesuffix("M")) > 4096 + 2049


def test_a_reserve_shares_one_guest_between_storage_sizes(tmp_path: Path) -> None:
    """The guest reserves the reserve; each module takes the start of it: two storage sizes, one kernel command
    line and one guest memory, so one pooled guest serves both."""
    ko = tmp_path / "nvmev.ko"
    small, large = NvmevirtPlan(reserve_mib=4608), NvmevirtPlan(storage_mib=4608, reserve_mib=4608)
    assert small.kernel_append == large.kernel_append == "memmap=4609M$4G"
    assert small.memory_mib == large.memory_mib > 4096 + 4609
    assert small.module_params == "memmap_start=4G memmap_size=1025M cpus=1,2"  # 32 zones, as without a reserve
    assert large.module_params == "memmap_start=4G memmap_size=4609M cpus=1,2"
    a, b = small.vmtest_args(ko), large.vmtest_args(ko)
    assert [x for x in a if not x.startswith("ZTBP_KO_PARAMS")] == [x for x in b if not x.startswith("ZTBP_KO_PARAMS")]
    assert NvmevirtPlan(reserve_mib=0).kernel_append == NvmevirtPlan().kernel_append


@pytest.mark.parametrize("kwargs,msg", [
    ({"storage_mib": 2048, "reserve_mib": 1024}, "smaller than its storage"),
    ({"storage_mib": 1000}, "multiple of the zone size"),
    ({"cpus": (1,)}, "at least two CPUs"),
    ({"cpus": (0, 1)}, "CPU 0"),
])
def test_bad_plans_are_refused(kwargs: dict, msg: str) -> None:
    with pytest.raises(VmError, match=msg):
        NvmevirtPlan(**kwargs)


def test_geometry_args() -> None:
    g = Geometry(zone_bytes=64 * MIB, zones=16, zone_cap_bytes=48 * MIB, max_open=8, max_active=10,
                 lba_bytes=512, conv_ns_bytes=256 * MIB)
    a = g.vmtest_args()
    assert a[a.index("--zone-size") + 1] == str(64 * MIB)
    assert a[a.index("--zone-cap") + 1] == str(48 * MIB)
    assert a[a.index("--max-open") + 1] == "8" and a[a.index("--max-active") + 1] == "10"
    assert a[a.index("--lba-size") + 1] == "512"
    assert a[a.index("--conv-ns") + 1] == str(256 * MIB)
    with pytest.raises(VmError, match="capacity"):
        Geometry(zone_cap_bytes=64 * MIB).vmtest_args()
    with pytest.raises(VmError, match="LBA size"):
        Geometry(lba_bytes=1024).vmtest_args()


def fake_block(root: Path, name: str, zoned: str, lba: int = 4096, zone_sectors: int = 65536,
               nr_zones: int = 64) -> Path:
    q = root / "block" / name / "queue"
    q.mkdir(parents=True)
    (q / "zoned").write_text(zoned + "\n")
    (q / "logical_block_size").write_text(f"{lba}\n")
    (q / "chunk_sectors").write_text(f"{zone_sectors}\n")
    (q / "nr_zones").write_text(f"{nr_zones}\n")
    return root


def test_capture_host_refuses_non_zoned(tmp_path: Path) -> None:
    sysfs = fake_block(tmp_path, "nvme1n1", "none")
    with pytest.raises(CaptureError, match="not a zoned device"):
        check_zoned("/dev/nvme1n1", sysfs)
    with pytest.raises(CaptureError, match="no such block device"):
        check_zoned("/dev/nvme9n1", sysfs)


def test_capture_host_geometry_and_write_refusals(tmp_path: Path) -> None:
    sysfs = fake_block(tmp_path, "nvme0n1", "host-managed", lba=512, zone_sectors=2 * 65536, nr_zones=100)
    assert check_zoned("/dev/nvme0n1", sysfs) == "host-managed"
    assert host_geometry("/dev/nvme0n1", sysfs) == (512, 64 * MIB, 100)
    wl = Workload(name="paper80", reads=10, zone_bytes=64 * MIB, nr_zones=100, region_bytes=2048 * MIB)
    with pytest.raises(CaptureError, match="--destructive"):
        check_writes("/dev/nvme0n1", wl, destructive=False, no_prefill=False)
    check_writes("/dev/nvme0n1", wl, destructive=True, no_prefill=False)
    check_writes("/dev/nvme0n1", wl, destructive=False, no_prefill=True)  # read-only: allowed
    for name in ("seqwrite", "mixed"):
        w = Workload(name=name, reads=10)
        with pytest.raises(CaptureError, match="--destructive"):
            check_writes("/dev/nvme0n1", w, destructive=False, no_prefill=True)


def test_capture_host_cli_refuses_before_touching_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ZTBP_SYSFS", str(fake_block(tmp_path, "sda", "none")))
    assert main(["capture-host", "/dev/sda", "uniform", "--no-prefill"]) == 2
    assert "not a zoned device" in capsys.readouterr().err
    monkeypatch.setenv("ZTBP_SYSFS", str(fake_block(tmp_path / "z", "nvme0n1", "host-managed")))
    assert main(["capture-host", "/dev/nvme0n1", "seqwrite"]) == 2
    assert "--destructive" in capsys.readouterr().err


def test_capture_host_json_refusals_keep_stdout_clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """--json: a refusal is an error on stderr with its exit code, never a half JSON document on stdout (the JSON
    summary of a capture that ran is checked in the VM, tests/test_capture_vm.py)."""
    monkeypatch.setenv("ZTBP_SYSFS", str(fake_block(tmp_path, "sda", "none")))
    assert main(["capture-host", "/dev/sda", "uniform", "--no-prefill", "--json"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "not a zoned device" in out.err
    monkeypatch.setenv("ZTBP_SYSFS", str(fake_block(tmp_path / "z", "nvme0n1", "host-managed")))
    assert main(["capture-host", "/dev/nvme0n1", "uniform", "--no-prefill", "--json", "--probe", "x.bt"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "--probe x.bt" in out.err


def test_capture_cli_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "nope"]) == 2
    assert "choose one of" in capsys.readouterr().err
    assert main(["capture", "paper80", "--backend", "nvmevirt"]) == 2
    assert "--nvmevirt-ko" in capsys.readouterr().err
    assert main(["capture", "paper80", "--backend", "nvmevirt", "--nvmevirt-ko", "/nonexistent.ko"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["capture", "paper80", "--lba-size", "1000"]) == 2
    assert "LBA size" in capsys.readouterr().err

