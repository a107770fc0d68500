"""Option types and option groups shared by several commands."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..acquire.vm import LBA_BYTES, ZONE_BYTES, ZONES
from ..analysis.params import PAPER_EPS, PAPER_MIN_SAMPLES, RECOMMEND_GAIN, TRAIN_SHARE, VALIDATIONS, ClusterParams
from ..errors import ZtbpError
from ..units import MIB, parse_size


def mib(text: str) -> float | int:
    """A size in MiB from the command line: an int when whole (cache-config.json holds whole MiB as integers)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of MiB") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of MiB")
    return int(v) if v.is_integer() else v


def add_run(p: argparse.ArgumentParser, json_help: str = "machine-readable output") -> None:
    p.add_argument("run", help="run directory (or a run id under runs/)")
    p.add_argument("--json", action="store_true", help=json_help)


BACKENDS = ("qemu", "nvmevirt")


def add_backend_args(p: argparse.ArgumentParser | argparse._ArgumentGroup, backend_help: str,
                     storage: bool = True) -> None:
    """The VM's device: QEMU's zoned namespace or NVMeVirt (a module built for the guest kernel)."""
    p.add_argument("--backend", choices=BACKENDS, default="qemu", help=backend_help)
    p.add_argument("--nvmevirt-ko", type=Path, metavar="KO",
                   help="NVMeVirt ZNS module built for the guest kernel (backend nvmevirt; see vm/README.md)")
    if storage:
        p.add_argument("--nvmevirt-storage", default="1G",
                       help="NVMeVirt storage (default %(default)s = 32 zones of 32 MiB)")


def add_geometry_args(p: argparse.ArgumentParser | argparse._ArgumentGroup, *, zones_flag: str = "--zones",
                      lba: bool = True, lba_choices: bool = False, limits: bool = False,
                      conv_ns: str | None | bool = False) -> None:
    """The zoned namespace's geometry, declared here only: --zone-size, --zones (`zones_flag`: --vm-zones where
    --zones names the zones to work on; either way args.device_zones), --lba-size (`lba`; refused by argparse
    unless 512 or 4096 with `lba_choices`, else by Geometry.validate); `limits`: also
    --zone-cap, --max-open, --max-active; `conv_ns` (not False): --conv-ns with that default. Read back with
    device_geometry(args)."""
    p.add_argument("--zone-size", default=f"{ZONE_BYTES // MIB}M", help="zone size (default: %(default)s)")
    p.add_argument(zones_flag, dest="device_zones", type=int, default=ZONES, metavar="N",
                   help="zones of the zoned namespace (default: %(default)s)")
    if lba:
        p.add_argument("--lba-size", type=int, default=LBA_BYTES, choices=(512, 4096) if lba_choices else None,
                       help="logical block size, 512 or 4096 (default: %(default)s)")
    if limits:
        p.add_argument("--zone-cap", default=None, help="zone capacity (default: the zone size)")
        p.add_argument("--max-open", type=int, default=0, help="max open zones, 0 = no limit")
        p.add_argument("--max-active", type=int, default=0, help="max active zones, 0 = no limit")
    if conv_ns is not False:
        p.add_argument("--conv-ns", default=conv_ns,
                       help="also attach a conventional namespace of this size" +
                            (" (default: %(default)s)" if conv_ns else ""))


def device_geometry(args: argparse.Namespace) -> Any:
    """The acquire.vm.Geometry of the options add_geometry_args declared (the others at their defaults)."""
    from ..acquire.vm import Geometry

    cap, conv = getattr(args, "zone_cap", None), getattr(args, "conv_ns", None)
    return Geometry(zone_bytes=parse_size(args.zone_size), zones=args.device_zones,
                    zone_cap_bytes=parse_size(cap) if cap else None, max_open=getattr(args, "max_open", 0),
                    max_active=getattr(args, "max_active", 0), lba_bytes=getattr(args, "lba_size", LBA_BYTES),
                    conv_ns_bytes=parse_size(conv) if conv else None)


def add_config_args(p: argparse.ArgumentParser) -> None:
    """How `ztbp config` and `ztbp apply` judge a configuration."""
    p.add_argument("--train-share", type=float, default=TRAIN_SHARE,
                   help=f"learn the hot zones on this first share of the reads, predict on the rest (default "
                        f"{TRAIN_SHARE:g})")
    p.add_argument("--min-gain", type=float, default=RECOMMEND_GAIN,
                   help="recommend the configuration when zone-LRU beats LRU by at least this hit ratio on the "
                        f"held-out reads (default {RECOMMEND_GAIN:g})")


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    d = ClusterParams()
    p.add_argument("--eps", default=",".join(map(str, PAPER_EPS)), help="eps grid (default: the paper's)")
    p.add_argument("--min-samples", default=",".join(map(str, PAPER_MIN_SAMPLES)),
                   help="min_samples grid (default: the paper's)")
    p.add_argument("--cells-per-zone", type=int, default=d.cells_per_zone,
                   help=f"cells per zone (default {d.cells_per_zone})")
    p.add_argument("--hot-factor", type=float, default=d.hot_factor,
                   help=f"a cluster is hot at this multiple of the mean read density (default {d.hot_factor:g})")
    p.add_argument("--alpha", type=float, default=d.alpha,
                   help=f"family-wise false-positive rate of the zone significance test per run (default {d.alpha:g})")
    p.add_argument("--validation", choices=VALIDATIONS, default=d.validation,
                   help="which validation picks eps / min_samples: time (tune on earlier reads, score on later "
                        "ones) or kfold (the paper's 5-fold split of the accesses); both are reported "
                        f"(default {d.validation})")
    p.add_argument("--no-widen", action="store_true",
                   help="keep the grid as given even when the winner sits on its edge")
    p.add_argument("--seed", type=int, default=d.seed, help=f"KFold shuffle seed (default {d.seed})")


def _numbers(text: str, flag: str, kind: type, example: str) -> tuple:
    try:
        return tuple(kind(x) for x in text.split(","))
    except ValueError:
        raise ZtbpError(f"{flag} {text!r}: expected numbers separated by commas, e.g. {example}") from None


def cluster_params(args: argparse.Namespace) -> ClusterParams:
    eps = _numbers(args.eps, "--eps", float, "0.01,0.02")
    if not eps or any(e <= 0 for e in eps):
        raise ZtbpError("--eps values must be positive")
    ms = _numbers(args.min_samples, "--min-samples", int, "20,30")
    if not ms or any(m < 1 for m in ms):
        raise ZtbpError("--min-samples values must be ≥ 1")
    if args.hot_factor <= 0:
        raise ZtbpError("--hot-factor must be positive")
    if not 0 < args.alpha < 1:
        raise ZtbpError("--alpha must be in (0, 1), e.g. 0.01")
    return ClusterParams(eps=eps, min_samples=ms, cells_per_zone=args.cells_per_zone, hot_factor=args.hot_factor,
                         alpha=args.alpha, validation=args.validation, widen=not args.no_widen, seed=args.seed)


def progress_bar(enabled: bool, desc: str, unit: str) -> Callable[[int, int], None] | None:
    """A tqdm bar on stderr fed by a stage's progress(done, total) calls (None when not a terminal or with --json)."""
    if not enabled:
        return None
    from tqdm import tqdm

    bar: list[Any] = []

    def update(done: int, total: int) -> None:
        if not bar:
            bar.append(tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False))
        bar[0].update(done - bar[0].n)
        if done >= total:
            bar[0].close()

    return update
