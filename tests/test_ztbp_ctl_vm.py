"""ztbp-ctl against QEMU's emulated zoned namespace, in one guest boot (vm/vmtest.sh).

The binary is built on the host (same Debian 12 glibc) and run from the read-only repository share. In the
guest: `geometry` on the block, generic and controller devices, compared here with `blkzone report` and sysfs;
every ZTBP command through all three device kinds, which QEMU rejects (Invalid Command Opcode), so ztbp-ctl
must exit with the protocol code and message; the validation errors that need a real device (zone id beyond
the device's zone count, config geometry that is not the device's, a non-NVMe non-zoned disk); and afterwards
a zone reset, a direct-I/O write of 1 MiB and its read-back, to show the namespace still works and the
controller was never reset.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from loop_run import CONV_NS

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "ztbp-ctl"
VMTEST = ROOT / "vm" / "vmtest.sh"
GUEST_CTL = "/ztbp/src/tools/ztbp-ctl/build/ztbp-ctl"
ZONES = 64  # the default device (with CONV_NS beside it: the guest shared with its chain's captures)
ZONE_MIB = 32
LBA = 4096
IO_ZONE = 3
PROTOCOL_MESSAGE = "device does not implement the ZTBP cache protocol (NVMe status 0x"

pytestmark = pytest.mark.vm

GUEST_SCRIPT = r"""
set -u
CTL=__CTL__
O=/ztbp/out
run() {  # run NAME COMMAND...: stdout, stderr and exit status into /ztbp/out/NAME.{out,err,rc}
	local name=$1; shift
	"$@" > "$O/$name.out" 2> "$O/$name.err"
	echo $? > "$O/$name.rc"
}
blkzone report /dev/nvme0n1 > "$O/blkzone-before.txt"
for f in nr_zones chunk_sectors logical_block_size zoned; do
	echo "$f $(cat /sys/block/nvme0n1/queue/$f)"
done > "$O/sysfs.txt"

run geometry       "$CTL" geometry /dev/nvme0n1 --json
run geometry-text  "$CTL" geometry /dev/nvme0n1
run geometry-ng    "$CTL" geometry /dev/ng0n1 --json
run geometry-ctrl  "$CTL" geometry /dev/nvme0 --json

run set            "$CTL" set /dev/nvme0n1 --zones 1,7,11,15,0
run set-json       "$CTL" set /dev/nvme0n1 --zones 1,7 --json
run set-ng         "$CTL" set /dev/ng0n1 --zones 2
run set-ctrl       "$CTL" set /dev/nvme0 --zones 3
run set-config     "$CTL" set /dev/nvme0n1 --config "$O/config-ok.json" --top5
run info           "$CTL" info /dev/nvme0n1
run status         "$CTL" status /dev/nvme0 --json
run stop           "$CTL" stop /dev/ng0n1
run range          "$CTL" set /dev/nvme0n1 --zones 1,__ZONES__
run mismatch       "$CTL" set /dev/nvme0n1 --config "$O/config-other-geometry.json"
run vda-geometry   "$CTL" geometry /dev/vda
run vda-set        "$CTL" set /dev/vda --zones 1

