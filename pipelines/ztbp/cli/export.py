"""Export commands: `ztbp perfetto` (a run as a Perfetto trace: one track per zone, every command a slice)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from ..errors import ZtbpError
from ..files import check_target
from ..units import parse_window, parse_zone_list
from . import emit
from .common import BoundedSize, add_run, progress_bar


def _perfetto(args: argparse.Namespace) -> int:
    from ..io.run import load
    from ..present.perfetto import export, verify
    from ..present.text import perfetto_text

    run = load(args.run)
    out = Path(args.output) if args.output else Path(f"{run.run_id}.pftrace")
    if out.is_dir():
        raise ZtbpError(f"-o {out} is a directory; give a file name, e.g. {out / (run.run_id + '.pftrace')}")
    check_target(out)
    window = parse_window(args.window) if args.window else None
    zones = parse_zone_list(args.zones, "--zones") if args.zones else None
    bar = progress_bar(not args.json and sys.stderr.isatty(), "perfetto", "cmd")
    res = asdict(export(run, out, window_ns=window, zones=zones, layers=not args.no_layers, progress=bar,
                        split_bytes=args.split_at))
    if args.check:
        res["check"] = verify(run, res["files"], window_ns=window, zones=zones, split_bytes=args.split_at)
    emit(res, args.json, perfetto_text(res))
    ok = not args.check or (all(res["check"][k] for k in ("commands_per_zone_equal", "wp_final_equal",
                                                           "flows_with_both_ends", "files_within_limit"))
                            and res["check"]["undeclared_tracks"] == 0)
    return 0 if ok else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("perfetto", help="write the run as a Perfetto trace (open it at ui.perfetto.dev)",
                       description="One track per zone, every NVMe command a slice, write-pointer and queue-depth "
                                   "counters, and the layer probe's requests nested and linked to their commands.")
    add_run(p)
    p.add_argument("-o", "--output", help="trace file to write (default: <run-id>.pftrace here)")
    p.add_argument("--window", help="only commands submitted in START:END from the first command, e.g. 1s:1.5s, "
                                    ":200ms (units s, ms, us, ns; a bare number is seconds)")
    p.add_argument("--zones", help="only these zones, e.g. 1,7,11")
    p.add_argument("--no-layers", action="store_true", help="leave out the layer probe's requests")
    p.add_argument("--split-at", type=BoundedSize("split-at"), default="512M",
                   help="a file is cut before it passes this size: a larger trace is written as OUT, OUT.part2, ... "
                        "(each opens alone; the trace processor refuses a file past 4 GiB and the UI fails far "
                        "earlier) (default: %(default)s)")
    p.add_argument("--check", action="store_true",
                   help="read the trace back, file by file, and check it against the run (commands per zone, "
                        "final write pointers, flow ends, each file within --split-at); exit 1 when a check fails")
    p.set_defaults(func=_perfetto)
