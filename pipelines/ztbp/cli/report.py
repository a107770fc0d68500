"""`ztbp report`: the notebooks run on one run (or every run) and rendered to an offline HTML report."""

from __future__ import annotations

import argparse
import sys

from ..errors import ZtbpError
from . import emit
from .common import bounded


def _report(args: argparse.Namespace) -> int:
    from ..report.notebooks import load_parameters
    from ..report.render import render, report_runs

    runs = report_runs(args.all, args.run)
    if args.output and len(runs) > 1:
        raise ZtbpError("-o names one report folder; it cannot be used with several runs")
    _check_watch_options(args, runs)
    params = load_parameters(args.params_file, args.param)
    if args.send:
        params["send"] = True
    results = []
    bad_runs = []
    for run in runs:
        log = (lambda s: print(s, file=sys.stderr)) if args.json else print
        try:
            res = render(run, args.output, params, args.only.split(",") if args.only else None, args.timeout, log,
                         allow_send=args.send, rounds=args.rounds)
        except ZtbpError as e:
            if len(runs) == 1:
                raise
            bad_runs.append(run)  # --all: one broken run does not stop the others
            print(f"ztbp report: error: {run}: {e}", file=sys.stderr)
            continue
        results.append(res)
        if not args.json and "summary" in res:  # a watch session: one page, no notebook
            sm = res["summary"]
            print(f"report: {res['run']}: {res['index']} ({sm['windows']} windows, applies made {sm['applies_made']}, "
                  f"rollbacks {sm['rollbacks']})")
        elif not args.json:
            print(f"report: {res['run']}: {res['index']} ({sum(p['ok'] for p in res['pages'])}/"
                  f"{len(res['pages'])} pages ok)")
    if args.json and results:
        emit(results if len(runs) > 1 else results[0], True)
    failed = [(r["run"], p) for r in results for p in r["pages"] if not p["ok"]]
    failed += [(r["run"], {"notebook": f"round {x['run']}", "error": f"see {x['index']}"}) for r in results
               for x in r.get("rounds", []) if not x["ok"]]
    for run_id, p in failed:
        print(f"ztbp report: error: {run_id}: notebook {p['notebook']} failed: {p['error']}", file=sys.stderr)
    if bad_runs:
        print(f"ztbp report: {len(bad_runs)} of {len(runs)} runs could not be reported: {', '.join(bad_runs)}",
              file=sys.stderr)
    return 1 if failed or bad_runs else 0


def _check_watch_options(args: argparse.Namespace, runs: list[str]) -> None:
    """A watch session's journal has one page and no notebook: the notebooks' options do not apply to it."""
    from ..report.watch import is_watch_dir

    watch = [r for r in runs if is_watch_dir(r)]
    given = [name for name, on in (("--only", args.only), ("-p", args.param), ("-f", args.params_file),
                                   ("--send", args.send), ("--rounds", args.rounds)) if on]
    if watch and given:
        raise ZtbpError(f"{watch[0]} is a watch session's journal: its report runs no notebook, so "
                        f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not apply")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="run the notebooks on a run (or a loop) and write an offline HTML report; "
                                      "a watch session's journal gets one page")
    p.add_argument("run", nargs="*", help="run directory, loop directory of `ztbp loop`, or their id under runs/; "
                                          "or the journal folder of `ztbp watch` (holding watch.jsonl)")
    p.add_argument("--all", action="store_true", help="every run in runs/")
    p.add_argument("-o", "--output", help="report folder (default reports/<run-id>; reports/watch-<folder> for a "
                                          "watch journal)")
    p.add_argument("-f", "--params-file", help="YAML mapping of notebook parameters")
    p.add_argument("-p", "--param", nargs=2, action="append", metavar=("NAME", "VALUE"),
                   help="one notebook parameter (value read as YAML); repeatable")
    p.add_argument("--only", help="comma-separated notebooks to run, by number or name (default: all); for a loop "
                                  "with --rounds, its loop notebooks for its page and its run notebooks for each "
                                  "round's")
    p.add_argument("--timeout", type=bounded("cell-timeout"), default=900,
                   help="seconds per notebook cell (default 900)")
    p.add_argument("--send", action="store_true",
                   help="let the cache notebook send the configuration to its `device` parameter (default: a dry "
                        "run; nothing is sent while a report renders unless this is given)")
    p.add_argument("--rounds", action="store_true",
                   help="a loop directory: also report each round's run (its pages linked from the loop's index)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=_report)
