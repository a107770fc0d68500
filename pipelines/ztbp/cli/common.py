"""Option types and option groups shared by several commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..acquire.vm import LBA_BYTES, ZONE_BYTES, ZONES
from ..analysis.params import PAPER_EPS, PAPER_MIN_SAMPLES, RECOMMEND_GAIN, TRAIN_SHARE, VALIDATIONS, ClusterParams
from ..errors import ZtbpError
from ..units import GIB, LIMITS, MIB, Bound, parse_size


class Bounded:
    """An option's type: a number in its range of units.LIMITS, refused by argparse otherwise with one line naming
    the range ("argument --eps: 'nan' is out of range: give a number in [1e-06, 1.5]"). `whole_as_int`: a float that
    is whole comes back as an int (cache-config.json holds whole MiB as integers)."""

    def __init__(self, name: str, whole_as_int: bool = False) -> None:
        self.__name__ = name
        self.bound: Bound = LIMITS[name]
        self.whole_as_int = whole_as_int

    @property
    def says(self) -> str:
        return f"{self.bound.kind[self.bound.kind.index(' ') + 1:]} in {self.bound}"

    def __call__(self, text: str) -> int | float:
        try:
            v = self.bound.parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return int(v) if self.whole_as_int and float(v).is_integer() else v


def bounded(name: str) -> Bounded:
    """The argparse type of a number bounded by LIMITS[name]."""
    return Bounded(name)


#: A cache size in MiB: an int when whole.
mib = Bounded("cache-mib", whole_as_int=True)


class BoundedList:
    """An option's type: comma-separated numbers, each in the range of LIMITS[name] (e.g. --eps 0.01,0.02)."""

    def __init__(self, name: str) -> None:
        self.__name__ = f"{name} list"
        self.bound: Bound = LIMITS[name]

    @property
    def says(self) -> str:
        return f"each in {self.bound}"

    def __call__(self, text: str) -> tuple[int | float, ...]:
        parts = [x.strip() for x in text.split(",")]
        if not any(parts):
            raise argparse.ArgumentTypeError(f"{text!r}: give {self.bound.kind}s in {self.bound} separated by commas")
        try:
            return tuple(self.bound.parse(x) for x in parts)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None


class BoundedSize:
    """An option's type: a size (4096, 4k, 32M, 1G) in bytes, within LIMITS[name]."""

    def __init__(self, name: str) -> None:
        self.__name__ = name
        self.bound: Bound = LIMITS[name]

    @property
    def says(self) -> str:
        return f"{self.bound.lo // 1024:g} KiB to {self.bound.hi / GIB:g} GiB"

    def __call__(self, text: str) -> int:
        try:
            v = parse_size(text)
        except ZtbpError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a size ztbp takes: give a size of {self.says}, e.g. "
                                             "32M") from None
        if not self.bound.contains(v):
            raise argparse.ArgumentTypeError(f"{text!r} is out of range: give a size of {self.says}")
        return v


def say_bounds(parser: argparse.ArgumentParser) -> None:
    """End the help of every bounded option of every command with its range, so `ztbp CMD --help` says it."""
    for sub in parser._actions:
        for command in getattr(sub, "choices", None) or {}:
            for action in sub.choices[command]._actions:
                t = action.type
                if isinstance(t, Bounded | BoundedList | BoundedSize) and action.help:
                    action.help += f"; {t.says}"


def add_run(p: argparse.ArgumentParser, json_help: str = "machine-readable output") -> None:
    p.add_argument("run", help="run directory (or a run id under runs/)")
    p.add_argument("--json", action="store_true", help=json_help)


