"""The device's own behaviour: `ztbp profile` (interference profiler, conflict groups), `ztbp conflicts` (a trace
against a zone-to-group table) and `ztbp resets` (zone resets and the FAR what-if)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from ..analysis.device_params import (
    FAR_INTERCEPT,
    FAR_T,
    INTERFERENCE_THRESHOLD,
    MIN_SEPARATION,
    REFERENCES,
    ProfileParams,
)
from ..errors import ZtbpError
from ..files import write_atomic
from ..units import MIB, parse_size, parse_zone_list
from .common import add_backend_args, add_geometry_args, add_run, bounded, device_geometry, shown


def zone_spec(text: str) -> tuple[int, ...]:
    """'0-7,128,130-131' -> (0, ..., 7, 128, 130, 131)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            a, _, b = part.partition("-")
            ends = parse_zone_list(a, "--zones") + parse_zone_list(b, "--zones")
            if len(ends) != 2:
                raise ZtbpError(f"--zones {text!r}: give zone ids and ranges FIRST-LAST, e.g. 0-7,128")
            lo, hi = ends
            if hi < lo:
                raise ZtbpError(f"--zones {text!r}: range {part} runs backwards")
            out += range(lo, hi + 1)
        elif part:
            out += parse_zone_list(part, "--zones")
    return tuple(out)


def _spec(args: argparse.Namespace) -> ProfileParams:
    return ProfileParams(rw=args.rw, block_bytes=parse_size(args.bs), iodepth=args.iodepth, seconds=args.seconds,
                         ramp_seconds=args.ramp, ioengine=args.ioengine, span_mib=args.span_mib, fresh=args.fresh)


def _profile_out(args: argparse.Namespace) -> Path:
    from .. import paths

    if args.out:
        out = Path(args.out)
    else:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        out = paths.RUNS / f"{stamp}-profile-{args.device or args.backend}".replace("/dev/", "")
    if out.exists() and any(p.name != "console.log" for p in out.iterdir()):
        raise ZtbpError(f"{out} exists and is not empty; choose another --out")
    return out


