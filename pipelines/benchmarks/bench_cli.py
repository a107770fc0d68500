"""Benchmark: how long `ztbp --version` and `ztbp --help` take to start (target ≤ 0.5 s each on the project's
2-core machine), with `python -X importtime`'s account of the imports behind building the parser.

Run with `just bench-cli` (part of `just bench`). Prints the best of ROUNDS wall times of each command and the
slowest imports; the figures are a benchmark, not a timed test.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time

TARGET_S = 0.5


def wall(argv: list[str], rounds: int) -> float:
    """Best wall time of `rounds` runs of argv (seconds)."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        best = min(best, time.perf_counter() - t0)
    return best


def import_times(top: int) -> tuple[float, list[tuple[float, str]]]:
    """Cumulative import time of building the parser (s) and the `top` slowest top-level imports under it."""
    code = "import ztbp.cli; ztbp.cli.build_parser()"
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                         check=True).stderr
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split(":", 1)[1].split("|")
        depth = len(name) - len(name.lstrip()) - 1  # importtime indents nested imports by two spaces a level
        if cumulative.strip().isdigit() and depth == 0:
            rows.append((int(cumulative) / 1e6, name.strip()))
    total = sum(t for t, _ in rows)
    return total, sorted(rows, reverse=True)[:top]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python pipelines/benchmarks/bench_cli.py", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="runs of each command; the best counts (default 5)")
    ap.add_argument("--top", type=int, default=5, help="slowest imports listed (default 5)")
    args = ap.parse_args(argv)
    exe = shutil.which("ztbp") or sys.executable
    base = [exe] if exe.endswith("ztbp") else [sys.executable, "-m", "ztbp.cli"]
    for flag in ("--version", "--help"):
        t = wall([*base, flag], args.rounds)
        print(f"bench-cli: ztbp {flag:<9} {t:6.3f} s (best of {args.rounds}; target ≤ {TARGET_S})  "
              f"{'ok' if t <= TARGET_S else 'MISSED'}")
    total, slowest = import_times(args.top)
    print(f"bench-cli: imports while building the parser: {total:.3f} s (python -X importtime)")
    for t, name in slowest:
        print(f"  {t:6.3f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
