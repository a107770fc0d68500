"""Analysis benchmark (`just bench-analysis`): ingest rate, and time and peak RSS of each stage on N events.

Targets (issue: foundation): ingest ≥ 3 M events/s; zones + chains + frag + cluster + cachesim (without Belady)
≤ 30 s on 10 M events; peak RSS ≤ 4 GiB. The analysis runs in a child process so its peak RSS is its own; the
figures are printed, and written as JSON with --json-out. Timings on a shared 2-core machine are noisy: compare
figures from one run.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGETS = {"ingest_events_per_s": 3e6, "analysis_s": 30.0, "peak_rss_gib": 4.0}


#: the stages timed, in registry order, and the parameters the benchmark gives them: the cache model's own policies
#: (the target leaves out Belady and libCacheSim's general policies; Belady is timed apart)
TIMED = ("zones", "chains", "frag", "cluster", "cachesim")
PARAMS: dict[str, dict[str, Any]] = {"cachesim": {"policies": ("lru", "zone_lru", "static_best")}}


def child(run_dir: Path) -> dict[str, Any]:
    """Ingest `run_dir`, then run every timed stage of the registry on it; return the timings and this process's peak
    RSS."""
    import importlib

    from ztbp.io.nvme import ingest
    from ztbp.io.run import load
    from ztbp.paths import RunPaths
    from ztbp.stages import STAGES

    for name in TIMED:  # import each stage's analysis module now: a stage's time is its work, not its imports
        importlib.import_module(f"ztbp.analysis.{name}")

    t: dict[str, float] = {}
    t0 = time.perf_counter()
    rep = ingest(RunPaths(run_dir))
    t["ingest"] = time.perf_counter() - t0
    run = load(run_dir, events=False)
    s = time.perf_counter()
    run.events  # noqa: B018 - read derived/events.parquet once, timed apart
    t["load_parquet"] = time.perf_counter() - s
    done: dict[str, Any] = {}
    for name in TIMED:
        s = time.perf_counter()
        done[name] = STAGES[name].memory(run, done, **PARAMS.get(name, {}))
        t[name] = time.perf_counter() - s
    hr = dict(done["cachesim"])
    s = time.perf_counter()
    hr.update(STAGES["cachesim"].memory(run, done, policies=("belady",)))
    t["belady"] = time.perf_counter() - s
    stages = {"zones": done["zones"].height, "chains": done["chains"]["chains"], "frag": done["frag"].height,
              "hot_zones": done["cluster"]["hot_zones"]}
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"events": rep.rows, "timings_s": t, "hit_ratios": hr, "stages": stages, "peak_rss_kib": rss_kib}


def run_bench(events: int, keep: Path | None) -> dict[str, Any]:
    from ztbp.acquire.synth import write_run

    with tempfile.TemporaryDirectory(prefix="ztbp-bench-") as tmp:
        run = keep or Path(tmp) / "bench-paper80"
        print(f"bench: writing a synthetic paper80 run of about {events:,} events to {run} …", flush=True)
        s = time.perf_counter()
        # the prefill adds 8,192 writes and 32 resets
        write_run(run, "paper80", max(0, events - 8192 - 32), seed=1, overwrite=True)
        print(f"bench: synth took {time.perf_counter() - s:.1f} s; running the analysis in a child process …",
              flush=True)
        p = subprocess.run([sys.executable, __file__, "--child", str(run)], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"bench: the analysis child failed:\n{p.stderr[-4000:]}")
        res = json.loads(p.stdout.strip().splitlines()[-1])
    t = res["timings_s"]
    analysis = sum(t[k] for k in ("zones", "chains", "frag", "cluster", "cachesim"))
    res["ingest_events_per_s"] = res["events"] / t["ingest"]
    res["analysis_s"] = analysis
    res["pipeline_s"] = t["ingest"] + t["load_parquet"] + analysis
    res["peak_rss_gib"] = res["peak_rss_kib"] / (1 << 20)
    res["targets"] = TARGETS
    res["meets"] = {
        "ingest_events_per_s": res["ingest_events_per_s"] >= TARGETS["ingest_events_per_s"],
        "analysis_s": analysis <= TARGETS["analysis_s"],
        "peak_rss_gib": res["peak_rss_gib"] <= TARGETS["peak_rss_gib"],
    }
    return res


def report(res: dict[str, Any]) -> str:
    t = res["timings_s"]
    ok = {True: "ok", False: "MISSED"}
    m = res["meets"]
    lines = [
        f"bench: {res['events']:,} events",
        f"  ingest       {t['ingest']:7.2f} s   {res['ingest_events_per_s'] / 1e6:6.2f} M events/s "
        f"(target ≥ 3.00)  {ok[m['ingest_events_per_s']]}",
    ]
    for k in ("zones", "chains", "frag", "cluster", "cachesim", "belady"):
        note = "  (not in the target)" if k == "belady" else ""
        lines.append(f"  {k:<12} {t[k]:7.2f} s{note}")
    lines += [
        f"  analysis     {res['analysis_s']:7.2f} s   zones+chains+frag+cluster+cachesim w/o belady "
        f"(target ≤ 30)  {ok[m['analysis_s']]}",
        f"  peak RSS     {res['peak_rss_gib']:7.2f} GiB (ingest and every stage, target ≤ 4)  {ok[m['peak_rss_gib']]}",
        f"  hot zones {res['stages']['hot_zones']}; hit ratios at 64 MiB: "
        + ", ".join(f"{k} {v:.4f}" for k, v in res["hit_ratios"].items()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python pipelines/benchmarks/bench.py", description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000_000, help="events in the synthetic run (default 10 M)")
    ap.add_argument("--keep", type=Path, help="write the synthetic run here and keep it")
    ap.add_argument("--json-out", type=Path, help="also write the figures as JSON")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    res = run_bench(args.events, args.keep)
    print(report(res))
    if args.json_out:
        args.json_out.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
