"""A device made by a kernel module (`--module KO --module-params "k=v ..."` of capture-host, loop --host and watch).

NVMeVirt's busy-polling threads hold off RCU-tasks grace periods, which bpftrace's kfunc/fentry programs need to
attach and to detach: with the module loaded, bpftrace hangs attaching or stopping (../shared/nvmevirt/README.md;
vm/guest/probe-lib.sh, "a device module"). So such a device exists only between the probe's attach and its detach:

    geometry:  load -> read sysfs and blkzone -> unload            (before the probe exists)
    session:   probe attached -> load -> ... -> unload -> probe detached

`device_geometry` reads the geometry so (a drive of this machine without a module: at once). The guest scripts do
the session's half themselves from `env()` (ZTBP_KO, ZTBP_KO_PARAMS); `ztbp watch` does it from Python. Every
outside command (modprobe, insmod, rmmod) goes through one `Machine`, which the tests replace with a fake one. The
module's parameters reach insmod's argv (and the guest scripts' unquoted word splitting), never a shell: they are
`name=value` words of safe characters only.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .. import commands
from ..commands import Runner
from ..errors import ZtbpError
from .capture import CaptureError
from .drive import check_zoned, host_geometry, host_zone_cap

#: seconds one of modprobe / insmod / rmmod may take
COMMAND_TIMEOUT_S = 120
#: seconds the module's device may take to appear (probe-lib.sh's module_load waits as long)
LOAD_TIMEOUT_S = 60.0
POLL_S = 0.1
#: a module parameter: name=value, the value of letters, digits and _ . , : + - only (4G, 1025M, 1,2)
PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.,:+-]+")
MODULE_NAME = re.compile(r"[A-Za-z0-9_-]+")
PARAMS_MAX = 1000


class ModuleError(ZtbpError):
    """The device's module is refused, or could not be loaded or unloaded."""


def module_command(argv: list[str]) -> tuple[int | None, str, str]:
    """One of modprobe / insmod / rmmod, run with a timeout of COMMAND_TIMEOUT_S (commands.run_command)."""
    return commands.run_command(argv, COMMAND_TIMEOUT_S)


def is_block_device(path: Path) -> bool:
    try:
        return stat.S_ISBLK(path.stat().st_mode)
    except OSError:
        return False


@dataclass
class Machine:
    """What loading a module touches: the commands, the device node, /sys/module and the clock."""

    run: Runner = module_command
    is_block: Callable[[Path], bool] = is_block_device
    sysfs: Path = field(default_factory=lambda: Path(os.environ.get("ZTBP_SYSFS", "/sys")))
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic


#: the machine the commands run on (the tests put a fake one here)
MACHINE: Machine | None = None


def machine() -> Machine:
    return MACHINE if MACHINE is not None else Machine()


def _said(out: str, err: str) -> str:
    text = " ".join((err.strip() or out.strip()).split())
    return text[-400:] if text else "no message"


