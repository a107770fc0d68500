"""`ztbp compare`: is B faster, slower, or no different from A within the noise? Two runs (a loop's round-NN
folders are runs), or one loop directory whose A/B blocks are compared pair by pair."""

from __future__ import annotations

import argparse
import math
from typing import Any

from ..analysis.params import COMPARE_BLOCKS, COMPARE_MAX_BLOCKS, RUN_NOISE_CV
from ..errors import ZtbpError

#: the options of two runs only (a loop's A/B blocks carry their own listed zones and pairs)
RUN_ONLY = ("listed", "blocks", "noise_cv", "force")


def _number(text: str, flag: str, kind: type, low: float, high: float) -> Any:
    """A bounded, finite option value; a one-line ZtbpError otherwise."""
    try:
        v = kind(text)
    except ValueError:
        raise ZtbpError(f"{flag} {text!r}: expected a{'' if kind is float else ' whole'} number from {low:g} to "
                        f"{high:g}") from None
    if not math.isfinite(v) or not low <= v <= high:
        raise ZtbpError(f"{flag} {text!r}: must be from {low:g} to {high:g}")
    return v


def _listed(args: argparse.Namespace, runs: tuple[Any, Any]) -> tuple[list[int], str]:
    """The listed zones and where they come from: --listed, else the zones in force during B (a loop round), else
    during A, else the workload's hot zones (meta.json)."""
    from ..units import parse_zone_list

    if args.listed is not None:
        return sorted(set(parse_zone_list(args.listed, "--listed"))), "--listed"
    for side, run in zip("BA", runs[::-1], strict=True):
        zones = (run.meta.get("loop") or {}).get("zones_in_force")
        if zones:
            return sorted(zones), f"the zones in force during {side}"
    for side, run in zip("BA", runs[::-1], strict=True):
        zones = (run.meta.get("workload") or {}).get("hot_zones")
        if zones:
            return sorted(zones), f"the workload's hot zones in {side}'s meta.json: no zones were in force"
    return [], "none given, none in force, no hot zones in meta.json"


def _same_geometry(runs: tuple[Any, Any], force: bool) -> None:
    """Two runs of different zone sizes or LBA sizes: their zone ids and LBAs do not name the same places, so the
    listed zones of one are other places in the other; refused, or said on stderr with --force."""
    keys = ("zone_size_lba", "lba_bytes")
    a, b = ({k: r.meta[k] for k in keys} for r in runs)
    if a == b:
        return
    what = (f"A has zones of {a['zone_size_lba']} LBAs of {a['lba_bytes']} bytes, B of {b['zone_size_lba']} LBAs of "
            f"{b['lba_bytes']} bytes: a zone id names other blocks in each")
    if not force:
        raise ZtbpError(f"{what}; compare runs of one geometry, or pass --force to compare them anyway")
    import logging

    logging.getLogger("ztbp").warning(f"{what} (compared anyway: --force)")


def _two_runs(args: argparse.Namespace) -> dict[str, Any]:
    from ..analysis.compare import run_effect
    from ..io.run import load

    blocks = COMPARE_BLOCKS if args.blocks is None else _number(args.blocks, "--blocks", int, 2, COMPARE_MAX_BLOCKS)
    noise_cv = RUN_NOISE_CV if args.noise_cv is None else _number(args.noise_cv, "--noise-cv", float, 0.0, 1.0)
    runs = (load(args.a), load(args.b))
    _same_geometry(runs, args.force)
    listed, source = _listed(args, runs)
    res = run_effect(runs[0].events, runs[1].events, runs[0].meta.get("fio"), runs[1].meta.get("fio"),
                     listed=listed, blocks=blocks, noise_cv=noise_cv)
    return {**res, "listed_from": source, "a_run": str(runs[0].paths.root), "b_run": str(runs[1].paths.root)}