def add_backend_args(p: argparse.ArgumentParser | argparse._ArgumentGroup, backend_help: str,
                     storage: bool = True, read_model: bool = True) -> None:
    """The VM's device (devices/: each one the VM boots): QEMU's zoned namespace or NVMeVirt (a module built for the
    guest kernel)."""
    from .. import devices

    p.add_argument("--backend", choices=devices.vm_names(), default=devices.QEMU.name, help=backend_help)
    p.add_argument("--nvmevirt-ko", type=Path, metavar="KO",
                   help="NVMeVirt ZNS module built for the guest kernel (backend nvmevirt; see vm/README.md)")
    if storage:
        p.add_argument("--nvmevirt-storage", default="1G",
                       help="NVMeVirt storage (default %(default)s = 32 zones of 32 MiB)")
    if read_model:
        p.add_argument("--nvmevirt-params", default="", metavar='"K=V ..."',
                       help="the read model's parameters of a module built with the project's read model (build.sh "
                            "--read-model vm/read-model/ztbp_read_model.c): policy=fork|lru|zone_lru entries=N "
                            "hit_ns=N miss_ns=N shortcut=0|1 skip_nand=0|1 (docs/metrics.md)")
    p.add_argument("--nvmevirt-reserve", type=BoundedSize("nvmevirt-reserve"), default=None, metavar="SIZE",
                   help="guest memory reserved for NVMeVirt, at least its storage (default: the storage); "
                        "commands with the same reserve can share one pooled guest (vm/vmtest.sh, guest pool)")


MODULE_HELP = ("the device is created by this kernel module, loaded after the probe has attached and unloaded before "
               "it detaches (a module whose threads stall RCU-tasks grace periods, as NVMeVirt's do); DEV's geometry "
               "is read first with the module loaded for that moment (what the device holds may not survive the "
               "unload in between: NVMeVirt's does not)")


def add_module_args(p: argparse.ArgumentParser | argparse._ArgumentGroup, what: str = "DEV") -> None:
    """--module KO and --module-params, the same for capture-host, loop --host and watch (acquire/module.py)."""
    p.add_argument("--module", type=Path, default=None, metavar="KO", help=MODULE_HELP.replace("DEV", what))
    p.add_argument("--module-params", default=None, metavar='"K=V ..."',
                   help="the module's parameters: name=value words of letters, digits and _ . , : + - (they go to "
                        "insmod as they are), e.g. \"memmap_start=4G memmap_size=1025M cpus=1,2\"")


def device_module(args: argparse.Namespace) -> Any:
    """The acquire.module.DeviceModule of --module / --module-params, checked (None without --module)."""
    from ..acquire.module import DeviceModule, ModuleError

    if args.module is None:
        if args.module_params is not None:
            raise ModuleError("--module-params needs --module KO, the module they are for")
        return None
    return DeviceModule(args.module, args.module_params or "").validate()


def add_geometry_args(p: argparse.ArgumentParser | argparse._ArgumentGroup, *, zones_flag: str = "--zones",
                      lba: bool = True, lba_choices: bool = False, limits: bool = False,
                      conv_ns: str | None | bool = False) -> None:
    """The zoned namespace's geometry, declared here only: --zone-size, --zones (`zones_flag`: --vm-zones where
    --zones names the zones to work on; either way args.device_zones), --lba-size (`lba`; refused by argparse
    unless 512 or 4096 with `lba_choices`, else by Geometry.validate); `limits`: also
    --zone-cap, --max-open, --max-active; `conv_ns` (not False): --conv-ns with that default. Read back with
    device_geometry(args)."""
    p.add_argument("--zone-size", type=BoundedSize("zone-size"), default=f"{ZONE_BYTES // MIB}M",
                   help="zone size (default: %(default)s)")
    p.add_argument(zones_flag, dest="device_zones", type=bounded("zones"), default=ZONES, metavar="N",
                   help="zones of the zoned namespace (default: %(default)s)")
    if lba:
        p.add_argument("--lba-size", type=bounded("lba-bytes"), default=LBA_BYTES,
                       choices=(512, 4096) if lba_choices else None,
                       help="logical block size, 512 or 4096 (default: %(default)s)")
    if limits:
        p.add_argument("--zone-cap", default=None, help="zone capacity (default: the zone size)")
        p.add_argument("--max-open", type=bounded("zone-limit"), default=0, help="max open zones, 0 = no limit")
        p.add_argument("--max-active", type=bounded("zone-limit"), default=0, help="max active zones, 0 = no limit")
    if conv_ns is not False:
        p.add_argument("--conv-ns", default=conv_ns,
                       help="also attach a conventional namespace of this size" +
                            (" (default: %(default)s)" if conv_ns else ""))


