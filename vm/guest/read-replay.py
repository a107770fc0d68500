#!/usr/bin/env python3
"""read-replay.py - replay a plan of 4 KiB reads on a zoned NVMe namespace, one at a time (QD 1, O_DIRECT), and
ask the device's ZTBP STATUS after every read, so the device's own hit count says which reads hit its cache.

USAGE (vm/guest/read-replay.sh runs it once per module load):
	read-replay.py PLAN OUT.csv --dev /dev/nvme0n1 --ctrl /dev/nvme0 --ctl ztbp-ctl

PLAN, one step a line:
	R OFFSET      a 4 KiB read at byte OFFSET of the namespace (4 KiB-aligned)
	S Z1,Z2,...   SET those zones (`ztbp-ctl set DEV --zones ...`: the check on)
	T             STOP (`ztbp-ctl stop DEV`: the check off)
OUT.csv: "# status before: READS HITS" (dwords 0 and 1 of STATUS before the first read), then a header and one row
per read: i,offset,lat_ns,reads,hits — lat_ns from just before the read's system call to just after it
(time.perf_counter_ns), reads and hits the STATUS answer right after it.

STATUS goes through the 64-bit admin passthrough ioctl (NVME_IOCTL_ADMIN64_CMD, struct nvme_passthru_cmd64 of
<linux/nvme_ioctl.h>: 80 bytes, cdw10 at byte 40, result at byte 72): opcode 0x99, cdw10 97, the one
sub-command ztbp-ctl's `status` sends; result = dword 0 (reads) | dword 1 (hits) << 32. SET and STOP go through
ztbp-ctl (a fork each: ~60 ms under TCG, too slow for every read). Exits 1 with one line on the first failure.

CHECKED ON: Debian 12 guest (Linux 6.1, Python 3.11), NVMeVirt's ZTBP fork (zn540), unmodified and with the
project's read model.
"""

from __future__ import annotations

import argparse
import fcntl
import mmap
import os
import struct
import subprocess
import sys
import time

NVME_IOCTL_ADMIN64_CMD = 0xC0504E47  # _IOWR('N', 0x47, struct nvme_passthru_cmd64)
PASSTHRU64 = struct.Struct("<BBHIIIQQII6IIIQ")  # opcode flags rsvd1 nsid cdw2 cdw3 metadata addr mlen dlen
#                                                 cdw10..15 timeout_ms rsvd2 result
ZTBP_OPCODE, STATUS = 0x99, 97
BLOCK = 4096


def status(ctrl: int) -> tuple[int, int]:
    """(reads, hits): dwords 0 and 1 of the device's STATUS answer."""
    buf = bytearray(PASSTHRU64.pack(ZTBP_OPCODE, 0, 0, 0, 0, 0, 0, 0, 0, 0, STATUS, 0, 0, 0, 0, 0, 0, 0, 0))
    fcntl.ioctl(ctrl, NVME_IOCTL_ADMIN64_CMD, buf)
    result = PASSTHRU64.unpack(buf)[-1]
    return result & 0xFFFFFFFF, result >> 32


def ctl(tool: str, dev: str, *args: str) -> None:
    proc = subprocess.run([tool, *args[:1], dev, *args[1:]], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise OSError(f"ztbp-ctl {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")


def replay(plan: list[str], out: str, dev: str, ctrl_path: str, tool: str) -> None:
    fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
    ctrl = os.open(ctrl_path, os.O_RDONLY)
    buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs
    rows = []
    before = status(ctrl)
    for line in plan:
        step, _, arg = line.partition(" ")
        if step == "R":
            offset = int(arg)
            t0 = time.perf_counter_ns()
            n = os.preadv(fd, [buf], offset)
            lat = time.perf_counter_ns() - t0
            if n != BLOCK:
                raise OSError(f"read at {offset} returned {n} bytes")
            reads, hits = status(ctrl)
            rows.append(f"{len(rows)},{offset},{lat},{reads},{hits}\n")
        elif step == "S":
            ctl(tool, dev, "set", "--zones", arg)
        elif step == "T":
            ctl(tool, dev, "stop")
        elif step:
            raise ValueError(f"plan line {line!r}: give R OFFSET, S ZONES or T")
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"# status before: {before[0]} {before[1]}\ni,offset,lat_ns,reads,hits\n")
        f.writelines(rows)
    os.replace(tmp, out)


def main() -> int:
    ap = argparse.ArgumentParser(description="Replay 4 KiB reads at QD 1 with the device's STATUS after each.")
    ap.add_argument("plan")
    ap.add_argument("out")
    ap.add_argument("--dev", default="/dev/nvme0n1")
    ap.add_argument("--ctrl", default="/dev/nvme0")
    ap.add_argument("--ctl", default="ztbp-ctl")
    a = ap.parse_args()
    try:
        with open(a.plan) as f:
            plan = f.read().splitlines()
        replay(plan, a.out, a.dev, a.ctrl, a.ctl)
    except (OSError, ValueError) as e:
        print(f"read-replay: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
