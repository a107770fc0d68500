"""`ztbp regime`: the loop's A/B mode over a grid of NVMeVirt --slow factors × outstanding I/O, and where the
configuration's effect on read IOPS appears and where it vanishes."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..analysis.params import AB_READS
from .acquire import add_workload_arg
from .common import bounded, shown

#: The sweep's defaults: a short round 1 (its configuration is what the blocks switch) and three pairs per cell.
#: paper80's round 1 of 20,000 reads recommended nothing on NVMeVirt (zone-LRU +0.0009 hit ratio on the held-out
#: half); of 40,000 reads it recommends its five hot zones (+0.06).
REGIME_READS = 40_000
REGIME_PAIRS = 3


def _regime(args: argparse.Namespace) -> int:
    from ..acquire.workload import WorkloadOptions
    from ..control.regime import RegimeRequest, default_out, run_regime
    from ..present.regime import regime_text
    from ..units import parse_outstanding

    req = RegimeRequest(kos=tuple(args.nvmevirt_ko or ()), outstanding=parse_outstanding(args.outstanding),
                        out=Path(args.out) if args.out else default_out(args.workload),
                        workload=WorkloadOptions(name=args.workload, reads=args.reads), ab_pairs=args.ab,
                        ab_reads=args.ab_reads, timeout=args.timeout, verbose=args.verbose,
                        run_cells=not args.summary)
    doc = run_regime(req)
    return shown(doc, args, regime_text(doc))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("regime", help="A/B loops over NVMeVirt --slow x outstanding I/O: where the device bounds IOPS",
                       description="Run `ztbp loop --ab` once per cell of a grid — each NVMeVirt build given (one "
                                   "per --slow factor, read from the folder build.sh made) x each outstanding I/O "
                                   "(fio jobs x queue depth) — one VM at a time, each cell a loop directory "
                                   "OUT/slow<N>-<jobs>x<depth>/ (a cell finished with the same settings is reused: "
                                   "run the command again to resume). Writes OUT/regime.json and prints per cell "
                                   "the configuration's effect on read IOPS and on the listed zones' device p50 "
                                   "with 95 % intervals, the regime share (the emulator's modelled device time / "
                                   "the measured one) and where the effect appears and where it vanishes.")
    add_workload_arg(p)
    p.add_argument("--nvmevirt-ko", type=Path, action="append", metavar="KO",
                   help="an NVMeVirt ZNS module built by build.sh (its folder names its profile and --slow); give "
                        "one per --slow factor to sweep")
    p.add_argument("--outstanding", default="4x1,16x4,36x4",
                   help="the cells' outstanding I/O: fio jobs x queue depth, comma-separated (default: %(default)s)")
    p.add_argument("--reads", type=bounded("reads"), default=REGIME_READS,
                   help="4 KiB reads of each cell's round 1 (default: %(default)s)")
    p.add_argument("--ab", type=bounded("ab"), default=REGIME_PAIRS, metavar="PAIRS",
                   help="pairs of A/B blocks per cell, 2 or more (default: %(default)s)")
    p.add_argument("--ab-reads", type=bounded("ab-reads"), default=AB_READS, metavar="N",
                   help="reads per A/B block (default: %(default)s)")
    p.add_argument("-o", "--out", default=None,
                   help="the sweep's folder (default: runs/<UTC time>-regime-<workload>); give an existing one to "
                        "resume")
    p.add_argument("--timeout", type=bounded("timeout"), default=7200,
                   help="kill a cell's guest after this many seconds")
    p.add_argument("--summary", action="store_true",
                   help="run no cell: summarise the cells finished in OUT (the others are listed as not run)")
    p.add_argument("--json", action="store_true", help="print regime.json instead of the table")
    p.add_argument("-v", "--verbose", action="store_true", help="echo the guest console")
    p.set_defaults(func=_regime)