@dataclass(frozen=True)
class DeviceModule:
    """A kernel module that creates the traced device when loaded (NVMeVirt's nvmev.ko) and its parameters."""

    ko: Path
    params: str = ""

    @property
    def name(self) -> str:
        """The module's name for rmmod: the file's name without .ko (nvmev.ko -> nvmev), as probe-lib.sh takes it."""
        return self.ko.name.removesuffix(".ko")

    @property
    def words(self) -> list[str]:
        return self.params.split()

    def validate(self) -> DeviceModule:
        """Refuse a module that is not a .ko file and parameters that are not name=value words of safe characters;
        the module itself, checked (its path made absolute: the guest scripts run from another folder)."""
        if self.ko.suffix != ".ko" or not MODULE_NAME.fullmatch(self.name):
            raise ModuleError(f"--module {self.ko}: give a kernel module file NAME.ko (NAME of letters, digits, _ "
                              "and -: rmmod NAME unloads it), e.g. ~/.cache/ztbp/nvmevirt/<release>-zn540/nvmev.ko")
        if not self.ko.is_file():
            raise ModuleError(f"--module {self.ko}: no such file")
        if len(self.params) > PARAMS_MAX:
            raise ModuleError(f"--module-params: {len(self.params)} characters; at most {PARAMS_MAX}")
        bad = [w for w in self.words if not PARAM.fullmatch(w)]
        if bad:
            raise ModuleError(f"--module-params: {bad[0]!r} is not name=value of letters, digits and _ . , : + - "
                              "(e.g. \"memmap_start=4G memmap_size=1025M cpus=1,2\"); the words go to insmod as "
                              "they are")
        return DeviceModule(self.ko.resolve(), " ".join(self.words))

    def env(self) -> dict[str, str]:
        """The guest scripts' variables (probe-lib.sh module_load: insmod after the probe attached)."""
        return {"ZTBP_KO": str(self.ko), "ZTBP_KO_PARAMS": " ".join(self.words)}

    def describe(self) -> str:
        return " ".join([self.ko.name, *self.words])

    def prepare(self, m: Machine | None = None) -> None:
        """The nvme driver, loaded before a probe attaches (its functions are the probe's) and before the module
        (nothing else loads it where there is no NVMe drive: it binds the module's device when that appears)."""
        m = m or machine()
        code, out, err = m.run(["modprobe", "--", "nvme"])
        if code != 0:
            raise ModuleError(f"modprobe nvme failed ({_said(out, err)}); the module {self.ko.name}'s device needs "
                              "the nvme driver")

    def load(self, dev: str, timeout_s: float = LOAD_TIMEOUT_S, m: Machine | None = None) -> float:
        """modprobe nvme, insmod KO PARAMS..., then wait until DEV is a block device; the seconds it took. A
        ModuleError naming the module and the device when it fails (the module unloaded again when DEV never came)."""
        m = m or machine()
        if (m.sysfs / "module" / self.name).exists():
            raise ModuleError(f"the module {self.name} is loaded already: unload it first (rmmod {self.name}); "
                              "--module loads it itself, after the probe has attached")
        self.prepare(m)
        code, out, err = m.run(["insmod", "--", str(self.ko), *self.words])
        if code != 0:
            raise ModuleError(f"insmod {self.describe()} failed (exit {code}): {_said(out, err)}; {dev} was not "
                              "created")
        said = _said(out, err) if (out.strip() or err.strip()) else ""
        t0 = m.clock()
        try:
            while not m.is_block(Path(dev)):
                if m.clock() - t0 >= timeout_s:
                    break
                m.sleep(POLL_S)
            else:
                return m.clock() - t0
        except KeyboardInterrupt:  # Ctrl-C while waiting: the module does not stay behind
            m.run(["rmmod", "--", self.name])
            raise
        rc, rout, rerr = m.run(["rmmod", "--", self.name])
        undone = "the module was unloaded again" if rc == 0 else f"rmmod {self.name} failed too: {_said(rout, rerr)}"
        raise ModuleError(f"{dev} did not appear within {timeout_s:g} s after insmod {self.describe()}"
                          f"{f' (insmod said: {said})' if said else ''}; {undone}. Is {dev} the name the module's "
                          "device gets here (see dmesg)?")

    def unload(self, m: Machine | None = None) -> None:
        """rmmod NAME; a ModuleError with its message when it fails."""
        m = m or machine()
        code, out, err = m.run(["rmmod", "--", self.name])
        if code != 0:
            raise ModuleError(f"rmmod {self.name} failed (exit {code}): {_said(out, err)}")

    @contextlib.contextmanager
    def loaded(self, dev: str, timeout_s: float = LOAD_TIMEOUT_S, m: Machine | None = None) -> Iterator[float]:
        """The device for a moment (its geometry read before the probe exists): load, the body, unload."""
        m = m or machine()
        appeared = self.load(dev, timeout_s, m)
        try:
            yield appeared
        except BaseException as e:
            try:
                self.unload(m)
            except ModuleError as u:
                if isinstance(e, ZtbpError):  # both said, in one line: the module stays loaded
                    raise type(e)(f"{e}; then {u}: the module is still loaded", e.code) from None
                raise
            raise
        self.unload(m)


def device_present(module: DeviceModule | None, dev: str) -> contextlib.AbstractContextManager[object]:
    """The device while the body runs: `module.loaded(dev)`, or nothing to do when no module makes it."""
    return module.loaded(dev) if module is not None else contextlib.nullcontext()


def device_geometry(dev: str, sysfs: Path, module: DeviceModule | None = None,
                    error: type[ZtbpError] = CaptureError) -> tuple[int, int, int, int | None]:
    """(lba bytes, zone bytes, nr zones, zone capacity) of this machine's zoned namespace `dev`, checked zoned (as
    `error`); with `module` (a module that creates the device, NVMeVirt), the module loaded for the moment of reading
    them and unloaded again, before any probe attaches. loop --host and watch read it so; capture-host without a
    module refuses its options first (check_writes, --probe) and runs blkzone for the capacity last."""
    with device_present(module, dev):
        check_zoned(dev, sysfs, error)
        lba, zone_bytes, nr = host_geometry(dev, sysfs)
        return lba, zone_bytes, nr, host_zone_cap(dev, error)