def device_geometry(args: argparse.Namespace) -> Any:
    """The acquire.vm.Geometry of the options add_geometry_args declared (the others at their defaults)."""
    from ..acquire.vm import Geometry

    cap, conv = getattr(args, "zone_cap", None), getattr(args, "conv_ns", None)
    return Geometry(zone_bytes=args.zone_size, zones=args.device_zones,
                    zone_cap_bytes=parse_size(cap) if cap else None, max_open=getattr(args, "max_open", 0),
                    max_active=getattr(args, "max_active", 0), lba_bytes=getattr(args, "lba_size", LBA_BYTES),
                    conv_ns_bytes=parse_size(conv) if conv else None)


def add_config_args(p: argparse.ArgumentParser) -> None:
    """How `ztbp config` and `ztbp apply` judge a configuration."""
    p.add_argument("--train-share", type=bounded("train-share"), default=TRAIN_SHARE,
                   help=f"learn the hot zones on this first share of the reads, predict on the rest (default "
                        f"{TRAIN_SHARE:g})")
    p.add_argument("--min-gain", type=bounded("min-gain"), default=RECOMMEND_GAIN,
                   help="recommend the configuration when zone-LRU beats LRU by at least this hit ratio on the "
                        f"held-out reads (default {RECOMMEND_GAIN:g})")


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    d = ClusterParams()
    p.add_argument("--eps", type=BoundedList("eps"), default=",".join(map(str, PAPER_EPS)),
                   help="eps grid (default: the paper's)")
    p.add_argument("--min-samples", type=BoundedList("min-samples"), default=",".join(map(str, PAPER_MIN_SAMPLES)),
                   help="min_samples grid (default: the paper's)")
    p.add_argument("--cells-per-zone", type=bounded("cells-per-zone"), default=d.cells_per_zone,
                   help=f"cells per zone (default {d.cells_per_zone})")
    p.add_argument("--hot-factor", type=bounded("hot-factor"), default=d.hot_factor,
                   help=f"a cluster is hot at this multiple of the mean read density (default {d.hot_factor:g})")
    p.add_argument("--alpha", type=bounded("alpha"), default=d.alpha,
                   help=f"family-wise false-positive rate of the zone significance test per run (default {d.alpha:g})")
    p.add_argument("--validation", choices=VALIDATIONS, default=d.validation,
                   help="which validation picks eps / min_samples: time (tune on earlier reads, score on later "
                        "ones) or kfold (the paper's 5-fold split of the accesses); both are reported "
                        f"(default {d.validation})")
    p.add_argument("--no-widen", action="store_true",
                   help="keep the grid as given even when the winner sits on its edge")
    p.add_argument("--seed", type=bounded("seed"), default=d.seed, help=f"KFold shuffle seed (default {d.seed})")


def cluster_params(args: argparse.Namespace) -> ClusterParams:
    """The clustering's parameters from the options add_cluster_args declared (each already in its range)."""
    return ClusterParams(eps=args.eps, min_samples=args.min_samples, cells_per_zone=args.cells_per_zone,
                         hot_factor=args.hot_factor, alpha=args.alpha, validation=args.validation,
                         widen=not args.no_widen, seed=args.seed)


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


def shown(result: Any, args: argparse.Namespace, text: str | None = None) -> int:
    """Print a command's result (JSON with --json, else `text`) and return the command's exit code, 0."""
    from . import emit

    emit(result, args.json, text)
    return 0
