"""A zoned drive of this machine: the checks (zoned, the tools, root) and its geometry (sysfs, blkzone) that
capture-host, loop --host and watch share. A device a kernel module makes is read the same way, the module loaded
for that moment (acquire/module.device_geometry)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..commands import run_command
from ..errors import ZtbpError
from ..units import zone_capacity
from .capture import CaptureError


def sysfs_block(dev: str, sysfs: Path) -> Path:
    return sysfs / "block" / Path(dev).name


def check_zoned(dev: str, sysfs: Path = Path("/sys"), error: type[ZtbpError] = CaptureError) -> str:
    """Refuse a device that is not a zoned block device (as `error`); return its zoned model."""
    q = sysfs_block(dev, sysfs) / "queue"
    if not q.is_dir():
        raise error(f"{dev}: no such block device ({q} missing); give a whole namespace like /dev/nvme0n1")
    model = (q / "zoned").read_text().strip() if (q / "zoned").is_file() else "none"
    if model not in ("host-managed", "host-aware"):
        raise error(f"{dev} is not a zoned device (queue/zoned = {model}); capture-host traces ZNS drives only. Use "
                    "`just capture` for the emulated one.")
    return model


def host_geometry(dev: str, sysfs: Path = Path("/sys")) -> tuple[int, int, int]:
    """(lba bytes, zone bytes, nr zones) of a real zoned device from sysfs."""
    q = sysfs_block(dev, sysfs) / "queue"
    lba = int((q / "logical_block_size").read_text())
    zone_bytes = int((q / "chunk_sectors").read_text()) * 512
    nr = int((q / "nr_zones").read_text())
    return lba, zone_bytes, nr


def host_zone_cap(dev: str, error: type[ZtbpError] = CaptureError) -> int | None:
    """The zone capacity of a real zoned device in bytes, from `blkzone report -c 1` (None: its blkzone prints no
    capacity, an old util-linux); `error` when blkzone cannot report the device."""
    code, out, err = run_command(["blkzone", "report", "-c", "1", dev], 60)
    if code is None:
        raise error(f"blkzone report {dev} did not run ({err}); it tells the zone capacity the workload must keep "
                    "within: install util-linux")
    if code != 0:
        raise error(f"blkzone report {dev} failed: {err.strip()[-300:]}; it tells the zone capacity the workload "
                    "must keep within")
    return zone_capacity(out)


def host_tools(error: type[ZtbpError], command: str) -> None:
    """What the host path needs on this machine: bpftrace, fio, blkzone, and root."""
    missing = [t for t in ("bpftrace", "fio", "blkzone") if shutil.which(t) is None]
    if missing:
        raise error(f"missing on this machine: {', '.join(missing)}; install with "
                    "apt-get install bpftrace fio util-linux")
    if os.geteuid() != 0:
        raise error(f"{command} needs root (bpftrace and raw device access); run it with sudo")