def _profile(args: argparse.Namespace) -> int:
    from ..acquire.profile import GuestRunner, HostRunner
    from ..acquire.vm import NvmevirtPlan
    from ..control.profile import ProfileRequest, run_profile
    from ..present.device_study import profile_heatmap, profile_text

    spec = _spec(args)
    req = ProfileRequest(zones=zone_spec(args.zones) if args.zones else None, spec=spec, threshold=args.threshold,
                         threshold_mib=args.threshold_mib, reference=args.reference, full_matrix=args.full_matrix,
                         confirm=args.confirm, recheck=not args.no_recheck, budget_s=args.budget,
                         fill=not args.no_fill, key=args.key, max_zones=args.max_zones,
                         min_separation=args.min_separation)
    out = _profile_out(args)
    echo = (lambda s: None) if args.json else (lambda s: print(s, flush=True))
    runner: Any
    if args.device:
        if (spec.rw == "write" or req.fill) and not args.destructive:
            raise ZtbpError(f"profiling {args.device} resets and writes the zones it measures (fill before reads, "
                            "or --rw write): add --destructive if that is what you want, or --no-fill to read "
                            "what is on the drive")
        runner = HostRunner(args.device)
    else:
        def on_line(line: str) -> None:
            if (line.startswith(("ZTBP: error", "ZTBP: stage boot-again"))
                    or (args.verbose and line.startswith("ZTBP: stage"))):
                echo(f"  | {line}")

        geometry = device_geometry(args)
        plan = NvmevirtPlan(storage_mib=parse_size(args.nvmevirt_storage) // MIB,
                            zone_mib=args.zone_size // MIB, reserve_mib=(args.nvmevirt_reserve or 0) // MIB)
        runner = GuestRunner(out=out, backend=args.backend, geometry=geometry,
                             nvmevirt_ko=args.nvmevirt_ko,
                             nvmevirt_plan=plan, timeout_s=args.timeout, on_line=on_line)
    doc = run_profile(req, runner, out, echo)
    fig = profile_heatmap(doc)
    if hasattr(fig, "write_html"):
        write_atomic(out / "heatmap.html", fig.to_html(include_plotlyjs=True))
    return shown(doc, args, profile_text(doc, str(out)))


def _conflicts(args: argparse.Namespace) -> int:
    from .. import stages
    from ..analysis.dispatch import DispatchModel
    from ..io.profile import read_z2c
    from ..io.run import load
    from ..present.device_study import conflicts_text

    groups = read_z2c(Path(args.groups))
    res = stages.conflicts(load(args.run), groups, args.bin_s,
                              DispatchModel(queue_depth=args.queue_depth, window=args.window,
                                            max_commands=args.max_commands))
    out = {**res, "per_bin": res["per_bin"].to_dicts()}
    return shown(out, args, conflicts_text(res))


def _resets(args: argparse.Namespace) -> int:
    from .. import stages
    from ..analysis.device_params import FarParams
    from ..io.run import load
    from ..present.device_study import resets_json, resets_text

    far = FarParams(t=args.far_t, slope=args.far_slope, intercept=args.far_intercept)
    res = stages.resets(load(args.run), far)
    return shown(resets_json(res), args, resets_text(res, args.rows))


def register(sub: argparse._SubParsersAction) -> None:
    d = ProfileParams()
    p = sub.add_parser("profile", help="interference profiler: solo and pairwise zone bandwidth -> conflict groups",
                       description="Measure each zone's bandwidth alone, then pairs of zones at once, and sort the "
                                   "zones into conflict groups (the ZNS parallelism study's algorithm). On the VM "
                                   "(QEMU's zoned namespace or NVMeVirt) or, with --device, a zoned drive here.")
    p.add_argument("--zones", help="zones to profile, e.g. 0-15 or 0,1,8,128-131 (default: the first --max-zones)")
    p.add_argument("--max-zones", type=bounded("max-zones"), default=32,
                   help="zones profiled without --zones (default %(default)s)")
    p.add_argument("--threshold", type=bounded("threshold"), default=INTERFERENCE_THRESHOLD,
                   help="a pair interferes when its total bandwidth is below this share of the reference "
                        "(default %(default)s)")
    p.add_argument("--reference", choices=REFERENCES, default="median",
                   help="the reference: twice the median solo bandwidth (default; steady under noisy solos) or "
                        "the pair's own summed solo bandwidth")
    p.add_argument("--threshold-mib", type=bounded("threshold-mib"),
                   help="instead: a pair interferes below this many MiB/s in all")
    p.add_argument("--min-separation", type=bounded("min-separation"), default=MIN_SEPARATION,
                   help="interfering and independent pairs must be this far apart to count as structure "
                        "(default %(default)s)")
    p.add_argument("--full-matrix", action="store_true",
                   help="measure every pair, in a shuffled order, before grouping (small devices)")
    p.add_argument("--confirm", type=bounded("confirm"), default=1,
                   help="measure a pair found interfering up to N more times, keeping its best figure (a passing "
                        "disturbance only lowers bandwidth); with --full-matrix, measure the whole matrix N more "
                        "times in the same order (default %(default)s)")
    p.add_argument("--no-recheck", action="store_true",
                   help="skip the closing solo pass (every zone alone again after the pairs), which measures the "
                        "drift and, with --confirm, the noise of one measurement the verdict weighs groups against")
    p.add_argument("--budget", type=bounded("budget"), default=0,
                   help="stop measuring after this many seconds (0 = no limit)")
    p.add_argument("--rw", choices=("read", "write"), default=d.rw, help="measure reads or writes (default read)")
    p.add_argument("--bs", default=f"{d.block_bytes // 1024}k", help="block size (default %(default)s)")
    p.add_argument("--iodepth", type=bounded("profile-iodepth"), default=d.iodepth,
                   help="queue depth per zone (default %(default)s)")
    p.add_argument("--seconds", type=bounded("seconds"), default=d.seconds,
                   help="seconds per measurement (default %(default)s)")
    p.add_argument("--ramp", type=bounded("ramp"), default=0.0, help="fio ramp_time before each measurement, seconds")
    p.add_argument("--ioengine", default=d.ioengine, help="fio ioengine (default %(default)s)")
    p.add_argument("--span-mib", type=bounded("span-mib"), default=0.0,
                   help="read this much of each zone (default: all of it)")
    p.add_argument("--fresh", action="store_true",
                   help="read blocks no earlier measurement read (a device read cache then never hits)")
    p.add_argument("--no-fill", action="store_true", help="do not reset and write the zones before read profiling")
    p.add_argument("--key", choices=("nvmevirt-prototype", "nvmevirt-zn540"),
                   help="score the groups against this device layout (adjusted Rand index)")
    p.add_argument("--out", help="output folder (default: runs/<UTC timestamp>-profile-<backend>)")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="also show the guest's stages")
    g = p.add_argument_group("where")
    g.add_argument("--device", help="a zoned namespace of this machine, e.g. /dev/nvme0n1 (default: the VM)")
    g.add_argument("--destructive", action="store_true", help="allow resets and writes on --device")
    add_backend_args(g, "VM device (default qemu)", read_model=False)
    add_geometry_args(g, zones_flag="--vm-zones", lba=False)
    g.add_argument("--timeout", type=bounded("timeout"), default=7200, help="kill the guest after this many seconds")
    p.set_defaults(func=_profile)

    p = sub.add_parser("conflicts", help="commands colliding within a conflict group over time, and a "
                                         "group-aware dispatch what-if, for a zone-to-group table")
    add_run(p)
    p.add_argument("--groups", required=True, help="zone-to-group table: z2c.json or z2c.csv of `ztbp profile`")
    p.add_argument("--bin-s", type=bounded("bin-s"), default=1.0, help="time bin, seconds (default %(default)s)")
    p.add_argument("--queue-depth", type=bounded("queue-depth"), default=32,
                   help="what-if: commands in flight (default %(default)s)")
    p.add_argument("--window", type=bounded("dispatch-window"), default=32,
                   help="what-if: look-ahead of group-aware dispatch")
    p.add_argument("--max-commands", type=bounded("max-commands"), default=200_000,
                   help="what-if: commands simulated at most")
    p.set_defaults(func=_conflicts)

    p = sub.add_parser("resets", help="every zone reset (write pointer, fullness, free space, latency) and the "
                                      "FAR what-if against eager reset")
    add_run(p)
    p.add_argument("--far-t", type=bounded("far-t"), default=FAR_T,
                   help="FAR's free-space threshold T (default %(default)s)")
    p.add_argument("--far-slope", type=bounded("far-line"), default=None,
                   help="below T: T_wp = slope x free share + intercept, of the zone (default 1/T)")
    p.add_argument("--far-intercept", type=bounded("far-line"), default=FAR_INTERCEPT, help="(default %(default)s)")
    p.add_argument("--rows", type=bounded("rows"), default=12, help="text output: resets listed (default %(default)s)")
    p.set_defaults(func=_resets)