# the namespace still works: reset a zone, write 1 MiB with direct I/O, read it back
start=$(( __IO_ZONE__ * __ZONE_MIB__ * 2048 ))   # zone start in 512-byte sectors
blkzone reset -o "$start" -c 1 /dev/nvme0n1; echo $? > "$O/reset.rc"
head -c 1048576 /dev/urandom > /tmp/pattern
seek=$(( __IO_ZONE__ * __ZONE_MIB__ * 16 ))        # zone start in 64 KiB blocks
dd if=/tmp/pattern of=/dev/nvme0n1 bs=64k seek="$seek" count=16 oflag=direct status=none; echo $? > "$O/write.rc"
dd if=/dev/nvme0n1 of=/tmp/back bs=64k skip="$seek" count=16 iflag=direct status=none; echo $? > "$O/read.rc"
cmp /tmp/pattern /tmp/back; echo $? > "$O/cmp.rc"
blkzone report -o "$start" -c 1 /dev/nvme0n1 > "$O/io-zone.txt"
blkzone report /dev/nvme0n1 > "$O/blkzone-after.txt"
dmesg > "$O/dmesg.txt"
echo done > "$O/finished"
"""


def _config(nr_zones: int, zone_size_lba: int) -> dict[str, Any]:
    hot = [5, 9, 2, 14, 7, 11]
    return {
        "format": "ztbp-cache-config/1",
        "hot_zones": hot,
        "zone_scores": [{"zone": z, "reads": 600 - 100 * i, "share": 0.3 - 0.05 * i} for i, z in enumerate(hot)],
        "zone_size_lba": zone_size_lba,
        "lba_bytes": LBA,
        "nr_zones": nr_zones,
    }


def _zones(report: str) -> list[dict[str, int]]:
    """`blkzone report` lines as start/len/cap/wptr in 512-byte sectors (wptr relative to start)."""
    rows = []
    for m in re.finditer(r"start: (0x[0-9a-f]+), len (0x[0-9a-f]+), cap (0x[0-9a-f]+), wptr (0x[0-9a-f]+)", report):
        rows.append(dict(zip(("start", "len", "cap", "wptr"), (int(g, 16) for g in m.groups()), strict=True)))
    return rows


#: a boot whose console stays empty this long has hung (seen under TCG); it is killed and booted once more
SILENT_BOOT_S = 240
BOOT_ATTEMPTS = 2


def _boot(cmd: list[str], console: Path) -> tuple[int | None, str]:
    """Run vmtest.sh; (its exit status, its stderr), or (None, stderr) when the guest's console stayed empty for
    SILENT_BOOT_S seconds (vmtest.sh is then stopped; it kills QEMU on SIGTERM)."""
    import tempfile
    import time

    console.unlink(missing_ok=True)
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
        t0 = time.monotonic()
        rc: int | None = None
        while (rc := proc.poll()) is None:
            silent = not (console.exists() and console.stat().st_size > 0)
            if (silent and time.monotonic() - t0 > SILENT_BOOT_S) or time.monotonic() - t0 > 900:
                proc.terminate()
                proc.wait(timeout=60)
                rc = None if silent else proc.returncode
                break
            time.sleep(1)
        err.seek(0)
        return rc, err.read()


@pytest.fixture(scope="module")
def guest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Boot one guest, run the script, return the output folder."""
    if not VMTEST.exists():
        pytest.skip("vm/vmtest.sh (the VM harness) is not in this checkout")
    if shutil.which("qemu-system-x86_64") is None:
        pytest.fail("qemu-system-x86_64 is missing: run `just deps`")
    build = subprocess.run(["make", "-s", "-C", str(TOOL)], capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr
    out = tmp_path_factory.mktemp("ztbp-ctl-vm")
    script = GUEST_SCRIPT
    values = {"__CTL__": GUEST_CTL, "__ZONES__": ZONES, "__IO_ZONE__": IO_ZONE, "__ZONE_MIB__": ZONE_MIB}
    for key, value in values.items():
        script = script.replace(key, str(value))
    (out / "guest.sh").write_text(script)
    zone_lba = ZONE_MIB * 1024 * 1024 // LBA
    (out / "config-ok.json").write_text(json.dumps(_config(ZONES, zone_lba)))
    (out / "config-other-geometry.json").write_text(json.dumps(_config(2 * ZONES, zone_lba)))
    cmd = [str(VMTEST), "-o", str(out), "-q", "-t", "840", "--zones", str(ZONES), "--zone-size", f"{ZONE_MIB}M",
           "--lba-size", str(LBA), *CONV_NS, "--", "bash /ztbp/out/guest.sh"]
    for attempt in range(1, BOOT_ATTEMPTS + 1):
        rc, stderr = _boot(cmd, out / "console.log")
        if rc is not None or attempt == BOOT_ATTEMPTS:
            break
        print(f"ztbp-ctl VM: the guest printed nothing in {SILENT_BOOT_S} s (a hung boot); booted again")
    console = (out / "console.log").read_text(errors="replace") if (out / "console.log").exists() else ""
    # The guest script's own marker, not only vmtest's exit status: each step's status is in a file.
    assert (out / "finished").exists(), f"vmtest exit {rc}\n{stderr[-2000:]}\n{console[-3000:]}"
    return out


def _result(out: Path, name: str) -> tuple[int, str, str]:
    return int((out / f"{name}.rc").read_text()), (out / f"{name}.out").read_text(), (out / f"{name}.err").read_text()


def test_geometry_agrees_with_blkzone(guest: Path) -> None:
    rc, stdout, stderr = _result(guest, "geometry")
    assert rc == 0, stderr
    geo = json.loads(stdout)
    zones = _zones((guest / "blkzone-before.txt").read_text())
    assert len(zones) == geo["nr_zones"]
    assert {z["len"] for z in zones} == {geo["zone_size_sectors"]}
    assert min(z["cap"] for z in zones) == geo["zone_cap_sectors"]
    assert max(z["cap"] for z in zones) == geo["zone_cap_max_sectors"]
    assert [z["start"] for z in zones] == [i * geo["zone_size_sectors"] for i in range(geo["nr_zones"])]
    sysfs = dict(line.split() for line in (guest / "sysfs.txt").read_text().splitlines())
    assert int(sysfs["nr_zones"]) == geo["nr_zones"]
    assert int(sysfs["chunk_sectors"]) == geo["zone_size_sectors"]
    assert int(sysfs["logical_block_size"]) == geo["lba_bytes"]
    assert sysfs["zoned"] == "host-managed"
    assert geo["nvme"] is True and geo["nsid"] == 1 and geo["source"] == "blkzoned"
    assert geo["zone_size_lba"] * geo["lba_bytes"] == geo["zone_size_bytes"] == geo["zone_size_sectors"] * 512
    text_rc, text, _ = _result(guest, "geometry-text")
    assert text_rc == 0 and f"zones        {geo['nr_zones']}" in text


@pytest.mark.parametrize("name", ["geometry-ng", "geometry-ctrl"])
def test_geometry_of_character_devices(guest: Path, name: str) -> None:
    block = json.loads(_result(guest, "geometry")[1])
    rc, stdout, stderr = _result(guest, name)
    assert rc == 0, stderr
    geo = json.loads(stdout)
    assert geo["source"] == "identify"
    for key in ("nr_zones", "zone_size_lba", "lba_bytes", "zone_size_bytes", "nsid"):
        assert geo[key] == block[key], key


@pytest.mark.parametrize("name", ["set", "set-ng", "set-ctrl", "set-config", "info", "stop"])
def test_commands_fail_with_protocol_error(guest: Path, name: str) -> None:
    rc, stdout, stderr = _result(guest, name)
    assert rc == 30, stderr
    assert stdout == ""
    assert PROTOCOL_MESSAGE in stderr and "Invalid Command Opcode" in stderr


@pytest.mark.parametrize("name", ["set-json", "status"])
def test_protocol_error_as_json(guest: Path, name: str) -> None:
    rc, stdout, stderr = _result(guest, name)
    assert rc == 30
    out = json.loads(stdout)
    assert out["ok"] is False and out["exit_code"] == 30 and out["error"] == "no-ztbp-protocol"
    assert out["message"].startswith(PROTOCOL_MESSAGE)
    assert out["message"] in stderr


def test_device_validation(guest: Path) -> None:
    rc, _, stderr = _result(guest, "range")
    assert rc == 5 and f"device's zone count {ZONES}" in stderr
    rc, _, stderr = _result(guest, "mismatch")
    assert rc == 15 and f"{2 * ZONES} zones" in stderr
    rc, _, stderr = _result(guest, "vda-geometry")  # a virtio disk: not NVMe by sysfs, so nothing is sent
    assert rc == 23 and "not an NVMe device by its sysfs entry; nothing was sent" in stderr
    rc, _, stderr = _result(guest, "vda-set")
    assert rc == 23 and "not an NVMe device" in stderr


def test_namespace_still_reads_and_writes(guest: Path) -> None:
    for step in ("reset", "write", "read", "cmp"):
        assert int((guest / f"{step}.rc").read_text()) == 0, step
    zone = _zones((guest / "io-zone.txt").read_text())[0]
    assert zone["start"] == IO_ZONE * ZONE_MIB * 2048
    assert zone["wptr"] == 1024 * 1024 // 512  # blkzone prints the write pointer relative to the zone start
    before = _zones((guest / "blkzone-before.txt").read_text())
    after = _zones((guest / "blkzone-after.txt").read_text())
    assert [(z["start"], z["len"], z["cap"]) for z in after] == [(z["start"], z["len"], z["cap"]) for z in before]
    dmesg = (guest / "dmesg.txt").read_text(errors="replace")
    assert "resetting controller" not in dmesg and "I/O Cmd" not in dmesg