def _loop_blocks(path: str, repeats: int | None = None) -> dict[str, Any]:
    from ..analysis.compare import ab_effects, ab_repeats
    from ..io.loop import LOOP_FILE, read_loop
    from ..paths import resolve_run

    if not (resolve_run(path).root / LOOP_FILE).is_file():  # a loop.json that does not check: read_loop says why
        raise ZtbpError(f"{path} is not a loop directory: give two runs (ztbp compare A B), or one loop directory "
                        "whose loop.json has A/B blocks")
    doc = read_loop(path)
    ab = doc.get("ab")
    if not isinstance(ab, dict) or not isinstance(ab.get("blocks"), list) or not ab["blocks"]:
        raise ZtbpError(f"{doc['dir']} has no A/B blocks (loop.json has no 'ab' section): compare two of its rounds "
                        f"instead, e.g. ztbp compare {path}/round-01 {path}/round-02")
    if repeats is not None:
        return {**ab_repeats(ab["blocks"], repeats), "loop": doc["dir"], "listed": ab.get("listed")}
    return {**ab_effects(ab["blocks"]), "loop": doc["dir"], "listed": ab.get("listed")}


def _compare(args: argparse.Namespace) -> int:
    from ..present.compare import compare_text
    from . import emit

    if args.b is None:
        given = [f"--{k.replace('_', '-')}" for k in RUN_ONLY if getattr(args, k) is not None]
        if given:
            raise ZtbpError(f"{', '.join(given)}: options of two runs; a loop's A/B blocks carry their own listed "
                            "zones and pairs")
        repeats = None if args.repeats is None else _number(args.repeats, "--repeats", int, 2, 1000)
        res = _loop_blocks(args.a, repeats)
        if repeats is not None:
            from ..present.compare import repeats_text

            emit(res, args.json, None if args.json else repeats_text(res))
            return 0
        names = (f"{res['loop']}: blocks with the configuration off", "the same loop: blocks with it on")
    else:
        if args.repeats is not None:
            raise ZtbpError("--repeats: an option of a loop directory's A/B blocks, not of two runs")
        res = _two_runs(args)
        names = (res["a_run"], res["b_run"])
    emit(res, args.json, None if args.json else compare_text(res, *names))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="is B faster, slower or no different from A within the noise? (two runs, "
                                       "or a loop's A/B blocks)",
                       description="Effect sizes with 95 % intervals and a verdict in words (faster, slower, no "
                                   "difference within noise). Two runs A B (a loop's round-NN folders are runs): "
                                   "fio's totals and, from the traces cut into time blocks, the read rate and the "
                                   "device latency of the listed zones and of the others, with the run-to-run noise "
                                   "one run each cannot measure assumed (--noise-cv). One loop directory: its A/B "
                                   "blocks (the configuration switched off and on in ABBA order), pair by pair.")
    p.add_argument("a", metavar="A", help="run directory (or run id); alone: a loop directory with A/B blocks")
    p.add_argument("b", metavar="B", nargs="?", default=None, help="run directory (or run id) compared against A")
    p.add_argument("--listed", metavar="ZONES", default=None,
                   help="zones of the listed class, e.g. 1,7,11 (default: the zones in force during B or A, else "
                        "the workload's hot zones)")
    p.add_argument("--blocks", default=None, metavar="N",
                   help=f"time blocks per run, 2 to {COMPARE_MAX_BLOCKS} (default: {COMPARE_BLOCKS})")
    p.add_argument("--noise-cv", default=None, metavar="X",
                   help="run-to-run coefficient of variation assumed between two runs, 0 to 1 (default: "
                        f"{RUN_NOISE_CV:g}, measured for untraced runs)")
    p.add_argument("--repeats", default=None, metavar="N",
                   help="a loop directory only: cut its pairs into N consecutive groups and compare each on its own "
                        "(repeats of one experiment, e.g. a negative control), with how often each verdict came out")
    p.add_argument("--force", action="store_true", default=None,
                   help="two runs only: compare them even when their zone sizes or LBA sizes differ (a zone id then "
                        "names other blocks in each)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_compare)
