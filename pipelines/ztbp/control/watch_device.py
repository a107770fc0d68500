"""The device as `ztbp watch` sees it: SET, STOP and STATUS behind a Protocol (a test gives a fake one), ztbp-ctl's
answers read (the read and hit counts, when the device answered), and the zones a SET sends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..analysis.device_counters import Counters, from_answer
from ..writeback.config import DEVICE_MAX_ZONES


class Device(Protocol):
    """What the session asks of the device: SET the zones, STOP, and STATUS (its read and hit counters)."""

    def set(self, zones: tuple[int, ...]) -> dict[str, Any]: ...
    def stop(self) -> dict[str, Any]: ...
    def status(self) -> dict[str, Any]: ...


@dataclass
class CtlDevice:
    """The device through ztbp-ctl (writeback/ctl.py)."""

    dev: str

    def set(self, zones: tuple[int, ...]) -> dict[str, Any]:
        from ..writeback.ctl import command
        return command("set", self.dev, "--zones", ",".join(str(z) for z in zones))

    def stop(self) -> dict[str, Any]:
        from ..writeback.ctl import command
        return command("stop", self.dev)

    def status(self) -> dict[str, Any]:
        from ..writeback.ctl import command
        return command("status", self.dev)


def sent_zones(zones: tuple[int, ...], reads: np.ndarray) -> tuple[int, ...]:
    """The zones SET sends, by zone id: the device takes at most DEVICE_MAX_ZONES, so the most read of the window
    (ties by zone id), as ztbp-ctl's --top5 does."""
    return tuple(sorted(sorted(zones, key=lambda z: (-int(reads[z]), z))[:DEVICE_MAX_ZONES]))


def answered_ns(answer: dict[str, Any]) -> int | None:
    """When the device's answer came back (ztbp-ctl's answered_mono_ns: CLOCK_MONOTONIC just after its ioctl, the
    probe's clock), None when ztbp-ctl did not say."""
    res = answer.get("result") or {}
    t = res.get("answered_mono_ns") if isinstance(res, dict) else None
    return int(t) if isinstance(t, int) and t > 0 else None


def status_counters(answer: dict[str, Any]) -> Counters:
    """The read and hit counters of a STATUS answer (analysis/device_counters.py), None where the device gave
    none."""
    return from_answer(answer)
