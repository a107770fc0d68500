"""The devices a command can trace, one module each, and the one way from a name to its `Device` (`get`).

`DEVICES` maps each CLI value (meta.json's "backend") to its device; `get(name)` refuses an unknown name with one
clear line, `find(name)` answers None for a name that is no device (a synthetic or imported run's "synth",
"import"): what a report shows of a run of unknown origin.
"""

from __future__ import annotations

from ..errors import ZtbpError
from .base import Device
from .drive import DRIVE
from .nvmevirt import NVMEVIRT, NVMEVIRT_NOTES
from .qemu import QEMU

__all__ = ["DEVICES", "DRIVE", "NVMEVIRT", "NVMEVIRT_NOTES", "QEMU", "Device", "DeviceError", "find", "get",
           "vm_names"]

DEVICES: dict[str, Device] = {d.name: d for d in (QEMU, NVMEVIRT, DRIVE)}


class DeviceError(ZtbpError):
    """A device name that names no device."""


def get(name: str) -> Device:
    """The device of `name` (a --backend value, or "host"); an unknown name is one clear error."""
    try:
        return DEVICES[name]
    except KeyError:
        raise DeviceError(f"unknown device {name!r}; choose one of: {', '.join(DEVICES)}") from None


def find(name: object) -> Device | None:
    """The device of `name`, or None when it names none (a run's "backend" read back from a file)."""
    return DEVICES.get(name) if isinstance(name, str) else None


def vm_names() -> tuple[str, ...]:
    """The devices the VM harness boots: the choices of --backend."""
    return tuple(d.name for d in DEVICES.values() if d.in_vm)
