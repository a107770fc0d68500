"""`ztbp watch DEV`: trace continuously, follow the hot set, apply within a budget, verify, roll back."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..analysis.params import CACHE_MIB, ORDER_MAX_S, PAGE_KIB, RECOMMEND_GAIN
from .common import BoundedSize, add_module_args, bounded, device_module

if TYPE_CHECKING:
    from ..control.probe_process import Started


def _watch(args: argparse.Namespace) -> int:
    from ..control.probe_process import start_stream
    from ..io.journal import journal_dir

    module = device_module(args)  # a bad --module / --module-params: one line, before anything is touched
    journal_dir(Path(args.journal), args.journal_follow_link, make=False)  # a link where the journal goes: refused
    # SIGTERM while the analysis loads and warms up (a minute under emulation) is an interruption like Ctrl-C (the
    # CLI's handler), so the finally below detaches bpftrace (its own session: it outlives a process killed by the
    # default action); watch_device has handlers of its own from then on.
    # The device checked and bpftrace started before the analysis loads (numpy, polars, numba): it compiles meanwhile
    started = start_stream(args.device, module)
    try:
        return _session(args, started)
    finally:
        started.probe.close()  # whatever happened (watch_device closes it too): never leave bpftrace running


def _session(args: argparse.Namespace, started: Started) -> int:
    from ..analysis.watch import WatchParams
    from ..control.watch import Session, WatchRequest
    from ..control.watch_run import watch_device
    from ..present.watch import status_line, summary_text

    params = WatchParams(k=args.k, threshold=args.threshold, budget_per_day=args.budget_per_day,
                         min_interval_s=args.min_interval, backoff_s=args.backoff, cache_mib=args.cache_mib,
                         page_kib=args.page_kib)
    req = WatchRequest(meta={}, params=params, journal_dir=Path(args.journal), journal_cap_bytes=args.journal_cap,
                       window_commands=args.window_commands, window_s=args.window_s, resume=args.resume,
                       on_exit=args.on_exit, order_max_s=args.order_max_s,
                       journal_follow_link=args.journal_follow_link)

    def on_window(s: Session) -> None:
        now = time.time()
        last = s.last.as_dict() if s.last else None
        if args.json:
            print(json.dumps({"window": s.window - 1, "commands": s.commands_total, "lost": s.lost_total,
                              "in_force": list(s.state.in_force), "last_decision": last}), flush=True)
        else:
            line = status_line(s.commands_total, now - s.started, s.lost_total, s.state, last, params, now)
            print(f"\r{line}", end="", file=sys.stderr, flush=True)

    summary: dict[str, Any] = watch_device(req, args.device, on_window, started=started)
    if args.json:
        print(json.dumps({"summary": summary}, default=str))
    else:
        print(file=sys.stderr)
        print(summary_text(summary))
    return 130 if summary["why"].startswith("interrupted") else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("watch", help="online: trace DEV continuously, follow the hot set, apply within a budget",
                       description="On the machine with the drive, as root: the streaming probe always on, its rows "
                                   "in rolling windows; each window's hot zones by the significance rule of "
                                   "`ztbp cluster`; a new hot set hot for K windows in a row and recommended by "
                                   "the cache model on the next window is sent with ztbp-ctl set, at most "
                                   "--budget-per-day times a day, --min-interval apart; the set in force is "
                                   "STOPped when its gain stays below --threshold for K windows. Everything goes "
                                   "to JOURNAL/watch.jsonl, the raw rows to JOURNAL/rows/ (docs/watch.md).")
    p.add_argument("device", help="the zoned namespace, e.g. /dev/nvme0n1")
    p.add_argument("--window-commands", type=bounded("window-commands"), default=100_000, metavar="N",
                   help="close a window after N commands (default: %(default)s)")
    p.add_argument("--window-s", type=bounded("watch-window-s"), default=None, metavar="S",
                   help="also close a window after S seconds of the trace's time (default: by commands only)")
    p.add_argument("--order-max-s", type=bounded("watch-order-max-s"), default=ORDER_MAX_S, metavar="S",
                   help="hold the probe's rows up to S seconds to let them out in their own time order (bpftrace "
                        "prints each CPU's buffer in turn when it lags; 0: as they come; default: %(default)s)")
    p.add_argument("-k", "--k", type=bounded("k"), default=3,
                   help="windows in a row before a change is applied or a set rolled back (default: %(default)s)")
    p.add_argument("--budget-per-day", type=bounded("budget-per-day"), default=10, metavar="N",
                   help="at most N applies in any 24 h (default: %(default)s, as in the paper)")
    p.add_argument("--min-interval", type=bounded("min-interval"), default=600.0, metavar="S",
                   help="seconds between two applies at least (default: %(default)s)")
    p.add_argument("--backoff", type=bounded("backoff"), default=3600.0, metavar="S",
                   help="seconds a rolled-back set is not applied again (default: %(default)s)")
    p.add_argument("--threshold", type=bounded("min-gain"), default=RECOMMEND_GAIN,
                   help="hit-ratio gain of zone-LRU over LRU a set must reach to be applied and to stay "
                        "(default: %(default)s)")
    p.add_argument("--cache-mib", type=bounded("loop-cache-mib"), default=CACHE_MIB,
                   help="cache size of the model (default: %(default)s)")
    p.add_argument("--page-kib", type=bounded("page-kib"), default=PAGE_KIB,
                   help="cache page of the model (default: %(default)s)")
    p.add_argument("--journal", default="watch", metavar="DIR",
                   help="the journal's folder (default: %(default)s)")
    p.add_argument("--journal-cap", type=BoundedSize("journal-cap"), default=1 << 30, metavar="SIZE",
                   help="size cap of the rolling Parquet journal of raw rows (default: 1G)")
    p.add_argument("--journal-follow-link", action="store_true",
                   help="write the journal even where DIR, a folder above it or its watch.jsonl is a symbolic link "
                        "(refused by default: a planted link would send the journal's writes elsewhere)")
    p.add_argument("--resume", action="store_true", help="continue the session of the journal DIR")
    p.add_argument("--on-exit", choices=("keep", "stop"), default="keep",
                   help="on exit leave the device as it is (keep) or STOP its configuration (default: %(default)s)")
    add_module_args(p)
    p.add_argument("--json", action="store_true", help="one JSON line per window on stdout instead of the status line")
    p.set_defaults(func=_watch)
