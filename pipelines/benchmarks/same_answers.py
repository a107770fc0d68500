"""Same answers: the analyses of two copies of the package on the committed sample runs, side by side.

`python pipelines/benchmarks/same_answers.py OLD NEW [--synth N]` runs every analysis command with --json on a fresh
copy of each run in tests/data/runs (and, with --synth, of the paper's paper80 and paper60 workloads of N reads on
64 zones, written by `ztbp synth`), once with the package folder OLD first on PYTHONPATH and
once with NEW (each a `pipelines` folder: e.g. a `git worktree` of the commit before a change, and this checkout's),
and compares what they print, leaving out what differs by nature (seconds taken, paths, dates, files' inodes).
A Perfetto trace is compared by what it holds — each track's slices, counter values and nesting, its flows, read
back with the reader of the package that wrote it — not byte for byte (how its packets are laid out may change).
Exit 0 when every answer is the same, 1 (with the differences) otherwise. A change meant to make things faster
keeps this at 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

RUNS = Path(__file__).resolve().parents[2] / "tests" / "data" / "runs"
#: the commands compared, each with --json
COMMANDS = (["ingest"], ["zones", "--top", "0"], ["opcodes"], ["chains"], ["frag"], ["cluster"], ["cachesim"],
            ["resets"])
#: keys whose values differ from one run of the same code to the next
VOLATILE = ("seconds", "read_seconds", "path", "source", "run", "created", "elapsed", "ctime_ns", "mtime_ns", "ino",
            "libcachesim")
#: what a Perfetto trace of the run (whole, a window, two zones) holds, by track name (run with each package)
TRACE = """
import json, sys
from ztbp.io.run import load
from ztbp.present.perfetto import export
from ztbp.present.perfetto_proto import read_trace
run, out, summary = load(sys.argv[1]), sys.argv[2], {}
for label, kw in (("all", {}), ("window", {"window_ns": (1_000_000_000, 1_500_000_000)}), ("zones", {"zones": (1, 7)})):
    try:
        res = export(run, out, **kw)
    except Exception as e:
        summary[label] = f"error {e}"
        continue
    rb = read_trace(out)
    name = {u: f"{t['name']} < {rb.tracks.get(t['parent'], {}).get('name', '')}" for u, t in rb.tracks.items()}
    slices, values = {}, {}
    for u, n in rb.slices.items():
        slices[name[u]] = slices.get(name[u], 0) + n
    for u, pts in rb.counters.items():
        values.setdefault(name[u], []).extend(sorted((t, v) for t, _, v in pts))
    summary[label] = {"slices": slices, "values": values, "nesting": sorted(map(str, rb.nesting.items())),
                      "flows": [len(rb.flows_out), len(rb.flows_in)], "commands": res.commands,
                      "requests": res.requests, "skipped": res.skipped}
print(json.dumps(summary))
"""


def steady(x: Any) -> Any:
    """x without the volatile keys, at any depth."""
    if isinstance(x, dict):
        return {k: steady(v) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [steady(v) for v in x]
    return x


def answers(pipelines: Path, run: Path) -> dict[str, Any]:
    """What each command prints (as JSON, or its error) with the package in `pipelines`, on a copy of `run`."""
    out: dict[str, Any] = {}
    env = {**os.environ, "PYTHONPATH": str(pipelines)}
    with tempfile.TemporaryDirectory(prefix="ztbp-same.") as tmp:
        copy = Path(tmp) / run.name
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("derived"))
        for cmd in COMMANDS:
            args = [a.format(tmp=tmp) for a in cmd]
            p = subprocess.run([sys.executable, "-m", "ztbp.cli", args[0], str(copy), *args[1:], "--json"],
                               capture_output=True, text=True, env=env, check=False)
            out[args[0]] = _read(p)
        p = subprocess.run([sys.executable, "-c", TRACE, str(copy), str(Path(tmp) / "t.pftrace")],
                           capture_output=True, text=True, env=env, check=False)
        out["perfetto"] = _read(p)
    return out


def _read(p: subprocess.CompletedProcess[str]) -> Any:
    try:
        return steady(json.loads(p.stdout)) if p.returncode in (0, 1) else f"exit {p.returncode}"
    except json.JSONDecodeError:
        return f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python pipelines/benchmarks/same_answers.py",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path, help="the `pipelines` folder of the package before the change")
    ap.add_argument("new", type=Path, help="the `pipelines` folder of the package after it")
    ap.add_argument("--synth", type=int, default=0, help="also paper80 and paper60 runs of this many reads")
    args = ap.parse_args(argv)
    for p in (args.old, args.new):
        if not (p / "ztbp" / "__init__.py").is_file():
            ap.error(f"{p}: not a pipelines folder (no ztbp/__init__.py in it)")
    differ = 0
    runs = sorted(r for r in RUNS.iterdir() if (r / "meta.json").is_file())
    made = tempfile.TemporaryDirectory(prefix="ztbp-same-synth.")
    for pattern in ("paper80", "paper60") if args.synth else ():
        run = Path(made.name) / f"synth-{pattern}"
        subprocess.run([sys.executable, "-m", "ztbp.cli", "synth", str(run), "--pattern", pattern, "--reads",
                        str(args.synth)], check=True, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(args.new)})
        runs.append(run)
    for run in runs:
        old, new = answers(args.old, run), answers(args.new, run)
        for cmd in old:
            same = old[cmd] == new[cmd]
            differ += not same
            print(f"{run.name:<24} {cmd:<10} {'same' if same else 'DIFFERENT'}", flush=True)
            if not same:
                print(f"  old: {json.dumps(old[cmd], sort_keys=True)[:2000]}\n  new: "
                      f"{json.dumps(new[cmd], sort_keys=True)[:2000]}")
    made.cleanup()
    print(f"same_answers: {'every answer the same' if not differ else f'{differ} answers differ'}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
