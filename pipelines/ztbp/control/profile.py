"""The interference profile (`ztbp profile`): measure every zone alone and in pairs on a runner (acquire/profile.py),
group the zones that interfere and judge the groups against the measured noise (analysis/conflict_groups.py), and write
the profile's files (io/profile.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..acquire.profile import Budget, Device, GuestRunner, HostRunner, Meter, started
from ..analysis.conflict_groups import UNCLASSIFIED, adjusted_rand, nvmevirt_layout, pair_matrix, profile_zones
from ..analysis.device_params import ProfileParams
from ..errors import ProfileError
from ..files import make_dir
from ..io.profile import PROFILE_FORMAT, write_profile
from ..units import KIB, MIB

#: Answer keys of devices whose layout is known: name -> nvmevirt_layout arguments.
KEYS: dict[str, dict[str, int]] = {
    "nvmevirt-prototype": {"channels": 8, "luns_per_channel": 16, "dies_per_zone": 1},
    "nvmevirt-zn540": {"channels": 8, "luns_per_channel": 4, "dies_per_zone": 32},
}


@dataclass(frozen=True)
class ProfileRequest:
    """What `ztbp profile` was asked for."""

    zones: tuple[int, ...] | None  # None = every zone of the device (up to max_zones)
    spec: ProfileParams = ProfileParams()
    threshold: float = 0.75
    threshold_mib: float | None = None
    reference: str = "median"
    full_matrix: bool = False
    confirm: int = 1
    recheck: bool = True  # every zone's solo bandwidth again at the end: the drift and the noise of a measurement
    budget_s: float = 0.0
    fill: bool = True
    key: str | None = None
    max_zones: int = 32
    min_separation: float = 0.15


def choose_zones(req: ProfileRequest, device: Device) -> list[int]:
    if req.zones is None:
        return list(range(min(device.nr_zones, req.max_zones)))
    bad = [z for z in req.zones if z >= device.nr_zones]
    if bad:
        raise ProfileError(f"zones {bad} are beyond the device's {device.nr_zones} zones")
    if len(set(req.zones)) < 2:
        raise ProfileError("give at least two different zones to profile")
    return list(dict.fromkeys(req.zones))


class Reporter:
    """Progress lines with the elapsed time and, for pairs, what is left at most."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.echo = echo
        self.t0 = time.monotonic()
        self.pair_times: list[float] = []

    def say(self, msg: str) -> None:
        self.echo(f"[{time.monotonic() - self.t0:7.1f}s] {msg}")


def run_profile(req: ProfileRequest, runner: GuestRunner | HostRunner, out: Path,
                echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure, group and write the profile's files into `out`; return the profile document."""
    rep = Reporter(echo)
    make_dir(out)
    rep.say(f"starting the {runner.__class__.__name__.removesuffix('Runner').lower()} side")
    t_boot = time.monotonic()
    with started(runner) as r:
        dev = r.device
        boot_s = time.monotonic() - t_boot
        zones = choose_zones(req, dev)
        rep.say(f"device {dev.name} ({dev.backend}): {dev.nr_zones} zones of {dev.zone_bytes // MIB} MiB, "
                f"LBA {dev.lba_bytes} B; profiling {len(zones)} zones, {req.spec.rw} "
                f"{req.spec.block_bytes // KIB} KiB QD {req.spec.iodepth}, {req.spec.seconds:g} s per measurement")
        meter = Meter(r, req.spec)
        fill_s = 0.0
        if req.fill and req.spec.rw == "read":
            rep.say(f"resetting and writing the {len(zones)} zones full (reads of unwritten blocks say nothing)")
            fill_s = meter.fill(zones)
            rep.say(f"filled in {fill_s:.0f} s")
        budget = Budget(req.budget_s)

        seen: set[tuple[int, ...]] = set()

        def measure(zs: Sequence[int]) -> dict[int, float]:
            bw = meter.measure(zs)
            what = " + ".join(f"{z}: {bw[z]:.2f}" for z in zs)
            kind = ("solo" if len(zs) == 1 else "pair") + (" again" if tuple(zs) in seen else "")
            seen.add(tuple(zs))
            rep.say(f"{kind} {what} MiB/s ({meter.log[-1]['wall_s']:.0f} s)")
            return bw

        def on_step(kind: str, done: int, total: int) -> None:
            if kind == "pair" and done % 10 == 0:
                left = "" if not req.budget_s else f", {max(0, req.budget_s - budget.spent()):.0f} s of budget left"
                rep.say(f"pairs measured: {done} (at most {total}){left}")

        t_meas = time.monotonic()
        res = profile_zones(zones, measure, threshold=req.threshold, threshold_mib=req.threshold_mib,
                            reference=req.reference, full_matrix=req.full_matrix, confirm=req.confirm,
                            min_separation=req.min_separation, recheck=req.recheck, on_step=on_step,
                            stop=budget.exhausted)
        measure_s = time.monotonic() - t_meas
        versions = r.versions
    doc: dict[str, Any] = {
        "format": PROFILE_FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": asdict(dev), "spec": asdict(req.spec), "request": {
            "threshold": req.threshold, "threshold_mib": req.threshold_mib, "reference": req.reference,
            "full_matrix": req.full_matrix, "min_separation": req.min_separation, "confirm": req.confirm,
            "recheck": req.recheck, "budget_s": req.budget_s, "fill": req.fill, "key": req.key},
        "versions": versions,
        "timing": {"boot_s": round(boot_s, 1), "fill_s": round(fill_s, 1), "measure_s": round(measure_s, 1),
                   "total_s": round(time.monotonic() - rep.t0, 1), "measurements": res.measurements,
                   "fresh_wraps": meter.wraps, "boot_attempts": getattr(r, "boot_attempts", 1),
                   "budget_exhausted": res.stopped_early},
        **res.as_dict(),
        "matrix": pair_matrix(res.zones, res.pairs),
        "log": meter.log,
    }
    if req.key:
        if req.key not in KEYS:
            raise ProfileError(f"unknown answer key {req.key!r}; choose one of {', '.join(KEYS)}")
        lay = nvmevirt_layout(res.zones, **KEYS[req.key])
        doc["key"] = {"name": req.key, "layout": lay.to_dicts(),
                      "ari_channel": adjusted_rand(dict(zip(lay["zone"], lay["channel"], strict=True)), res.groups),
                      "ari_die": adjusted_rand(dict(zip(lay["zone"], lay["die"], strict=True)), res.groups)}
    write_profile(out, doc)
    doc["unclassified"] = [z for z, g in res.groups.items() if g == UNCLASSIFIED]
    return doc


