"""`ztbp loop`: capture -> analyse -> apply -> capture again, round after round, in one VM boot or on this machine."""

from __future__ import annotations

import argparse
import json
import sys

from ..analysis.params import AB_READS, CACHE_MIB, PAGE_KIB, RECOMMEND_GAIN
from .acquire import add_fio_file_option, add_workload_arg, add_workload_options, workload_options
from .common import add_backend_args, add_geometry_args, add_module_args, bounded, device_geometry, device_module


def _loop(args: argparse.Namespace) -> int:
    from ..control.loop import LoopRequest, run_loop
    from ..devices import DRIVE
    from ..present.loop import summary_text

    backend = DRIVE.name if args.host else args.backend
    req = LoopRequest(workload=workload_options(args), rounds=args.rounds, min_gain=args.min_gain, backend=backend,
                      nvmevirt_ko=args.nvmevirt_ko, nvmevirt_reserve_bytes=args.nvmevirt_reserve or 0,
                      nvmevirt_params=args.nvmevirt_params,
                      geometry=device_geometry(args),
                      host_device=args.host, fio_file=args.fio_file,
                      cache_mib=args.cache_mib, page_kib=args.page_kib, out=args.out, timeout=args.timeout,
                      verbose=args.verbose, ab_pairs=args.ab, ab_reads=args.ab_reads, module=device_module(args))
    req.validate()  # a bad request (a --fio-file option not allowed too) is refused before the loop starts
    doc = run_loop(req)
    if args.json:
        json.dump(doc, sys.stdout, indent=2, default=str)
        print()
    else:
        print(summary_text(doc))
    return 130 if doc.get("interrupted") else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("loop", help="closed loop: capture, analyse, send the hot zones, capture again (one boot)",
                       description="Boot the VM once (or use --host DEV) and run rounds: the workload under the "
                                   "NVMe probe, the analysis (cluster, config with its recommendation), ztbp-ctl set "
                                   "and info in the guest, the next round with the config active. Writes "
                                   "runs/<UTC timestamp>-loop-<workload>/ with loop.json and one run per round "
                                   "(probes/FORMAT.md). Stops after --rounds, when a config is not recommended "
                                   "(nothing is sent) or when the measured gain falls below --min-gain.")
    add_workload_arg(p)
    add_workload_options(p)
    p.add_argument("--rounds", type=bounded("rounds"), default=3,
                   help="at most this many rounds (default: %(default)s)")
    p.add_argument("--min-gain", type=bounded("min-gain"), default=RECOMMEND_GAIN,
                   help="stop when the model's hit ratio with the zones in force rises by less (default: "
                        "%(default)s); also the config's recommendation threshold")
    p.add_argument("--ab", type=bounded("ab"), default=0, metavar="PAIRS",
                   help="A/B mode: after round 1, switch its configuration on (SET) and off (STOP) in PAIRS pairs of "
                        "blocks in ABBA order (2 or more), and report each effect with its 95 %% "
                        "interval and a verdict (default: 0, the plain loop)")
    p.add_argument("--ab-reads", type=bounded("ab-reads"), default=AB_READS, metavar="N",
                   help="reads per A/B block (default: %(default)s)")
    add_fio_file_option(p, "each round")
    p.add_argument("--cache-mib", type=bounded("loop-cache-mib"), default=CACHE_MIB,
                   help="cache size of the model (default: %(default)s)")
    p.add_argument("--page-kib", type=bounded("page-kib"), default=PAGE_KIB,
                   help="cache page of the model (default: %(default)s)")
    add_backend_args(p, "qemu (default: the device refuses SET; the loop evaluates the model only) or nvmevirt",
                     storage=False)
    p.add_argument("--host", metavar="DEV", default=None,
                   help="run on this machine's zoned namespace DEV instead of a VM (root; destroys the data of the "
                        "zones the workload resets and prefills)")
    add_module_args(p, "--host DEV")
    add_geometry_args(p, limits=True, conv_ns=None)
    p.add_argument("-o", "--out", default=None, help="loop directory (default: runs/<UTC time>-loop-<workload>)")
    p.add_argument("--timeout", type=bounded("timeout"), default=7200, help="kill the guest after this many seconds")
    p.add_argument("--json", action="store_true", help="print loop.json instead of the summary")
    p.add_argument("-v", "--verbose", action="store_true", help="echo the guest console")
    p.set_defaults(func=_loop)
