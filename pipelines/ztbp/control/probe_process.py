"""The streaming probe on this machine, started before `ztbp watch`'s analysis is loaded.

`start_stream` checks the device, reads its geometry (with a device module, loaded for that moment only) and
starts bpftrace on probes/nvme_zone_stream.bt. It imports nothing heavy: `ztbp watch` calls it before it imports
the analysis (numpy, polars, numba) and warms it up, so bpftrace compiles and attaches meanwhile, on another core.
Under emulation the three take 20-35 s each, one after the other before (measured in the guest: tests/
test_host_path_vm.py). Until the session reads the probe's lines, bpftrace holds them: in its per-CPU buffers
(BPFTRACE_PERF_RB_PAGES) and then in the pipe; what it cannot hold it counts as lost, and the session counts it.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import paths
from ..acquire.module import DeviceModule, device_geometry
from ..errors import ZtbpError
from ..writeback.ctl import check_device

#: seconds without a line of the probe after which its reader hears a tick (b""): an idle device's last rows are
#: not kept waiting for the next line
IDLE_TICK_S = 1.0
#: seconds after which a SIGINT bpftrace has not acted on is sent again (bpftrace 0.17 can miss one while it waits in
#: its event loop, vm/guest/probe-lib.sh does the same; a `ztbp watch` in a fresh-clone run waited 7 minutes)
SIGINT_AGAIN_S = 5.0


class ProbeProcess:
    """bpftrace running probes/nvme_zone_stream.bt on this machine: its stdout lines; close() detaches it."""

    @staticmethod
    def check() -> None:
        """bpftrace on this machine, and root."""
        missing = [t for t in ("bpftrace",) if shutil.which(t) is None]
        if missing:
            raise ZtbpError("cannot start the streaming probe: bpftrace not found on this machine (install it, e.g. "
                            "apt-get install bpftrace)")
        if os.geteuid() != 0:
            raise ZtbpError("cannot start the streaming probe: watch needs root (bpftrace); run it with sudo")

    def __init__(self, script: Path) -> None:
        self.check()
        env = {**os.environ, "BPFTRACE_STRLEN": "16", "BPFTRACE_PERF_RB_PAGES": "32768"}
        # stderr joins stdout: bpftrace's messages ("Lost N events", its errors) are read in order, and a pipe
        # nobody reads never fills and blocks it
        self.proc = subprocess.Popen(["bpftrace", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env=env, start_new_session=True)
        self.last = b""
        self.stopping = False
        self.sigint_at = 0.0

    def stop(self) -> None:
        """SIGINT to bpftrace: it detaches, prints what it still holds and exits (the end of its lines)."""
        self.stopping = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.sigint_at = time.monotonic()

    def _stop_again(self) -> None:
        """The SIGINT once more when bpftrace is still running SIGINT_AGAIN_S after the last one."""
        if self.stopping and self.proc.poll() is None and time.monotonic() - self.sigint_at >= SIGINT_AGAIN_S:
            self.stop()

    def lines(self) -> Iterator[bytes]:
        """bpftrace's output lines, and a tick (b"") after each IDLE_TICK_S without one; a ZtbpError with its
        last line when it exits with an error."""
        assert self.proc.stdout is not None
        fd, pending = self.proc.stdout.fileno(), b""
        while True:
            self._stop_again()
            if not select.select([fd], [], [], IDLE_TICK_S)[0]:
                yield b""
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            *whole, pending = (pending + chunk).split(b"\n")
            for line in whole:
                if line.strip():
                    self.last = line
                yield line + b"\n"
        if pending:
            yield pending
        if self.proc.wait() != 0 and not self.stopping:
            last = self.last.decode("utf-8", "replace").strip() or "no message"
            raise ZtbpError(f"the streaming probe could not run on this machine (bpftrace exit "
                            f"{self.proc.returncode}): {last}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.stop()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:  # stuck in the kernel: a detach waiting for a grace period
                    logging.getLogger("ztbp").warning(
                        f"bpftrace (pid {self.proc.pid}) did not exit after SIGKILL: its detach waits for an RCU-tasks "
                        "grace period (a module whose threads stall them still loaded? rmmod it)")


@dataclass
class Started:
    """The device's geometry (a watch session's meta) and its probe, already compiling."""

    meta: dict[str, Any]
    probe: ProbeProcess
    module: DeviceModule | None = field(default=None)


def start_stream(dev: str, module: DeviceModule | None = None, sysfs: Path | None = None) -> Started:
    """Check `dev` (a zoned namespace ztbp-ctl can open), read its geometry and start the streaming probe on it.

    With `module` (a module that creates `dev`, NVMeVirt): root and bpftrace are checked before the module is loaded
    to read the geometry; it is unloaded again before bpftrace starts (its threads stall the RCU-tasks grace periods
    the probe needs to attach; the session loads it once the probe's header arrives)."""
    check_device(dev)
    if module is not None:
        ProbeProcess.check()
    lba, zone_bytes, nr, cap = device_geometry(dev, sysfs or Path(os.environ.get("ZTBP_SYSFS", "/sys")), module)
    meta: dict[str, Any] = {"device": Path(dev).name, "lba_bytes": lba, "zone_size_lba": zone_bytes // lba,
                            "nr_zones": nr}
    if cap and cap < zone_bytes:  # a real drive's zones hold less than their size: the hot rule's cells per zone
        meta["zone_cap_lba"] = cap // lba
    if module is not None:
        meta["device_module"] = {"ko": str(module.ko), "params": module.params}
    return Started(meta, ProbeProcess(paths.PROBES / "nvme_zone_stream.bt"), module)
